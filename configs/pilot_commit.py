"""Pilot-Commit (seed 000 para. 46; reconstruction): a pilot of n0
completions per prompt estimates how informative each prompt is; the rest
of the step's rollout budget goes to the high-variance prompts, and
prompts whose pilot shows no spread are skipped.

The budget stage `strategies.allocation.pilot_commit`: two sampling calls
within the step, both from the current policy (so the committed rollouts
are on-policy): the pilot (n0 per prompt), then the other N - P n0 rows
by Neyman allocation extra_p ~ std(pilot rewards of p) (largest
remainders, a group capped at g_max, what a cap frees spread again);
prompts with pilot std < min_std are skipped and their pilot rows do not
train (padding). Groups are ragged within the N rows; GRPO's advantage
over each group's real members (`GroupData.members`).

Paper's setup: not recovered (the seed gives the rule only). Here: the
quickstart's 8 rows a step (2 prompts x 4), a pilot of 2 per prompt, the
other 4 rows committed, groups of at most 6, min_std 0.1 (the rewards are
accuracy + 0.1 format, so a group differing only in format has std 0.05
and is skipped), one-digit sums, SmolLM2-135M-Instruct, 40 new tokens, 40
steps, no KL. ``:tiny`` keeps use_tiny's 2 prompts x 4 rows, min_std 0.01.

Command:
  python -m experiments.train --config=configs/pilot_commit.py --workdir=runs/pilot_commit
  python -m experiments.evaluate --checkpoint=runs/pilot_commit --json=pilot_after.json

Expect: budget/skipped_prompts > 0 on steps where a pilot agrees,
budget/committed_rows below 0.5 then (nothing to commit to), and
rollout/nonzero_gradient_share (trained rows with a nonzero advantage)
near 1 for the rows kept. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.budget.name = "pilot_commit"
  c.budget.kwargs = dict(n0=2, g_max=6, min_std=0.1)
  c = config_lib.finalize(c, arg)
  if arg == config_lib.TINY_MODEL:
    # use_tiny's graded reward, 1 / (1 + distance), is mostly well below
    # 0.1 for the random model's numbers: a smaller spread counts.
    c.budget.kwargs.min_std = 0.01
  return c
