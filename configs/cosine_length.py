"""Cosine length reward (Yeo et al., "Demystifying Long Chain-of-Thought
Reasoning in LLMs", arXiv 2502.03373): a correct answer earns more the
shorter it is, a wrong one loses less the longer it is.

Reward (the `cosine_length` shaper): c = cos(pi min(n, L) / L), n the
completion's tokens; correct R = 0.5 + 0.25 (1 + c) (1.0 at n = 0, 0.5 at
L), wrong R = -0.5 - 0.25 (1 + c) (-1.0 at n = 0, -0.5 at L): the
peers' defaults (open-r1 / the TRL recipes' ``get_cosine_scaled_reward``).
With ``accuracy`` weighted 1, accuracy + column = R.

Paper's setup: Llama-3.1-8B after long-CoT SFT, PPO on MATH, L the
generation limit (their code also gives a fixed reward past it and adds
an n-gram repetition penalty to wrong answers, `configs/
repetition_penalty.py`). Scaled down to the quickstart
(SmolLM2-135M-Instruct, one-digit sums, 2 prompts x 4 completions of up
to 40 tokens, 40 steps, GRPO): L = 40, the sampler's limit, so the whole
curve is reachable; the reward ends kept (they have no unit). ``:tiny``
sets L to its 8 new tokens.

Command:
  python -m experiments.train --config=configs/cosine_length.py --workdir=runs/cosine_length

Expect: among correct answers completion_length/mean below GRPO's;
shaping/cosine_length/abs_mean shows the length term. Not measured at this
scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.rewards.functions = ("accuracy",)  # the reward is correctness and length
  c.rewards.weights = (1.0,)
  c.rewards.shapers.cosine_length = dict(
      weight=1.0, max_length=40, min_value_wrong=-1.0, max_value_wrong=-0.5,
      min_value_correct=0.5, max_value_correct=1.0)
  c = config_lib.finalize(c, arg)
  if arg == config_lib.TINY_MODEL:
    c.rewards.shapers.cosine_length.max_length = c.rollout.max_new_tokens
  return c
