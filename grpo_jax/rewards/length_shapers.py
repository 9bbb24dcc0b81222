"""Length shapers: rewards for how long a completion is, relative to a
target in its prompt (LCPO / L1), to its group's correct members
(GRPO-LEAD), to its prompt's history (HAPO), to a budget that tightens
over training (curriculum) or on a cosine in the length (Yeo et al.). Each column is what the shaper adds to the
verifiers' weighted sum (see `shapers`); lengths are TOKEN counts.
"""

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from grpo_jax.data import prompt_ids as prompt_ids_lib
from grpo_jax.rewards.shapers import (SHAPERS, StateSpec, check_group_size,
                                      check_lengths, check_rows)


def _is_correct(correct, n: int) -> np.ndarray:
  return check_rows("correct", correct, n) >= 0.5


# ---------------------------------------------------------------- LCPO / L1

LCPO_MODES = ("exact", "max")


def lcpo_target(prompt_index, *, target_range=(16, 32), **_) -> np.ndarray:
  """n*, the target length of each prompt: a fixed mix of its
  `data.Example.index` into ``[lo, hi]`` (L1 draws n* uniformly per
  prompt; a function of the id keeps it stable across steps, processes and
  a resumed run). ``lo == hi`` gives one target for all."""
  lo, hi = target_range
  index = np.asarray(prompt_index, np.int64)
  mixed = (index * 2654435761 + 40503) % (2**32)  # Knuth's multiplier
  return (lo + mixed % (hi - lo + 1)).astype(np.int64)


def lcpo_instruction(prompt_index, *, mode="exact", target_range=(16, 32),
                     **_) -> str:
  """L1's prompt suffix: "Think for N tokens." (exact) or "Think for
  maximum N tokens." (max)."""
  target = int(lcpo_target([prompt_index], target_range=target_range)[0])
  return (f"Think for {target} tokens." if mode == "exact"
          else f"Think for maximum {target} tokens.")


def _check_lcpo(*, mode="exact", target_range=(16, 32), alpha=1 / 3000,
                width=500.0):
  if mode not in LCPO_MODES:
    raise ValueError(f"mode={mode!r} is unknown; choose one of "
                     f"{', '.join(LCPO_MODES)}.")
  if (len(tuple(target_range)) != 2
      or not all(isinstance(x, int) for x in target_range)
      or not 1 <= target_range[0] <= target_range[1]):
    raise ValueError(f"target_range={tuple(target_range)!r} must be two "
                     "integers 1 <= lo <= hi (target lengths in tokens).")
  if not alpha >= 0 or not math.isfinite(alpha):
    raise ValueError(f"alpha={alpha!r} must be a finite number >= 0.")
  if not width > 0 or not math.isfinite(width):
    raise ValueError(f"width={width!r} must be a finite number > 0.")


def _lcpo_range(*, mode="exact", target_range=(16, 32), alpha=1 / 3000,
                width=500.0):
  del target_range, width
  return (-1.0, 0.0) if mode == "max" else (-math.inf, 0.0)


@SHAPERS.register(
    "lcpo", paper="L1 / LCPO, arXiv 2503.04697 (seed 002 para. 16)",
    reads=("correct", "prompt_index"), range=_lcpo_range, check=_check_lcpo,
    instruction=lcpo_instruction,
    examples=({}, {"mode": "max", "target_range": (4, 8), "width": 4.0},
              {"target_range": (6, 6), "alpha": 0.1}))
def lcpo(lengths, *, correct, prompt_index, mode: str = "exact",
         target_range=(16, 32), alpha: float = 1 / 3000,
         width: float = 500.0) -> np.ndarray:
  """LCPO (L1): accuracy and adherence to a target length n* in the prompt.

  exact:  R = 1[correct] - alpha |n - n*|           column = -alpha |n - n*|
  max:    R = 1[correct] clip(0.5 + (n* - n) / (2 width), 0, 1)
                                       column = R - 1[correct]

  n* is stated in the prompt ("Think for n* tokens.", `lcpo_instruction`)
  and derived from the prompt's id (`lcpo_target`). L1, "Controlling How
  Long A Reasoning Model Thinks With Reinforcement Learning" (arXiv
  2503.04697), after its code (deepscaler ``math_reward.py``:
  alpha = 1/3000, width 500, the paper's delta = 0.5): VARIANTS.md 5.2.
  With ``accuracy`` weighted 1, verifiers + column is the paper's R.

  Args:
    lengths: [N] completion lengths in tokens.
    correct: [N], 1 where the answer is right.
    prompt_index: [N] each row's prompt id (its target).
    mode: ``exact`` or ``max``.
    target_range: (lo, hi) of the targets, in tokens.
    alpha: exact mode's penalty per token off target.
    width: max mode's half-ramp (tokens over n* where R falls to 0.5 below).

  Returns:
    [N] float32.
  """
  _check_lcpo(mode=mode, target_range=target_range, alpha=alpha, width=width)
  lengths = check_lengths(lengths).astype(np.float64)
  n = lengths.shape[0]
  ok = _is_correct(correct, n).astype(np.float64)
  target = lcpo_target(check_rows("prompt_index", prompt_index, n,
                                  dtype=np.int64),
                       target_range=target_range).astype(np.float64)
  if mode == "exact":
    column = -alpha * np.abs(lengths - target)
  else:
    column = ok * (np.clip(0.5 + (target - lengths) / (2.0 * width), 0.0, 1.0)
                   - 1.0)
  return column.astype(np.float32)


# ---------------------------------------------------------------- GRPO-LEAD


def lead_weight(x, *, low: float = 0.4, high: float = 1.5, k: float = 10.0,
                x0: float = 0.75):
  """GRPO-LEAD's logistic difficulty weight w(x) = low + (high - low) / (1 +
  exp(k (x - x0))), in [low, high]; x a group's share of R > 0."""
  x = np.asarray(x, np.float64)
  return low + (high - low) / (1.0 + np.exp(k * (x - x0)))


def lead_reweight(advantages, rewards, *, low: float = 0.4, high: float = 1.5,
                  k: float = 10.0, x0: float = 0.75) -> np.ndarray:
  """GRPO-LEAD's difficulty-aware advantage reweighting (its third part;
  an advantage step, not a reward column: given here as a pure function):

    rho = share of the group with R > 0
    A <- A w(rho) if A > 0, else A w(1 - rho)

  Args:
    advantages: [P, G] (e.g. `advantages.grpo` of the shaped rewards).
    rewards: [P, G] the shaped rewards.

  Returns:
    [P, G] float32.
  """
  adv = np.asarray(advantages, np.float64)
  rho = (np.asarray(rewards) > 0).mean(axis=-1, keepdims=True)
  opts = dict(low=low, high=high, k=k, x0=x0)
  return np.where(adv > 0, adv * lead_weight(rho, **opts),
                  adv * lead_weight(1.0 - rho, **opts)).astype(np.float32)


def _check_lead(*, alpha=0.05, min_len_to_shape=0):
  if not alpha >= 0 or not math.isfinite(alpha):
    raise ValueError(f"alpha={alpha!r} must be a finite number >= 0.")
  if not min_len_to_shape >= 0:
    raise ValueError(f"min_len_to_shape={min_len_to_shape!r} must be >= 0.")


@SHAPERS.register(
    "grpo_lead", paper="GRPO-LEAD (seed 002 para. 42)",
    reads=("correct", "formatted", "group_size"), range=(-1.0, math.inf),
    check=_check_lead,
    examples=({}, {"alpha": 0.5}, {"min_len_to_shape": 6}))
def grpo_lead(lengths, *, correct, formatted, group_size: int,
              alpha: float = 0.05, min_len_to_shape: float = 0
              ) -> np.ndarray:
  """GRPO-LEAD's length-dependent accuracy reward and wrong-answer penalty.

    correct:            R = exp(-alpha z),  z = (L - mean_c L) / (std_c L + 1e-6)
                        over the group's correct members (ddof=1; std = 1
                        with fewer than two)
    wrong, formatted:   R = -1
    format failure:     R = 0
    column = R - 1[correct]

  Groups whose three shortest completions average below
  `min_len_to_shape` keep R = 1 for correct answers (the authors' code
  shapes only above 4000 tokens, a stage switch; default 0 = always).
  GRPO-LEAD (seed 002 para. 42), after aeroplanepaper/GRPO-LEAD
  (``get_reweight_rewards``): VARIANTS.md 5.3. Its difficulty reweighting
  of the advantages is `lead_reweight`.

  Args:
    lengths: [N] completion lengths in tokens, prompt major.
    correct: [N] 1 where the answer is right.
    formatted: [N] 1 where the format verifier passed.
    group_size: G.
    alpha: the length sensitivity.
    min_len_to_shape: see above.

  Returns:
    [N] float32: R - 1[correct].
  """
  _check_lead(alpha=alpha, min_len_to_shape=min_len_to_shape)
  lengths = check_lengths(lengths).astype(np.float64)
  n = lengths.shape[0]
  g = check_group_size(group_size, n)
  ok = _is_correct(correct, n).reshape(-1, g)
  fmt = check_rows("formatted", formatted, n).reshape(-1, g) >= 0.5
  length = lengths.reshape(-1, g)
  count = ok.sum(-1, keepdims=True)
  mean = (length * ok).sum(-1, keepdims=True) / np.maximum(count, 1)
  var = (((length - mean) * ok)**2).sum(-1, keepdims=True) / np.maximum(
      count - 1, 1)
  std = np.where(count >= 2, np.sqrt(var), 1.0)
  z = (length - mean) / (std + 1e-6)
  shortest = np.sort(length, axis=-1)[:, :3].mean(-1, keepdims=True)
  shaped = np.where(shortest >= min_len_to_shape, np.exp(-alpha * z), 1.0)
  reward = np.where(ok, shaped, np.where(fmt, -1.0, 0.0))
  return (reward - ok).reshape(n).astype(np.float32)


# ------------------------------------------------- HAPO, history-aware

HAPO_MODES = ("min", "mean")


class HAPOState(NamedTuple):
  """HAPO's per-prompt history, one slot per problem of the task.

  Attributes:
    history: [capacity] float32 h_x, the tracked correct length of problem
      x (`data.Example.index`); 0 = none yet (no correct answer seen).
    count: [capacity] float32 correct completions seen (the ``mean``
      mode's weight).
  """
  history: jnp.ndarray
  count: jnp.ndarray


def hapo_init(*, capacity: int = 1024) -> HAPOState:
  """Every slot empty (h = 0: no history)."""
  prompt_ids_lib.check_capacity(capacity)
  zeros = jnp.zeros((capacity,), jnp.float32)
  return HAPOState(history=zeros, count=zeros)


def _slots(prompt_index, capacity: int, n: int, prompt_ids: str):
  """([N] slot, [N] bool tracked) (`prompt_ids.slots`): -1 (no id), or an
  id outside an exact table, has no slot."""
  index = check_rows("prompt_index", prompt_index, n, dtype=np.int64)
  return prompt_ids_lib.slots(index, capacity, prompt_ids)


def hapo_update(state: HAPOState, lengths, *, correct, prompt_index,
                mode: str = "min", prompt_ids: str = "exact") -> HAPOState:
  """The history after a step's rows (all of them at once, so the order of
  rows does not matter):

    min:   h_x <- min(h_x, min of this step's correct lengths of x)
    mean:  h_x <- the mean of every correct length of x seen so far

  Rows without a slot and wrong answers change nothing."""
  history = np.asarray(state.history, np.float64)
  count = np.asarray(state.count, np.float64)
  lengths = check_lengths(lengths).astype(np.float64)
  n = lengths.shape[0]
  slot, tracked = _slots(prompt_index, history.shape[0], n, prompt_ids)
  use = tracked & _is_correct(correct, n)
  seen = np.zeros_like(count)
  np.add.at(seen, slot[use], 1.0)
  if mode == "min":
    shortest = np.full_like(history, np.inf)
    np.minimum.at(shortest, slot[use], lengths[use])
    known = np.where(history > 0, history, np.inf)
    new = np.minimum(known, shortest)
    history = np.where(np.isfinite(new), new, 0.0)
  else:
    total = np.zeros_like(history)
    np.add.at(total, slot[use], lengths[use])
    history = np.where(count + seen > 0,
                       (history * count + total) / np.maximum(count + seen, 1),
                       0.0)
  return HAPOState(history=jnp.asarray(history, jnp.float32),
                   count=jnp.asarray(count + seen, jnp.float32))


def _check_hapo(*, mode="min", prompt_ids="exact"):
  if mode not in HAPO_MODES:
    raise ValueError(f"mode={mode!r} is unknown; choose one of "
                     f"{', '.join(HAPO_MODES)}.")
  prompt_ids_lib.check_mode(prompt_ids)


@SHAPERS.register(
    "hapo_length", paper="HAPO, history-aware (seed 002 para. 115)",
    reads=("correct", "prompt_index", "state"), range=(-1.0, 1.0),
    check=_check_hapo, state=StateSpec(init=hapo_init, update=hapo_update),
    prompt_ids=prompt_ids_lib.prompt_ids_option,
    examples=({"capacity": 16}, {"capacity": 4, "mode": "mean"},
              {"capacity": 2, "prompt_ids": "hash"}))
def hapo_length(lengths, *, correct, prompt_index, state: HAPOState,
                mode: str = "min", prompt_ids: str = "exact") -> np.ndarray:
  """HAPO's history-aware length reward against h_x, the shortest correct
  length of the prompt so far (its state):

    f = cos((n / h) pi / 2)   if n < 2h, else -1
    correct: max(-0.7, f);   wrong: min(0, f);   no history: 0

  so a correct answer shorter than h gains up to 1, and a short wrong one
  loses nothing. R = 1[correct] + w f, w the shaper's config weight (w <= 1
  keeps every correct reward above every wrong one). The history is
  updated once per step after all rows are scored (`hapo_update`; the
  authors' code updates after each rollout). HAPO (seed 002 para. 115),
  after ``utils.py::compute_len_reward`` (also in boovines/G-HAPO):
  VARIANTS.md 5.4.

  Args:
    lengths: [N] completion lengths in tokens.
    correct: [N] 1 where the answer is right.
    prompt_index: [N] each row's `data.Example.index`.
    state: the `HAPOState` before this step.
    mode: how the history tracks (``min`` or ``mean``; read by the update).
    prompt_ids: ``exact`` (slot = id) or ``hash`` (slot = id mod capacity;
      problems sharing a slot share a history), `prompt_ids.slots`.

  Returns:
    [N] float32 in [-1, 1].
  """
  _check_hapo(mode=mode, prompt_ids=prompt_ids)
  lengths = check_lengths(lengths).astype(np.float64)
  n = lengths.shape[0]
  table = np.asarray(state.history, np.float64)
  slot, tracked = _slots(prompt_index, table.shape[0], n, prompt_ids)
  h = np.where(tracked, table[slot], 0.0)
  safe = np.where(h > 0, h, 1.0)
  f = np.where(lengths < 2.0 * h, np.cos(lengths / safe * np.pi / 2), -1.0)
  ok = _is_correct(correct, n)
  f = np.where(ok, np.maximum(-0.7, f), np.minimum(0.0, f))
  return np.where(h > 0, f, 0.0).astype(np.float32)


# ------------------------------------------------ curriculum length budget

BUDGET_DECAYS = ("exponential", "linear", "cosine")


def length_budget_at(step, *, budget_start: float = 1024.0,
                     budget_final: float = 256.0,
                     decay: str = "exponential", tau: float = 100.0,
                     decay_steps: int = 1000) -> float:
  """B_t = B_f + (B_0 - B_f) d(t), d one of

    exponential  exp(-t / tau)
    linear       max(0, 1 - t / decay_steps)
    cosine       (1 + cos(pi min(t, decay_steps) / decay_steps)) / 2
  """
  t = float(step)
  if decay == "exponential":
    d = math.exp(-t / tau)
  elif decay == "linear":
    d = max(0.0, 1.0 - t / decay_steps)
  else:
    d = 0.5 * (1.0 + math.cos(math.pi * min(t, decay_steps) / decay_steps))
  return budget_final + (budget_start - budget_final) * d


def _check_budget(*, budget_start=1024.0, budget_final=256.0,
                  decay="exponential", tau=100.0, decay_steps=1000):
  if decay not in BUDGET_DECAYS:
    raise ValueError(f"decay={decay!r} is unknown; choose one of "
                     f"{', '.join(BUDGET_DECAYS)}.")
  if not 0 < budget_final <= budget_start < math.inf:
    raise ValueError(
        f"budget_start={budget_start!r} and budget_final={budget_final!r} "
        "must satisfy 0 < budget_final <= budget_start (tokens; the budget "
        "tightens).")
  if not 0 < tau < math.inf:
    raise ValueError(f"tau={tau!r} must be a finite number > 0 (steps).")
  if not isinstance(decay_steps, int) or decay_steps < 1:
    raise ValueError(f"decay_steps={decay_steps!r} must be an integer >= 1.")


@SHAPERS.register(
    "length_budget",
    paper="curriculum length budget (seed 002 para. 17), reconstruction",
    reads=("step",), range=(0.0, 1.0), check=_check_budget,
    examples=({}, {"budget_start": 8.0, "budget_final": 2.0,
                   "decay": "linear", "decay_steps": 3},
              {"budget_start": 6.0, "budget_final": 4.0, "decay": "cosine",
               "decay_steps": 2}))
def length_budget(lengths, *, step: int, budget_start: float = 1024.0,
                  budget_final: float = 256.0, decay: str = "exponential",
                  tau: float = 100.0, decay_steps: int = 1000) -> np.ndarray:
  """A length budget that starts generous and tightens over training:

    column = clip(1 - n / B_t, 0, 1),   B_t = `length_budget_at(step)`

  The paper's reward is w1 1[correct] + w2 column + w3 1[format] (defaults
  1.0, 0.5, 0.1): the verifiers' accuracy and format weights and this
  shaper's weight. **Reconstruction** (VARIANTS.md 5.6): the seed (002
  para. 17) gives the idea, not the schedule; its code
  (hammoudhasan/curriculum_grpo) was not read. The schedule is a function
  of the step, so it needs no state and a resumed run continues it.

  Args:
    lengths: [N] completion lengths in tokens.
    step: the training step t.
    budget_start, budget_final: B_0 and B_f in tokens.
    decay: ``exponential`` (tau), ``linear`` or ``cosine`` (decay_steps).

  Returns:
    [N] float32 in [0, 1].
  """
  _check_budget(budget_start=budget_start, budget_final=budget_final,
                decay=decay, tau=tau, decay_steps=decay_steps)
  budget = length_budget_at(step, budget_start=budget_start,
                            budget_final=budget_final, decay=decay, tau=tau,
                            decay_steps=decay_steps)
  lengths = check_lengths(lengths).astype(np.float64)
  return np.clip(1.0 - lengths / budget, 0.0, 1.0).astype(np.float32)


# ------------------------------------------- cosine length (Yeo et al.)


def _check_cosine(*, max_length=1000, min_value_wrong=-1.0,
                  max_value_wrong=-0.5, min_value_correct=0.5,
                  max_value_correct=1.0, exceed_length=None):
  if isinstance(max_length, bool) or not isinstance(max_length, int) or (
      max_length < 1):
    raise ValueError(f"max_length={max_length!r} must be an integer >= 1 "
                     "(tokens; the length where the cosine reaches its end).")
  values = (min_value_wrong, max_value_wrong, min_value_correct,
            max_value_correct)
  if not all(math.isfinite(v) for v in values):
    raise ValueError(f"the reward ends {values!r} must be finite.")
  if not min_value_wrong <= max_value_wrong:
    raise ValueError(
        f"min_value_wrong={min_value_wrong!r} must be <= max_value_wrong="
        f"{max_value_wrong!r} (a short wrong answer gets the min).")
  if not min_value_correct <= max_value_correct:
    raise ValueError(
        f"min_value_correct={min_value_correct!r} must be <= "
        f"max_value_correct={max_value_correct!r} (a short correct answer "
        "gets the max).")
  if exceed_length is not None and not math.isfinite(exceed_length):
    raise ValueError(f"exceed_length={exceed_length!r} must be None or "
                     "finite.")


def _cosine_range(*, max_length=1000, min_value_wrong=-1.0,
                  max_value_wrong=-0.5, min_value_correct=0.5,
                  max_value_correct=1.0, exceed_length=None):
  del max_length
  ends = [min_value_wrong, max_value_wrong, min_value_correct - 1.0,
          max_value_correct - 1.0]
  if exceed_length is not None:
    ends += [exceed_length, exceed_length - 1.0]
  return (min(ends), max(ends))


@SHAPERS.register(
    "cosine_length",
    paper="Yeo et al., Demystifying Long CoT, arXiv 2502.03373",
    reads=("correct",), range=_cosine_range, check=_check_cosine,
    examples=({"max_length": 8},
              {"max_length": 6, "exceed_length": -2.0,
               "min_value_correct": 0.0, "max_value_wrong": 0.0}))
def cosine_length(lengths, *, correct, max_length: int = 1000,
                  min_value_wrong: float = -1.0,
                  max_value_wrong: float = -0.5,
                  min_value_correct: float = 0.5,
                  max_value_correct: float = 1.0,
                  exceed_length=None) -> np.ndarray:
  """The cosine-scaled length reward: shorter correct answers earn more,
  longer wrong ones lose less.

    c = cos(pi min(n, L) / L)                  (1 at n = 0, -1 at n >= L)
    correct: R = r_min^c + (r_max^c - r_min^c) (1 + c) / 2
    wrong:   R = r_max^w + (r_min^w - r_max^w) (1 + c) / 2
    n >= L with `exceed_length` set: R = exceed_length
    column = R - 1[correct]

  so a correct answer earns r_max^c at n = 0 falling to r_min^c at L, and a
  wrong one r_min^w at n = 0 rising to r_max^w at L. Yeo et al. (arXiv
  2502.03373, sec. 4 and their ``cosine.py``), as the peers have it
  (open-r1's and the TRL recipes' ``get_cosine_scaled_reward``, defaults
  -1, -0.5, 0.5, 1.0, L = 1000). Two departures: lengths are tokens (the
  peers' port counts characters; the authors' code tokens), and n is
  clipped at L (the peers' cos(pi n / L) turns back up past L; the
  authors' code gives ``exceed_length`` there, optional here). The
  authors' repetition penalty is the separate ``repetition_penalty``
  shaper. With ``accuracy`` weighted 1, verifiers + column is R.

  Args:
    lengths: [N] completion lengths in tokens.
    correct: [N] 1 where the answer is right.
    max_length: L, in tokens (<= rollout.max_new_tokens).
    min_value_wrong, max_value_wrong: r_min^w <= r_max^w.
    min_value_correct, max_value_correct: r_min^c <= r_max^c.
    exceed_length: None, or R at n >= L.

  Returns:
    [N] float32.
  """
  _check_cosine(max_length=max_length, min_value_wrong=min_value_wrong,
                max_value_wrong=max_value_wrong,
                min_value_correct=min_value_correct,
                max_value_correct=max_value_correct,
                exceed_length=exceed_length)
  lengths = check_lengths(lengths).astype(np.float64)
  ok = _is_correct(correct, lengths.shape[0])
  c = np.cos(np.pi * np.minimum(lengths, max_length) / max_length)
  reward = np.where(
      ok, min_value_correct + (max_value_correct - min_value_correct)
      * (1.0 + c) / 2.0,
      max_value_wrong + (min_value_wrong - max_value_wrong) * (1.0 + c) / 2.0)
  if exceed_length is not None:
    reward = np.where(lengths >= max_length, exceed_length, reward)
  return (reward - ok).astype(np.float32)
