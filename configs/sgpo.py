"""sGPO (seed 000 para. 9; reconstruction): group sizes set to the
inverse of each query's success rate under the initial policy, trivial
queries removed, unsolvable ones subsampled, queries scheduled easy to
hard.

The budget stage `strategies.allocation.sgpo`: before the first update a
profiling pass (`grpo_jax.data.profiling`) draws n = 8 completions of every
training problem under the initial policy; p_q = solved / 8. Queries with
p_q = 1 are dropped, those with p_q = 0 kept with probability 0.1; G_q =
clip(ceil(1 / p_q), g_min, g_max) (g_max at p_q = 0); the kept queries
are ordered by descending p_q, and each step takes the next ones of the
order while their groups fit the N rows (at most P of them). The profile
and the curriculum's cursor are state in TrainState (checkpointed: a
resumed run neither profiles again nor restarts the order). GRPO's
advantage over each group's real members (`GroupData.members`).

Paper's setup: not recovered beyond the rule. Here: the quickstart's 8
rows a step, as up to 4 prompts of 2 (an easy query takes 2 rows, a hard
one up to 8: the step then trains one query), G in [2, 8], the one-digit
sums' 50 training problems profiled (400 completions, about a minute on
a 2-core CPU), SmolLM2-135M-Instruct, 40 new tokens, 40 steps, no KL.
``:tiny``: 2 prompts x 2 rows (G in [2, 4]) and a profile of 2
completions per problem.

Command:
  python -m experiments.train --config=configs/sgpo.py --workdir=runs/sgpo
  python -m experiments.evaluate --checkpoint=runs/sgpo --json=sgpo_after.json

Expect: budget/profiled_prompts 50 at step 0 only, budget/success_mean
falling over the run (easy to hard), budget/group_size_max rising with
it. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.rollout.num_prompts = 4
  c.rollout.num_generations = 2  # N = 8 rows, the quickstart's
  c.budget.name = "sgpo"
  c.budget.kwargs = dict(num_samples=8, g_min=2, g_max=8,
                         zero_keep_frac=0.1, capacity=300)
  c = config_lib.finalize(c, arg)
  if arg == config_lib.TINY_MODEL:  # use_tiny's 2 prompts x 2 rows
    c.budget.kwargs.update(num_samples=2, g_max=4)
  return c
