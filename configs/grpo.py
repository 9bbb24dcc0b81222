"""GRPO (DeepSeekMath, arXiv 2402.03300): PPO clip 0.2, k3 KL at beta 0.04.

Command:
  python -m experiments.train --config=configs/grpo.py --workdir=runs/grpo

Expect: on SmolLM2-135M-Instruct and the arithmetic task the accuracy
rises from the base model's level within the first few dozen steps while
the KL to the reference grows slowly (~1e-3). Add ``:tiny`` to the config
path for a seconds-long smoke run on a random tiny model.
"""

from configs import common


def get_config(arg=None):
  c = common.get_base_config()
  return common.finalize(c, arg)
