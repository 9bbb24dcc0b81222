"""Clip-Cov (Entropy-Mechanism paper, arXiv 2505.22617; verl
``loss_mode=clip_cov``): PPO's clip with the gradient of a few random
tokens of high advantage-log-prob covariance dropped, against entropy
collapse.

Per token -min(r A, clip(r, 0, 2) A), 0 for max(1, floor(2e-4 n)) tokens
drawn uniformly at random (without replacement) among those whose
cov = (A - mean A)(logp - mean logp) lies in the band (1, 5) (n real
tokens of the minibatch; tokens PPO's clip already cut are no candidates;
all of them when fewer). Token mean, no KL.

Paper's setup (verl's recipe/entropy scripts): GRPO advantages, clip_cov
ratio 2e-4 with the band (1, 5), the PPO band widened to clip_ratio_low =
clip_ratio_high = 1, token-mean, no KL, minibatch updates off policy. The
draw is verl's (``randperm`` over the band's tokens, the first k): each
token's uniform comes from the objective's key (its state, folded from
the run's seed, a fresh key each optimiser step, checkpointed), so the
minibatch is not split into microbatches (validation says so;
clip_cov_rule="top", the highest covariances of the band, is the
deterministic alternative that microbatches). Covariance and share are
the minibatch's where verl uses its micro-batch. Scaled down: 8 prompts x
8 completions in 4 minibatches, so a minibatch of 16 rows drops one token
or a few.

Command:
  python -m experiments.train --config=configs/clip_cov.py --workdir=runs/clip_cov

Expect: cov_selected about 2e-4 (at least one token per minibatch when
any lies in the band, none when none does: early on covariances are
small); entropy decays more slowly than GRPO's; accuracy close to GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "clip_cov"
  c.objective.kwargs = dict(clip_low=1.0, clip_high=1.0, clip_cov_ratio=2e-4,
                            clip_cov_lb=1.0, clip_cov_ub=5.0,
                            clip_cov_rule="random",
                            aggregation="token_mean")
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
