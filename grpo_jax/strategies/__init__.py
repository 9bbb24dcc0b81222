"""Data strategies: prompt selection, group strategies, row strategies.

| stage  | name               | what it does                                  |
|--------|--------------------|-----------------------------------------------|
| select | ``uniform``        | the task's own order of prompts               |
| select | ``prioritized``    | by SPO's tracker, sqrt(p(1-p)) + 0.05         |
| groups | ``all_groups``     | every group of one round (GRPO)               |
| groups | ``dynamic_sampling`` | resample until P groups have signal (DAPO)  |
| groups | ``guided_correction`` | a reference row in all-wrong groups (EDGE) |
| groups | ``ghpo``           | all-wrong groups redrawn with hints (GHPO)    |
| groups | ``aero``           | all-equal groups grown until mixed (AERO)     |
| groups | ``popo``           | zero-variance groups refilled from a buffer   |
|        |                    | of earlier effective groups (POPO; stateful)  |
| groups | ``repo``           | each group joined by K completions from its   |
|        |                    | prompt's own FIFO cache (RePO; stateful)      |
| rows   | ``all_rows``       | every sampled token trains                    |
| rows   | ``mask_truncated`` | truncated completions leave the loss (DAPO)   |
| filter | ``none``           | every member of a group trains                |
| filter | ``gfpo``           | the k shortest (or best R/L) of G' (GFPO)     |
| filter | ``bppo``           | shortest right + wrong, token prefix (BPPO)   |
| budget | ``fixed``          | num_generations each (the plain pipeline)     |
| budget | ``knapsack``       | Knapsack-RL's DP over tracked success rates   |
| budget | ``pilot_commit``   | a pilot, the rest by the pilots' reward std   |
| budget | ``sgpo``           | 1 / p from a profiling pass, easy to hard     |

A new strategy is one function in `select.py`, `groups.py`, `resampled.py`
or `rows.py` under its registry's decorator, and a config naming it; a
member filter (the ``filter`` stage: after the group strategy, before the
estimator) is one in `members.py`; a budget strategy (the ``budget``
stage: each prompt's group size, ragged groups in the step's N rows) one
in `allocation.py`.
"""

from grpo_jax.strategies import allocation
from grpo_jax.strategies import groups
from grpo_jax.strategies import members
from grpo_jax.strategies import resampled
from grpo_jax.strategies import replay
from grpo_jax.strategies import repo
from grpo_jax.strategies import row_replay
from grpo_jax.strategies import rows
from grpo_jax.strategies import select
from grpo_jax.strategies._kit import GROUP_STRATEGIES
from grpo_jax.strategies.allocation import Budget
from grpo_jax.strategies.allocation import BUDGETS
from grpo_jax.strategies.allocation import make_budget
from grpo_jax.strategies._kit import GroupLayout
from grpo_jax.strategies._kit import GroupStrategy
from grpo_jax.strategies._kit import make_group_strategy
from grpo_jax.strategies._kit import make_row_strategy
from grpo_jax.strategies._kit import make_selection
from grpo_jax.strategies._kit import ROW_STRATEGIES
from grpo_jax.strategies._kit import RowStrategy
from grpo_jax.strategies._kit import Selected
from grpo_jax.strategies._kit import Selection
from grpo_jax.strategies._kit import SELECTIONS
from grpo_jax.strategies.groups import all_groups
from grpo_jax.strategies.groups import dynamic_sampling
from grpo_jax.strategies.groups import guided_correction
from grpo_jax.strategies.groups import inject_reference
from grpo_jax.strategies.groups import References
from grpo_jax.strategies.members import Filtered
from grpo_jax.strategies.members import filter_members
from grpo_jax.strategies.members import make_member_filter
from grpo_jax.strategies.members import MEMBER_FILTERS
from grpo_jax.strategies.members import MemberFilter
from grpo_jax.strategies.rows import all_rows
from grpo_jax.strategies.rows import mask_truncated
from grpo_jax.strategies.select import prioritized
from grpo_jax.strategies.select import uniform

# The public API: what the imports above re-export.
__all__ = [
    "all_groups", "all_rows", "allocation", "Budget", "BUDGETS",
    "dynamic_sampling", "filter_members", "Filtered", "GROUP_STRATEGIES",
    "GroupLayout", "groups", "GroupStrategy", "guided_correction",
    "inject_reference", "make_budget", "make_group_strategy",
    "make_member_filter", "make_row_strategy", "make_selection",
    "mask_truncated", "MEMBER_FILTERS", "MemberFilter", "members",
    "prioritized", "References", "replay", "repo", "resampled", "row_replay",
    "ROW_STRATEGIES", "rows", "RowStrategy", "select", "Selected", "Selection",
    "SELECTIONS", "uniform",
]
