"""GMPO (arXiv 2507.20673): geometric mean of token ratios, clipped in log space.

Per-token log-ratio clipped one-sidedly by the sign of A to (-0.4, 0.4);
sequence ratio exp(mean); no KL.

Paper's setup: its claim is a narrower, more stable range of importance
ratios than GRPO's under off-policy updates (several optimiser steps per
rollout batch; the exact count of the released code is not reproduced
here). Scaled down: 8 prompts x 8 completions in 4 minibatches. The wide
band (e^+-0.4) may rightly never bind at this scale; the ratio acts.

Command:
  python -m experiments.train --config=configs/gmpo.py --workdir=runs/gmpo

Expect: ratio extremes (ratio_max / ratio_min) narrower than GRPO's at the
same minibatch structure, and accuracy close to GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "gmpo"
  c.objective.kwargs = dict(clip_low=0.4, clip_high=0.4)
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
