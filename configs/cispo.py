"""CISPO (MiniMax-M1, arXiv 2506.13585): clipped IS weight, every token's gradient.

Per token -sg(clip(r, 1 - eps_low, 1 + eps_high)) A logp; the clip scales,
never drops, a token's gradient. Token mean, no KL.

Paper's setup: several off-policy gradient updates per rollout batch, the
reason to keep every token's gradient (the count here is this repository's
choice). Scaled down: 8 prompts x 8 completions in 4 minibatches.

Command:
  python -m experiments.train --config=configs/cispo.py --workdir=runs/cispo

Expect: accuracy at least GRPO's; clip_fraction counts scaled tokens, and
entropy decays more slowly than with the PPO clip.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "cispo"
  # No lower bound (weight floored at 0), weight <= 5 (ScaleRL, arXiv 2510.13786).
  c.objective.kwargs = dict(clip_low=1.0, clip_high=4.0,
                            aggregation="token_mean")
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
