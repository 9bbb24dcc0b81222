"""Tasks: the example type, GSM8K (tfds), JSONL files, the task registry
(Hugging Face datasets: `hf`; reasoning_gym's generators: `gym`).

Every source is a `Dataset`: ``train(step, batch_size)`` gives the batch of
training step `step`, a pure function of (seed, step), so a resumed run sees the
same data in the same order; ``heldout(n)`` gives n evaluation examples that no
training batch ever contains. Every example carries its stable id,
``index`` (`prompt_ids`: the arithmetic tasks' enumeration, a GSM8K or JSONL
record's index or a JSONL file's ``id`` field; per-prompt state keys on
it), and ``example(index)`` gives a training example back.

| source            | train                          | heldout                  |
|-------------------|--------------------------------|--------------------------|
| `arithmetic.ArithmeticTask` | fresh problems per step | a hash-split of problems |
| `arithmetic.SegmentTask` | fresh multi-part problems | a hash-split of problems |
| `gym.GymTask`     | generated problems per step    | a hash-split of problems |
| `ListDataset`     | a seeded permutation per epoch | a fixed list             |

The registered tasks (`TASKS`, a config's ``data.task``) build them:
``arithmetic``, ``segments`` (multi-part problems with per-segment rewards;
its metadata ``segments=True``), ``gsm8k``, ``jsonl``, ``hf`` (a Hugging
Face dataset: a data file, a ``save_to_disk`` directory or a hub id;
`hf`) and ``reasoning_gym`` (procedural problems scored by their
generators, the ``reasoning_gym`` reward; `gym`).

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
import os
import re
from typing import (List, NamedTuple, Optional, Protocol, Sequence, Tuple,
                    Union)

import numpy as np

from grpo_jax.data import prompt_ids
from grpo_jax.data import records
from grpo_jax import registry

_text = records.text

# The answer-format instruction for every source (see the module docstring).
SYSTEM_PROMPT = ("You are a math assistant. Solve the problem, then give the "
                 "final answer as \\boxed{<number>}.")


class TaskMeta(NamedTuple):
  """What a task declares when it registers (`TASKS`)."""
  # Its examples carry a worked solution (`Example.solution`; GHPO's hints).
  solutions: bool = False
  # It gives per-segment rewards (multi-part problems; SD-GRPO's).
  segments: bool = False


# name -> ``fn(*, seed, **options) -> Dataset``; a config's ``data.task``
# picks one, its options come from the fields of ``data`` with their names.
TASKS = registry.Registry("task", meta=TaskMeta)


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


def check_step_and_size(step: int, batch_size: int) -> None:
  if step < 0:
    raise ValueError(f"step must be >= 0; got {step!r}.")
  if batch_size <= 0:
    raise ValueError(f"batch_size must be positive; got {batch_size!r}.")


def unit_hash(text: str) -> float:
  """A stable number in [0, 1) from `text` (the same in every process)."""
  digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
  return int.from_bytes(digest, "big") / 2.0**64


def with_instruction(question: str, instruction: Optional[str]) -> str:
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
    # train.validate refuses them where a stage keys state on the id.
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
    check_step_and_size(step, batch_size)
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
    side = heldout if unit_hash(example.question) < fraction else train
    side.append(example)
  return train, heldout


def gsm8k_solution(text: str, answer: str) -> str:
  """GSM8K's worked solution as a completion: the calculator annotations
  (``<<48/2=24>>``) dropped and the closing ``#### 72`` written as
  ``The answer is \\boxed{72}.``"""
  work = re.sub(r"<<[^>]*>>", "", text.split("####")[0]).strip()
  return f"{work}\nThe answer is \\boxed{{{answer}}}.".lstrip()


def _import_failure(package: str, error: ImportError) -> str:
  """What failed to import and what to install: the missing module itself
  (a dependency of `package`, say), not `package` by default."""
  missing = (getattr(error, "name", None) or package).split(".")[0]
  return (f"{package} failed to import ({type(error).__name__}: {error}); "
          f"pip install {missing.replace('_', '-')}")


def gsm8k_source(split: str, data_dir: Optional[str] = None):
  """tfds's data source of GSM8K's `split`, from prepared data only.

  Never downloads: offline, tfds's download retries the network for
  minutes before it fails. ValueError saying what to install when tfds
  (or a module it imports) is missing, and how to prepare GSM8K once
  when it is not prepared in `data_dir` (None: tfds's default,
  ``TFDS_DATA_DIR`` or ~/tensorflow_datasets).
  """
  try:
    # Imported here: tfds is slow to import and only this source needs it.
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    # Importing the builder registers "gsm8k" (tfds does not import text
    # builders when TensorFlow is absent).
    from tensorflow_datasets.text.gsm8k import gsm8k as _  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as error:
    raise ValueError(f"GSM8K: {_import_failure('tensorflow_datasets', error)}"
                     ".") from error
  try:
    return tfds.data_source("gsm8k", split=split, data_dir=data_dir,
                            download=False)
  except ImportError as error:  # tfds imports some modules lazily
    raise ValueError(f"GSM8K: {_import_failure('tensorflow_datasets', error)}"
                     ".") from error
  except Exception as error:  # pylint: disable=broad-except
    # tfds says "format not supported" for data that is simply absent.
    builder = tfds.builder("gsm8k", data_dir=data_dir)
    where = f", data_dir={data_dir!r}" if data_dir else ""
    prepare = ("prepare it once where the network allows: python -c "
               "\"import tensorflow_datasets as tfds; tfds.data_source("
               f"'gsm8k'{where})\" (the array_record files read here); or "
               "give a JSONL file of the problems")
    if not builder.is_prepared():
      raise ValueError(f"GSM8K is not prepared in {builder.data_dir}; "
                       f"{prepare}.") from error
    raise ValueError(
        f"GSM8K's split {split!r} could not be read from {builder.data_dir} "
        f"({type(error).__name__}: {error}); check the split, or "
        f"{prepare}.") from error


def gsm8k(split: str, *, data_dir: Optional[str] = None,
          instruction: Optional[str] = None,
          solutions: bool = False) -> List[Example]:
  """GSM8K (arXiv 2110.14168) through ``tfds.data_source`` (no TensorFlow).

  The answer is the final number, the text after "#### " in the solution
  (tfds's ``short_answer``).

  Args:
    split: a tfds split, e.g. "train", "test" or "train[:100]".
    data_dir: tfds data directory holding the prepared dataset
      (`gsm8k_source`: read, never downloaded).
    instruction: appended to every question, e.g.
      `rewards.ANSWER_INSTRUCTION`.
    solutions: keep each worked solution as ``Example.solution``
      (`gsm8k_solution`).

  Returns:
    The split's examples in stored order, each its record index as id.
  """
  source = gsm8k_source(split, data_dir)
  examples = []
  for i in range(len(source)):
    record = source[i]
    if "short_answer" in record:
      answer = _text(record["short_answer"])
    else:
      answer = _text(record["answer"]).split("####")[-1]
    question = with_instruction(_text(record["question"]).strip(), instruction)
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
        with_instruction(_text(record[found["question_key"]]), instruction),
        _text(record[found["answer_key"]]), index))
  if not examples:
    raise ValueError(f"{name}: holds no examples.")
  return examples


# ------------------------------------------------------------------ tasks


# The arithmetic tasks' module imports this one (Example, the helpers), so
# their builders import it when called.
# solutions: every example has a worked solution (`references.worked_solution`;
# GHPO hints from it).
@TASKS.register("arithmetic", solutions=True)
def arithmetic_task(*, seed: int = 0, digits: int = 1,
                    ops: Sequence[str] = ("+",), operands: int = 2,
                    heldout_fraction: float = 0.2):
  """The embedded arithmetic task (`arithmetic.ArithmeticTask`), offline."""
  from grpo_jax.data import arithmetic  # pylint: disable=g-import-not-at-top
  return arithmetic.ArithmeticTask(
      digits=digits, ops=tuple(ops), operands=operands, seed=seed,
      heldout_fraction=heldout_fraction)


@TASKS.register("segments", segments=True)
def segments_task(*, seed: int = 0, digits: int = 1,
                  ops: Sequence[str] = ("+",), max_segments: int = 3,
                  heldout_fraction: float = 0.2, box_reward: float = 0.0):
  """Multi-part arithmetic, one boxed answer per part
  (`arithmetic.SegmentTask`): the task with per-segment rewards (SD-GRPO),
  offline."""
  from grpo_jax.data import arithmetic  # pylint: disable=g-import-not-at-top
  return arithmetic.SegmentTask(
      digits=digits, ops=tuple(ops), max_segments=max_segments, seed=seed,
      heldout_fraction=heldout_fraction, box_reward=box_reward)


@TASKS.register("gsm8k", solutions=True)
def gsm8k_task(*, seed: int = 0) -> ListDataset:
  """GSM8K's train split for training, its test split held out (tfds)."""
  return ListDataset(gsm8k("train", solutions=True), gsm8k("test"),
                     seed=seed)


@TASKS.register("jsonl")
def jsonl_task(*, path: str, seed: int = 0, heldout_fraction: float = 0.2,
               question_key: str = "question", answer_key: str = "answer"
               ) -> ListDataset:
  """A JSONL file of question/answer pairs, hash-split (`split_heldout`)."""
  train, heldout = split_heldout(
      jsonl(path, question_key=question_key, answer_key=answer_key),
      fraction=heldout_fraction)
  return ListDataset(train, heldout, seed=seed)


@TASKS.register("hf")
def hf_task(*, path: str, seed: int = 0, subset: str = "",
            split: str = "train", heldout_split: str = "",
            question_key: str = "question", answer_key: str = "answer",
            heldout_fraction: float = 0.2) -> ListDataset:
  """A Hugging Face dataset's question/answer pairs: a data file, a
  ``save_to_disk`` directory or a cached hub id (`hf.load_task`)."""
  from grpo_jax.data import hf  # pylint: disable=g-import-not-at-top
  return hf.load_task(
      path, seed=seed, subset=subset, split=split,
      heldout_split=heldout_split, question_key=question_key,
      answer_key=answer_key, heldout_fraction=heldout_fraction)


@TASKS.register("reasoning_gym")
def reasoning_gym_task(*, generators: Sequence[str], seed: int = 0,
                       difficulty: int = 0, problems_per_generator: int = 1000,
                       heldout_fraction: float = 0.2):
  """reasoning_gym's generators (e.g. `gym.DEFAULT_GENERATORS`) at one
  curriculum level (`gym.GymTask`); scored by the ``reasoning_gym``
  reward."""
  from grpo_jax.data import gym  # pylint: disable=g-import-not-at-top
  return gym.GymTask(tuple(generators), difficulty=difficulty,
                     problems_per_generator=problems_per_generator,
                     seed=seed, heldout_fraction=heldout_fraction)


def make_task(data_config, *, seed: int):
  """The config's task (`TASKS`): ``train(step, batch_size)`` and
  ``heldout(n)``; its options are the fields of `data_config` it names."""
  options = TASKS.options(data_config.task, exclude=("seed",))
  return TASKS.get(data_config.task)(
      seed=seed, **{name: data_config[name] for name in options})

