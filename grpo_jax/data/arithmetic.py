"""The embedded arithmetic tasks: generated problems with exact answers.

`ArithmeticTask` ("What is 3 + 5?") and `SegmentTask` (several problems,
one boxed answer each: SD-GRPO's task) are `data.Dataset`s built offline,
registered as ``data.task`` ``arithmetic`` and ``segments``
(`data.TASKS`). A problem is held out by a hash of its text, so the split
is the same for every seed, and every problem has a stable index
(`prompt_ids`): its place in the enumeration of the problem space.
"""

import itertools
from typing import List, Optional, Sequence, Tuple

import numpy as np

from grpo_jax import data

OPERATORS = ("+", "-", "*")

# Problem spaces up to this size are enumerated to find every held-out problem.
_ENUMERATE_LIMIT = 200_000


def _evaluate(numbers: Sequence[int], ops: Sequence[str]) -> int:
  """Value of n0 op0 n1 op1 ... with * binding tighter than + and -."""
  terms, signs = [numbers[0]], [1]
  for op, number in zip(ops, numbers[1:]):
    if op == "*":
      terms[-1] *= number
    else:
      terms.append(number)
      signs.append(1 if op == "+" else -1)
  return sum(sign * term for sign, term in zip(signs, terms))


def _expression(numbers: Sequence[int], ops: Sequence[str]) -> str:
  parts = [str(numbers[0])]
  for op, number in zip(ops, numbers[1:]):
    parts += [op, str(number)]
  return " ".join(parts)


class ArithmeticTask:
  """Generated arithmetic problems with exact answers, e.g. "What is 3 + 5?".

  Operands are uniform in [0, 10**digits); operators uniform over `ops`; the
  usual precedence applies (* before + and -). A problem is held out when a
  hash of its expression falls below `heldout_fraction`: the split depends on
  the problem alone, so training never sees a held-out problem, for any seed,
  and every seed is evaluated on the same problems.

  With the defaults (single-digit sums) the space holds only 100 problems, 20
  of them held out.
  """

  def __init__(self, digits: int = 1, ops: Sequence[str] = ("+",),
               operands: int = 2, seed: int = 0, *,
               heldout_fraction: float = 0.2,
               instruction: Optional[str] = None):
    """Args:
      digits: operands have at most this many digits (>= 1).
      ops: operators to draw from, a nonempty subset of `OPERATORS`.
      operands: numbers per problem (>= 2).
      seed: seeds the training stream (not the split).
      heldout_fraction: share of the problem space held out, in (0, 1).
      instruction: appended to every question, e.g.
      `rewards.ANSWER_INSTRUCTION`.
    """
    ops = tuple(ops)
    if digits < 1:
      raise ValueError(f"digits must be >= 1; got {digits!r}.")
    if operands < 2:
      raise ValueError(f"operands must be >= 2; got {operands!r}.")
    if not ops or len(set(ops)) != len(ops) or not set(ops) <= set(OPERATORS):
      raise ValueError(
          f"ops must be distinct operators from {OPERATORS}; got {ops!r}.")
    if not 0.0 < heldout_fraction < 1.0:
      raise ValueError(
          f"heldout_fraction must be in (0, 1); got {heldout_fraction!r}.")
    if seed < 0:
      raise ValueError(f"seed must be >= 0; got {seed!r}.")
    self.digits, self.ops, self.operands = digits, ops, operands
    self.seed, self.heldout_fraction = seed, heldout_fraction
    self.instruction = instruction

  @property
  def num_problems(self) -> int:
    """Size of the problem space."""
    return (10**self.digits)**self.operands * len(self.ops)**(self.operands - 1)

  def is_heldout(self, expression: str) -> bool:
    """Whether the problem "`expression`" (e.g. "3 + 5") is held out."""
    return data.unit_hash(expression) < self.heldout_fraction

  def index(self, numbers: Sequence[int], ops: Sequence[str]) -> int:
    """The problem's stable index in [0, num_problems): its operands, then
    its operators, read as digits of a mixed-radix number."""
    index = 0
    for number in numbers:
      index = index * 10**self.digits + int(number)
    for op in ops:
      index = index * len(self.ops) + self.ops.index(op)
    return index

  def train_indices(self) -> np.ndarray:
    """[M] int64, the indices of the problems training may draw (those not
    held out), ascending; the space must be small enough to enumerate."""
    if self.num_problems > _ENUMERATE_LIMIT:
      raise ValueError(
          f"the task holds {self.num_problems} problems, more than "
          f"{_ENUMERATE_LIMIT} to enumerate; lower digits or operands.")
    return np.asarray([i for i in range(self.num_problems)
                       if not self.is_heldout(_expression(*self._problem(i)))],
                      np.int64)

  def example(self, index: int) -> data.Example:
    """The problem of `index` (the inverse of `index`), held out or not."""
    if not 0 <= index < self.num_problems:
      raise ValueError(
          f"index={index!r} is outside [0, {self.num_problems}) (the "
          "problems of this task).")
    return self._example(*self._problem(index))

  def solution(self, example: data.Example) -> str:
    """A one-line worked solution of `example` ("3 + 5 = \\boxed{8}"),
    the reference EDGE-GRPO's error correction injects."""
    expression = _expression(*self._problem(example.index))
    return f"{expression} = \\boxed{{{example.answer}}}"

  def _problem(self, index: int) -> Tuple[Tuple[int, ...], Tuple[str, ...]]:
    """(numbers, ops) of `index` in [0, num_problems)."""
    ops = []
    for _ in range(self.operands - 1):
      index, code = divmod(index, len(self.ops))
      ops.append(self.ops[code])
    numbers = []
    for _ in range(self.operands):
      index, number = divmod(index, 10**self.digits)
      numbers.append(number)
    return tuple(reversed(numbers)), tuple(reversed(ops))

  def _example(self, numbers, ops) -> data.Example:
    question = data.with_instruction(f"What is {_expression(numbers, ops)}?",
                                 self.instruction)
    return data.Example(question, str(_evaluate(numbers, ops)),
                   self.index(numbers, ops))

  def _draw(self, rng) -> Tuple[Tuple[int, ...], Tuple[str, ...]]:
    numbers = rng.integers(0, 10**self.digits, size=self.operands)
    ops = rng.integers(0, len(self.ops), size=self.operands - 1)
    return tuple(int(x) for x in numbers), tuple(self.ops[i] for i in ops)

  def train(self, step: int, batch_size: int) -> List[data.Example]:
    """`batch_size` problems, drawn with replacement, none held out.

    A pure function of (seed, step).
    """
    data.check_step_and_size(step, batch_size)
    rng = np.random.default_rng((self.seed, step))
    batch = []
    while len(batch) < batch_size:
      numbers, ops = self._draw(rng)
      if not self.is_heldout(_expression(numbers, ops)):
        batch.append(self._example(numbers, ops))
    return batch

  def heldout(self, n: int) -> List[data.Example]:
    """n distinct held-out problems, the same for every seed."""
    if n <= 0:
      raise ValueError(f"n must be positive; got {n!r}.")
    if self.num_problems <= _ENUMERATE_LIMIT:
      problems = [
          (numbers, ops)
          for numbers in itertools.product(range(10**self.digits),
                                           repeat=self.operands)
          for ops in itertools.product(self.ops, repeat=self.operands - 1)
          if self.is_heldout(_expression(numbers, ops))]
      if n > len(problems):
        raise ValueError(
            f"n={n} but only {len(problems)} of the {self.num_problems} "
            "problems are held out; raise heldout_fraction, digits or "
            "operands.")
      # Ordered by hash: a fixed shuffle, independent of the seed.
      problems.sort(key=lambda p: data.unit_hash("order:" + _expression(*p)))
      return [self._example(*p) for p in problems[:n]]
    rng = np.random.default_rng(0)
    seen, examples = set(), []
    while len(examples) < n:
      numbers, ops = self._draw(rng)
      expression = _expression(numbers, ops)
      if expression not in seen and self.is_heldout(expression):
        seen.add(expression)
        examples.append(self._example(numbers, ops))
    return examples


class SegmentTask:
  """Multi-part arithmetic problems, one ``\\boxed{}`` answer per part
  (SD-GRPO's task), e.g. "Compute each: (a) 3 + 4 (b) 5 + 2. Write each
  result in its box: (a) 3 + 4 = \\boxed{} (b) 5 + 2 = \\boxed{}" with the
  reference "7; 7". (Told only to "give each answer in its own
  \\boxed{}", the embedded model almost never wrote a box; with the boxes
  laid out it fills some.)

  A problem has 2 to `max_segments` parts (uniform), each an
  `ArithmeticTask` problem; the reference joins the parts' answers with
  `rewards.verifiers.SEGMENT_SEPARATOR`, so `verifiers.segment_scores`
  rewards each box on its own and ``all_segments`` / ``segment_fraction``
  give the holistic reward. A problem is held out when a hash of its text
  falls below `heldout_fraction`; `max_segments` is S, the segment slots of
  the rollout's group data, and `box_reward` the credit of a box that
  holds a number in each segment's reward (`verifiers.segment_scores`).
  Each example carries its stable index in [0, `num_problems`).
  """

  def __init__(self, digits: int = 1, ops: Sequence[str] = ("+",),
               max_segments: int = 3, seed: int = 0, *,
               heldout_fraction: float = 0.2, box_reward: float = 0.0):
    """Args:
      digits, ops: each part's operands and operators (`ArithmeticTask`).
      max_segments: the most parts of a problem (>= 2).
      seed: seeds the training stream (not the split).
      heldout_fraction: share of the problems held out, in (0, 1).
      box_reward: a segment's reward for a box holding a number (>= 0).
    """
    if max_segments < 2:
      raise ValueError(
          f"max_segments must be >= 2 (a problem has 2 or more parts); got "
          f"{max_segments!r}.")
    self.part = ArithmeticTask(digits=digits, ops=ops, seed=seed,
                               heldout_fraction=heldout_fraction)
    if not box_reward >= 0:  # NaN too
      raise ValueError(f"box_reward must be >= 0; got {box_reward!r}.")
    self.max_segments, self.seed = max_segments, seed
    self.box_reward = float(box_reward)
    self.heldout_fraction = heldout_fraction

  def _draw(self, rng) -> data.Example:
    parts = [self.part._draw(rng)  # pylint: disable=protected-access
             for _ in range(int(rng.integers(2, self.max_segments + 1)))]
    labelled = [(f"({chr(ord('a') + i)})", _expression(*part))
                for i, part in enumerate(parts)]
    listed = " ".join(f"{label} {expression}"
                      for label, expression in labelled)
    boxes = " ".join(f"{label} {expression} = \\boxed{{}}"
                     for label, expression in labelled)
    question = f"Compute each: {listed}. Write each result in its box: {boxes}"
    from grpo_jax.rewards import verifiers  # pylint: disable=g-import-not-at-top
    answer = f"{verifiers.SEGMENT_SEPARATOR} ".join(
        str(_evaluate(*part)) for part in parts)
    return data.Example(question, answer, self._index(parts))

  @property
  def num_problems(self) -> int:
    """Size of the problem space: M**2 + ... + M**max_segments, M the
    problems of one part."""
    m = self.part.num_problems
    return sum(m**k for k in range(2, self.max_segments + 1))

  def _index(self, parts) -> int:
    """A problem's stable index in [0, num_problems): the problems of fewer
    parts first, then its parts' indices as digits in base M."""
    m = self.part.num_problems
    index = sum(m**k for k in range(2, len(parts)))
    digits = 0
    for part in parts:
      digits = digits * m + self.part.index(*part)
    return index + digits

  def _is_heldout(self, example: data.Example) -> bool:
    return data.unit_hash("segments:" + example.question) < self.heldout_fraction

  def train(self, step: int, batch_size: int) -> List[data.Example]:
    """`batch_size` problems, none held out; a pure function of (seed,
    step)."""
    data.check_step_and_size(step, batch_size)
    rng = np.random.default_rng((self.seed, step))
    batch = []
    while len(batch) < batch_size:
      example = self._draw(rng)
      if not self._is_heldout(example):
        batch.append(example)
    return batch

  def heldout(self, n: int) -> List[data.Example]:
    """n distinct held-out problems, the same for every seed."""
    if n <= 0:
      raise ValueError(f"n must be positive; got {n!r}.")
    rng, seen, examples = np.random.default_rng(0), set(), []
    for _ in range(1000 * n):
      example = self._draw(rng)
      if example.question not in seen and self._is_heldout(example):
        seen.add(example.question)
        examples.append(example)
        if len(examples) == n:
          return examples
    raise ValueError(
        f"n={n}: only {len(examples)} distinct held-out problems found; "
        "raise heldout_fraction, digits or max_segments.")
