"""GRPO (DeepSeekMath, arXiv 2402.03300): PPO clip 0.2, k3 KL at beta 0.04.

Paper's setup: 64 completions per question, batch 1024, lr 1e-6, KL 0.04,
and "the policy model only has a single update following each exploration
stage": one optimiser step per rollout batch, so the update is on policy
(ratio 1, the clip inert) and the old log-prob pass is skipped. Scaled
down: 8 prompts x 8 completions, 96 new tokens.

Command:
  python -m experiments.train --config=configs/grpo.py --workdir=runs/grpo

Expect: on SmolLM2-135M-Instruct and the arithmetic task the accuracy
rises from the base model's level within the first few dozen steps while
the KL to the reference grows slowly (~1e-3); ratio_* stay at 1 and
clip_fraction at 0 (on policy). Add ``:tiny`` to the config path for a
seconds-long smoke run on a random tiny model.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  return config_lib.finalize(c, arg)
