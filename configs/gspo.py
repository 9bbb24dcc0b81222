"""GSPO (arXiv 2507.18071): sequence-level ratio, the geometric mean of tokens.

s_i = exp(mean_t (logp - old_logp)); clip band (1 - 3e-4, 1 + 4e-4); no KL.

Command:
  python -m experiments.train --config=configs/gspo.py --workdir=runs/gspo

Expect: a clip fraction far higher than GRPO's (around 0.1 to 0.2 with
num_iterations=2) with stable training; accuracy close to GRPO's.
"""

from configs import common


def get_config(arg=None):
  c = common.get_base_config()
  c.objective.name = "gspo"
  c.objective.kwargs = dict(clip_low=3e-4, clip_high=4e-4)
  c.kl.beta = 0.0
  c.train.num_iterations = 2
  return common.finalize(c, arg)
