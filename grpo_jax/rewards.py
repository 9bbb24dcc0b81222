"""Verifiable rewards: math answers (math-verify), answer format, overlong length.

A reward function is a plain callable over a batch of N completions,

  fn(prompts: Sequence[str], completions: Sequence[str],
     answers: Sequence[str]) -> list[float]     (N floats)

and `score` runs several of them with weights. A function that raises for one
completion costs that completion its reward (0), is counted, and never stops a
run.

| name          | value                                              |
|---------------|----------------------------------------------------|
| ``accuracy``  | 1 if math-verify finds the reference answer, else 0 |
| ``format``    | 1 if the completion ends with ``\\boxed{...}``      |

`overlong_penalty` (DAPO, arXiv 2503.14476) is not a text reward: it acts on
token counts, which only the sampler knows exactly.
"""

import logging
import math
import re
import threading
from typing import Callable, Dict, Mapping, NamedTuple, Sequence, Tuple

import numpy as np

from grpo_jax import advantages as advantages_lib

RewardFn = Callable[[Sequence[str], Sequence[str], Sequence[str]], list]

SCORE_MODES = ("sum",) + advantages_lib.MULTI_REWARD_MODES

# The answer format as a question suffix (data.SYSTEM_PROMPT asks for the same).
ANSWER_INSTRUCTION = "Put your final answer in \\boxed{}."

_TIMEOUT_SECONDS = 5


def _timeout_seconds():
  # math-verify times out with signal.alarm, which only the main thread may
  # set; elsewhere (a scoring thread pool) run without its timeout.
  if threading.current_thread() is threading.main_thread():
    return _TIMEOUT_SECONDS
  return None


def _check_batch(prompts, completions, answers) -> None:
  if not len(prompts) == len(completions) == len(answers):
    raise ValueError(
        f"prompts, completions and answers must have one entry per completion "
        f"(N each); got {len(prompts)}, {len(completions)} and {len(answers)}.")


def _is_unevaluated_arithmetic(expression) -> bool:
  """True for a closed arithmetic expression such as ``3 + 5`` (not ``8``)."""
  is_number = getattr(expression, "is_number", False)
  return bool(is_number) and not expression.is_Atom


def _is_integer(expression) -> bool:
  return bool(getattr(expression, "is_Integer", False))


def answer_is_correct(completion: str, answer: str, *,
                      require_evaluated: bool = True) -> bool:
  """Whether `completion`'s final answer equals the reference `answer`.

  math-verify extracts the answer (``\\boxed{}`` first, then "answer is",
  then the last expression) and compares it symbolically. With
  `require_evaluated`, when the reference is an integer the extracted answer
  must be a number, not an expression: math-verify would otherwise accept
  ``3 + 5`` for 8, and a policy learns to echo the question.

  Args:
    completion: the model's text.
    answer: the reference, e.g. ``"8"`` or ``"\\frac{1}{2}"``.
    require_evaluated: reject unevaluated arithmetic for integer references.

  Returns:
    True if correct. Raises ValueError if `answer` holds no parsable answer.
  """
  # Imported here: math-verify loads sympy and its grammar (a second or two).
  from math_verify import parse, verify  # pylint: disable=g-import-not-at-top
  timeout = _timeout_seconds()
  gold = parse(answer, parsing_timeout=timeout)
  if not gold:
    raise ValueError(f"reference answer {answer!r} holds no parsable answer.")
  predicted = parse(completion, parsing_timeout=timeout)
  if not predicted:
    return False
  if (require_evaluated and _is_integer(gold[0])
      and _is_unevaluated_arithmetic(predicted[0])):
    return False
  return bool(verify(gold, predicted, timeout_seconds=timeout))


def accuracy(prompts: Sequence[str], completions: Sequence[str],
             answers: Sequence[str]) -> list:
  """1.0 where the completion's final answer equals the reference, else 0.0.

  See `answer_is_correct` for what counts as the final answer.

  Args:
    prompts: N prompts (unused; part of the reward-function signature).
    completions: N completion texts.
    answers: N reference answers.

  Returns:
    N floats in {0, 1}.
  """
  _check_batch(prompts, completions, answers)
  return [float(answer_is_correct(c, a)) for c, a in zip(completions, answers)]


math_answer = accuracy

# A \boxed{...} with at most one level of nested braces (\boxed{\frac{1}{2}}),
# then nothing but closing punctuation, "$" and whitespace.
_BOXED_AT_END = re.compile(
    r"\\boxed\{(?:[^{}]|\{[^{}]*\})+\}[\s$.!)\]]*\Z")


def format_reward(prompts: Sequence[str], completions: Sequence[str],
                  answers: Sequence[str]) -> list:
  """1.0 where the completion ends with a nonempty ``\\boxed{...}``, else 0.0.

  This is the format `data.SYSTEM_PROMPT` and `ANSWER_INSTRUCTION` ask for.
  Trailing whitespace, ``$`` and closing punctuation are allowed after the box;
  further text is not, so the box really is the final answer.

  Args:
    prompts: N prompts (unused).
    completions: N completion texts.
    answers: N reference answers (unused).

  Returns:
    N floats in {0, 1}.
  """
  _check_batch(prompts, completions, answers)
  return [float(_BOXED_AT_END.search(c) is not None) for c in completions]


def overlong_penalty(lengths, *, max_length: int, cache_length: int
                     ) -> np.ndarray:
  """DAPO's soft overlong punishment, in tokens.

  R(L) = 0                          if L <= max_length - cache_length
       = (max_length - cache_length - L) / cache_length
                                    if max_length - cache_length < L <= max_length
       = -1                         if L > max_length

  arXiv 2503.14476 (eq. 13). Lengths are TOKEN counts of the completion (the
  sum of its mask), never characters.

  Args:
    lengths: [N] completion lengths in tokens (any integer array-like).
    max_length: L_max, the length at which the penalty reaches -1.
    cache_length: L_cache, the width of the linear ramp; 0 gives a hard cut.

  Returns:
    [N] float32 penalties in [-1, 0].
  """
  if max_length <= 0:
    raise ValueError(f"max_length must be positive; got {max_length!r}.")
  if not 0 <= cache_length <= max_length:
    raise ValueError(
        f"cache_length must be in [0, max_length={max_length}]; got "
        f"{cache_length!r}.")
  lengths = np.asarray(lengths)
  if lengths.ndim != 1:
    raise ValueError(
        f"lengths must be [N] (rank 1); got shape {lengths.shape}.")
  if lengths.size and not np.issubdtype(lengths.dtype, np.integer):
    raise ValueError(
        f"lengths must be integer token counts; got dtype {lengths.dtype}. "
        "Pass mask.sum(-1).astype(int), not string lengths.")
  lengths = lengths.astype(np.float64)
  start = max_length - cache_length
  ramp = (start - lengths) / max(cache_length, 1)
  penalty = np.where(lengths <= start, 0.0,
                     np.where(lengths <= max_length, ramp, -1.0))
  return penalty.astype(np.float32)


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
  _check_batch(prompts, completions, answers)
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


_REWARDS = {"accuracy": accuracy, "format": format_reward}


def names() -> Tuple[str, ...]:
  """The registered reward functions, sorted."""
  return tuple(sorted(_REWARDS))


def get(name: str) -> RewardFn:
  """The reward function registered as `name`."""
  if name not in _REWARDS:
    raise ValueError(f"reward {name!r} is unknown; choose one of "
                     f"{', '.join(names())}.")
  return _REWARDS[name]
