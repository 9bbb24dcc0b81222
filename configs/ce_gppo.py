"""CE-GPPO (arXiv 2509.20712): PPO's clip with bounded gradients on clipped tokens.

Per token, clipped tokens keep PPO's clipped value times beta and a gradient
-beta (1 -+ eps) A instead of none: beta_low on A < 0, r < 1 - eps (entropy
rises), beta_high on A > 0, r > 1 + eps; then PPO's dual clip for A < 0.
Token mean, no KL.

Paper's setup (the authors' verl scripts): band 0.2 / 0.2, dual clip c = 10,
beta_low 0.5 for the 1.5B model (0.75 for 7B), beta_high 1, several
minibatch updates per rollout batch. Followed: those values (beta_low of the
smaller model). Scaled down: 8 prompts x 8 completions in 4 minibatches, so
the last three optimiser steps of each batch are off policy and tokens
leave the band.

Command:
  python -m experiments.train --config=configs/ce_gppo.py --workdir=runs/ce_gppo

Expect: clip_fraction as PPO's (the same tokens leave the band) but entropy
steadier than with ppo_clip, accuracy at least GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "ce_gppo"
  c.objective.kwargs = dict(clip_low=0.2, clip_high=0.2, beta_low=0.5,
                            beta_high=1.0, dual_clip=10.0,
                            aggregation="token_mean")
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
