"""RGRA: REINFORCE with group-relative advantages (no ratio, no clip).

Per token -A logp with GRPO's advantages; on-policy with one update per batch
its gradient equals GRPO's. No KL.

Command:
  python -m experiments.train --config=configs/rgra.py --workdir=runs/rgra

Expect: curves close to GRPO's with num_iterations=1.
"""

from configs import common


def get_config(arg=None):
  c = common.get_base_config()
  c.objective.name = "reinforce"
  c.objective.kwargs = {}
  c.kl.beta = 0.0
  return common.finalize(c, arg)
