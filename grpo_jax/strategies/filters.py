"""Subset filters: which members of a group train (VARIANTS.md 4.4, 4.5).

Pure, jit-able functions over grouped arrays ``[P, G]`` (rows ``p*G + g``):

* GFPO (arXiv 2508.09726): sample G' > k, keep the k shortest or the k best
  by reward per token, z-score over the kept subset only (`gfpo_keep`,
  `gfpo_advantages`), with k set per prompt by its difficulty
  (`gfpo_difficulty`, `DifficultyHistory`, `difficulty_thresholds`,
  `gfpo_adaptive_k`);
* BPPO (seed 000 para. 41): the shortest correct and the shortest incorrect
  completion of each group, trained on a prefix of their tokens
  (`bppo_keep`, `prefix_mask`, `bppo_loss_mask`).
"""

from typing import NamedTuple, Optional

import jax.numpy as jnp

from grpo_jax.advantages import segments

GFPO_SCORES = ("length", "reward_per_token")


def _grouped(name: str, x, shape=None) -> jnp.ndarray:
  x = jnp.asarray(x)
  if x.ndim != 2 or (shape is not None and x.shape != tuple(shape)):
    raise ValueError(f"{name} must be [P, G]"
                     + (f" = {tuple(shape)}" if shape is not None else "")
                     + f"; got shape {x.shape}.")
  return x


# -------------------------------------------------------------------- GFPO


def gfpo_keep(rewards, lengths, k, *, score: str = "length") -> jnp.ndarray:
  """GFPO's filter: the k members of each group with the best `score`.

  ``length`` keeps the k shortest, ``reward_per_token`` the k highest
  R / max(L, 1); ties go to the lower index (a stable sort), as TRL's
  GFPO trainer (EXACT-CODE).

  Args:
    rewards: [P, G'] rewards.
    lengths: [P, G'] completion lengths in tokens.
    k: the members kept, an int with 2 <= k < G' (EasyDeL's bound), or [P]
      per prompt (`gfpo_adaptive_k`).
    score: ``length`` or ``reward_per_token``.

  Returns:
    [P, G'] bool, the kept members.
  """
  r = _grouped("rewards", rewards).astype(jnp.float32)
  n = _grouped("lengths", lengths, r.shape).astype(jnp.float32)
  if score not in GFPO_SCORES:
    raise ValueError(f"score={score!r} is unknown; choose one of "
                     f"{', '.join(GFPO_SCORES)}.")
  size = r.shape[1]
  if isinstance(k, int) and not 2 <= k < size:
    raise ValueError(f"k={k} must satisfy 2 <= k < G' = {size} (sample more "
                     "completions than GFPO keeps).")
  key = n if score == "length" else -r / jnp.maximum(n, 1.0)
  rank = jnp.argsort(jnp.argsort(key, axis=1, stable=True), axis=1)
  return rank < jnp.reshape(jnp.asarray(k, jnp.int32), (-1, 1))


def gfpo_advantages(rewards, keep, *, eps: float = 1e-6, ddof: int = 1
                    ) -> jnp.ndarray:
  """GFPO's advantage: GRPO's z-score over the kept subset S only.

    A_i = (R_i - mean_S R) / (std_S R + eps)  for i in S, 0 otherwise

  (std with `ddof` over S). A kept subset of equal rewards gets 0: filtering
  can make a group signal-free. Rejected members also leave the loss: the
  caller masks their rows with `keep`.

  Args:
    rewards: [P, G'] rewards.
    keep: [P, G'] bool, `gfpo_keep`.

  Returns:
    [P, G'] float32 advantages.
  """
  r = _grouped("rewards", rewards).astype(jnp.float32)
  keep = _grouped("keep", keep, r.shape).astype(bool)
  return segments.masked_group_z(r[..., None], keep[..., None], scale="group",
                                 eps=eps, ddof=ddof)[..., 0]


def gfpo_difficulty(rewards) -> jnp.ndarray:
  """[P] d_p = 1 - mean_g R: GFPO's difficulty of each prompt (rewards in
  [0, 1]; the mean over all G' sampled members)."""
  return 1.0 - _grouped("rewards", rewards).astype(jnp.float32).mean(axis=1)


class DifficultyHistory(NamedTuple):
  """The last W difficulties seen, for streaming quantiles.

  Attributes:
    values: [W] float32, a ring of difficulties.
    count: [] int32, difficulties written so far (slot = count mod W).
  """
  values: jnp.ndarray
  count: jnp.ndarray


def difficulty_history_init(window: int = 256) -> DifficultyHistory:
  """An empty history of `window` slots."""
  if isinstance(window, bool) or not isinstance(window, int) or window < 1:
    raise ValueError(f"window={window!r} must be an integer >= 1.")
  return DifficultyHistory(values=jnp.zeros((window,), jnp.float32),
                           count=jnp.zeros((), jnp.int32))


def difficulty_history_update(history: DifficultyHistory, difficulty,
                              valid=None) -> DifficultyHistory:
  """`history` with the valid entries of `difficulty` [P] written in order
  (the oldest overwritten first; only the last W of a larger batch land)."""
  d = jnp.asarray(difficulty, jnp.float32)
  valid = jnp.ones(d.shape, bool) if valid is None else jnp.asarray(valid,
                                                                     bool)
  window = history.values.shape[0]
  rank = jnp.cumsum(valid) - 1
  landed = valid & (rank >= valid.sum() - window)
  slot = jnp.where(landed, (history.count + rank) % window, window)
  return DifficultyHistory(
      values=history.values.at[slot].set(d, mode="drop"),
      count=history.count + valid.sum().astype(jnp.int32))


def difficulty_thresholds(history: DifficultyHistory, num_buckets: int = 4
                          ) -> jnp.ndarray:
  """[B - 1] bucket edges: the quantiles i / B (linear interpolation) of the
  filled part of `history` (GFPO's streaming quantiles; **reconstruction**:
  the paper's quantile sketch is replaced by a fixed window). NaN while the
  history is empty: update it with the batch first."""
  window = history.values.shape[0]
  filled = jnp.arange(window) < history.count
  levels = jnp.arange(1, num_buckets) / num_buckets
  return jnp.nanquantile(jnp.where(filled, history.values, jnp.nan), levels)


def gfpo_adaptive_k(difficulty, thresholds, k_table=(4, 6, 8, 8), *,
                    group_size: Optional[int] = None) -> jnp.ndarray:
  """GFPO's adaptive-difficulty k (**reconstruction**; the paper's table is
  unknown): k_p = k_table[b], b the number of edges <= d_p, so easy prompts
  (low d) keep few members and hard ones many.

  Args:
    difficulty: [P] `gfpo_difficulty`.
    thresholds: [B - 1] increasing edges, `difficulty_thresholds`.
    k_table: B members kept per bucket, each in [2, G').
    group_size: G', the sampled group; when given, k_table is checked
      against it (do so once, when the strategy is built).

  Returns:
    [P] int32 k per prompt.
  """
  if group_size is not None and any(not 2 <= int(k) < group_size
                                    for k in k_table):
    raise ValueError(f"k_table={tuple(k_table)} must hold values in "
                     f"[2, G' = {group_size}): GFPO keeps fewer than it "
                     "samples.")
  table = jnp.asarray(k_table, jnp.int32)
  edges = jnp.asarray(thresholds, jnp.float32)
  if table.ndim != 1 or edges.shape != (table.shape[0] - 1,):
    raise ValueError(f"k_table needs one more entry than thresholds; got "
                     f"{table.shape} and {edges.shape}.")
  bucket = jnp.searchsorted(edges, jnp.asarray(difficulty, jnp.float32),
                            side="right")
  return table[bucket]


# -------------------------------------------------------------------- BPPO


def bppo_keep(correct, lengths, valid=None) -> jnp.ndarray:
  """BPPO's update unit (seed 000 para. 41; **reconstruction**): in each
  group the shortest correct and the shortest incorrect completion, ties to
  the lower index; a group without both classes keeps nothing.

  Args:
    correct: [P, G] bool, e.g. the accuracy reward > 0.
    lengths: [P, G] completion lengths.
    valid: [P] bool, False for filler groups (keep nothing).

  Returns:
    [P, G] bool.
  """
  c = _grouped("correct", correct).astype(bool)
  n = _grouped("lengths", lengths, c.shape).astype(jnp.int32)
  big = jnp.iinfo(jnp.int32).max
  members = jnp.arange(c.shape[1])[None, :]
  # argmin returns the first minimum: the lower index of a tie.
  best_right = jnp.argmin(jnp.where(c, n, big), axis=1)[:, None]
  best_wrong = jnp.argmin(jnp.where(c, big, n), axis=1)[:, None]
  both = c.any(axis=1) & (~c).any(axis=1)
  if valid is not None:
    both = both & jnp.asarray(valid, bool)
  return ((members == best_right) | (members == best_wrong)) & both[:, None]


def prefix_mask(mask, *, prefix_len: Optional[int] = 256,
                prefix_frac: Optional[float] = None) -> jnp.ndarray:
  """`mask` [N, T] kept on each row's first sampled tokens only: the first
  `prefix_len`, or, with ``prefix_len=None``, the first ceil(prefix_frac *
  n_i) of its n_i tokens (**reconstruction**: BPPO's "response prefixes")."""
  m = jnp.asarray(mask)
  if m.ndim != 2:
    raise ValueError(f"mask must be [N, T]; got shape {m.shape}.")
  if (prefix_len is None) == (prefix_frac is None):
    raise ValueError("give exactly one of prefix_len and prefix_frac.")
  if prefix_len is not None and (isinstance(prefix_len, bool) or not
                                 isinstance(prefix_len, int) or prefix_len < 1):
    raise ValueError(f"prefix_len={prefix_len!r} must be an integer >= 1.")
  if prefix_frac is not None and not 0.0 < prefix_frac <= 1.0:
    raise ValueError(f"prefix_frac={prefix_frac!r} must lie in (0, 1].")
  position = jnp.cumsum(m > 0, axis=1)  # 1 for a row's first sampled token
  if prefix_len is not None:
    limit = jnp.full((m.shape[0], 1), prefix_len)
  else:
    limit = jnp.ceil(prefix_frac * (m > 0).sum(axis=1, keepdims=True))
  return jnp.where(position <= limit, m, jnp.zeros_like(m))


def bppo_loss_mask(loss_mask, correct, lengths, *, group_size: int,
                   prefix_len: Optional[int] = 256,
                   prefix_frac: Optional[float] = None) -> jnp.ndarray:
  """BPPO's row strategy: `loss_mask` [N, T] kept on the prefix of each
  group's shortest correct and shortest incorrect row only. The advantages
  stay GRPO's over the full group (the estimator is unchanged).

  Args:
    loss_mask: [N, T], rows p*G + g, filler groups already zeroed.
    correct: [N] bool; lengths: [N] completion lengths.
    group_size: G.

  Returns:
    [N, T] the loss mask.
  """
  m = jnp.asarray(loss_mask)
  if m.ndim != 2 or m.shape[0] % group_size:
    raise ValueError(f"loss_mask must be [N, T] with N a multiple of "
                     f"group_size={group_size}; got shape {m.shape}.")
  shape = (m.shape[0] // group_size, group_size)
  keep = bppo_keep(jnp.reshape(jnp.asarray(correct), shape),
                   jnp.reshape(jnp.asarray(lengths), shape))
  kept = jnp.where(keep.reshape(-1, 1), m, jnp.zeros_like(m))
  return prefix_mask(kept, prefix_len=prefix_len, prefix_frac=prefix_frac)
