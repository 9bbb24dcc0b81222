"""RePO's per-prompt replay (VARIANTS.md 4.9, arXiv 2506.09340; EXACT-CODE,
SihengLi99/RePO ``src/replay_grpo_trainer.py``).

Each prompt keeps a FIFO cache of its last M completions; once it holds
`min_cache_to_replay` of them, every new group of that prompt is joined by k
cached completions chosen by a retrieval strategy, trained with the PPO clip
against their stored old log-probs. The authors retrieve *before* pushing
the step's fresh completions, so a step never replays itself.

The cache is one fixed-shape table (`RepoCache`), a slot per prompt (the
caller maps a prompt's `data.Example.index` to its slot). Each slot holds
its entries right-aligned in FIFO order: the newest at position M - 1, the
oldest filled one at M - size, so position M - size + j is deque index j.
Every function is pure and jit-able.
"""

import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax import registry
from grpo_jax.advantages import segments
from grpo_jax.strategies._kit import GROUP_STRATEGIES
from grpo_jax.strategies._kit import Selected

REPO_STRATEGIES = ("random_k", "highest_k", "recent_k", "max_variance_k",
                   "all")
REPO_MODES = ("split", "mixed")
# max_variance_k scores every k-subset of the M entries at once.
_MAX_SUBSETS = 100_000


class RepoCache(NamedTuple):
  """Q prompts' FIFO caches of M completions each.

  Attributes:
    tokens: [Q, M, T] int32 completion tokens.
    mask: [Q, M, T] float32 completion masks.
    old_logp: [Q, M, T] float32, the old policy's log-probs when drawn
      (the PPO denominator of a replayed row).
    rewards: [Q, M] float32 total rewards (sum_k w_k R_k).
    step: [Q, M] int32, the step that drew each entry.
    size: [Q] int32 entries held (<= M).
  """
  tokens: jnp.ndarray
  mask: jnp.ndarray
  old_logp: jnp.ndarray
  rewards: jnp.ndarray
  step: jnp.ndarray
  size: jnp.ndarray


def repo_init(capacity: int, completion_len: int, *, max_cache_size: int = 16
              ) -> RepoCache:
  """Empty caches for `capacity` prompts of `max_cache_size` entries (the
  authors' script: 16; their code default 8)."""
  for name, value in (("capacity", capacity), ("completion_len",
                                               completion_len),
                      ("max_cache_size", max_cache_size)):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"{name}={value!r} must be an integer >= 1.")
  q, m, t = capacity, max_cache_size, completion_len
  return RepoCache(tokens=jnp.zeros((q, m, t), jnp.int32),
                   mask=jnp.zeros((q, m, t), jnp.float32),
                   old_logp=jnp.zeros((q, m, t), jnp.float32),
                   rewards=jnp.zeros((q, m), jnp.float32),
                   step=jnp.zeros((q, m), jnp.int32),
                   size=jnp.zeros((q,), jnp.int32))


def repo_push(cache: RepoCache, slots, tokens, mask, old_logp, rewards, step,
              valid=None) -> RepoCache:
  """`cache` with each group's G completions appended to its prompt's FIFO
  (the oldest fall out past M), groups in batch order: a prompt twice in a
  batch appends twice. Filler groups (`valid` False) are not stored.

  Args:
    slots: [P] int32 cache slot of each group's prompt.
    tokens, mask, old_logp: [P, G, T].
    rewards: [P, G] total rewards.
    step: the current step.
    valid: [P] bool; default all.
  """
  slots = jnp.asarray(slots, jnp.int32)
  p, g = jnp.shape(rewards)
  m = cache.rewards.shape[1]
  valid = jnp.ones((p,), bool) if valid is None else jnp.asarray(valid, bool)
  steps = jnp.full((p, g), step, jnp.int32)
  new = (jnp.asarray(tokens, jnp.int32), jnp.asarray(mask, jnp.float32),
         jnp.asarray(old_logp, jnp.float32),
         jnp.asarray(rewards, jnp.float32), steps)

  def push(c, x):
    s, ok, fresh = x[0], x[1], x[2:]
    # Append on the right, keep the last M: right-aligned FIFO order.
    fields = [jnp.concatenate([old[s], f])[g:][-m:] if g < m else f[-m:]
              for old, f in zip((c.tokens, c.mask, c.old_logp, c.rewards,
                                 c.step), fresh)]
    fields = [jnp.where(ok, f, old[s]) for f, old in
              zip(fields, (c.tokens, c.mask, c.old_logp, c.rewards, c.step))]
    size = jnp.where(ok, jnp.minimum(c.size[s] + g, m), c.size[s])
    return RepoCache(*(old.at[s].set(f) for old, f in
                       zip(c[:5], fields)), size=c.size.at[s].set(size)), None

  cache, _ = jax.lax.scan(push, cache, (slots, valid) + new)
  return cache


def _subsets(m: int, k: int) -> np.ndarray:
  """[C(m, k), k] every k-subset of range(m), in lexicographic order."""
  if math.comb(m, k) > _MAX_SUBSETS:
    raise registry.OptionError(
        "num_replays", f"max_variance_k scores all C({m}, {k}) = "
        f"{math.comb(m, k)} subsets; keep it under {_MAX_SUBSETS}: lower "
        "num_replays or max_cache_size.")
  return np.asarray(list(itertools.combinations(range(m), k)), np.int32)


def repo_retrieve(cache: RepoCache, slots, key, *, strategy: str = "highest_k",
                  num_replays: int = 8, min_cache_to_replay: int = 16):
  """The cached entries each group replays, chosen by `strategy`.

  With size the prompt's entries and k = min(size, num_replays); nothing
  when size < min_cache_to_replay:

  * ``random_k``: k drawn uniformly without replacement (keyed);
  * ``highest_k``: the k highest rewards, ties in FIFO order (oldest first);
  * ``recent_k``: the k newest, oldest first;
  * ``max_variance_k``: the k-subset of largest population variance of
    rewards, then of largest sum, then the first in lexicographic order of
    FIFO indices (the authors' strict ``>`` over
    ``itertools.combinations``);
  * ``all``: every entry (K = M).

  Args:
    cache: `RepoCache`.
    slots: [P] int32 cache slot of each group's prompt.
    key: the key of ``random_k`` (unused otherwise).

  Returns:
    (positions [P, K] int32 into the cache's M axis, valid [P, K] bool);
    K = num_replays, or M for ``all``.
  """
  if strategy not in REPO_STRATEGIES:
    raise ValueError(f"strategy={strategy!r} is unknown; choose one of "
                     f"{', '.join(REPO_STRATEGIES)}.")
  m = cache.rewards.shape[1]
  for name, value in (("num_replays", num_replays),
                      ("min_cache_to_replay", min_cache_to_replay)):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"{name}={value!r} must be an integer >= 1.")
  if min_cache_to_replay > m:
    raise ValueError(f"min_cache_to_replay={min_cache_to_replay} exceeds "
                     f"max_cache_size={m}: no prompt would ever replay.")
  k = min(num_replays, m)
  slots = jnp.asarray(slots, jnp.int32)
  size = cache.size[slots][:, None]  # [P, 1]
  ready = size >= min_cache_to_replay
  rewards = cache.rewards[slots]  # [P, M]
  position = jnp.arange(m)[None, :]
  filled = position >= m - size
  count = jnp.minimum(size, k)  # entries actually replayed
  first_k = jnp.arange(k)[None, :] < count
  if strategy == "all":
    return jnp.broadcast_to(position, filled.shape).astype(jnp.int32), \
        filled & ready
  if strategy == "recent_k" or strategy == "max_variance_k":
    tail = jnp.broadcast_to(m - k + jnp.arange(k)[None, :], (slots.shape[0],
                                                             k))
    tail_valid = (tail >= m - count) & ready
    if strategy == "recent_k":
      return tail.astype(jnp.int32), tail_valid
    return _max_variance(rewards, size, k, tail, tail_valid, ready)
  if strategy == "highest_k":
    order = jnp.argsort(jnp.where(filled, -rewards, jnp.inf), axis=1,
                        stable=True)
  else:  # random_k: Gumbel top-k over the filled entries
    noise = jax.random.gumbel(key, rewards.shape)
    order = jnp.argsort(jnp.where(filled, -noise, jnp.inf), axis=1)
  return order[:, :k].astype(jnp.int32), first_k & ready


def _max_variance(rewards, size, k, tail, tail_valid, ready):
  """max_variance_k; a prompt with fewer than k entries replays them all
  (the tail)."""
  m = rewards.shape[1]
  subsets = jnp.asarray(_subsets(m, k))  # [S, k] FIFO indices
  # FIFO index j sits at position m - size + j.
  positions = m - size[:, :, None] + subsets[None]  # [P, S, k]
  allowed = subsets[None, :, -1] < size  # every index within the FIFO
  rows = jnp.arange(rewards.shape[0])[:, None, None]
  values = rewards[rows, jnp.clip(positions, 0, m - 1)]  # [P, S, k]
  var = jnp.where(allowed, values.var(axis=2), -jnp.inf)
  best = var == var.max(axis=1, keepdims=True)
  total = jnp.where(best & allowed, values.sum(axis=2), -jnp.inf)
  winner = jnp.argmax(best & (total == total.max(axis=1, keepdims=True)),
                      axis=1)
  chosen = jnp.take_along_axis(positions, winner[:, None, None], axis=1)[:, 0]
  full = size >= k
  return (jnp.where(full, chosen, tail).astype(jnp.int32),
          jnp.where(full, ready, tail_valid))


def repo_take(cache: RepoCache, slots, positions):
  """(tokens, mask, old_logp [P, K, T], rewards [P, K]) of the retrieved
  entries."""
  s = jnp.asarray(slots, jnp.int32)[:, None]
  return (cache.tokens[s, positions], cache.mask[s, positions],
          cache.old_logp[s, positions], cache.rewards[s, positions])


def repo_advantages(on_rewards, off_rewards, off_valid, *,
                    mode: str = "split", eps: float = 1e-6, ddof: int = 1):
  """RePO's advantages of a group's fresh and replayed completions.

  * ``split`` (the authors' default): the G fresh and the K replayed are
    each z-scored on their own;
  * ``mixed``: one z-score over their union.

  z = (R - mean) / (std + eps), std with `ddof` (the authors: ddof 1,
  eps 1e-4); 0 for invalid replays and for a set of equal rewards.

  Args:
    on_rewards: [P, G]; off_rewards: [P, K]; off_valid: [P, K] bool.

  Returns:
    (on [P, G], off [P, K]) float32 advantages.
  """
  if mode not in REPO_MODES:
    raise ValueError(f"mode={mode!r} is unknown; choose one of "
                     f"{', '.join(REPO_MODES)}.")
  on = jnp.asarray(on_rewards, jnp.float32)
  off = jnp.asarray(off_rewards, jnp.float32)
  off_valid = jnp.asarray(off_valid, bool)
  if on.ndim != 2 or off.ndim != 2 or off.shape[0] != on.shape[0] \
      or off_valid.shape != off.shape:
    raise ValueError(f"on_rewards must be [P, G], off_rewards and off_valid "
                     f"[P, K]; got {on.shape}, {off.shape}, "
                     f"{off_valid.shape}.")
  z = lambda x, members: segments.masked_group_z(
      x[..., None], members[..., None], scale="group", eps=eps,
      ddof=ddof)[..., 0]
  g = on.shape[1]
  if mode == "split":
    return z(on, jnp.ones(on.shape, bool)), z(off, off_valid)
  both = z(jnp.concatenate([on, off], axis=1),
           jnp.concatenate([jnp.ones(on.shape, bool), off_valid], axis=1))
  return both[:, :g], both[:, g:]


# ------------------------------------------------- RePO, wired as a stage


class ReplayRows(NamedTuple):
  """The K cached completions each of a step's P groups replays
  (`Selected.replay`), host arrays; `valid` False marks an empty slot
  (the prompt's cache not ready, or holding fewer than K entries).

  Attributes:
    tokens, mask: [P, K, T] int32 / float32.
    behaviour_logp: [P, K, T] float32, the sampler's log-probs when drawn.
    rewards: [P, K] float32 total rewards (sum_k w_k R_k).
    step: [P, K] int32, the step that drew each.
    valid: [P, K] bool.
    advantage_mode: ``split`` or ``mixed`` (the strategy's option, which
      the step's estimate reads).
  """
  tokens: np.ndarray
  mask: np.ndarray
  behaviour_logp: np.ndarray
  rewards: np.ndarray
  step: np.ndarray
  valid: np.ndarray
  advantage_mode: str = "split"


def replay_width(*, max_cache_size: int = 16, num_replays: int = 8,
                 strategy: str = "highest_k", **_) -> int:
  """K, the replay slots a group gets beside its G members (metadata
  ``extra_rows``): num_replays, capped at the cache size; M for ``all``."""
  if strategy == "all":
    return int(max_cache_size)
  return min(int(num_replays), int(max_cache_size))


def _check_repo_options(capacity, prompt_ids, max_cache_size,
                        min_cache_to_replay, num_replays, strategy,
                        advantage_mode, off_policy_coef) -> None:
  """`registry.OptionError` naming the first option out of range (a config
  error names ``groups.kwargs.<option>``)."""
  from grpo_jax.data import prompt_ids as prompt_ids_lib  # pylint: disable=g-import-not-at-top
  prompt_ids_lib.check_capacity(capacity)  # a slot per prompt
  prompt_ids_lib.check_mode(prompt_ids)
  registry.check_int("max_cache_size", max_cache_size, low=1,
                     why="cached completions per prompt; the authors' 16")
  registry.check_int("min_cache_to_replay", min_cache_to_replay, low=1)
  registry.check_int("num_replays", num_replays, low=1,
                     why="replayed completions per group; the authors' 8")
  if min_cache_to_replay > max_cache_size:
    raise registry.OptionError(
        "min_cache_to_replay", f"min_cache_to_replay={min_cache_to_replay} "
        f"exceeds max_cache_size={max_cache_size}: no prompt would ever "
        "replay; lower it or raise max_cache_size.")
  registry.check_choice("strategy", strategy, REPO_STRATEGIES)
  if strategy == "max_variance_k":
    _subsets(max_cache_size, min(num_replays, max_cache_size))
  registry.check_choice("advantage_mode", advantage_mode, REPO_MODES)
  registry.check_real("off_policy_coef", off_policy_coef, low=0.0,
                      why="c_off, the replayed rows' loss weight; the "
                      "authors' 1")


def repo_state(layout, *, capacity: int = 1024, prompt_ids: str = "exact",
               max_cache_size: int = 16, min_cache_to_replay: int = 16,
               num_replays: int = 8, strategy: str = "highest_k",
               advantage_mode: str = "split", off_policy_coef: float = 1.0
               ) -> RepoCache:
  """RePO's state in ``TrainState.states["groups"]``: empty FIFO caches of
  `capacity` prompts (slots by `prompt_ids`) x `max_cache_size` entries of
  ``layout.max_new_tokens`` tokens."""
  _check_repo_options(capacity, prompt_ids, max_cache_size,
                      min_cache_to_replay, num_replays, strategy,
                      advantage_mode, off_policy_coef)
  return repo_init(capacity, int(layout.max_new_tokens),
                   max_cache_size=max_cache_size)


_retrieve = jax.jit(repo_retrieve, static_argnames=(
    "strategy", "num_replays", "min_cache_to_replay"))
_push = jax.jit(repo_push)


@jax.jit
def _take(cache: RepoCache, slots, positions):
  s = jnp.asarray(slots, jnp.int32)[:, None]
  return repo_take(cache, slots, positions) + (cache.step[s, positions],)


@GROUP_STRATEGIES.register(
    rounds_per_step=lambda **_: 1, reads=("step", "key"), state=repo_state,
    replays=True, extra_rows=replay_width,
    prompt_ids=lambda prompt_ids="exact", **_: prompt_ids,
    paper="RePO, arXiv 2506.09340 (SihengLi99/RePO)",
    examples=({"capacity": 16, "max_cache_size": 4, "min_cache_to_replay": 3,
               "num_replays": 2},
              {"capacity": 4, "prompt_ids": "hash", "max_cache_size": 3,
               "min_cache_to_replay": 3, "num_replays": 2,
               "strategy": "max_variance_k", "advantage_mode": "mixed",
               "off_policy_coef": 0.5}))
def repo(draw, num_prompts, *, state: RepoCache, layout, step, key,
         capacity: int = 1024, prompt_ids: str = "exact",
         max_cache_size: int = 16, min_cache_to_replay: int = 16,
         num_replays: int = 8, strategy: str = "highest_k",
         advantage_mode: str = "split", off_policy_coef: float = 1.0):
  """RePO's replay of each prompt's own earlier completions (arXiv
  2506.09340, VARIANTS.md 4.9; EXACT-CODE, SihengLi99/RePO).

  One round is drawn. Each group's prompt id (`data.Example.index`) maps to
  a slot of the per-prompt cache (`prompt_ids.slots`: ``exact``, or
  ``hash`` = id mod capacity). A prompt whose FIFO holds at least
  `min_cache_to_replay` entries replays K of them, chosen by `strategy`
  (`repo_retrieve`: highest_k, the authors' script; random_k with `key`;
  recent_k; max_variance_k; all), before the round's G completions are
  appended to it (a step never replays itself). The replayed rows join
  the group's batch rows (`Selected.replay`; `grpo_jax.rollout.repo` joins
  them: G + K rows per group, a fixed row count), with
  their stored sampler log-probs as the behaviour policy mu and their
  advantages the estimator's, on the fresh and replayed rewards apart
  (``advantage_mode="split"``, the authors' default) or together
  (``"mixed"``). The update's loss is

    L = agg(fresh rows) + off_policy_coef * agg(replayed rows),

  each part aggregated on its own, KL (beta > 0) on the fresh rows only.

  Args:
    draw: ``draw(r) -> Round``; one round is drawn.
    num_prompts: P.
    state: the `RepoCache` (capacity prompts x max_cache_size entries).
    layout: the run's `GroupLayout` (reward weights).
    step: the training step (stored with each entry).
    key: ``random_k``'s key.
    capacity, prompt_ids: the cache's prompt slots and how ids map to them.
    max_cache_size: M, entries per prompt (authors' script 16).
    min_cache_to_replay: entries a prompt needs before it replays (16).
    num_replays: k (8).
    strategy: the retrieval (`REPO_STRATEGIES`).
    advantage_mode, off_policy_coef: read by the step (`rollout.repo`).

  Returns:
    (Selected with ``replay`` a `ReplayRows` [P, K], new cache);
    measurements ``repo/replaying_groups`` (share of the P groups with a
    replayed row), ``repo/replay_rows`` (share of the P*K slots filled),
    ``repo/mean_age`` (steps, over replayed rows; 0 when none) and
    ``repo/untracked_groups`` (ids with no cache slot: they neither store
    nor replay).
  """
  del capacity, max_cache_size, off_policy_coef  # the state's; the update's
  from grpo_jax.data import prompt_ids as prompt_ids_lib  # pylint: disable=g-import-not-at-top
  rnd = draw(0)
  cache_slots, tracked = prompt_ids_lib.slots(
      rnd.prompt_index, state.rewards.shape[0], prompt_ids)
  positions, valid = _retrieve(state, cache_slots, key, strategy=strategy,
                               num_replays=num_replays,
                               min_cache_to_replay=min_cache_to_replay)
  tokens, mask, logp, rewards, when = jax.device_get(
      _take(state, cache_slots, positions))
  valid = np.asarray(valid, bool) & np.asarray(tracked, bool)[:, None]
  total = (np.asarray(rnd.rewards, np.float32)
           * np.asarray(layout.weights, np.float32)).sum(-1)
  new_state = _push(state, cache_slots, rnd.tokens, rnd.mask,
                    rnd.sampler_logp, total, jnp.asarray(step, jnp.int32),
                    tracked)
  replay = ReplayRows(tokens=np.asarray(tokens, np.int32),
                      mask=np.asarray(mask, np.float32) * valid[..., None],
                      behaviour_logp=np.asarray(logp, np.float32),
                      rewards=np.where(valid, rewards, 0.0).astype(
                          np.float32),
                      step=np.asarray(when, np.int32), valid=valid,
                      advantage_mode=advantage_mode)
  age = (step - replay.step)[valid]
  measurements = {
      "repo/replaying_groups": float(valid.any(axis=1).mean()),
      "repo/replay_rows": float(valid.mean()),
      "repo/mean_age": float(age.mean()) if age.size else 0.0,
      "repo/untracked_groups": float(1.0 - np.asarray(tracked).mean()),
  }
  return Selected(rounds=[rnd], picks=[(0, i) for i in range(num_prompts)],
                  valid=np.ones(num_prompts, bool), measurements=measurements,
                  replay=replay), new_state
