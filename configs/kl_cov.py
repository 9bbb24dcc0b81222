"""KL-Cov (Entropy-Mechanism paper, arXiv 2505.22617; verl
``loss_mode=kl_cov``): the unclipped surrogate, with a |log r| penalty on
the few tokens of highest advantage-log-prob covariance.

Per token -r A + |log r| on the max(1, floor(2e-3 n)) tokens of highest
cov = (A - mean A)(logp - mean logp) (n real tokens of the minibatch), -r A
elsewhere; no ratio clip. Token mean, no KL.

Paper's setup (verl's recipe/entropy scripts): GRPO advantages, kl_cov
ratio 2e-3 for the 7B model (2e-4 for 32B), ppo_kl_coef 1, token-mean, no
KL loss, minibatch updates off policy. Scaled down: 8 prompts x 8
completions in 4 minibatches; a minibatch of 16 rows penalises one token or
a few (on the first, r = 1 and the penalty is 0).

Command:
  python -m experiments.train --config=configs/kl_cov.py --workdir=runs/kl_cov

Expect: cov_selected (= clip_fraction) about 2e-3; ratios of the selected
tokens pulled back to 1; entropy decays more slowly than GRPO's; accuracy
close to GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "kl_cov"
  c.objective.kwargs = dict(kl_cov_ratio=2e-3, ppo_kl_coef=1.0,
                            aggregation="token_mean")
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
