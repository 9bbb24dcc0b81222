"""R2VPO: ratio-variance regularised policy optimisation (a reconstruction).

-mean(r*A) + lam (Var(r) - delta), with the dual variable lam updated once
per optimiser step: lam <- max(0, lam + eta (Var(r) - delta)). No public code
exists; this follows the paper's abstract (see grpo_jax.objectives).

Command:
  python -m experiments.train --config=configs/r2vpo.py --workdir=runs/r2vpo

Expect: ratio_var held near delta once lam has grown (lam is logged as
objective/lam); accuracy close to GRPO's.
"""

from configs import common


def get_config(arg=None):
  c = common.get_base_config()
  c.objective.name = "r2vpo"
  c.objective.kwargs = dict(delta=0.01, center="one")
  c.objective.state = dict(lam0=0.0, eta=0.1)
  c.objective.aggregation = "token_mean"
  c.train.num_iterations = 2
  return common.finalize(c, arg)
