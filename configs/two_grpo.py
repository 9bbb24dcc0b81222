"""2-GRPO (arXiv 2510.00977): GRPO with only G=2 completions per prompt.

Paper's setup: GRPO's recipe with G=2 instead of 16, the saved rollouts
spent on more prompts; one update per rollout batch as in GRPO. Scaled
down: twice the prompts per step (32 x 2), so the number of rows N stays
that of the GRPO config.

Command:
  python -m experiments.train --config=configs/two_grpo.py --workdir=runs/two_grpo

Expect: accuracy close to GRPO's at the same number of rows per step; a
higher advantage collapse rate (a pair agrees more often than a group of 8).
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.rollout.num_prompts *= c.rollout.num_generations // 2
  c.rollout.num_generations = 2
  return config_lib.finalize(c, arg)
