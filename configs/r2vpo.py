"""R2VPO: ratio-variance regularised policy optimisation (a reconstruction).

-mean(r*A) + lam (Var(r) - delta), with the dual variable lam updated once
per optimiser step from the step's exact ratio variance:
lam <- max(0, lam + eta (Var(r) - delta)). No public code exists; this
follows the paper's abstract (see grpo_jax.objectives.penalised).

Paper's setup (from the abstract): a variance budget in place of the clip,
so that stale rollouts can be reused. Scaled down: 8 prompts x 8
completions, 2 passes in 2 minibatches (4 optimiser steps per batch).

Command:
  python -m experiments.train --config=configs/r2vpo.py --workdir=runs/r2vpo

Expect: ratio_var held near delta once lam has grown (lam is logged as
objective/lam); accuracy close to GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "r2vpo"
  c.objective.kwargs = dict(delta=0.01, center="one", lam0=0.0, eta=0.1,
                            aggregation="token_mean")
  c.train.num_iterations = 2
  c.train.num_minibatches = 2
  return config_lib.finalize(c, arg)
