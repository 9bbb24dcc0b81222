"""CFPO (arXiv 2601.22801): clipping-free quadratic trust region.

Per token -(r*A - |A| (r - 1)^2 / (2 eps)), eps = 0.2: the gradient never
vanishes, it pulls r back towards 1 + eps*sign(A).

Paper's setup: the point is stale data, several optimiser steps on each
rollout batch where the clipped objective's gradient vanishes. Scaled
down: 8 prompts x 8 completions, 2 passes over each batch in 2 minibatches
(4 optimiser steps per batch, 3 of them off policy).

Command:
  python -m experiments.train --config=configs/cfpo.py --workdir=runs/cfpo

Expect: ratios staying within about (0.8, 1.2), clip_fraction (tokens past
the maximiser) small, accuracy close to GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "cfpo"
  c.objective.kwargs = dict(epsilon=0.2, aggregation="seq_mean_token_mean")
  c.train.num_iterations = 2
  c.train.num_minibatches = 2
  return config_lib.finalize(c, arg)
