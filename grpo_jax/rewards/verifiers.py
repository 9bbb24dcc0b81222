"""Verifiers: reward functions of the completion text.

A reward function scores a batch of N completions,

  fn(prompts: Sequence[str], completions: Sequence[str],
     answers: Sequence[str]) -> list[float]     (N floats)

and registers in `VERIFIERS` under the name a config uses
(``rewards.functions``).

| name          | value                                               |
|---------------|-----------------------------------------------------|
| ``accuracy``  | 1 if math-verify finds the reference answer, else 0 |
| ``format``    | 1 if the completion ends with ``\\boxed{...}``       |
"""

import re
import threading
from typing import Callable, Sequence

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


@VERIFIERS.register()
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


@VERIFIERS.register("format")
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
