"""Data strategies: prompt selection, group strategies, row strategies.

| stage  | name               | what it does                                  |
|--------|--------------------|-----------------------------------------------|
| select | ``uniform``        | the task's own order of prompts               |
| select | ``prioritized``    | by SPO's tracker, sqrt(p(1-p)) + 0.05         |
| groups | ``all_groups``     | every group of one round (GRPO)               |
| groups | ``dynamic_sampling`` | resample until P groups have signal (DAPO)  |
| groups | ``guided_correction`` | a reference row in all-wrong groups (EDGE) |
| rows   | ``all_rows``       | every sampled token trains                    |
| rows   | ``mask_truncated`` | truncated completions leave the loss (DAPO)   |

A new strategy is one function in `select.py`, `groups.py` or `rows.py`
under its registry's decorator, and a config naming it.
"""

from grpo_jax.strategies import groups
from grpo_jax.strategies import rows
from grpo_jax.strategies import select
from grpo_jax.strategies._kit import GROUP_STRATEGIES
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
from grpo_jax.strategies.rows import all_rows
from grpo_jax.strategies.rows import mask_truncated
from grpo_jax.strategies.select import prioritized
from grpo_jax.strategies.select import uniform
