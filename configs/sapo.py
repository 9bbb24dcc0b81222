"""SAPO (arXiv 2511.20347): soft sigmoid gate instead of a hard clip.

Per token -f(r) A with f(r) = sigmoid(tau (r - 1)) * 4 / tau, tau = 1.0 for
A > 0 and 1.05 for A < 0.

Command:
  python -m experiments.train --config=configs/sapo.py --workdir=runs/sapo

Expect: smooth ratio statistics (no hard clip boundary), accuracy close to
GRPO's.
"""

from configs import common


def get_config(arg=None):
  c = common.get_base_config()
  c.objective.name = "sapo"
  c.objective.kwargs = dict(tau_pos=1.0, tau_neg=1.05)
  c.objective.aggregation = "token_mean"
  c.train.num_iterations = 2
  return common.finalize(c, arg)
