"""Member filters: which members of each group train (the ``filter`` stage).

A step's groups are filtered after the group strategy and before the
estimator (DESIGN.md, "One training step": GFPO's kept subset, BPPO's rows).
A filter returns the kept members [P, G] and, optionally, a token mask
[N, T]; the rollout then

* zeroes the loss-mask rows of every member outside the kept set (and its
  advantage), and multiplies the loss mask by the token mask;
* lets the estimator see the kept set, or not, by the filter's
  ``statistics`` (its registry metadata):

  - ``"kept"``: the estimator's statistics are over the kept members only
    (GFPO: "the mean and std of the kept subset"): the rollout sets
    `groups.GroupData.members`, which only an estimator declaring
    ``members=True`` honours (grpo, dr_grpo, rloo; any other is a config
    error naming ``advantage.name``);
  - ``"all"``: the estimator sees the full group (BPPO: "preserving
    full-group advantage normalization"); the kept set restricts the loss
    alone.

| name   | statistics | keeps                                             | paper            |
|--------|------------|---------------------------------------------------|------------------|
| `none` | all        | every member (the default; nothing changes)       |                  |
| `gfpo` | kept       | the k shortest (or best R/L) of G' sampled;       | arXiv 2508.09726 |
|        |            | k per prompt by difficulty with a k table         |                  |
| `bppo` | all        | shortest correct + shortest incorrect; a prefix   | seed 000 ¶41     |
|        |            | of their tokens                                   | (reconstruction) |

An entry is a pure function ``fn(groups, mask, state, **options) ->
(Filtered, state)`` under ``@MEMBER_FILTERS.register(statistics=...,
init=..., check=..., examples=...)``; `make_member_filter` binds it once
(checking the options against G' and the reward columns) into a jitted
`MemberFilter` record with ``init()`` like every stage component. Its
state (GFPO's window of difficulties) lives in ``TrainState.states
["filter"]`` and is checkpointed.
"""

import functools
import inspect
from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp

from grpo_jax import groups as groups_lib
from grpo_jax import registry
from grpo_jax.strategies import filters


class MemberFilterMeta(NamedTuple):
  """What a member filter declares when it registers (`register`)."""
  statistics: str  # "kept" or "all": the members the statistics span
  paper: str = ""  # arXiv id (or a short reference)
  # ``init(**options) -> state``; None for a stateless filter.
  init: Optional[Callable] = None
  # ``check(group_size, columns, **options)``: ValueError on bad options.
  check: Optional[Callable] = None


# The stage's array arguments: the group data, the sampled tokens' mask
# [N, T] (rows p*G + g), the filter's state.
MEMBER_FILTERS = registry.Registry(
    "member filter", positional=("groups", "mask", "state"),
    meta=MemberFilterMeta)
STATISTICS = ("kept", "all")


class Filtered(NamedTuple):
  """What a member filter keeps.

  Attributes:
    members: [P, G] bool, the kept members; None keeps every one.
    token_mask: [N, T] float32, multiplies the loss mask (BPPO's prefix);
      None for none.
    measures: name -> float32 scalar, logged as ``filter/<name>``.
  """
  members: Optional[jnp.ndarray]
  token_mask: Optional[jnp.ndarray] = None
  measures: Mapping[str, jnp.ndarray] = {}


class MemberFilter(NamedTuple):
  """A bound member filter.

  Attributes:
    name: its registry name.
    statistics: ``kept`` (the estimator's statistics over the kept members:
      `GroupData.members`) or ``all`` (over the full group; the kept set
      restricts the loss only).
    init: ``() -> state`` (``()`` when stateless).
    apply: ``apply(state, groups, mask [N, T]) -> (Filtered, state)``,
      jitted.
  """
  name: str
  statistics: str
  init: Callable[[], Any]
  apply: Callable


def register(*, statistics: str, paper: str = "", init=None, check=None,
             examples=({},)):
  """Registers a member filter.

  Args:
    statistics: ``kept`` or ``all`` (`MemberFilter`).
    paper: arXiv id or a short reference.
    init: ``init(**options) -> state``; None for a stateless filter.
    check: ``check(group_size, columns, **options)``: raises ValueError on
      options out of range for G' members and the reward columns, at build.
    examples: options the tests run it with.
  """
  if statistics not in STATISTICS:
    raise ValueError(f"statistics={statistics!r}: choose one of "
                     f"{', '.join(STATISTICS)}.")
  return MEMBER_FILTERS.register(examples=examples, statistics=statistics,
                                 paper=paper, init=init, check=check)


def _share(kept, valid) -> dict:
  """Kept and dropped shares of the valid groups' members."""
  rows = jnp.broadcast_to(valid[:, None], kept.shape).astype(jnp.float32)
  total = jnp.maximum(rows.sum(), 1.0)
  kept_share = (kept.astype(jnp.float32) * rows).sum() / total
  return {"kept_share": kept_share,
          "dropped_share": jnp.where(rows.sum() > 0, 1.0 - kept_share, 0.0)}


@register(statistics="all")
def none(groups, mask, state):
  """Every member trains (the default)."""
  del groups, mask
  return Filtered(members=None), state


# -------------------------------------------------------------------- GFPO


def _gfpo_init(k=4, window: int = 256, **_):
  if isinstance(k, (tuple, list)):
    return filters.difficulty_history_init(window)
  return ()


def _is_int(x) -> bool:
  return isinstance(x, int) and not isinstance(x, bool)


def _gfpo_check(group_size: int, columns, k=4, score: str = "length",
                window: int = 256):
  del columns
  if score not in filters.GFPO_SCORES:
    raise ValueError(f"gfpo: score={score!r} is unknown; choose one of "
                     f"{', '.join(filters.GFPO_SCORES)}.")
  table = tuple(k) if isinstance(k, (tuple, list)) else (k,)
  if not table or not all(_is_int(x) and 2 <= x < group_size for x in table):
    raise ValueError(
        f"gfpo: k={k!r} must be an integer (or a table of integers, one per "
        f"difficulty bucket) with 2 <= k < G' = rollout.num_generations = "
        f"{group_size}; sample more completions than GFPO keeps, or lower k.")
  if isinstance(k, (tuple, list)):
    if len(table) < 2:
      raise ValueError(f"gfpo: k={k!r} as a table needs >= 2 buckets; give "
                       "an integer for a fixed k.")
    if not _is_int(window) or window < 1:
      raise ValueError(f"gfpo: window={window!r} must be an integer >= 1 "
                       "(the difficulties kept for the quantiles).")


@register(statistics="kept", paper="arXiv 2508.09726", init=_gfpo_init,
          check=_gfpo_check,
          examples=({"k": 2}, {"k": 2, "score": "reward_per_token"},
                    {"k": (2, 3), "window": 8}))
def gfpo(groups, mask, state, *, k=4, score: str = "length",
         window: int = 256):
  """GFPO (arXiv 2508.09726): of the G' members sampled, keep the k with
  the best `score` (``length``: the shortest; ``reward_per_token``: the
  highest R / L; ties to the lower index, `filters.gfpo_keep`); the
  estimator's mean and std are over the kept subset (``statistics="kept"``:
  GRPO's z-score there is `filters.gfpo_advantages`), the others leave the
  loss. EXACT-CODE (TRL's GFPO trainer).

  Adaptive difficulty (**reconstruction**, the paper's table is unknown):
  with `k` a table (k_1, ..., k_B) each prompt's difficulty d_p = 1 -
  mean_g R (`filters.gfpo_difficulty`; R the weighted total, which only
  ranks) goes into a window of the last `window` difficulties (the state,
  `filters.DifficultyHistory`, checkpointed), the window's quantiles i/B
  are the bucket edges, and the prompt keeps k_b of its bucket b
  (`filters.gfpo_adaptive_k`): easy prompts few, hard ones many.

  Args:
    groups: `GroupData`; the rewards' weighted sum and the lengths.
    mask: [N, T] sampled tokens (unused: GFPO filters whole rows).
    state: () or the `DifficultyHistory`.
    k: members kept, 2 <= k < G'; or a table of them by difficulty.
    score: ``length`` or ``reward_per_token``.
    window: the difficulties kept for the quantiles (a table k only).

  Returns:
    (Filtered, state); measures ``kept_share``, ``dropped_share``,
    ``k_mean`` (over the valid groups).
  """
  del mask
  rewards = groups_lib.weighted_sum(groups.rewards, groups.weights)
  valid = groups.valid
  if isinstance(k, (tuple, list)):
    difficulty = filters.gfpo_difficulty(rewards)
    state = filters.difficulty_history_update(state, difficulty, valid)
    edges = filters.difficulty_thresholds(state, num_buckets=len(k))
    kept_k = filters.gfpo_adaptive_k(difficulty, edges, tuple(k))
  else:
    kept_k = jnp.full(valid.shape, k, jnp.int32)
  keep = filters.gfpo_keep(rewards, groups.lengths, kept_k, score=score)
  keep = keep & valid[:, None]
  count = jnp.maximum(valid.sum(), 1).astype(jnp.float32)
  measures = dict(_share(keep, valid),
                  k_mean=(kept_k * valid).sum().astype(jnp.float32) / count)
  return Filtered(members=keep, measures=measures), state


# -------------------------------------------------------------------- BPPO


def _bppo_check(group_size: int, columns, correct_reward: str = "",
                prefix_len: Optional[int] = 256,
                prefix_frac: Optional[float] = None):
  if group_size < 2:
    raise ValueError(f"bppo keeps a correct and an incorrect member: it "
                     f"needs G = rollout.num_generations >= 2, not "
                     f"{group_size}.")
  if correct_reward and columns is not None and correct_reward not in columns:
    raise ValueError(f"bppo: correct_reward={correct_reward!r} is not a "
                     f"configured reward; choose one of {', '.join(columns)}, "
                     "or '' for the first.")
  if (prefix_len is None) == (prefix_frac is None):
    raise ValueError("bppo: give exactly one of prefix_len (tokens) and "
                     "prefix_frac (a share of each row's tokens); set the "
                     "other to None.")
  if prefix_len is not None and (not _is_int(prefix_len) or prefix_len < 1):
    raise ValueError(f"bppo: prefix_len={prefix_len!r} must be an integer "
                     ">= 1 (the first tokens of each kept row that train).")
  if prefix_frac is not None and not (
      isinstance(prefix_frac, (int, float)) and not isinstance(
          prefix_frac, bool) and 0.0 < prefix_frac <= 1.0):
    raise ValueError(f"bppo: prefix_frac={prefix_frac!r} must lie in "
                     "(0, 1].")


@register(statistics="all", paper="BPPO (seed 000 para. 41)",
          check=_bppo_check,
          examples=({}, {"prefix_len": 2}, {"prefix_len": None,
                                            "prefix_frac": 0.5}))
def bppo(groups, mask, state, *, columns: Tuple[str, ...] = (),
         correct_reward: str = "", prefix_len: Optional[int] = 256,
         prefix_frac: Optional[float] = None):
  """BPPO (seed 000 para. 41; **reconstruction** from the abstract): in
  each group the shortest correct and the shortest incorrect completion
  train (ties to the lower index, `filters.bppo_keep`), on a prefix of
  their tokens (the first `prefix_len`, or ceil(prefix_frac n_i) of the
  n_i, `filters.prefix_mask`); a group without both classes trains
  nothing. The advantages stay the estimator's over the FULL group
  (``statistics="all"``): the kept set restricts the loss only.

  Args:
    groups: `GroupData`; the correctness column and the lengths.
    mask: [N, T] sampled tokens (the prefix is counted on them).
    state: ().
    columns: the reward column names (bound by `make_member_filter`).
    correct_reward: the column whose value > 0 is "correct"; "" = the
      first (the first verifier, accuracy by default).
    prefix_len, prefix_frac: exactly one is not None.

  Returns:
    (Filtered, state); measures ``kept_share``, ``dropped_share``,
    ``groups_kept`` (valid groups with both classes) and ``prefix_cut``
    (the kept rows' sampled tokens past the prefix, as a share of them).
  """
  column = columns.index(correct_reward) if correct_reward else 0
  correct = groups.rewards[..., column] > 0
  keep = filters.bppo_keep(correct, groups.lengths, groups.valid)
  mask = jnp.asarray(mask, jnp.float32)
  prefix = filters.prefix_mask(mask, prefix_len=prefix_len,
                               prefix_frac=prefix_frac)
  rows = keep.reshape(-1, 1).astype(jnp.float32)
  kept_tokens = (mask * rows).sum()
  valid = groups.valid.astype(jnp.float32)
  measures = dict(
      _share(keep, groups.valid),
      groups_kept=(keep.any(axis=1) * valid).sum() / jnp.maximum(
          valid.sum(), 1.0),
      prefix_cut=((mask - prefix) * rows).sum() / jnp.maximum(
          kept_tokens, 1.0))
  return Filtered(members=keep, token_mask=(prefix > 0).astype(jnp.float32),
                  measures=measures), state


# --------------------------------------------------------------- binding


def make_member_filter(name: str, *, group_size: int,
                       columns: Optional[Tuple[str, ...]] = None,
                       **options) -> MemberFilter:
  """The `MemberFilter` `name` with `options` bound, checked against the
  G' = `group_size` members sampled per prompt and the reward `columns`
  (the functions', then the shapers'; None: not checked, the first is the
  correctness column)."""
  entry = MEMBER_FILTERS.entry(name)
  hidden = ("columns",)
  MEMBER_FILTERS.check_options(name, options, exclude=hidden)
  if entry.meta.check is not None:
    entry.meta.check(group_size, columns, **options)
  bound = dict(options)
  if "columns" in inspect.signature(entry.fn).parameters:
    bound["columns"] = tuple(columns or ())
  fn = jax.jit(functools.partial(entry.fn, **bound))
  init = entry.meta.init
  init = (functools.partial(init, **options) if init is not None
          else (lambda: ()))
  return MemberFilter(name=name, statistics=entry.meta.statistics,
                      init=init, apply=lambda state, groups, mask: fn(
                          groups, mask, state))


def filter_members(member_filter: Optional[MemberFilter], state, groups,
                   mask) -> Tuple[Any, Optional[jnp.ndarray],
                                  Optional[jnp.ndarray], Any, dict]:
  """The ``filter`` stage of a step.

  Args:
    member_filter: the bound filter, or None (no stage: nothing changes).
    state: its state.
    groups: the step's `GroupData`.
    mask: [N, T] the sampled tokens, rows p*G + g.

  Returns:
    (groups, rows, token_mask, state, measures): `groups` with ``members``
    set where the filter's statistics are over the kept members; `rows` [N]
    bool, the kept rows (None: all); `token_mask` [N, T] float32 or None;
    measures ``filter/<name>`` as floats.
  """
  if member_filter is None:
    return groups, None, None, state, {}
  filtered, state = member_filter.apply(state, groups, mask)
  measures = {f"filter/{k}": float(v) for k, v in filtered.measures.items()}
  if filtered.members is None:
    return groups, None, filtered.token_mask, state, measures
  if member_filter.statistics == "kept":
    groups = groups._replace(members=filtered.members)
  return (groups, jnp.reshape(filtered.members, (-1,)), filtered.token_mask,
          state, measures)
