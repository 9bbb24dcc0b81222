"""CFPO (arXiv 2601.22801): clipping-free quadratic trust region.

Per token -(r*A - |A| (r - 1)^2 / (2 eps)), eps = 0.2: the gradient never
vanishes, it pulls r back towards 1 + eps*sign(A).

Command:
  python -m experiments.train --config=configs/cfpo.py --workdir=runs/cfpo

Expect: clip_fraction 0 throughout and ratios staying within about
(0.8, 1.2) with num_iterations=2; accuracy close to GRPO's.
"""

from configs import common


def get_config(arg=None):
  c = common.get_base_config()
  c.objective.name = "cfpo"
  c.objective.kwargs = dict(epsilon=0.2)
  c.train.num_iterations = 2
  return common.finalize(c, arg)
