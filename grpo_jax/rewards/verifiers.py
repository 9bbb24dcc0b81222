"""Verifiers: reward functions of the completion text.

A reward function scores a batch of N completions,

  fn(prompts: Sequence[str], completions: Sequence[str],
     answers: Sequence[str]) -> list[float]     (N floats)

and registers in `VERIFIERS` under the name a config uses
(``rewards.functions``), with the range of its values (``range=(lo, hi)``
metadata), which `config.validate` holds against an estimator's domain
(BNPO's [0, 1]). Training scores in worker processes by default
(``rewards.workers``), one completion per call (N = 1), each under a
timeout; a function that needs the whole batch at once runs with
``rewards.workers=0``.

| name          | value                                               |
|---------------|-----------------------------------------------------|
| ``accuracy``  | 1 if math-verify finds the reference answer, else 0 |
| ``format``    | 1 if the completion ends with ``\\boxed{...}``       |
"""

import re
import threading
from typing import Callable, List, Sequence

import numpy as np

from grpo_jax import registry

RewardFn = Callable[[Sequence[str], Sequence[str], Sequence[str]], list]

VERIFIERS = registry.Registry(
    "reward", positional=("prompts", "completions", "answers"))

# The answer format as a question suffix (data.SYSTEM_PROMPT asks for the same).
ANSWER_INSTRUCTION = "Put your final answer in \\boxed{}."

_TIMEOUT_SECONDS = 5


def _timeout_seconds():
  # math-verify times out with signal.alarm, which only the main thread may
  # set; elsewhere (a scoring thread pool) run without its timeout.
  if threading.current_thread() is threading.main_thread():
    return _TIMEOUT_SECONDS
  return None


def check_batch(prompts, completions, answers) -> None:
  if not len(prompts) == len(completions) == len(answers):
    raise ValueError(
        f"prompts, completions and answers must have one entry per completion "
        f"(N each); got {len(prompts)}, {len(completions)} and {len(answers)}.")


def as_rewards(values, n: int) -> np.ndarray:
  """A reward function's return value as N finite floats, or a ValueError
  saying what is wrong."""
  values = np.asarray(values, dtype=np.float64)
  if values.shape != (n,):
    raise ValueError(f"returned shape {values.shape}, expected ({n},)")
  if not np.all(np.isfinite(values)):
    raise ValueError("returned a non-finite reward")
  return values


def _is_unevaluated_arithmetic(expression) -> bool:
  """True for a closed arithmetic expression such as ``3 + 5`` (not ``8``)."""
  is_number = getattr(expression, "is_number", False)
  return bool(is_number) and not expression.is_Atom


def _is_integer(expression) -> bool:
  return bool(getattr(expression, "is_Integer", False))


# LaTeX markup in a bare reference (10\sqrt{2}, \frac{\sqrt{3}}{2}): parsed as
# math, since math-verify reads undelimited text as prose (10\sqrt{2} -> 10).
_LATEX_MARKUP = re.compile(r"[\\^_{}]")
# A reference that already delimits its math: a worked solution.
_DELIMITED = re.compile(r"\\boxed|(?<!\\)\$")
# Words and spaces only ("no number here"): prose, not an answer.
_PROSE = re.compile(r"[A-Za-z]+(\s+[A-Za-z]+)+[.!?]?")


def parse_reference(answer: str) -> list:
  """math-verify's parse of a reference answer; [] when it holds none.

  A benchmark's answer field is LaTeX math without delimiters
  (``10\\sqrt{2}``, ``[-2,7]``, ``p - q``), which math-verify reads as
  prose unless delimited (``10\\sqrt{2}`` alone parses as 10), so such a
  reference is parsed as ``$answer$``: always when it holds LaTeX markup,
  and when the bare text parses to nothing unless it is plain words. A
  reference with its own ``$`` or ``\\boxed`` (a worked solution) and a
  plain number (``8``, ``2,400``) parse as they are.

  Args:
    answer: the reference text.

  Returns:
    math-verify's parsed answer (a list; [] if nothing parsable).
  """
  # Imported here: math-verify loads sympy and its grammar (a second or two).
  from math_verify import parse  # pylint: disable=g-import-not-at-top
  timeout = _timeout_seconds()
  text = answer.strip()
  if _DELIMITED.search(text):
    return parse(text, parsing_timeout=timeout)
  bare = [] if _LATEX_MARKUP.search(text) else parse(
      text, parsing_timeout=timeout)
  if bare or _PROSE.fullmatch(text):
    return bare
  return parse(f"${text}$", parsing_timeout=timeout)


def parse_answer(completion: str) -> list:
  """math-verify's parse of a completion's final answer (``\\boxed{}``
  first, then "answer is", then the last expression); [] when none."""
  from math_verify import parse  # pylint: disable=g-import-not-at-top
  return parse(completion, parsing_timeout=_timeout_seconds())


def same_answer(first: list, second: list) -> bool:
  """Whether two parsed answers (`parse_answer`) are equivalent
  (math-verify's symbolic comparison); False when either is empty."""
  from math_verify import verify  # pylint: disable=g-import-not-at-top
  if not first or not second:
    return False
  return bool(verify(first, second, timeout_seconds=_timeout_seconds()))


def answer_classes(completions: Sequence[str]) -> List[int]:
  """The answer-equivalence class of each completion of one group: the index
  of the first completion whose parsed answer is the same (`same_answer`),
  or -1 where no answer parses (SEED-GRPO's semantic classes)."""
  parsed = [parse_answer(text) for text in completions]
  classes, firsts = [], []  # firsts: the index that opened each class
  for i, answer in enumerate(parsed):
    if not answer:
      classes.append(-1)
      continue
    match = next((j for j in firsts if same_answer(parsed[j], answer)), None)
    if match is None:
      firsts.append(i)
    classes.append(i if match is None else match)
  return classes


def matches_reference(predicted: list, gold: list, *,
                      require_evaluated: bool = True) -> bool:
  """Whether a parsed completion answer equals the parsed reference.

  See `answer_is_correct`; `predicted` from `parse_answer`, `gold` from
  `parse_reference` (nonempty).
  """
  if not predicted:
    return False
  if (require_evaluated and _is_integer(gold[0])
      and _is_unevaluated_arithmetic(predicted[0])):
    return False
  return same_answer(gold, predicted)


def answer_is_correct(completion: str, answer: str, *,
                      require_evaluated: bool = True) -> bool:
  """Whether `completion`'s final answer equals the reference `answer`.

  math-verify extracts the answer (``\\boxed{}`` first, then "answer is",
  then the last expression; `parse_answer`) and compares it symbolically
  with the reference (`parse_reference`). With `require_evaluated`, when the
  reference is an integer the extracted answer must be a number, not an
  expression: math-verify would otherwise accept ``3 + 5`` for 8, and a
  policy learns to echo the question.

  Args:
    completion: the model's text.
    answer: the reference, e.g. ``"8"`` or ``"\\frac{1}{2}"``.
    require_evaluated: reject unevaluated arithmetic for integer references.

  Returns:
    True if correct. Raises ValueError if `answer` holds no parsable answer.
  """
  gold = parse_reference(answer)
  if not gold:
    raise ValueError(f"reference answer {answer!r} holds no parsable answer.")
  return matches_reference(parse_answer(completion), gold,
                           require_evaluated=require_evaluated)


@VERIFIERS.register(range=(0.0, 1.0))
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
  check_batch(prompts, completions, answers)
  return [float(answer_is_correct(c, a)) for c, a in zip(completions, answers)]


math_answer = accuracy

# A \boxed{...} with at most one level of nested braces (\boxed{\frac{1}{2}}),
# then nothing but closing punctuation, "$" and whitespace.
_BOXED_AT_END = re.compile(
    r"\\boxed\{(?:[^{}]|\{[^{}]*\})+\}[\s$.!)\]]*\Z")


@VERIFIERS.register("format", range=(0.0, 1.0))
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
  check_batch(prompts, completions, answers)
  return [float(_BOXED_AT_END.search(c) is not None) for c in completions]
