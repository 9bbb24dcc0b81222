"""Budget rules: how many completions each prompt gets (VARIANTS.md 4.1-4.3)
and how many more a signal-free group draws (AERO).

Pure numpy functions, run on the host between sampling rounds: their inputs
(success estimates, pilot rewards, counts) are small per-prompt vectors and
their outputs decide the shapes of the next round, which must be concrete.

* `knapsack_value`, `knapsack_allocate`, `uniform_allocation`: Knapsack-RL;
* `pilot_commit_allocation`: Pilot-Commit's Neyman allocation;
* `sgpo_keep`, `sgpo_group_sizes`, `sgpo_order`: sGPO from offline profiling;
* `aero_extra_draws`: how many more completions a group draws until its
  outcomes are mixed.

Group sizes from these rules differ per prompt; `ragged.ragged_rows` packs
them into the step's fixed row count.
"""

from typing import NamedTuple, Optional

import numpy as np

# Ties in the knapsack DP are decided below this difference in total value
# (values are at most 4/27 per prompt, summed in float64).
_TIE = 1e-12


def _check_int(name: str, value, low: int) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
      or value < low:
    raise ValueError(f"{name}={value!r} must be an integer >= {low}.")
  return int(value)


def _check_rates(name: str, p) -> np.ndarray:
  p = np.asarray(p, np.float64)
  if p.ndim != 1 or not np.all(np.isfinite(p)) or np.any((p < 0) | (p > 1)):
    raise ValueError(f"{name} must be a [P] vector of success rates in [0, 1];"
                     f" got {p!r}.")
  return p


# ------------------------------------------------------------- Knapsack-RL


def knapsack_value(n, p) -> np.ndarray:
  """Knapsack-RL's value of drawing n completions of a prompt of success rate p.

    value(n, p) = (1 - p**n - (1 - p)**n) * p * (1 - p)**2

  the chance that n draws are not all equal (a non-zero gradient) times the
  information gain p (1 - p)^2 (arXiv 2509.25849, as in the port
  giga-knapsack-rl ``task_value.py``). 0 for p in {0, 1}.

  Args:
    n: completions, any shape (broadcast with p).
    p: success rates in [0, 1].

  Returns:
    float64 values, the broadcast shape.
  """
  n = np.asarray(n, np.float64)
  p = np.asarray(p, np.float64)
  return (1.0 - p**n - (1.0 - p)**n) * p * (1.0 - p)**2


def knapsack_allocate(success, budget: int, *, n_min: int = 2,
                      n_max: int = 16,
                      extreme_p: Optional[int] = None) -> np.ndarray:
  """Knapsack-RL's budget allocation (arXiv 2509.25849): an exact DP.

    maximise sum_i value(n_i, p_i)  s.t.  sum_i n_i <= budget,
                                          n_min <= n_i <= n_max

  a multiple-choice knapsack over the prompts, solved by dynamic programming
  in O(P * budget * (n_max - n_min)). Prompts with p in {0, 1} have value 0
  and get `extreme_p` completions (default n_min) before the DP; the paper's
  own treatment of such prompts was not recovered (**reconstruction**).

  Ties: the smallest total among allocations of the best value (budget is
  not spent for nothing), then, prompt by prompt in index order, the
  smaller n (so a tied extra completion goes to the higher index).

  Args:
    success: [P] estimated success rates in [0, 1] (from the prompts'
      success history; Knapsack-RL's first steps use `uniform_allocation`).
    budget: the most completions the step draws in all.
    n_min, n_max: each prompt's fewest and most completions.
    extreme_p: completions given to a prompt with p in {0, 1}; None = n_min.

  Returns:
    [P] int64 completions per prompt.
  """
  p = _check_rates("success", success)
  n_min = _check_int("n_min", n_min, 1)
  n_max = _check_int("n_max", n_max, n_min)
  budget = _check_int("budget", budget, 0)
  fixed = n_min if extreme_p is None else _check_int("extreme_p", extreme_p,
                                                     n_min)
  if fixed > n_max:
    raise ValueError(f"extreme_p={extreme_p!r} must lie in [n_min, n_max] = "
                     f"[{n_min}, {n_max}].")
  extreme = (p == 0) | (p == 1)
  free = np.flatnonzero(~extreme)
  spare = budget - fixed * int(extreme.sum()) - n_min * free.size
  if spare < 0:
    raise ValueError(
        f"budget={budget} cannot give each of the {p.size} prompts its "
        f"minimum (n_min={n_min}, extreme_p={fixed}): raise budget to at "
        f"least {budget - spare} or lower n_min.")
  n = np.where(extreme, fixed, n_min).astype(np.int64)
  extra = _knapsack_extra(p[free], min(spare, free.size * (n_max - n_min)),
                          n_min, n_max)
  n[free] += extra
  return n


def _knapsack_extra(p, spare: int, n_min: int, n_max: int) -> np.ndarray:
  """[R] completions above n_min for the non-extreme prompts (the DP)."""
  r, choices = p.size, n_max - n_min + 1
  # gain[i, c]: prompt i's value with n_min + c completions.
  gain = knapsack_value(n_min + np.arange(choices)[None, :], p[:, None])
  # best[i, w]: the best value of prompts i.. using exactly w extra.
  best = np.full((r + 1, spare + 1), -np.inf)
  best[r, 0] = 0.0
  for i in range(r - 1, -1, -1):
    for c in range(choices):
      if c > spare:
        break
      cand = np.full(spare + 1, -np.inf)
      cand[c:] = gain[i, c] + best[i + 1, :spare + 1 - c]
      best[i] = np.maximum(best[i], cand)
  top = best[0].max() if r else 0.0
  w = int(np.flatnonzero(best[0] >= top - _TIE)[0]) if r else 0
  extra = np.zeros(r, np.int64)
  for i in range(r):
    for c in range(min(choices, w + 1)):
      if gain[i, c] + best[i + 1, w - c] >= best[i, w] - _TIE:
        extra[i], w = c, w - c
        break
  return extra


def uniform_allocation(num_prompts: int, budget: int, *, n_min: int = 1,
                       n_max: Optional[int] = None) -> np.ndarray:
  """The uniform split of `budget` (Knapsack-RL's warm-up steps): budget // P
  each, one more to the lowest indices for the remainder, within
  [n_min, n_max].

  Returns:
    [P] int64 completions per prompt.
  """
  num_prompts = _check_int("num_prompts", num_prompts, 1)
  budget = _check_int("budget", budget, 0)
  n_min = _check_int("n_min", n_min, 1)
  n_max = budget if n_max is None else _check_int("n_max", n_max, n_min)
  if budget < num_prompts * n_min:
    raise ValueError(f"budget={budget} is below n_min={n_min} for each of "
                     f"the {num_prompts} prompts; raise budget.")
  n = np.full(num_prompts, budget // num_prompts, np.int64)
  n[:budget % num_prompts] += 1
  return np.clip(n, n_min, n_max)


# ------------------------------------------------------------ Pilot-Commit


class PilotCommit(NamedTuple):
  """Pilot-Commit's decision for each prompt.

  Attributes:
    std: [P] the pilot rewards' std (ddof 0).
    skip: [P] bool, prompts whose pilot std is below min_std: neither their
      pilot nor any further completion trains.
    extra: [P] int64 completions drawn after the pilot (0 where skipped);
      a kept prompt's group is its n0 pilot rows plus these.
  """
  std: np.ndarray
  skip: np.ndarray
  extra: np.ndarray


def pilot_commit_allocation(pilot_rewards, budget: int, *, g_max: int,
                            min_std: float = 0.1) -> PilotCommit:
  """Pilot-Commit (seed 000 para. 46): a pilot of n0 draws per prompt, then
  the rest of the budget by Neyman allocation (**reconstruction**).

    s_p     = std(pilot_R[p], ddof=0); skip p where s_p < min_std
    extra_p ~ (B - P n0) s_p / sum_q s_q     over the kept prompts

  integer parts first, the remainder to the largest fractional parts (ties
  to the lower index); a prompt's total n0 + extra is capped at g_max and
  what a cap frees is spread again over the uncapped prompts, until nothing
  is left or every kept prompt is capped (the rest is not drawn).

  Args:
    pilot_rewards: [P, n0] the pilot draws' rewards.
    budget: B, all completions of the step, the pilot's included.
    g_max: the largest group (pilot included).
    min_std: the pilot std below which a prompt is skipped.

  Returns:
    `PilotCommit`.
  """
  r = np.asarray(pilot_rewards, np.float64)
  if r.ndim != 2 or r.shape[1] < 1 or not np.all(np.isfinite(r)):
    raise ValueError(f"pilot_rewards must be a finite [P, n0] array with "
                     f"n0 >= 1; got shape {r.shape}.")
  p, n0 = r.shape
  budget = _check_int("budget", budget, 0)
  g_max = _check_int("g_max", g_max, n0)
  if budget < p * n0:
    raise ValueError(f"budget={budget} is below the pilot's {p} x {n0} = "
                     f"{p * n0} draws; raise budget or shrink the pilot.")
  if not np.isfinite(min_std) or min_std < 0:
    raise ValueError(f"min_std={min_std!r} must be a finite number >= 0.")
  std = r.std(axis=1)
  skip = std < min_std
  cap = np.where(skip, 0, g_max - n0)
  extra = np.zeros(p, np.int64)
  left = budget - p * n0
  while left > 0:
    open_ = (extra < cap) & (std > 0)
    if not open_.any():
      break
    weight = np.where(open_, std, 0.0)
    share = left * weight / weight.sum()
    add = np.floor(share).astype(np.int64)
    frac = np.where(open_, share - add, -1.0)
    # The remainder, one each, to the largest fractional parts; lexsort
    # keeps the lower index first among equal fractions.
    order = np.lexsort((np.arange(p), -frac))
    add[order[:left - add.sum()]] += 1
    new = np.minimum(extra + add, cap)
    left -= int((new - extra).sum())
    extra = new
  return PilotCommit(std=std, skip=skip, extra=extra)


# -------------------------------------------------------------------- sGPO


def sgpo_keep(success, *, seed, zero_keep_frac: float = 0.1) -> np.ndarray:
  """sGPO's query filter (seed 000 para. 9; **reconstruction**): drop every
  query the profiled policy always solves (p = 1) and keep each never-solved
  one (p = 0) with probability `zero_keep_frac`.

  Args:
    success: [Q] profiled success rates p in [0, 1].
    seed: the seed (an int or a tuple) of the keyed draw for p = 0 queries.
    zero_keep_frac: the share of p = 0 queries kept, in [0, 1].

  Returns:
    [Q] bool, the queries trained on.
  """
  p = _check_rates("success", success)
  if not 0.0 <= zero_keep_frac <= 1.0:
    raise ValueError(f"zero_keep_frac={zero_keep_frac!r} must lie in [0, 1].")
  draw = np.random.default_rng(seed).random(p.size) < zero_keep_frac
  return (p < 1) & ((p > 0) | draw)


def sgpo_group_sizes(success, *, g_min: int = 2, g_max: int = 16
                     ) -> np.ndarray:
  """sGPO's group size, the inverse success rate (**reconstruction**):

    G_q = clip(ceil(1 / p_q - 1e-6), g_min, g_max),  G_q = g_max at p = 0

  (the 1e-6 keeps a float32 1 / 0.1 = 10.000001 at 10).

  Returns:
    [Q] int64 group sizes (every query's; `sgpo_keep` says which train).
  """
  p = _check_rates("success", success)
  g_min = _check_int("g_min", g_min, 1)
  g_max = _check_int("g_max", g_max, g_min)
  inverse = np.ceil(1.0 / np.where(p > 0, p, 1.0) - 1e-6)
  return np.clip(np.where(p > 0, inverse, g_max), g_min, g_max).astype(
      np.int64)


def sgpo_order(success, keep) -> np.ndarray:
  """The kept queries easy to hard: descending p, stable by index.

  Returns:
    [#kept] int64 query indices, the curriculum's order.
  """
  p = _check_rates("success", success)
  keep = np.asarray(keep, bool)
  if keep.shape != p.shape:
    raise ValueError(f"keep must be [Q] = {p.shape}; got {keep.shape}.")
  kept = np.flatnonzero(keep)
  return kept[np.argsort(-p[kept], kind="stable")]


# -------------------------------------------------------------------- AERO

AERO_RULES = ("fixed", "posterior")


def aero_extra_draws(successes, drawn, *, max_group: int,
                     rule: str = "posterior", chunk: int = 4,
                     target: float = 0.5, prior=(1.0, 1.0)) -> np.ndarray:
  """How many more completions each group draws until its outcomes are
  mixed: AERO's adaptive rollouts (arXiv 2602.14338; **reconstruction**,
  the paper's rule was not recovered). A sibling of dynamic sampling that
  grows a signal-free group instead of replacing its prompt.

  A group of s successes in n draws with 0 < s < n already has signal: 0.
  Otherwise, up to ``max_group - n``:

  * ``fixed``: `chunk` more;
  * ``posterior``: the fewest k such that k more draws break the tie with
    probability >= `target` under the Beta(a0 + s, b0 + n - s) posterior of
    the prompt's success rate. For an all-correct group
      P(k more all correct) = prod_{j<k} (a + j) / (a + b + j),
    a = a0 + s, b = b0 + n - s (a and b swap for an all-wrong group); the
    least k with that <= 1 - target, or the cap where none is.

  Args:
    successes: [P] correct completions so far.
    drawn: [P] completions so far (>= 1).
    max_group: the largest group.
    rule: ``fixed`` or ``posterior``.
    chunk: the fixed rule's increment (>= 1).
    target: the posterior rule's probability of a mixed group, in (0, 1).
    prior: (a0, b0) > 0, the Beta prior of a success rate.

  Returns:
    [P] int64 completions still to draw.
  """
  s = np.asarray(successes, np.int64)
  n = np.asarray(drawn, np.int64)
  if s.ndim != 1 or n.shape != s.shape or np.any(n < 1) or np.any(s < 0) \
      or np.any(s > n):
    raise ValueError(f"successes and drawn must be [P] counts with "
                     f"0 <= successes <= drawn and drawn >= 1; got "
                     f"{s!r}, {n!r}.")
  max_group = _check_int("max_group", max_group, 1)
  if rule not in AERO_RULES:
    raise ValueError(f"rule={rule!r} is unknown; choose one of "
                     f"{', '.join(AERO_RULES)}.")
  chunk = _check_int("chunk", chunk, 1)
  if not 0.0 < target < 1.0:
    raise ValueError(f"target={target!r} must lie in (0, 1).")
  a0, b0 = (float(x) for x in prior)
  if not (a0 > 0 and b0 > 0):
    raise ValueError(f"prior={prior!r} must be two numbers > 0 (Beta a0, b0).")
  room = np.maximum(max_group - n, 0)
  out = np.zeros_like(n)
  for i in np.flatnonzero((s == 0) | (s == n)):
    if rule == "fixed":
      out[i] = min(chunk, room[i])
      continue
    # `same` is the posterior count of the outcome seen so far.
    same, other = (a0 + s[i], b0 + n[i] - s[i]) if s[i] == n[i] else (
        b0 + n[i] - s[i], a0 + s[i])
    k, stay = 0, 1.0
    while k < room[i] and stay > 1.0 - target:
      stay *= (same + k) / (same + other + k)
      k += 1
    out[i] = k
  return out
