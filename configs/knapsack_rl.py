"""Knapsack-RL (arXiv 2509.25849): each prompt's number of completions
from a knapsack over the step's rollout budget.

The budget stage `strategies.allocation.knapsack`: the step's N rows are
split among its prompts to maximise sum_i value(n_i, p_i),
value(n, p) = (1 - p^n - (1 - p)^n) p (1 - p)^2 (the chance of a nonzero
gradient times the information gain), n_min <= n_i <= n_max, by an exact
DP; p_i is the prompt's success rate at its most recent visit (a
per-prompt tracker in TrainState, by `data.Example.index`, checkpointed),
0.5 for a prompt never seen. The first 5 steps split N uniformly (the
port's warm-up). Groups are ragged within the N rows (padding rows carry
no loss and no statistic); GRPO's advantage over each group's real
members (`GroupData.members`).

Paper's setup: GRPO on Qwen2.5 / Qwen3 math models, the budget of the
uniform baseline (e.g. 8 rollouts per prompt on average) reallocated with
a per-prompt ceiling far above the mean, success rates from the prompt's
previous epoch. Here: the quickstart's 8 rows a step (2 prompts, 4
completions on average), n in [2, 6], the one-digit sums (100 problems,
one tracker slot each), SmolLM2-135M-Instruct, 40 new tokens, 40 steps,
no KL. At 2 prompts a step most prompts are unseen (p = 0.5) for the
first ~25 steps, so the allocation differs from uniform only where a
prompt comes back; the comparison task (300 problems) is sparser still.
``:tiny`` keeps use_tiny's 2 prompts x 4 rows.

Command:
  python -m experiments.train --config=configs/knapsack_rl.py --workdir=runs/knapsack_rl
  python -m experiments.evaluate --checkpoint=runs/knapsack_rl --json=knapsack_after.json

Expect: budget/group_size_min < budget/group_size_max once tracked
prompts come back (solved or hopeless ones at n_min = 2, uncertain ones
up to 6), budget/rows_used 1.0, rollout/nonzero_gradient_share (the
share of trained rows with a nonzero advantage, measured alike on the
fixed path) above the uniform run's (budget.name=fixed). Not measured at
this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.budget.name = "knapsack"
  # One slot per problem: 100 one-digit sums (300 on the comparison task).
  c.budget.kwargs = dict(n_min=2, n_max=6, warmup_steps=5, capacity=300)
  return config_lib.finalize(c, arg)
