"""2-GRPO (arXiv 2510.00977): GRPO with only G=2 completions per prompt.

Twice the prompts per step, so the number of rows N stays that of GRPO.

Command:
  python -m experiments.train --config=configs/two_grpo.py --workdir=runs/two_grpo

Expect: accuracy close to GRPO's at the same number of rows per step; a
higher advantage collapse rate (a pair agrees more often than a group of 8).
"""

from configs import common


def get_config(arg=None):
  c = common.get_base_config()
  c.rollout.num_prompts *= c.rollout.num_generations // 2
  c.rollout.num_generations = 2
  c = common.finalize(c, arg)
  c.rollout.num_generations = 2
  return c
