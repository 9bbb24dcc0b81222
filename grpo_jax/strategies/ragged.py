"""Groups of different sizes within a fixed number of rows (DESIGN.md,
"Group sizes may differ per prompt").

A budget rule (`budgets`) gives each prompt its own group size; the step
keeps N rows whatever the sizes, so nothing recompiles. `ragged_rows` lays
the groups out prompt-major into the N rows (padding rows after the last
group), and `ragged_grpo` is GRPO's group z-score over that layout by
segment sums; padding rows get 0 and enter no statistic. ``[P, G]`` groups
are the special case of P equal sizes.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class RaggedRows(NamedTuple):
  """Where each of the N rows belongs.

  Attributes:
    group: [N] int32, the row's prompt (0 .. P-1), -1 for a padding row.
    member: [N] int32, its index within its group, -1 for padding.
    valid: [N] bool, False for padding rows (no loss, no statistic).
  """
  group: np.ndarray
  member: np.ndarray
  valid: np.ndarray


def ragged_rows(sizes, num_rows: int) -> RaggedRows:
  """Groups of `sizes` laid out prompt-major in `num_rows` rows.

  Args:
    sizes: [P] completions per prompt (>= 0; 0 = a skipped prompt).
    num_rows: N, the step's fixed row count; at least sum(sizes).

  Returns:
    `RaggedRows`; rows sum(sizes) .. N-1 are padding.
  """
  sizes = np.asarray(sizes)
  if sizes.ndim != 1 or not np.issubdtype(sizes.dtype, np.integer) \
      or np.any(sizes < 0):
    raise ValueError(f"sizes must be [P] non-negative integers; got {sizes!r}.")
  used = int(sizes.sum())
  if used > num_rows:
    raise ValueError(
        f"the groups hold {used} completions but the step has num_rows="
        f"{num_rows}; lower the budget to at most num_rows (a budget rule "
        "must not draw more rows than the step trains).")
  group = np.full(num_rows, -1, np.int32)
  member = np.full(num_rows, -1, np.int32)
  group[:used] = np.repeat(np.arange(sizes.size, dtype=np.int32), sizes)
  starts = np.cumsum(sizes) - sizes
  member[:used] = np.arange(used) - np.repeat(starts, sizes)
  return RaggedRows(group=group, member=member, valid=group >= 0)


def ragged_grpo(rewards, group, valid, num_groups: int, *, eps: float = 1e-6,
                ddof: int = 1) -> jnp.ndarray:
  """GRPO's advantage over ragged groups, by segment sums (jit-able).

    A_i = (R_i - mean_{g(i)} R) / (std_{g(i)} R + eps)

  mean and std (ddof) over the valid rows of row i's group; 0 for padding
  rows, for a group of one and for a group of equal rewards.

  Args:
    rewards: [N] rewards.
    group: [N] int32 group of each row (-1 padding), `RaggedRows.group`.
    valid: [N] bool.
    num_groups: P (static).
    eps, ddof: as `advantages.grpo`.

  Returns:
    [N] float32 advantages.
  """
  r = jnp.asarray(rewards, jnp.float32)
  valid = jnp.asarray(valid, bool) & (jnp.asarray(group) >= 0)
  seg = jnp.where(valid, group, num_groups)  # padding to a dropped segment
  total = lambda x: jax.ops.segment_sum(jnp.where(valid, x, 0.0), seg,
                                        num_segments=num_groups + 1)
  count = total(jnp.ones_like(r))
  mean = total(r) / jnp.maximum(count, 1.0)
  centred = jnp.where(valid, r - mean[seg], 0.0)
  var = total(centred**2) / jnp.maximum(count - ddof, 1.0)
  sd = jnp.sqrt(var)
  high = jax.ops.segment_max(jnp.where(valid, r, -jnp.inf), seg,
                             num_segments=num_groups + 1)
  low = jax.ops.segment_min(jnp.where(valid, r, jnp.inf), seg,
                            num_segments=num_groups + 1)
  # Exactly 0 for a group of equal rewards (rounding in the mean aside).
  mixed = valid & (high[seg] > low[seg])
  return jnp.where(mixed, centred / (jnp.where(sd[seg] > 0, sd[seg], 1.0)
                                     + eps), 0.0)
