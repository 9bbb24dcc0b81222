"""Dr. GRPO (arXiv 2503.20783): no std division, constant length normaliser.

Advantages R - mean_g R; loss summed over tokens and divided by
N * max_new_tokens (``seq_mean_token_sum_norm``, horizon = max_new_tokens);
no KL.

Paper's setup: the GRPO recipe with these two fixes, one policy update per
rollout batch (on policy), so only the advantage and the normaliser differ
from GRPO. Scaled down: 8 prompts x 8 completions, 96 new tokens.

Command:
  python -m experiments.train --config=configs/dr_grpo.py --workdir=runs/dr_grpo

Expect: accuracy close to GRPO's, with shorter wrong completions than GRPO
(no length bias from the per-sequence mean).
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.advantage.name = "dr_grpo"
  c.advantage.kwargs = {}
  # A reference: --config.rollout.max_new_tokens=... moves the horizon too.
  c.objective.kwargs = dict(
      clip_low=0.2, clip_high=0.2, aggregation="seq_mean_token_sum_norm",
      horizon=c.rollout.get_ref("max_new_tokens"))
  c.kl.beta = 0.0
  return config_lib.finalize(c, arg)
