"""Tasks: the embedded arithmetic task, GSM8K (tfds), JSONL files.

Every source is a `Dataset`: ``train(step, batch_size)`` gives the batch of
training step `step`, a pure function of (seed, step), so a resumed run sees the
same data in the same order; ``heldout(n)`` gives n evaluation examples that no
training batch ever contains. Every example carries its stable id,
``index`` (`prompt_ids`: the arithmetic tasks' enumeration, a GSM8K or JSONL
record's index or a JSONL file's ``id`` field; per-prompt state keys on
it), and ``example(index)`` gives a training example back.

| source            | train                          | heldout                  |
|-------------------|--------------------------------|--------------------------|
| `ArithmeticTask`  | fresh problems per step        | a hash-split of problems |
| `SegmentTask`     | fresh multi-part problems      | a hash-split of problems |
| `ListDataset`     | a seeded permutation per epoch | a fixed list             |

The registered tasks (`TASKS`, a config's ``data.task``) build them:
``arithmetic``, ``segments`` (multi-part problems with per-segment rewards;
its metadata ``segments=True``), ``gsm8k`` and ``jsonl``.

The answer format (a final ``\\boxed{}``, what `rewards.format_reward` checks)
is asked for in `SYSTEM_PROMPT`; pass it to `format_prompt`. Questions are bare
by default; `instruction=` appends `rewards.ANSWER_INSTRUCTION` (or any text) to
each question instead.

Measured on SmolLM2-135M-Instruct, single-digit sums, 16 prompts x 8 samples at
temperature 1.0, 48 new tokens: with `SYSTEM_PROMPT`, greedy accuracy 0.50,
sampled accuracy 0.20, 75% of groups partly solved, none fully solved; with
the instruction in the question instead, greedy 0.88, sampled 0.22, 75% and 0%.
The system prompt leaves the evaluation (greedy) room to improve.
"""

import hashlib
import itertools
import os
import re
from typing import (List, NamedTuple, Optional, Protocol, Sequence, Tuple,
                    Union)

import numpy as np

from grpo_jax import prompt_ids
from grpo_jax import records
from grpo_jax import registry

_text = records.text

OPERATORS = ("+", "-", "*")

# The answer-format instruction for every source (see the module docstring).
SYSTEM_PROMPT = ("You are a math assistant. Solve the problem, then give the "
                 "final answer as \\boxed{<number>}.")

# Problem spaces up to this size are enumerated to find every held-out problem.
_ENUMERATE_LIMIT = 200_000

# name -> ``fn(*, seed, **options) -> Dataset``; a config's ``data.task``
# picks one, its options come from the fields of ``data`` with their names.
TASKS = registry.Registry("task")


class Example(NamedTuple):
  """One question and its reference answer (the text the reward checks), and
  its stable index in the task (0 .. num_problems - 1; -1 when the task gives
  none), which per-prompt trackers key on; `solution` is a worked reference
  solution ending in ``\\boxed{answer}`` where the source has one (GSM8K
  with ``solutions=True``), else "" (`references.solution_text`)."""
  question: str
  answer: str
  index: int = -1
  solution: str = ""


class Dataset(Protocol):
  """What the trainer needs from any source of examples."""

  def train(self, step: int, batch_size: int) -> List[Example]:
    """The `batch_size` prompts of training step `step` (deterministic)."""

  def heldout(self, n: int) -> List[Example]:
    """n evaluation examples, disjoint from every training batch."""


def _check_step_and_size(step: int, batch_size: int) -> None:
  if step < 0:
    raise ValueError(f"step must be >= 0; got {step!r}.")
  if batch_size <= 0:
    raise ValueError(f"batch_size must be positive; got {batch_size!r}.")


def _unit_hash(text: str) -> float:
  """A stable number in [0, 1) from `text` (the same in every process)."""
  digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
  return int.from_bytes(digest, "big") / 2.0**64


def _with_instruction(question: str, instruction: Optional[str]) -> str:
  return f"{question} {instruction}" if instruction else question


def format_prompt(tokenizer, question: str, *,
                  system_prompt: Optional[str] = None) -> str:
  """The chat-formatted prompt text, ending where the assistant's turn starts.

  Args:
    tokenizer: a transformers tokenizer with a chat template.
    question: the user message (it carries the answer-format instruction).
    system_prompt: the system message, usually `SYSTEM_PROMPT`; None keeps
      the template's default.

  Returns:
    The prompt string (tokenize it with ``add_special_tokens=False``: the
    template already wrote the special tokens).
  """
  if not getattr(tokenizer, "chat_template", None):
    raise ValueError(
        "tokenizer has no chat_template; use an instruct model's tokenizer or "
        "set tokenizer.chat_template.")
  messages = [{"role": "user", "content": question}]
  if system_prompt is not None:
    messages.insert(0, {"role": "system", "content": system_prompt})
  return tokenizer.apply_chat_template(
      messages, tokenize=False, add_generation_prompt=True)


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
    return _unit_hash(expression) < self.heldout_fraction

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

  def example(self, index: int) -> Example:
    """The problem of `index` (the inverse of `index`), held out or not."""
    if not 0 <= index < self.num_problems:
      raise ValueError(
          f"index={index!r} is outside [0, {self.num_problems}) (the "
          "problems of this task).")
    return self._example(*self._problem(index))

  def solution(self, example: Example) -> str:
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

  def _example(self, numbers, ops) -> Example:
    question = _with_instruction(f"What is {_expression(numbers, ops)}?",
                                 self.instruction)
    return Example(question, str(_evaluate(numbers, ops)),
                   self.index(numbers, ops))

  def _draw(self, rng) -> Tuple[Tuple[int, ...], Tuple[str, ...]]:
    numbers = rng.integers(0, 10**self.digits, size=self.operands)
    ops = rng.integers(0, len(self.ops), size=self.operands - 1)
    return tuple(int(x) for x in numbers), tuple(self.ops[i] for i in ops)

  def train(self, step: int, batch_size: int) -> List[Example]:
    """`batch_size` problems, drawn with replacement, none held out.

    A pure function of (seed, step).
    """
    _check_step_and_size(step, batch_size)
    rng = np.random.default_rng((self.seed, step))
    batch = []
    while len(batch) < batch_size:
      numbers, ops = self._draw(rng)
      if not self.is_heldout(_expression(numbers, ops)):
        batch.append(self._example(numbers, ops))
    return batch

  def heldout(self, n: int) -> List[Example]:
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
      problems.sort(key=lambda p: _unit_hash("order:" + _expression(*p)))
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

  def _draw(self, rng) -> Example:
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
    return Example(question, answer, self._index(parts))

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

  def _is_heldout(self, example: Example) -> bool:
    return _unit_hash("segments:" + example.question) < self.heldout_fraction

  def train(self, step: int, batch_size: int) -> List[Example]:
    """`batch_size` problems, none held out; a pure function of (seed,
    step)."""
    _check_step_and_size(step, batch_size)
    rng = np.random.default_rng((self.seed, step))
    batch = []
    while len(batch) < batch_size:
      example = self._draw(rng)
      if not self._is_heldout(example):
        batch.append(example)
    return batch

  def heldout(self, n: int) -> List[Example]:
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


class ListDataset:
  """A `Dataset` over fixed example lists (GSM8K, JSONL files).

  Training walks through `train_examples` in a new seeded permutation each
  epoch; batch `step` covers stream positions [step*B, (step+1)*B), so it is a
  pure function of (seed, step, B) and batches can straddle epochs. Each
  example keeps its id (`prompt_ids`: a record index or a file's ``id``);
  a list without ids (-1) is numbered by position.
  """

  def __init__(self, train_examples: Sequence[Example],
               heldout_examples: Sequence[Example] = (), *, seed: int = 0):
    if not train_examples:
      raise ValueError("train_examples is empty.")
    self.train_examples = list(train_examples)
    if any(example.index < 0 for example in self.train_examples):
      self.train_examples = [example._replace(index=i)
                             for i, example in enumerate(train_examples)]
    # id -> example; with repeated ids (a JSONL file's) the first wins, and
    # config.validate refuses them where a stage keys state on the id.
    self._by_id = {}
    for example in self.train_examples:
      self._by_id.setdefault(example.index, example)
    self.heldout_examples = list(heldout_examples)
    self.seed = seed

  @property
  def num_problems(self) -> int:
    """The training examples."""
    return len(self.train_examples)

  def train_indices(self) -> np.ndarray:
    """[M] int64, the distinct training ids, ascending."""
    return np.asarray(sorted(self._by_id), np.int64)

  def example(self, index: int) -> Example:
    """The training example of id `index`."""
    if index not in self._by_id:
      raise ValueError(
          f"index={index!r} is not the id of a training example (ids "
          f"{int(min(self._by_id))} .. {int(max(self._by_id))}).")
    return self._by_id[index]

  def _permutation(self, epoch: int) -> np.ndarray:
    rng = np.random.default_rng((self.seed, epoch))
    return rng.permutation(len(self.train_examples))

  def train(self, step: int, batch_size: int) -> List[Example]:
    _check_step_and_size(step, batch_size)
    size = len(self.train_examples)
    batch, permutations = [], {}
    for position in range(step * batch_size, (step + 1) * batch_size):
      epoch, index = divmod(position, size)
      if epoch not in permutations:
        permutations[epoch] = self._permutation(epoch)
      batch.append(self.train_examples[permutations[epoch][index]])
    return batch

  def heldout(self, n: int) -> List[Example]:
    """The first n held-out examples, in their stored order."""
    if not 0 < n <= len(self.heldout_examples):
      raise ValueError(
          f"n must be in [1, {len(self.heldout_examples)}] (the held-out "
          f"examples available); got {n!r}.")
    return self.heldout_examples[:n]


def split_heldout(examples: Sequence[Example], *, fraction: float
                  ) -> Tuple[List[Example], List[Example]]:
  """(train, heldout) by a hash of each question: stable across runs.

  Duplicated questions land on the same side, so the split stays disjoint.
  """
  if not 0.0 < fraction < 1.0:
    raise ValueError(f"fraction must be in (0, 1); got {fraction!r}.")
  train, heldout = [], []
  for example in examples:
    side = heldout if _unit_hash(example.question) < fraction else train
    side.append(example)
  return train, heldout


def gsm8k_solution(text: str, answer: str) -> str:
  """GSM8K's worked solution as a completion: the calculator annotations
  (``<<48/2=24>>``) dropped and the closing ``#### 72`` written as
  ``The answer is \\boxed{72}.``"""
  work = re.sub(r"<<[^>]*>>", "", text.split("####")[0]).strip()
  return f"{work}\nThe answer is \\boxed{{{answer}}}.".lstrip()


def gsm8k(split: str, *, data_dir: Optional[str] = None,
          instruction: Optional[str] = None,
          solutions: bool = False) -> List[Example]:
  """GSM8K (arXiv 2110.14168) through ``tfds.data_source`` (no TensorFlow).

  The answer is the final number, the text after "#### " in the solution
  (tfds's ``short_answer``).

  Args:
    split: a tfds split, e.g. "train", "test" or "train[:100]".
    data_dir: tfds data directory holding the prepared dataset.
    instruction: appended to every question, e.g.
      `rewards.ANSWER_INSTRUCTION`.
    solutions: keep each worked solution as ``Example.solution``
      (`gsm8k_solution`).

  Returns:
    The split's examples in stored order, each its record index as id.
  """
  # Imported here: tfds is slow to import and only this source needs it.
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  # Importing the builder registers "gsm8k" (tfds does not import text
  # builders when TensorFlow is absent).
  from tensorflow_datasets.text.gsm8k import gsm8k as _  # pylint: disable=g-import-not-at-top,unused-import
  source = tfds.data_source("gsm8k", split=split, data_dir=data_dir)
  examples = []
  for i in range(len(source)):
    record = source[i]
    if "short_answer" in record:
      answer = _text(record["short_answer"])
    else:
      answer = _text(record["answer"]).split("####")[-1]
    question = _with_instruction(_text(record["question"]).strip(), instruction)
    answer = answer.strip().replace(",", "")
    solution = (gsm8k_solution(_text(record["answer"]), answer) if solutions
                else "")
    examples.append(Example(question, answer, i, solution=solution))
  return examples


def jsonl(path: str, *, question_key: Union[str, Sequence[str]] = "question",
          answer_key: Union[str, Sequence[str]] = "answer",
          instruction: Optional[str] = None,
          id_key: Optional[str] = prompt_ids.ID_KEY) -> List[Example]:
  """Examples from a JSON-lines file of objects; blank lines are skipped.

  Args:
    path: the file.
    question_key: key of the question in each object, or candidate keys
      tried in order (case-insensitively), e.g. `records.QUESTION_KEYS`.
    answer_key: key of the reference answer (numbers become strings), or
      candidate keys, e.g. `records.ANSWER_KEYS` (a worked solution's final
      ``\\boxed{}`` is its answer).
    instruction: appended to every question, e.g.
      `rewards.ANSWER_INSTRUCTION`.
    id_key: the field of each record's id (`prompt_ids.record_ids`); None
      numbers the records by their order, whatever fields they carry.

  Returns:
    The examples in file order, each with its id (the records' integer
    ``id`` fields, or their index when no record has one). A missing file,
    a malformed line, a missing key or an id that is not an integer >= 0
    (or missing beside others) raises a ValueError naming the file, the
    line number and the field.
  """
  name = os.fspath(path)
  keys = {"question_key": (question_key,) if isinstance(question_key, str)
                         else tuple(question_key),
          "answer_key": (answer_key,) if isinstance(answer_key, str)
                        else tuple(answer_key)}
  lines = records.read_jsonl(name)
  ids = (prompt_ids.record_ids([record for _, record in lines], key=id_key,
                               source=name, lines=[n for n, _ in lines])
         if id_key else list(range(len(lines))))
  examples = []
  for (line_number, record), index in zip(lines, ids):
    found = {}
    for option, candidates in keys.items():
      found[option] = records.find_key(record, candidates)
      if found[option] is None or record[found[option]] is None:
        raise ValueError(
            f"{name}:{line_number}: missing key "
            f"{' or '.join(map(repr, candidates))} (keys: "
            f"{sorted(record)}); set {option}= to the field's name.")
    examples.append(Example(
        _with_instruction(_text(record[found["question_key"]]), instruction),
        _text(record[found["answer_key"]]), index))
  if not examples:
    raise ValueError(f"{name}: holds no examples.")
  return examples


# ------------------------------------------------------------------ tasks


# solutions: every example has a worked solution (`references.worked_solution`;
# GHPO hints from it).
@TASKS.register("arithmetic", solutions=True)
def arithmetic_task(*, seed: int = 0, digits: int = 1,
                    ops: Sequence[str] = ("+",), operands: int = 2,
                    heldout_fraction: float = 0.2) -> ArithmeticTask:
  """The embedded arithmetic task (`ArithmeticTask`), offline."""
  return ArithmeticTask(digits=digits, ops=tuple(ops), operands=operands,
                        seed=seed, heldout_fraction=heldout_fraction)


@TASKS.register("segments", segments=True)
def segments_task(*, seed: int = 0, digits: int = 1,
                  ops: Sequence[str] = ("+",), max_segments: int = 3,
                  heldout_fraction: float = 0.2,
                  box_reward: float = 0.0) -> SegmentTask:
  """Multi-part arithmetic, one boxed answer per part (`SegmentTask`):
  the task with per-segment rewards (SD-GRPO), offline."""
  return SegmentTask(digits=digits, ops=tuple(ops), max_segments=max_segments,
                     seed=seed, heldout_fraction=heldout_fraction,
                     box_reward=box_reward)


@TASKS.register("gsm8k", solutions=True)
def gsm8k_task(*, seed: int = 0) -> ListDataset:
  """GSM8K's train split for training, its test split held out (tfds)."""
  return ListDataset(gsm8k("train", solutions=True), gsm8k("test"),
                     seed=seed)


@TASKS.register("jsonl")
def jsonl_task(*, path: str, seed: int = 0, heldout_fraction: float = 0.2
               ) -> ListDataset:
  """A JSONL file of question/answer pairs, hash-split (`split_heldout`)."""
  train, heldout = split_heldout(jsonl(path), fraction=heldout_fraction)
  return ListDataset(train, heldout, seed=seed)


def make_task(data_config, *, seed: int):
  """The config's task (`TASKS`): ``train(step, batch_size)`` and
  ``heldout(n)``; its options are the fields of `data_config` it names."""
  options = TASKS.options(data_config.task, exclude=("seed",))
  return TASKS.get(data_config.task)(
      seed=seed, **{name: data_config[name] for name in options})
