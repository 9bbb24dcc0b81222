"""LUSPO (arXiv 2602.05261): GSPO with each sequence's term scaled by its length.

s_i = exp(mean_t (logp - old_logp)); per sequence
-n_i min(s_i A, clip(s_i, 1 - 2e-3, 1 + 2.5e-3) A), averaged over rows (the
``seq_mean_token_sum`` of GSPO-token's per-token terms); no KL.

Paper's setup (section 5.1, as TRL's paper index gives it): band 2e-3 /
2.5e-3 on the sequence ratio, GSPO's four minibatches per rollout batch.
Scaled down: 8 prompts x 8 completions in 4 minibatches of 16 rows; the
narrow band binds from the second minibatch on.

Command:
  python -m experiments.train --config=configs/luspo.py --workdir=runs/luspo

Expect: a clip fraction as high as GSPO's; completions that do not shrink
relative to GSPO's (the length bias removed); accuracy close to GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "luspo"
  c.objective.kwargs = dict(clip_low=2e-3, clip_high=2.5e-3,
                            aggregation="seq_mean_token_sum")
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
