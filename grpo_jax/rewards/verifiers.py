"""Verifiers: reward functions of the completion text.

A reward function scores a batch of N completions,

  fn(prompts: Sequence[str], completions: Sequence[str],
     answers: Sequence[str]) -> list[float]     (N floats)

and registers in `VERIFIERS` under the name a config uses
(``rewards.functions``), with the range of its values (``range=(lo, hi)``
metadata), which `train.validate` holds against an estimator's domain
(BNPO's [0, 1]). Training scores in worker processes by default
(``rewards.workers``), one completion per call (N = 1), each under a
timeout; a function that needs the whole batch at once runs with
``rewards.workers=0``.

| name          | value                                               |
|---------------|-----------------------------------------------------|
| ``accuracy``  | 1 if math-verify finds the reference answer, else 0 |
| ``format``    | 1 if the completion ends with ``\\boxed{...}``       |
| ``graded_accuracy`` | 1 / (1 + distance of its last number to the answer) |
| ``all_segments``     | 1 if every sub-answer (one ``\\boxed{}`` each) is right |
| ``segment_fraction`` | the share of the sub-answers that are right          |

The per-segment rewards of a multi-part problem (SD-GRPO's, `segment_scores`)
and the tokens each segment owns (`segment_token_ids`) are not reward
columns: the rollout computes them beside the columns when the estimator
reads them.
"""

import re
import threading
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from grpo_jax import registry

RewardFn = Callable[[Sequence[str], Sequence[str], Sequence[str]], list]


class VerifierMeta(NamedTuple):
  """What a reward function declares when it registers (`VERIFIERS`)."""
  # The (lo, hi) of its values, held against an estimator's domain; None:
  # undeclared.
  range: Optional[Tuple[float, float]] = None
  # () -> an answer text the function scores (the contract suite's example);
  # None: any plain answer, e.g. "3".
  example_answer: Optional[Callable[[], str]] = None


VERIFIERS = registry.Registry(
    "reward", positional=("prompts", "completions", "answers"),
    meta=VerifierMeta)

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


# A plain decimal number, signed or not: what `graded_accuracy` reads.
_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@VERIFIERS.register(range=(0.0, 1.0))
def graded_accuracy(prompts: Sequence[str], completions: Sequence[str],
                    answers: Sequence[str]) -> list:
  """Partial credit for a numeric answer: 1 / (1 + |n - answer|), where n
  is the last number written in the completion (a plain decimal, signed or
  not); 0.0 where it writes none.

  1.0 exactly when that number is the answer, 0.5 one off, and so on: a
  near miss earns something, so that a model that rarely gets an answer
  right (the random ``tiny`` model of the ``:tiny`` presets) still sees
  rewards that differ within a group. No math parsing: the answer is the
  last number, boxed or not.

  Args:
    prompts: N prompts (unused).
    completions: N completion texts.
    answers: N reference answers, each a plain number ("8", "-3", "2.5").

  Returns:
    N floats in [0, 1]. Raises ValueError for a reference that is not a
    plain number.
  """
  check_batch(prompts, completions, answers)
  out = []
  for completion, answer in zip(completions, answers):
    if not _PLAIN_NUMBER.fullmatch(answer.strip()):
      raise ValueError(f"graded_accuracy needs a plain number as the "
                       f"reference answer; got {answer!r}.")
    numbers = _PLAIN_NUMBER.findall(completion)
    out.append(1.0 / (1.0 + abs(float(numbers[-1]) - float(answer)))
               if numbers else 0.0)
  return out


# ----------------------------------------------- segments (SD-GRPO's task)

# Joins the sub-answers of a multi-part reference ("7; 12"): `data`'s
# segments task writes it, `reference_segments` reads it.
SEGMENT_SEPARATOR = ";"


def reference_segments(answer: str) -> List[str]:
  """The sub-answers of a multi-part reference, in order ("7; 12" ->
  ["7", "12"]); a reference without `SEGMENT_SEPARATOR` is one segment."""
  return [part.strip() for part in answer.split(SEGMENT_SEPARATOR)]


def boxed_answers(text: str) -> List[Tuple[int, str]]:
  """Every complete ``\\boxed{...}`` of `text`, in order, as (the index just
  past its closing brace, its content). Braces nest to any depth; a box
  still open at the end of `text` is not counted."""
  found, start = [], text.find("\\boxed{")
  while start != -1:
    depth, i = 1, start + len("\\boxed{")
    while i < len(text) and depth:
      depth += {"{": 1, "}": -1}.get(text[i], 0)
      i += 1
    if depth:
      break  # unclosed: nothing after it is a complete box either
    found.append((i, text[start + len("\\boxed{"):i - 1]))
    start = text.find("\\boxed{", i)
  return found


# A box that holds a number, right or wrong: what `box_reward` credits.
_NUMBER = re.compile(r"\s*-?\d+(?:\.\d+)?\s*\Z")


def segment_scores(completion: str, answer: str, *, max_segments: int,
                   box_reward: float = 0.0
                   ) -> Tuple[np.ndarray, np.ndarray]:
  """Per-segment rewards of one completion of a multi-part problem.

  Segment s is the completion's s-th ``\\boxed{}``; it earns 1 if its
  content equals the s-th sub-answer of `answer` (`answer_is_correct`, so
  ``3 + 4`` does not count for 7), else 0, plus `box_reward` if it holds a
  number at all (the per-part form of the quickstart's format reward). A
  missing box is a wrong answer (0, valid): only the problem's own
  sub-problems are valid segments, so every member of a group has the same
  valid segments.

  Args:
    completion: the model's text.
    answer: the reference, sub-answers joined by `SEGMENT_SEPARATOR`.
    max_segments: S, the fixed number of segment slots.
    box_reward: the credit for a box that holds a number (>= 0).

  Returns:
    (rewards [S] float32, valid [S] bool); valid is True for the first
    min(#sub-answers, S) slots.
  """
  parts = reference_segments(answer)[:max_segments]
  boxes = boxed_answers(completion)
  rewards = np.zeros((max_segments,), np.float32)
  valid = np.zeros((max_segments,), bool)
  for s, reference in enumerate(parts):
    valid[s] = True
    if s < len(boxes):
      content = boxes[s][1]
      rewards[s] = (float(answer_is_correct(f"\\boxed{{{content}}}",
                                            reference))
                    + box_reward * bool(_NUMBER.match(content)))
  return rewards, valid


def segment_token_ids(decode_prefix: Callable[[int], str], length: int, *,
                      num_segments: int, max_tokens: int) -> np.ndarray:
  """[T] int32: the segment each completion token belongs to, -1 for none.

  Segment s owns the tokens from the end of box s-1 (the completion's start
  for s = 0) up to and including the token that closes box s: the reasoning
  for a sub-problem belongs to its answer. Where the completion gives fewer
  boxes than `num_segments`, the tokens after its last box belong to the
  first unanswered segment (its failed attempt); tokens after the last
  segment's box, and padding (t >= length), get -1.

  Token boundaries come from decoding prefixes, ``decode_prefix(k)`` the
  text of the first k tokens, so any tokenizer works (offsets or not,
  byte-level or character-level): box s closes at the first k whose prefix
  holds s + 1 complete boxes, found by bisection (a prefix never holds more
  complete boxes than a longer one).

  Args:
    decode_prefix: k -> the decoded text of the completion's first k tokens.
    length: the completion's length in tokens.
    num_segments: the problem's segments (its valid slots).
    max_tokens: T, the padded completion length.

  Returns:
    [T] int32 segment ids.
  """
  ids = np.full((max_tokens,), -1, np.int32)
  if length <= 0 or num_segments <= 0:
    return ids
  count = lambda k: len(boxed_answers(decode_prefix(k)))
  boxes = min(count(length), num_segments)
  start = 0
  for s in range(boxes):
    lo, hi = start + 1, length  # the first k in [lo, hi] with count(k) > s
    while lo < hi:
      mid = (lo + hi) // 2
      lo, hi = (lo, mid) if count(mid) > s else (mid + 1, hi)
    ids[start:lo] = s
    start = lo
  if boxes < num_segments:
    ids[start:length] = boxes
  return ids


def _segment_results(completions, answers, *, all_correct: bool) -> list:
  out = []
  for completion, answer in zip(completions, answers):
    parts = reference_segments(answer)
    rewards, _ = segment_scores(completion, answer, max_segments=len(parts))
    out.append(float(rewards.min() if all_correct else rewards.mean()))
  return out


@VERIFIERS.register(range=(0.0, 1.0))
def all_segments(prompts: Sequence[str], completions: Sequence[str],
                 answers: Sequence[str]) -> list:
  """1.0 where every sub-answer of a multi-part problem is right (its s-th
  ``\\boxed{}`` equals the s-th sub-answer, `segment_scores`), else 0.0:
  the holistic reward of SD-GRPO's task.

  Args:
    prompts: N prompts (unused).
    completions: N completion texts.
    answers: N references, sub-answers joined by `SEGMENT_SEPARATOR`.

  Returns:
    N floats in {0, 1}.
  """
  check_batch(prompts, completions, answers)
  return _segment_results(completions, answers, all_correct=True)


@VERIFIERS.register(range=(0.0, 1.0))
def segment_fraction(prompts: Sequence[str], completions: Sequence[str],
                     answers: Sequence[str]) -> list:
  """The share of a multi-part problem's sub-answers that are right
  (`segment_scores`): the mean of the segment rewards, a holistic reward
  with partial credit.

  Args:
    prompts: N prompts (unused).
    completions: N completion texts.
    answers: N references, sub-answers joined by `SEGMENT_SEPARATOR`.

  Returns:
    N floats in [0, 1].
  """
  check_batch(prompts, completions, answers)
  return _segment_results(completions, answers, all_correct=False)
