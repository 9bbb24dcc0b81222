"""`score`: several reward functions with weights on one batch, failures
counted, never fatal; `group_advantages` on its result.

With ``workers > 0`` every completion is scored in a worker process under a
timeout, the whole call under a deadline (`workers.run`): a reward that
hangs or crashes costs only the completions it fails on. With 0 the batch
is scored here, at once, with no timeout (for debugging).
"""

import logging
import math
from typing import Dict, List, Mapping, NamedTuple, Sequence, Tuple

import numpy as np

from grpo_jax import advantages as advantages_lib
from grpo_jax.rewards import workers as workers_lib
from grpo_jax.rewards.verifiers import RewardFn, as_rewards, check_batch

SCORE_MODES = ("sum",) + advantages_lib.MULTI_REWARD_MODES


class ScoreOptions(NamedTuple):
  """Where `score` runs the reward functions and for how long: its keyword
  options (``rewards.workers``, ``timeout_s``, ``deadline_s`` in a config)."""
  workers: int = 0
  timeout_s: float = 30.0
  deadline_s: float = 300.0


class ScoreResult(NamedTuple):
  """Rewards of K named functions on N completions.

  Attributes:
    per_function: [N, K] float32, column k from `names[k]`; 0 where it failed.
    total: [N] float32, sum_k weights[k] * per_function[:, k].
    num_errors: name -> number of completions whose reward failed.
    names: the K function names, in column order.
    weights: [K] float32 weights.
    first_error: name -> why its first failed completion failed ("timed out
      after 30 s", "worker died (exit code -9)", an exception's repr); ""
      when none failed.
  """
  per_function: np.ndarray
  total: np.ndarray
  num_errors: Dict[str, int]
  names: Tuple[str, ...]
  weights: np.ndarray
  first_error: Dict[str, str] = {}


# (rewards [N], N failure messages with "" where the reward is valid)
Column = Tuple[np.ndarray, List[str]]


def _call_safely(name: str, fn: RewardFn, prompts, completions, answers
                 ) -> Column:
  """In this process: the batch call, else one completion at a time."""
  n = len(completions)
  try:
    return as_rewards(fn(prompts, completions, answers), n), [""] * n
  except Exception as batch_error:  # pylint: disable=broad-except
    logging.info("reward %r failed on the batch (%r); scoring one "
                 "completion at a time.", name, batch_error)
  rewards, failures = np.zeros((n,), np.float64), [""] * n
  for i in range(n):
    try:
      rewards[i] = as_rewards(
          fn([prompts[i]], [completions[i]], [answers[i]]), 1)[0]
    except Exception as error:  # pylint: disable=broad-except
      failures[i] = repr(error)
  return rewards, failures


def _call_in_workers(fns: Sequence[RewardFn], prompts, completions, answers,
                     **options) -> List[Column]:
  """One task per (completion, function) in worker processes, under one
  deadline; interleaved so that a slow function cannot use up the deadline
  of those after it."""
  n, k = len(completions), len(fns)
  payloads, unsent = [], {}
  for j, fn in enumerate(fns):
    try:
      payloads.append(workers_lib.dumps(fn))
    except Exception as error:  # pylint: disable=broad-except
      payloads.append(None)
      unsent[j] = (f"cannot be sent to a worker ({error!r}); set "
                   "rewards.workers=0 to score it in the training process")
  rows = list(zip(prompts, completions, answers))
  order = [(i, j) for i in range(n) for j in range(k) if j not in unsent]
  outcomes = workers_lib.run([(payloads[j], rows[i]) for i, j in order],
                             **options)
  rewards = np.zeros((k, n), np.float64)
  failures = [[unsent.get(j, "")] * n for j in range(k)]
  for (i, j), outcome in zip(order, outcomes):
    rewards[j, i], failures[j][i] = outcome
  return list(zip(rewards, failures))


def score(reward_fns: Mapping[str, Tuple[RewardFn, float]],
          prompts: Sequence[str], completions: Sequence[str],
          answers: Sequence[str], *, workers: int = 0, timeout_s: float = 30.0,
          deadline_s: float = 300.0) -> ScoreResult:
  """Runs each reward function on the batch; total = weighted sum.

  total_i = sum_k w_k R_k(prompt_i, completion_i, answer_i)

  A completion whose reward fails gets 0 from that function and is counted
  in `num_errors`; one warning per failing function names how many failed
  and why the first did (`first_error`). Failing is raising, returning a
  wrong count or a non-finite value, and with workers also running past
  `timeout_s`, killing the worker, or being unfinished at `deadline_s`. In
  this process (``workers=0``) a function that fails on the batch is retried
  one completion at a time. The per-function columns can instead be
  combined at the advantage step (`group_advantages`, GDPO's
  normalise-then-sum).

  Args:
    reward_fns: name -> (fn, weight), at least one entry.
    prompts: N prompt texts (each repeated G times for a group).
    completions: N completion texts.
    answers: N reference answers.
    workers: processes of the shared pool (`workers.pool`), each task one
      completion and one function; 0 scores the batch in this process.
    timeout_s: with workers, per completion and function.
    deadline_s: with workers, for the whole call.

  Returns:
    A `ScoreResult`.
  """
  check_batch(prompts, completions, answers)
  if not reward_fns:
    raise ValueError("reward_fns is empty; pass at least one name -> "
                     "(fn, weight).")
  if workers < 0 or not (timeout_s > 0 and deadline_s > 0):
    raise ValueError(f"workers={workers!r} must be >= 0 and timeout_s="
                     f"{timeout_s!r}, deadline_s={deadline_s!r} > 0.")
  names = tuple(reward_fns)
  n = len(completions)
  fns, weights = [], []
  for name in names:
    entry = reward_fns[name]
    if not (isinstance(entry, tuple) and len(entry) == 2 and callable(entry[0])):
      raise ValueError(
          f"reward_fns[{name!r}] must be a (fn, weight) pair; got {entry!r}.")
    fn, weight = entry
    if not math.isfinite(float(weight)):
      raise ValueError(f"reward_fns[{name!r}] weight must be finite; got "
                       f"{weight!r}.")
    fns.append(fn)
    weights.append(float(weight))
  if workers:
    columns = _call_in_workers(fns, prompts, completions, answers,
                               workers=workers, timeout_s=timeout_s,
                               deadline_s=deadline_s)
  else:
    columns = [_call_safely(name, fn, prompts, completions, answers)
               for name, fn in zip(names, fns)]
  num_errors, first_error = {}, {}
  for name, (_, failures) in zip(names, columns):
    failed = [i for i, message in enumerate(failures) if message]
    num_errors[name] = len(failed)
    first_error[name] = failures[failed[0]] if failed else ""
    if failed:
      logging.warning("reward %r failed on %d of %d completions; the first "
                      "(completion %d): %s", name, len(failed), n, failed[0],
                      first_error[name])
  per_function = np.stack([r for r, _ in columns], axis=-1).reshape(
      n, len(names))
  weights = np.asarray(weights, np.float64)
  total = (per_function * weights[None, :]).sum(axis=-1)
  return ScoreResult(per_function=per_function.astype(np.float32),
                     total=total.astype(np.float32), num_errors=num_errors,
                     names=names, weights=weights.astype(np.float32),
                     first_error=first_error)


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
