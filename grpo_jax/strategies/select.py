"""Prompt selection: which prompts a sampling round draws."""

import numpy as np

from grpo_jax.data import prompt_ids
from grpo_jax.strategies._kit import SELECTIONS


@SELECTIONS.register(examples=({},))
def uniform(task, index, num_prompts):
  """The task's own order: ``task.train(index, num_prompts)``, a pure
  function of (seed, index), so every process and every resume agree."""
  return task.train(index, num_prompts)


def beta_priorities(tracker, *, floor: float = 0.05) -> np.ndarray:
  """[capacity] float64 w_x = sqrt(p_x (1 - p_x)) + floor of a per-prompt
  Beta tracker (``alpha``, ``beta`` [capacity]; SPO's `SPOState`),
  p_x = alpha / (alpha + beta)."""
  alpha = np.asarray(tracker.alpha, np.float64)
  beta = np.asarray(tracker.beta, np.float64)
  p = alpha / (alpha + beta)
  return np.sqrt(np.clip(p * (1.0 - p), 0.0, None)) + floor


def draw_by_priority(task, index, num_prompts, priorities):
  """`num_prompts` distinct training problems of `task`, drawn without
  replacement with probability proportional to ``priorities[x]``, x the
  problem's `data.Example.index`; a pure function of (task seed, index,
  priorities).

  Args:
    task: a task with ``train_indices()`` and ``example(index)``.
    index: the round's prompt index (``step * rounds_per_step + round``).
    num_prompts: P, at most the number of training problems.
    priorities: [capacity] weights >= 0 by slot: problem x's is
      ``priorities[x mod capacity]`` (`prompt_ids.slots`, hash: the id
      itself wherever the ids fit the table, as an exact table's must).

  Returns:
    The P `data.Example`s, in draw order.
  """
  candidates = task.train_indices()
  weights = np.asarray(priorities, np.float64)
  if weights.ndim != 1 or not weights.size:
    raise ValueError(f"priorities must be [capacity] with capacity >= 1; "
                     f"got shape {weights.shape}.")
  if num_prompts > candidates.size:
    raise ValueError(
        f"num_prompts={num_prompts} exceeds the {candidates.size} training "
        "problems a draw without replacement can give.")
  weights = weights[prompt_ids.slots(candidates, weights.size, "hash")[0]]
  rng = np.random.default_rng((getattr(task, "seed", 0), index))
  picked = rng.choice(candidates, size=num_prompts, replace=False,
                      p=weights / weights.sum())
  return [task.example(int(x)) for x in picked]


def _check_floor(floor: float = 0.05) -> None:
  if isinstance(floor, bool) or not (isinstance(floor, (int, float))
                                     and floor > 0.0):  # NaN fails too
    raise ValueError(f"floor={floor!r} must be a number > 0 (every problem "
                     "keeps a chance to be drawn).")


# `needs` names what the estimator's state must hold (train.validate).
@SELECTIONS.register(reads=("advantage",), needs=("alpha", "beta"),
                     check=_check_floor, without_replacement=True,
                     paper="SPO (seed 002 para. 7)",
                     examples=({}, {"floor": 0.1}))
def prioritized(task, index, num_prompts, *, advantage, floor: float = 0.05):
  """SPO's prioritised prompt draw (seed 002 para. 7, verl recipe/spo):
  P distinct training problems drawn without replacement, problem x with
  probability proportional to

    w_x = sqrt(p_x (1 - p_x)) + floor,   p_x = alpha_x / (alpha_x + beta_x)

  from the estimator's per-prompt Beta tracker as it stood after the
  previous step (`advantages.trackers.SPOState`, the state ``advantage``).
  Uncertain problems (p near 1/2) come most often, solved and hopeless
  ones at the floor. A pure function of (task seed, index, tracker): every
  process and every resume draw the same. verl draws from a pool of 14000
  candidates (``gen_batch_size``); here the pool is every training problem.

  Args:
    task: a task with ``train_indices()`` and ``example(index)`` (the
      arithmetic task, GSM8K, JSONL).
    index: the round's prompt index (``step * rounds_per_step + round``).
    num_prompts: P.
    advantage: the estimator's state, a tracker with ``alpha`` and ``beta``
      [capacity] covering the task's problem indices.
    floor: the exploration floor added to every weight (0.05), > 0 so that
      every problem stays drawable.
  """
  _check_floor(floor)
  if not hasattr(advantage, "alpha") or not hasattr(advantage, "beta"):
    raise ValueError(
        "the prioritized selection reads a per-prompt Beta tracker (alpha, "
        "beta) from the advantage estimator's state, which this estimator "
        "does not keep; use advantage.name='spo'.")
  return draw_by_priority(task, index, num_prompts,
                          beta_priorities(advantage, floor=floor))
