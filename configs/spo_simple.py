"""SPO, Simple Policy Optimization (arXiv 2401.16025): a quadratic trust region.

Per token -(r A - |A| (r - 1)^2 / (2 eps)), eps = 0.2: the objective `cfpo`
registers under a second name (one function). Its maximiser in r is the
clip boundary 1 + eps sign(A), and the gradient pulls r back past it.

Paper's setup: PPO's setting (several epochs of minibatch updates per
batch, eps 0.2). Scaled down: 8 prompts x 8 completions, 2 passes over
each batch in 2 minibatches (4 optimiser steps per batch, 3 off policy).

Command:
  python -m experiments.train --config=configs/spo_simple.py --workdir=runs/spo_simple

Expect: as configs/cfpo.py: ratios within about (0.8, 1.2), clip_fraction
(tokens past the maximiser) small, accuracy close to GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "spo_simple"
  c.objective.kwargs = dict(epsilon=0.2, aggregation="seq_mean_token_mean")
  c.train.num_iterations = 2
  c.train.num_minibatches = 2
  return config_lib.finalize(c, arg)
