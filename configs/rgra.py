"""RGRA: REINFORCE with group-relative advantages (no ratio, no clip).

Per token -A logp with GRPO's advantages; no KL. It has no trust region
(its registry entry says ``mechanism=None``): on policy with one update per
batch, as here, its gradient equals GRPO's.

Command:
  python -m experiments.train --config=configs/rgra.py --workdir=runs/rgra

Expect: curves close to GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "reinforce"
  c.objective.kwargs = dict(aggregation="seq_mean_token_mean")
  c.kl.beta = 0.0
  return config_lib.finalize(c, arg)
