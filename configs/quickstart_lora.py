"""Quickstart with LoRA: the quickstart's GRPO run training rank-16 adapters.

Everything as `configs/quickstart.py` (SmolLM2-135M-Instruct, one-digit
additions, 40 steps of 2 prompts x 4 completions, on policy), except that
only low-rank adapters on every projection train (rank 16, alpha 32, as
TRL's and peft's usual examples) with the base frozen, at a learning rate
10x the full run's (2e-4; LoRA's updates are low-rank and start from zero).

Command:
  python -m experiments.train --config=configs/quickstart_lora.py --workdir=runs/quickstart_lora
  python -m experiments.evaluate --checkpoint=runs/quickstart_lora --json=lora_after.json

Expect: an optimiser state and checkpoint of the adapters only (docs/real-models.md's
memory table), held-out greedy
accuracy above the base model's after 40 steps (docs/real-models.md: measured figures),
and `python -m experiments.export --checkpoint=runs/quickstart_lora
--out=DIR` writing the merged weights.
"""

from configs import quickstart
from grpo_jax import config as config_lib


def get_config(arg=None):
  c = quickstart.get_config()
  c.lora.rank = 16
  c.lora.alpha = 32.0
  c.optimizer.learning_rate = 2e-4
  return config_lib.finalize(c, arg)
