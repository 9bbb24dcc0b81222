"""Reasoning Gym tasks: procedural problems with their own verifiers
(the ``reasoning-gym`` package, ``pip install -e ".[data]"``).

``data.task='reasoning_gym'`` draws problems from reasoning_gym's generators
(``data.generators``, e.g. leg counting, word sorting), each generated at
the generator's curriculum level ``data.difficulty`` (0 the easiest), and
the ``reasoning_gym`` reward (`rewards.gym_scoring`) scores a completion's
final ``\\boxed{}`` answer with the generator's own scorer
(``score_answer(answer, entry)``, partial credit where it gives some).

A reward function sees only the example's answer text, and some scorers
read more of the generated entry than its answer (word sorting reads the
sorted list in its metadata), so `Example.answer` is a *reference*: JSON
naming the generator, the difficulty, the problem set's size and the
problem's index in it, from which `entry` generates the same entry again
(reasoning_gym's generators are pure functions of their config and the
index). The oracle answer rides along for people reading samples.

Every generator's problem set is fixed (`PROBLEM_SEED`, the same for every
run seed); a problem is held out by a hash of its text, as the arithmetic
task's are, so training never draws a held-out problem. Problem g*S + j
(generator g of ``data.generators``, index j < S =
``data.problems_per_generator``) has the stable id g*S + j (`prompt_ids`).
"""

import dataclasses
import functools
import json
from typing import List, Sequence

import numpy as np

from grpo_jax import data
from grpo_jax import registry

# A handful of quick generators with exact answers, spanning arithmetic,
# counting and string manipulation (reasoning_gym 0.1.25).
DEFAULT_GENERATORS = ("basic_arithmetic", "chain_sum", "leg_counting",
                      "letter_counting", "word_sorting")
# The answer format for every generator: a word list or a number alike.
SYSTEM_PROMPT = ("Solve the problem, then give only the final answer as "
                 "\\boxed{<answer>}.")
# Seeds every problem set: the problems (and so the held-out split) are the
# same for every run seed, which picks the order of training draws.
PROBLEM_SEED = 0
# The key that marks a reference (`reference`, `is_reference`).
_KEY = "reasoning_gym"
_INSTALL = 'pip install reasoning-gym (or pip install -e ".[data]")'


def import_reasoning_gym():
  """The reasoning_gym module, or a ValueError saying how to install it
  (the module's own import error kept: a missing dependency of it, too)."""
  try:
    import reasoning_gym.factory  # pylint: disable=g-import-not-at-top
  except ImportError as error:
    raise ValueError(
        f"data.task='reasoning_gym' needs the reasoning-gym package, which "
        f"failed to import ({type(error).__name__}: {error}); {_INSTALL}."
    ) from error
  return reasoning_gym


def generator_names() -> tuple:
  """Every generator the installed reasoning_gym registers, sorted."""
  return tuple(sorted(import_reasoning_gym().factory.DATASETS))


def max_difficulty(name: str) -> int:
  """The highest curriculum level of generator `name` (its attribute with
  the most levels); 0 for a generator without a curriculum."""
  factory = import_reasoning_gym().factory
  if not factory.has_curriculum(name):
    return 0
  attributes = factory.create_curriculum(name).attributes.values()
  return max((len(a.levels) - 1 for a in attributes), default=0)


def check_options(generators: Sequence[str], difficulty: int,
                  problems_per_generator: int) -> None:
  """`registry.OptionError` naming the option unless the generators are
  distinct installed ones and the two sizes are integers in range."""
  if isinstance(generators, str) or not generators:
    raise registry.OptionError(
        "generators", f"generators={generators!r} must be a nonempty tuple "
        f"of reasoning_gym generator names, e.g. {DEFAULT_GENERATORS}.")
  if len(set(generators)) != len(generators):
    raise registry.OptionError(
        "generators", f"generators={tuple(generators)!r} repeats a name; "
        "name each generator once.")
  known = generator_names()
  unknown = [name for name in generators if name not in known]
  if unknown:
    raise registry.OptionError(
        "generators", f"generator {unknown[0]!r} is not one of the "
        f"installed reasoning_gym's {len(known)} generators, e.g. "
        f"{', '.join(DEFAULT_GENERATORS)} (all: reasoning_gym.factory."
        "DATASETS).")
  registry.check_int("difficulty", difficulty, low=0,
                     why="the curriculum level, 0 the easiest")
  highest = max(max_difficulty(name) for name in generators)
  if difficulty > highest:  # each generator stops at its own highest
    raise registry.OptionError(
        "difficulty", f"difficulty={difficulty} is above the highest "
        f"curriculum level of every generator named ({highest}); set a "
        f"level in [0, {highest}].")
  registry.check_int("problems_per_generator", problems_per_generator, low=1)


@functools.lru_cache(maxsize=64)
def problem_set(name: str, difficulty: int, size: int):
  """Generator `name`'s problem set of `size` problems at curriculum level
  `difficulty` (each attribute at that level or its highest, ranges from
  the easiest level up to it: reasoning_gym's inclusive curriculum);
  generated lazily, cached per process."""
  factory = import_reasoning_gym().factory
  options = {"seed": PROBLEM_SEED, "size": size}
  if factory.has_curriculum(name):
    curriculum = factory.create_curriculum(name)
    curriculum.set_global_level(difficulty)
    config = curriculum.generate_configuration(defaults=options)
    options = {f.name: getattr(config, f.name)
               for f in dataclasses.fields(config)}
  return factory.create_dataset(name, **options)


def reference(name: str, difficulty: int, size: int, index: int,
              answer: str) -> str:
  """The `Example.answer` of problem `index` of a problem set."""
  return json.dumps({_KEY: name, "difficulty": difficulty, "size": size,
                     "index": index, "answer": answer}, sort_keys=True)


def is_reference(text: str) -> bool:
  """Whether an answer text is a reasoning_gym `reference`."""
  if not text.startswith("{"):
    return False
  try:
    return _KEY in json.loads(text)
  except ValueError:
    return False


def entry(text: str) -> tuple:
  """(the problem set, its entry) of a `reference`: the entry generated
  again. A text that is no reference is a ValueError saying so."""
  if not is_reference(text):
    raise ValueError(
        f"the answer {text[:60]!r} is not a reasoning_gym problem's "
        "reference; the reasoning_gym reward scores data.task="
        "'reasoning_gym' problems only.")
  fields = json.loads(text)
  problems = problem_set(fields[_KEY], fields["difficulty"], fields["size"])
  return problems, problems[fields["index"]]


class GymTask:
  """Problems from reasoning_gym generators (module docstring): a
  `data.Dataset` with stable ids, `train_indices` and `example`."""

  def __init__(self, generators: Sequence[str] = DEFAULT_GENERATORS, *,
               difficulty: int = 0, problems_per_generator: int = 1000,
               seed: int = 0, heldout_fraction: float = 0.2):
    check_options(generators, difficulty, problems_per_generator)
    if not 0.0 < heldout_fraction < 1.0:
      raise registry.OptionError(
          "heldout_fraction", f"heldout_fraction={heldout_fraction!r} must "
          "be in (0, 1).")
    self.generators = tuple(generators)
    self.difficulty = difficulty
    self.size = problems_per_generator
    self.seed, self.heldout_fraction = seed, heldout_fraction
    self._train_indices = None

  @property
  def num_problems(self) -> int:
    """Every problem of every generator, held out or not."""
    return len(self.generators) * self.size

  def _problem(self, index: int):
    """(held out?, the `data.Example`) of problem id `index`."""
    g, j = divmod(int(index), self.size)
    name = self.generators[g]
    item = problem_set(name, self.difficulty, self.size)[j]
    question = str(item["question"])
    heldout = data.unit_hash(f"{name}:{question}") < self.heldout_fraction
    answer = reference(name, self.difficulty, self.size, j,
                       str(item["answer"]))
    return heldout, data.Example(question, answer, int(index))

  def example(self, index: int) -> data.Example:
    """The problem of id `index`, held out or not."""
    if not 0 <= index < self.num_problems:
      raise ValueError(
          f"index={index!r} is outside [0, {self.num_problems}) (the "
          "problems of this task).")
    return self._problem(index)[1]

  def train_indices(self) -> np.ndarray:
    """[M] int64, the ids training draws from (those not held out),
    ascending; generates every problem once."""
    if self._train_indices is None:
      self._train_indices = np.asarray(
          [i for i in range(self.num_problems) if not self._problem(i)[0]],
          np.int64)
    return self._train_indices

  def train(self, step: int, batch_size: int) -> List[data.Example]:
    """`batch_size` problems drawn with replacement, generator and index
    uniform, none held out; a pure function of (seed, step)."""
    data.check_step_and_size(step, batch_size)
    rng = np.random.default_rng((self.seed, step))
    batch = []
    # Far more draws than a held-out share below 1 ever needs.
    for _ in range(100 * batch_size):
      heldout, example = self._problem(rng.integers(self.num_problems))
      if not heldout:
        batch.append(example)
        if len(batch) == batch_size:
          return batch
    raise ValueError(
        f"heldout_fraction={self.heldout_fraction} holds out nearly every "
        "problem; lower it.")

  def heldout(self, n: int) -> List[data.Example]:
    """n distinct held-out problems, the generators interleaved, the same
    for every seed."""
    if n <= 0:
      raise ValueError(f"n must be positive; got {n!r}.")
    seen, examples = set(), []
    for j in range(self.size):
      for g in range(len(self.generators)):
        heldout, example = self._problem(g * self.size + j)
        if heldout and example.question not in seen:
          seen.add(example.question)
          examples.append(example)
          if len(examples) == n:
            return examples
    raise ValueError(
        f"n={n} but only {len(examples)} of the {self.num_problems} "
        "problems are held out and distinct; raise "
        "data.problems_per_generator or data.heldout_fraction.")

