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


# ------------------------------------------------- sampled rows of a step


class Rows(NamedTuple):
  """R sampled rows of ragged groups, numpy, prompt-major (`ragged_rows`):
  what a budget strategy's ``draw`` returns and the step trains on.

  Attributes:
    group: [R] int32, the row's prompt among the step's P (-1: padding,
      no loss and no statistic).
    prompt_index: [R] int32, the prompt's `data.Example.index` (-1 padding).
    prompt_ids: [R] object, the row's prompt token id list (`id_lists`).
    tokens, mask, sampler_logp, token_entropies: [R, T] (int32, float32).
    lengths: [R] int32; truncated: [R] bool; entropies: [R] float32.
    rewards: [R, K] float32 reward columns; total: [R] float32 their
      weighted sum.
    columns: the K column names.
    errors: [K verifiers] completions whose verifier raised.
    scored: completions scored (padding rows are not).
  """
  group: np.ndarray
  prompt_index: np.ndarray
  prompt_ids: np.ndarray
  tokens: np.ndarray
  mask: np.ndarray
  sampler_logp: np.ndarray
  token_entropies: np.ndarray
  lengths: np.ndarray
  truncated: np.ndarray
  entropies: np.ndarray
  rewards: np.ndarray
  total: np.ndarray
  columns: tuple
  errors: np.ndarray
  scored: int


# The fields of `Rows` with one entry per row.
ROW_FIELDS = ("group", "prompt_index", "prompt_ids", "tokens", "mask", "sampler_logp",
              "token_entropies", "lengths", "truncated", "entropies",
              "rewards", "total")


def id_lists(lists) -> np.ndarray:
  """[R] object array of R token id lists (of any lengths), so that rows
  index, join and drop like the other fields."""
  out = np.empty(len(lists), object)
  out[:] = [list(ids) for ids in lists]
  return out


def take_rows(rows: Rows, index) -> Rows:
  """`rows` at the row indices `index` (any order, repeats allowed)."""
  index = np.asarray(index, np.int64)
  return rows._replace(**{f: np.asarray(getattr(rows, f))[index]
                          for f in ROW_FIELDS})


def drop_groups(rows: Rows, where) -> Rows:
  """`rows` with every row of the prompts `where` [P] made padding (group
  and prompt index -1, empty mask): Pilot-Commit's skipped pilots."""
  group = np.asarray(rows.group)
  where = np.asarray(where, bool)
  gone = (group >= 0) & where[np.maximum(group, 0)]
  return rows._replace(
      group=np.where(gone, -1, group).astype(np.int32),
      prompt_index=np.where(gone, -1, rows.prompt_index).astype(np.int32),
      mask=np.where(gone[:, None], 0.0, rows.mask).astype(np.float32))


def join_rows(parts, num_rows: int) -> Rows:
  """The rows of several draws of the same P prompts in `num_rows` rows,
  prompt-major again: each prompt's rows in draw order (a stable sort),
  padding last; the padding beyond `num_rows` is dropped.

  Raises:
    ValueError: when the parts hold more than `num_rows` real rows.
  """
  first = parts[0]
  whole = first._replace(
      **{f: np.concatenate([np.asarray(getattr(p, f)) for p in parts])
         for f in ROW_FIELDS},
      errors=sum(np.asarray(p.errors) for p in parts),
      scored=sum(p.scored for p in parts))
  group = whole.group
  used = int((group >= 0).sum())
  if used > num_rows:
    raise ValueError(f"the draws hold {used} rows, more than the step's "
                     f"num_rows={num_rows}.")
  key = np.where(group >= 0, group, np.iinfo(np.int32).max)
  return take_rows(whole, np.argsort(key, kind="stable")[:num_rows])


def group_sizes(group, num_groups: int) -> np.ndarray:
  """[P] int64 rows of each group (padding rows, -1, not counted)."""
  group = np.asarray(group)
  return np.bincount(group[group >= 0], minlength=num_groups).astype(np.int64)


def member_index(group) -> np.ndarray:
  """[R] int32 each row's index within its group, in row order (-1 for
  padding); rows of a group need not be contiguous."""
  group = np.asarray(group)
  member = np.full(group.shape, -1, np.int32)
  seen = {}
  for i, g in enumerate(group.tolist()):
    if g >= 0:
      member[i] = seen.get(g, 0)
      seen[g] = member[i] + 1
  return member


def scatter_view(values, group, num_groups: int, width: int, *, fill=0):
  """[P, width, ...] of the [R, ...] row `values`, row i at (group[i],
  member i): the equal-width view an estimator takes, with `members`
  [P, width] bool marking the slots a row fills.

  Raises:
    ValueError: a group larger than `width` (the view's largest group).

  Returns:
    (view, members).
  """
  values = np.asarray(values)
  group = np.asarray(group)
  member = member_index(group)
  if member.size and member.max() >= width:
    big = int(np.argmax(group_sizes(group, num_groups)))
    raise ValueError(
        f"group {big} holds {int(member.max()) + 1} rows, more than the "
        f"largest group size {width}; raise the budget strategy's largest "
        "group (its n_max / g_max option) or lower its allocation.")
  view = np.full((num_groups, width) + values.shape[1:], fill, values.dtype)
  members = np.zeros((num_groups, width), bool)
  real = group >= 0
  view[group[real], member[real]] = values[real]
  members[group[real], member[real]] = True
  return view, members


def gather_rows(view, group) -> np.ndarray:
  """[R, ...] of a [P, width, ...] view at each row's (group, member): the
  inverse of `scatter_view`; padding rows get 0."""
  view = np.asarray(view)
  group = np.asarray(group)
  member = member_index(group)
  out = view[np.maximum(group, 0), np.maximum(member, 0)]
  real = (group >= 0).reshape((-1,) + (1,) * (out.ndim - 1))
  return np.where(real, out, 0).astype(view.dtype)
