"""The budget stage: how many completions each prompt of a step gets
(config.budget; VARIANTS.md 4.1-4.3), as registered strategies.

A step trains on N = rollout.num_prompts * rollout.num_generations rows
whatever the allocation (DESIGN.md, "Group sizes may differ per prompt"):
the groups are ragged within those rows (`ragged.ragged_rows`), padding
rows carry no loss and enter no statistic, and every shape is static, so
the sampler and the update compile once whatever the sizes. The estimator
sees a [P, G_max] view with `GroupData.members` marking the slots a row
fills (G_max the strategy's largest group, its `width`).

| name           | group sizes                                            |
|----------------|--------------------------------------------------------|
| ``fixed``      | rollout.num_generations each (the plain pipeline)      |
| ``knapsack``   | Knapsack-RL's DP over tracked success rates            |
| ``pilot_commit`` | a pilot of n0 each, the rest by the pilots' std       |
| ``sgpo``       | 1 / p from a profiling pass, easy to hard              |

An entry is ``fn(state, *, draw, select, task, profile, step, num_prompts,
num_rows, **options) -> (Plan, state)``: `select()` gives the step's
prompts (the select stage's), ``draw(examples, sizes, num_rows, round)``
samples ``sizes[p]`` completions of each prompt in a sampler call of
`num_rows` rows and scores them (`ragged.Rows`), ``profile(indices, n)``
samples n completions of every problem listed (`profiling.Profile`). The
host runs the allocation between sampling calls (the sizes decide the
next call's layout); the state is a NamedTuple of fixed-shape arrays
(``()`` when stateless), checkpointed in ``TrainState.states["budget"]``.
"""

import functools
from typing import Any, Callable, NamedTuple, Optional, Tuple

import jax.numpy as jnp
import numpy as np

from grpo_jax.data import prompt_ids as prompt_ids_lib
from grpo_jax import registry
from grpo_jax.strategies import budgets
from grpo_jax.strategies import ragged

# What the rollout passes every entry (not config options).
HELPERS = ("draw", "select", "task", "profile", "step", "num_prompts",
           "num_rows")


class BudgetMeta(NamedTuple):
  """What a budget strategy declares when it registers (`BUDGETS`). The
  fields given as functions take the strategy's options."""
  state: Callable  # (capacity=...) -> its initial state (``()`` if none)
  width: Callable  # (num_rows, **options) -> G_max, its largest group
  # check(num_prompts, num_rows, **options): ValueError naming the option.
  check: Optional[Callable] = None
  active: bool = True  # False for ``fixed``: the plain pipeline runs
  picks_prompts: bool = False  # it chooses the step's prompts (sGPO)
  # (**options) -> completions of each problem it profiles at the first
  # step (sGPO); None: it profiles none.
  profile_samples: Optional[Callable] = None
  # How its per-prompt table takes prompt ids (a function of the options);
  # None: it keeps none.
  prompt_ids: Any = None
  paper: str = ""  # arXiv id (or a short reference)


BUDGETS = registry.Registry("budget strategy", positional=("state",),
                            meta=BudgetMeta)


class Plan(NamedTuple):
  """What a budget strategy hands the step.

  Attributes:
    rows: the N rows to train on (`ragged.Rows`).
    measures: its own measurements, ``budget/<name>`` -> float.
  """
  rows: Any
  measures: dict


class Budget(NamedTuple):
  """A bound budget strategy.

  Attributes:
    name: its registry name.
    active: False for ``fixed`` (the plain pipeline runs).
    width: G_max, the largest group it draws (the estimator's view).
    init: ``() -> state``.
    apply: ``apply(state, **helpers) -> (Plan, state)`` (`HELPERS`).
    picks_prompts: it chooses the step's prompts itself (sGPO's
      curriculum): the select stage must be ``uniform``.
    profile_samples: completions of each training problem it samples at
      the first step (sGPO's profiling pass); 0 = none.
  """
  name: str
  active: bool
  width: int
  init: Callable[[], Any]
  apply: Callable
  picks_prompts: bool = False
  profile_samples: int = 0


def make_budget(name: str, *, num_prompts: int, num_rows: int,
                **options) -> Budget:
  """The `Budget` `name` for steps of `num_prompts` prompts and `num_rows`
  rows; ValueError naming the option and its fix when the options cannot
  fit those rows (checked here, before any compute)."""
  entry = BUDGETS.entry(name)
  BUDGETS.check_options(name, options, exclude=HELPERS)
  if entry.meta.check is not None:
    entry.meta.check(num_prompts=num_prompts, num_rows=num_rows, **options)
  fn = functools.partial(entry.fn, **options)
  init = functools.partial(entry.meta.state, **{
      k: v for k, v in options.items() if k == "capacity"})
  return Budget(
      name=name, active=entry.meta.active,
      width=int(entry.meta.width(num_rows=num_rows, **options)),
      init=init, picks_prompts=entry.meta.picks_prompts,
      profile_samples=_profile_samples(entry.meta, options),
      apply=lambda state, **helpers: fn(
          state, num_prompts=num_prompts, num_rows=num_rows, **helpers))


def _profile_samples(meta: BudgetMeta, options) -> int:
  return 0 if meta.profile_samples is None else int(
      meta.profile_samples(**options))


def _int(name: str, value, low: int, fix: str) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
      or value < low:
    raise ValueError(f"{name}={value!r} must be an integer >= {low}; {fix}.")
  return int(value)


def _check_width(name: str, width: int, num_rows: int) -> None:
  if width > num_rows:
    raise ValueError(
        f"{name}={width} is a group larger than the step's {num_rows} rows "
        "(rollout.num_prompts * rollout.num_generations); lower it to at "
        f"most {num_rows} or raise rollout.num_generations.")


def signal_column(rows, signal_reward: str) -> int:
  """The reward column that says solved (> 0) or not; "" = the first."""
  name = signal_reward or rows.columns[0]
  if name not in rows.columns:
    raise ValueError(f"signal_reward={signal_reward!r} is not a reward "
                     f"column; choose one of {', '.join(rows.columns)}.")
  return rows.columns.index(name)


def size_measures(sizes, num_rows: int) -> dict:
  """budget/rows_used (share of the N rows drawn), budget/group_size_min
  and _max (over the prompts drawn), budget/skipped_prompts (prompts of
  size 0)."""
  sizes = np.asarray(sizes)
  drawn = sizes[sizes > 0]
  return {"budget/rows_used": float(sizes.sum()) / num_rows,
          "budget/group_size_min": float(drawn.min()) if drawn.size else 0.,
          "budget/group_size_max": float(drawn.max()) if drawn.size else 0.,
          "budget/skipped_prompts": float((sizes == 0).sum())}


# ------------------------------------------------------------------ fixed


def _none(**_):
  return ()


@BUDGETS.register(state=_none, active=False,
                  width=lambda num_rows, **_: num_rows, examples=({},))
def fixed(state, **_):
  """rollout.num_generations completions of every prompt: the plain
  pipeline (`rollout.generate`), which never calls this."""
  raise ValueError("the fixed budget runs the plain pipeline; it draws "
                   "nothing itself.")


# ------------------------------------------------------------ Knapsack-RL


class SuccessTracker(NamedTuple):
  """Each problem's outcome at its most recent visit, by
  `data.Example.index` (its slot: `prompt_ids.slots`, exact or hashed).

  Attributes:
    successes: [capacity] float32 solved completions at the last visit.
    trials: [capacity] float32 completions at the last visit (0: never
      seen).
  """
  successes: jnp.ndarray
  trials: jnp.ndarray


def tracker_init(*, capacity: int = 1024) -> SuccessTracker:
  prompt_ids_lib.check_capacity(capacity)
  zero = jnp.zeros((capacity,), jnp.float32)
  return SuccessTracker(successes=zero, trials=zero)


def tracker_rates(tracker: SuccessTracker, prompt_index, *,
                  unseen_p: float = 0.5,
                  prompt_ids: str = "exact") -> np.ndarray:
  """[P] float64 success rates of the prompts at their last visit;
  `unseen_p` for a prompt never seen (or without a slot: an id past an
  exact table)."""
  s = np.asarray(tracker.successes, np.float64)
  n = np.asarray(tracker.trials, np.float64)
  slot, tracked = prompt_ids_lib.slots(prompt_index, s.size, prompt_ids)
  seen = tracked & (n[slot] > 0)
  return np.where(seen, s[slot] / np.maximum(n[slot], 1.0), unseen_p)


def tracker_update(tracker: SuccessTracker, rows, column: int, *,
                   prompt_ids: str = "exact") -> SuccessTracker:
  """The tracker with each drawn prompt's slot set to this visit's
  (solved, drawn) counts over its rows (column > 0 is solved); padding
  rows and prompts without a slot write nothing; prompts sharing a hashed
  slot pool their counts."""
  s = np.array(tracker.successes, np.float32)
  n = np.array(tracker.trials, np.float32)
  slot, tracked = prompt_ids_lib.slots(rows.prompt_index, s.size,
                                       prompt_ids)
  real = (np.asarray(rows.group) >= 0) & tracked
  solved = (np.asarray(rows.rewards)[:, column] > 0).astype(np.float32)
  visited = np.unique(slot[real])
  s[visited] = 0.0
  n[visited] = 0.0
  np.add.at(s, slot[real], solved[real])
  np.add.at(n, slot[real], 1.0)
  return SuccessTracker(successes=jnp.asarray(s), trials=jnp.asarray(n))


def _check_knapsack(*, num_prompts, num_rows, n_min=2, n_max=8,
                    warmup_steps=5, extreme_p=0, unseen_p=0.5,
                    capacity=1024, prompt_ids="exact", signal_reward=""):
  del signal_reward
  prompt_ids_lib.check_mode(prompt_ids)
  n_min = _int("n_min", n_min, 1, "give each prompt one completion or more")
  n_max = _int("n_max", n_max, n_min, "set n_max >= n_min")
  if num_prompts * n_min > num_rows:
    raise ValueError(
        f"n_min={n_min} for each of the {num_prompts} prompts needs "
        f"{num_prompts * n_min} rows, more than the budget of {num_rows} "
        "(rollout.num_prompts * rollout.num_generations); lower n_min or "
        "raise rollout.num_generations.")
  _check_width("n_max", n_max, num_rows)
  _int("warmup_steps", warmup_steps, 0, "0 allocates from the first step")
  if extreme_p:
    _int("extreme_p", extreme_p, n_min, "0 gives such prompts n_min")
    if extreme_p > n_max:
      raise ValueError(f"extreme_p={extreme_p} exceeds n_max={n_max}; "
                       "lower it (0 = n_min).")
  if not 0.0 <= unseen_p <= 1.0:  # NaN fails too
    raise ValueError(f"unseen_p={unseen_p!r} must lie in [0, 1].")
  tracker_init(capacity=capacity)


@BUDGETS.register(
    state=tracker_init, check=_check_knapsack,
    width=lambda n_max=8, **_: n_max, paper="arXiv 2509.25849",
    prompt_ids=prompt_ids_lib.prompt_ids_option,
    examples=({}, {"n_min": 1, "n_max": 4, "warmup_steps": 0},
              {"extreme_p": 3, "unseen_p": 0.3},
              {"capacity": 2, "prompt_ids": "hash", "warmup_steps": 0}))
def knapsack(state: SuccessTracker, *, draw, select, step, num_prompts,
             num_rows, n_min: int = 2, n_max: int = 8,
             warmup_steps: int = 5, extreme_p: int = 0,
             unseen_p: float = 0.5, capacity: int = 1024,
             prompt_ids: str = "exact", signal_reward: str = "", **_):
  """Knapsack-RL's budget allocation (arXiv 2509.25849; VARIANTS.md 4.3):

    maximise sum_i (1 - p_i^n_i - (1 - p_i)^n_i) p_i (1 - p_i)^2
    s.t.     sum_i n_i <= N,  n_min <= n_i <= n_max

  by the exact DP of `budgets.knapsack_allocate`, p_i the prompt's success
  rate at its most recent visit (a per-prompt `SuccessTracker` in state,
  by `data.Example.index`). The first `warmup_steps` steps split N
  uniformly (the port's 5-step warm-up); a prompt never seen gets
  `unseen_p` (**reconstruction**: the paper's treatment of new and
  extreme prompts was not recovered; p in {0, 1} gets `extreme_p`, 0 =
  n_min).

  Args:
    state: the tracker (`tracker_init(capacity=)`).
    draw, select, step, num_prompts, num_rows: the rollout's (`HELPERS`).
    n_min, n_max: each prompt's fewest and most completions (n_max is the
      view's width, at most N).
    warmup_steps: the uniform steps before the first allocation.
    extreme_p: completions of a prompt with p in {0, 1}; 0 = n_min.
    unseen_p: the success rate assumed for a prompt never seen.
    capacity: the tracker's slots (`prompt_ids`).
    prompt_ids: ``exact`` (slot = id; train.validate refuses a task whose
      ids reach past `capacity`) or ``hash`` (slot = id mod capacity;
      problems sharing a slot share their rate); `prompt_ids.slots`.
    signal_reward: the column whose value > 0 counts as solved; "" = the
      first (the verifier).
  """
  del capacity
  examples = select()
  index = np.asarray([e.index for e in examples])
  warm = step < warmup_steps
  p = tracker_rates(state, index, unseen_p=unseen_p, prompt_ids=prompt_ids)
  seen = tracker_rates(state, index, unseen_p=-1.0,
                       prompt_ids=prompt_ids) >= 0
  if warm:
    sizes = budgets.uniform_allocation(num_prompts, num_rows, n_min=n_min,
                                       n_max=n_max)
  else:
    sizes = budgets.knapsack_allocate(p, num_rows, n_min=n_min, n_max=n_max,
                                      extreme_p=extreme_p or None)
  rows = draw(examples, sizes, num_rows, 0)
  state = tracker_update(state, rows, signal_column(rows, signal_reward),
                         prompt_ids=prompt_ids)
  measures = size_measures(sizes, num_rows)
  measures.update({
      "budget/warmup": float(warm),
      "budget/value": float(budgets.knapsack_value(sizes, p).sum()),
      # The step's prompts with a success estimate from an earlier visit.
      "budget/seen_prompts": float(seen.mean())})
  return Plan(rows=rows, measures=measures), state


# ------------------------------------------------------------ Pilot-Commit


def _check_pilot(*, num_prompts, num_rows, n0=2, g_max=8, min_std=0.1):
  n0 = _int("n0", n0, 1, "draw one pilot completion per prompt or more")
  _int("g_max", g_max, n0, "the largest group holds the pilot too")
  _check_width("g_max", g_max, num_rows)
  if num_prompts * n0 >= num_rows:
    raise ValueError(
        f"n0={n0} pilot completions for each of the {num_prompts} prompts "
        f"take {num_prompts * n0} of the {num_rows} rows and leave none to "
        "commit; lower n0 below rollout.num_generations or raise "
        "rollout.num_generations.")
  if isinstance(min_std, bool) or not (isinstance(min_std, (int, float))
                                       and 0.0 <= min_std < np.inf):
    raise ValueError(f"min_std={min_std!r} must be a finite number >= 0.")


@BUDGETS.register(
    state=_none, check=_check_pilot, width=lambda g_max=8, **_: g_max,
    paper="Pilot-Commit (seed 000 para. 46)",
    examples=({}, {"n0": 1, "g_max": 6, "min_std": 0.0}))
def pilot_commit(state, *, draw, select, num_prompts, num_rows, n0: int = 2,
                 g_max: int = 8, min_std: float = 0.1, **_):
  """Pilot-Commit (seed 000 para. 46; VARIANTS.md 4.2; **reconstruction**):
  two sampling calls within the step, both from the current policy.

    pilot:  n0 completions of each prompt (P n0 rows);
            s_p = std(pilot rewards of p, ddof 0); skip p where s_p < min_std
    commit: the other N - P n0 rows by Neyman allocation, extra_p ~ s_p,
            a group (pilot included) capped at g_max
            (`budgets.pilot_commit_allocation`)

  A kept prompt's group is its pilot rows and its committed rows (all
  on-policy); a skipped prompt's pilot rows become padding (no loss, no
  statistic). The rewards are the weighted total of the columns.

  Args:
    state: () (stateless).
    draw, select, num_prompts, num_rows: the rollout's (`HELPERS`).
    n0: pilot completions per prompt; P n0 < N.
    g_max: the largest group, pilot included (the view's width).
    min_std: the pilot std below which a prompt is skipped.
  """
  examples = select()
  pilot_rows = num_prompts * n0
  pilot = draw(examples, np.full(num_prompts, n0, np.int64), pilot_rows, 0)
  decision = budgets.pilot_commit_allocation(
      np.asarray(pilot.total[:pilot_rows]).reshape(num_prompts, n0),
      num_rows, g_max=g_max, min_std=min_std)
  commit = draw(examples, decision.extra, num_rows - pilot_rows, 1)
  rows = ragged.join_rows([ragged.drop_groups(pilot, decision.skip), commit],
                          num_rows)
  sizes = ragged.group_sizes(rows.group, num_prompts)
  measures = size_measures(sizes, num_rows)
  measures.update({
      "budget/committed_rows": float(decision.extra.sum()) / num_rows,
      "budget/pilot_std_mean": float(decision.std.mean())})
  return Plan(rows=rows, measures=measures), state


# -------------------------------------------------------------------- sGPO


class SGPOState(NamedTuple):
  """sGPO's profile and curriculum position.

  Attributes:
    profiled: [] int32, 1 once the profiling pass ran (it runs at the
      first step, under the initial policy, and never again).
    successes, trials: [capacity] float32, the pass's solved and drawn
      completions of each problem (its slot: `prompt_ids.slots`; problems
      sharing a hashed slot pool their counts).
    cursor: [] int32, the position in the easy-to-hard order of the next
      prompt to train on (the order repeats when it runs out).
  """
  profiled: jnp.ndarray
  successes: jnp.ndarray
  trials: jnp.ndarray
  cursor: jnp.ndarray


def sgpo_init(*, capacity: int = 1024) -> SGPOState:
  tracker = tracker_init(capacity=capacity)
  zero = jnp.zeros((), jnp.int32)
  return SGPOState(profiled=zero, successes=tracker.successes,
                   trials=tracker.trials, cursor=zero)


def _check_sgpo(*, num_prompts, num_rows, num_samples=8, g_min=2, g_max=8,
                zero_keep_frac=0.1, capacity=1024, prompt_ids="exact",
                signal_reward=""):
  del num_prompts, signal_reward
  prompt_ids_lib.check_mode(prompt_ids)
  _int("num_samples", num_samples, 1, "profile each prompt at least once")
  g_min = _int("g_min", g_min, 1, "a group holds one completion or more")
  g_max = _int("g_max", g_max, g_min, "set g_max >= g_min")
  _check_width("g_max", g_max, num_rows)
  if isinstance(zero_keep_frac, bool) or not (
      isinstance(zero_keep_frac, (int, float))
      and 0.0 <= zero_keep_frac <= 1.0):
    raise ValueError(f"zero_keep_frac={zero_keep_frac!r} must lie in "
                     "[0, 1].")
  tracker_init(capacity=capacity)


def sgpo_schedule(sizes, order, cursor: int, *, num_prompts: int,
                  num_rows: int) -> Tuple[np.ndarray, int]:
  """The next prompts of the curriculum that fit the step: from `cursor`
  in `order` (cyclic), each with its group size, while fewer than
  `num_prompts` are taken and their sizes sum to at most `num_rows`.

  Args:
    sizes: [Q] group size of each problem (by position in `order`'s ids).
    order: [K] the kept problems' positions, easy to hard.
    cursor: where the previous step stopped.

  Returns:
    ([k] positions taken, k >= 1, the new cursor).
  """
  taken, used = [], 0
  while len(taken) < min(num_prompts, len(order)):
    q = order[(cursor + len(taken)) % len(order)]
    if used + sizes[q] > num_rows:
      break
    taken.append(q)
    used += sizes[q]
  return np.asarray(taken, np.int64), (cursor + len(taken)) % len(order)


@BUDGETS.register(
    state=sgpo_init, check=_check_sgpo, width=lambda g_max=8, **_: g_max,
    picks_prompts=True, paper="sGPO (seed 000 para. 9)",
    profile_samples=lambda num_samples=8, **_: num_samples,
    prompt_ids=prompt_ids_lib.prompt_ids_option,
    examples=({}, {"num_samples": 2, "g_min": 1, "zero_keep_frac": 1.0},
              {"capacity": 2, "prompt_ids": "hash",
               "zero_keep_frac": 1.0}))
def sgpo(state: SGPOState, *, draw, task, profile, num_prompts, num_rows,
         num_samples: int = 8, g_min: int = 2, g_max: int = 8,
         zero_keep_frac: float = 0.1, capacity: int = 1024,
         prompt_ids: str = "exact", signal_reward: str = "", **_):
  """sGPO (seed 000 para. 9; VARIANTS.md 4.1; **reconstruction**): group
  sizes from the inverse of each query's success rate under the initial
  policy, queries scheduled easy to hard.

    p_q  = successes / n of a profiling pass, n = num_samples completions
           of every training problem, before the first update
    drop p_q = 1; keep p_q = 0 with probability zero_keep_frac (keyed by
    the task's seed)
    G_q  = clip(ceil(1 / p_q - 1e-6), g_min, g_max), g_max at p_q = 0
    order: descending p_q, stable by index (`budgets.sgpo_*`)

  Each step takes the next queries of the order while they fit the N rows
  (at most P of them: `sgpo_schedule`); a step's unused prompt slots are
  padding. The profile and the cursor are state (checkpointed: a resumed
  run neither profiles again nor restarts the curriculum).

  Args:
    state: `SGPOState` (`sgpo_init(capacity=)`).
    draw, task, profile, num_prompts, num_rows: the rollout's (`HELPERS`).
    num_samples: n, profiling completions per problem (VARIANTS: 8).
    g_min, g_max: the group size's clip (g_max is the view's width).
    zero_keep_frac: the share of never-solved queries kept.
    capacity: the profile's slots (`prompt_ids`).
    prompt_ids: ``exact`` (slot = id; train.validate refuses a task whose
      ids reach past `capacity`; a problem without a slot is left out of
      the curriculum) or ``hash`` (slot = id mod capacity; problems sharing
      a slot pool their profiles); `prompt_ids.slots`.
    signal_reward: the column whose value > 0 counts as solved (profiling
      rewards); "" = the first.
  """
  indices = np.asarray(task.train_indices())
  measures = {}
  size = state.trials.shape[0]
  if not int(state.profiled):
    prof = profile(indices, num_samples, signal_reward)
    slot, tracked = prompt_ids_lib.slots(prof.index, size, prompt_ids)
    s = np.zeros(size, np.float32)
    n = np.zeros(size, np.float32)
    np.add.at(s, slot[tracked], np.asarray(prof.successes)[tracked])
    np.add.at(n, slot[tracked], np.asarray(prof.trials)[tracked])
    state = SGPOState(profiled=jnp.ones((), jnp.int32),
                      successes=jnp.asarray(s), trials=jnp.asarray(n),
                      cursor=state.cursor)
    measures["budget/profiled_prompts"] = float(tracked.sum())
  s = np.asarray(state.successes, np.float64)
  n = np.asarray(state.trials, np.float64)
  slot, tracked = prompt_ids_lib.slots(indices, size, prompt_ids)
  profiled = tracked & (n[slot] > 0)
  p = np.where(profiled, s[slot] / np.maximum(n[slot], 1.0), 0.0)
  keep = budgets.sgpo_keep(p, seed=(getattr(task, "seed", 0), 0x5690),
                           zero_keep_frac=zero_keep_frac) & profiled
  if not keep.any():
    raise ValueError(
        "sGPO kept no training problem: the initial policy solved every "
        "one (p = 1) or none was kept at p = 0; raise "
        "budget.kwargs.zero_keep_frac or use a harder task.")
  order = budgets.sgpo_order(p, keep)
  sizes_all = budgets.sgpo_group_sizes(p, g_min=g_min, g_max=g_max)
  taken, cursor = sgpo_schedule(sizes_all, order, int(state.cursor),
                                num_prompts=num_prompts, num_rows=num_rows)
  # P prompts for the sampler's fixed prefill: the unused slots repeat the
  # first prompt with no completion.
  picked = np.concatenate([taken, np.full(num_prompts - taken.size,
                                          taken[0])])
  sizes = np.zeros(num_prompts, np.int64)
  sizes[:taken.size] = sizes_all[taken]
  examples = [task.example(int(indices[q])) for q in picked]
  rows = draw(examples, sizes, num_rows, 0)
  state = state._replace(cursor=jnp.asarray(cursor, jnp.int32))
  measures.update(size_measures(sizes, num_rows))
  measures.update({
      "budget/kept_problems": float(keep.sum()),
      "budget/success_mean": float(p[taken].mean()),
      "budget/cursor": float(cursor)})
  return Plan(rows=rows, measures=measures), state
