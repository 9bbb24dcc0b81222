"""Rows a group strategy adds beside the step's P x G (`Selected.replay`),
as stages of `rollout.generate`, by the record the strategy returns:

  RePO's `strategies.repo.ReplayRows`        K rows in each group's block
                                             (`rollout.repo`)
  the buffer's `strategies.row_replay.ReplayDraw`   R rows after the groups,
                                             each with its prompt
                                             (`rollout.replay`)

Each stage module gives ``estimate(added, estimator, state, groups, round,
weights) -> (fresh, added advantages, state)``, ``join(added, episodes,
added advantages) -> Episodes``, ``finish(added, strategy state, round,
fresh advantages, *, weights, step) -> strategy state`` (after the batch is
assembled) and ``measures(added, added advantages, trained advantages,
strategy state) -> dict``. The rows they add are declared in the step's row
budget (`layout.step_rows`).
"""

from grpo_jax.rollout import replay
from grpo_jax.rollout import repo
from grpo_jax.strategies import repo as repo_strategy
from grpo_jax.strategies import row_replay

STAGES = {repo_strategy.ReplayRows: repo, row_replay.ReplayDraw: replay}
