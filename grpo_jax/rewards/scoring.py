"""`score`: several reward functions with weights on one batch, failures
counted, never fatal; `group_advantages` on its result."""

import logging
import math
from typing import Dict, Mapping, NamedTuple, Sequence, Tuple

import numpy as np

from grpo_jax import advantages as advantages_lib
from grpo_jax.rewards.verifiers import RewardFn, check_batch

SCORE_MODES = ("sum",) + advantages_lib.MULTI_REWARD_MODES


class ScoreResult(NamedTuple):
  """Rewards of K named functions on N completions.

  Attributes:
    per_function: [N, K] float32, column k from `names[k]`; 0 where it failed.
    total: [N] float32, sum_k weights[k] * per_function[:, k].
    num_errors: name -> number of completions whose reward failed.
    names: the K function names, in column order.
    weights: [K] float32 weights.
  """
  per_function: np.ndarray
  total: np.ndarray
  num_errors: Dict[str, int]
  names: Tuple[str, ...]
  weights: np.ndarray


def _as_rewards(values, n: int) -> np.ndarray:
  """`values` as N finite floats, or a ValueError saying what is wrong."""
  values = np.asarray(values, dtype=np.float64)
  if values.shape != (n,):
    raise ValueError(f"returned shape {values.shape}, expected ({n},)")
  if not np.all(np.isfinite(values)):
    raise ValueError("returned a non-finite reward")
  return values


def _call_safely(name: str, fn: RewardFn, prompts, completions, answers
                 ) -> Tuple[np.ndarray, int]:
  """(rewards [N], errors): the batch call, else one completion at a time."""
  n = len(completions)
  try:
    return _as_rewards(fn(prompts, completions, answers), n), 0
  except Exception as batch_error:  # pylint: disable=broad-except
    logging.warning("reward %r failed on the batch (%r); scoring one "
                    "completion at a time.", name, batch_error)
  rewards = np.zeros((n,), np.float64)
  errors = 0
  for i in range(n):
    try:
      rewards[i] = _as_rewards(
          fn([prompts[i]], [completions[i]], [answers[i]]), 1)[0]
    except Exception as error:  # pylint: disable=broad-except
      errors += 1
      logging.debug("reward %r failed on completion %d: %r", name, i, error)
  return rewards, errors


def score(reward_fns: Mapping[str, Tuple[RewardFn, float]],
          prompts: Sequence[str], completions: Sequence[str],
          answers: Sequence[str]) -> ScoreResult:
  """Runs each reward function on the batch; total = weighted sum.

  total_i = sum_k w_k R_k(prompt_i, completion_i, answer_i)

  A function that raises (or returns a wrong count or a non-finite value) on
  the batch is retried one completion at a time; each completion that still
  fails gets 0 from that function and is counted in `num_errors`. The
  per-function columns can instead be combined at the advantage step
  (`group_advantages`, GDPO's normalise-then-sum).

  Args:
    reward_fns: name -> (fn, weight), at least one entry.
    prompts: N prompt texts (each repeated G times for a group).
    completions: N completion texts.
    answers: N reference answers.

  Returns:
    A `ScoreResult`.
  """
  check_batch(prompts, completions, answers)
  if not reward_fns:
    raise ValueError("reward_fns is empty; pass at least one name -> "
                     "(fn, weight).")
  names = tuple(reward_fns)
  n = len(completions)
  columns, num_errors, weights = [], {}, []
  for name in names:
    entry = reward_fns[name]
    if not (isinstance(entry, tuple) and len(entry) == 2 and callable(entry[0])):
      raise ValueError(
          f"reward_fns[{name!r}] must be a (fn, weight) pair; got {entry!r}.")
    fn, weight = entry
    if not math.isfinite(float(weight)):
      raise ValueError(f"reward_fns[{name!r}] weight must be finite; got "
                       f"{weight!r}.")
    rewards, num_errors[name] = _call_safely(name, fn, prompts, completions,
                                             answers)
    columns.append(rewards)
    weights.append(float(weight))
  per_function = np.stack(columns, axis=-1).reshape(n, len(names))
  weights = np.asarray(weights, np.float64)
  total = (per_function * weights[None, :]).sum(axis=-1)
  return ScoreResult(per_function=per_function.astype(np.float32),
                     total=total.astype(np.float32), num_errors=num_errors,
                     names=names, weights=weights.astype(np.float32))


def group_advantages(result: ScoreResult, *, group_size: int,
                     mode: str = "sum", **options):
  """Advantages [P, G] from a `ScoreResult` of N = P*G completions.

  ``sum``: GRPO on `result.total`; ``sum_then_normalize`` is the same through
  `advantages.multi_reward`; ``normalize_then_sum`` normalises each reward
  function within its group first (GDPO, arXiv 2601.05242).

  Args:
    result: from `score`, rows grouped prompt-major (G rows per prompt).
    group_size: G.
    mode: one of `SCORE_MODES`.
    **options: eps, ddof for the estimator.

  Returns:
    [P, G] float32 advantages.
  """
  if mode not in SCORE_MODES:
    raise ValueError(f"mode={mode!r} is unknown; choose one of "
                     f"{', '.join(SCORE_MODES)}.")
  n, k = result.per_function.shape
  if group_size <= 0 or n % group_size:
    raise ValueError(f"group_size={group_size!r} must divide the {n} scored "
                     "completions.")
  if mode == "sum":
    return advantages_lib.grpo(result.total.reshape(-1, group_size), **options)
  return advantages_lib.multi_reward(
      result.per_function.reshape(-1, group_size, k), result.weights,
      mode=mode, **options)
