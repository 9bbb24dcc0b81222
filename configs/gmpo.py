"""GMPO (arXiv 2507.20673): geometric mean of token ratios, clipped in log space.

Per-token log-ratio clipped one-sidedly by the sign of A to (-0.4, 0.4);
sequence ratio exp(mean); no KL.

Command:
  python -m experiments.train --config=configs/gmpo.py --workdir=runs/gmpo

Expect: ratio extremes (ratio_max / ratio_min) narrower than GRPO's and
accuracy close to GRPO's.
"""

from configs import common


def get_config(arg=None):
  c = common.get_base_config()
  c.objective.name = "gmpo"
  c.objective.kwargs = dict(clip_low=0.4, clip_high=0.4)
  c.kl.beta = 0.0
  c.train.num_iterations = 2
  return common.finalize(c, arg)
