"""Dr. GRPO (arXiv 2503.20783): no std division, constant length normaliser.

Advantages R - mean_g R; loss summed over tokens and divided by
N * max_new_tokens (``seq_mean_token_sum_norm``, horizon = max_new_tokens);
no KL.

Command:
  python -m experiments.train --config=configs/dr_grpo.py --workdir=runs/dr_grpo

Expect: accuracy close to GRPO's, with shorter wrong completions than GRPO
(no length bias from the per-sequence mean).
"""

from configs import common


def get_config(arg=None):
  c = common.get_base_config()
  c.advantage.name = "dr_grpo"
  c.advantage.kwargs = {}
  c.objective.aggregation = "seq_mean_token_sum_norm"
  # A reference: --config.rollout.max_new_tokens=... moves it too.
  c.objective.horizon = c.rollout.get_ref("max_new_tokens")
  c.kl.beta = 0.0
  return common.finalize(c, arg)
