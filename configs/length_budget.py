"""Curriculum length budget (seed 002 para. 17; reconstruction): a token
budget that starts generous and tightens, rewarded with correctness and
format.

Reward: R = 1.0 1[correct] + 0.5 clip(1 - n / B_t, 0, 1) + 0.1 1[format]
(the `length_budget` shaper, weight 0.5, beside the accuracy and format
rewards), B_t = B_f + (B_0 - B_f) exp(-t / tau).

Paper's setup: not read (hammoudhasan/curriculum_grpo is not in the
store); VARIANTS.md 5.6 proposes B_0 = 1024, B_f = 256, tau = 100 steps.
Scaled down to the quickstart (SmolLM2-135M-Instruct, one-digit sums, 2
prompts x 4 completions of up to 40 tokens, 40 steps): B_0 = 40 (the
sampler's limit), B_f = 10, tau = 10 steps, so the budget is near its
floor by the last quarter of the run.

Command:
  python -m experiments.train --config=configs/length_budget.py --workdir=runs/length_budget

Expect: completion_length/mean falling with the budget while accuracy
holds. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.rewards.weights = (1.0, 0.1)  # w1, w3
  c.rewards.shapers.length_budget = dict(
      weight=0.5, budget_start=40.0, budget_final=10.0, decay="exponential",
      tau=10.0)
  return config_lib.finalize(c, arg)
