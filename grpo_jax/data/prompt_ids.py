"""Prompt ids: the stable integer id of every example (`data.Example.index`)
and the slots of the per-prompt state tables keyed on it.

Every task gives each example an id that does not change across steps,
processes or a resumed run:

| task          | id                                                        |
|---------------|-----------------------------------------------------------|
| ``arithmetic`` | its place in the enumeration of the problem space        |
| ``segments``  | likewise (problems of fewer parts first)                  |
| ``gsm8k``     | the record's index in its split                           |
| ``jsonl``     | the record's integer ``id`` field, or its index among    |
|               | the file's records when no record has the field           |
| ``hf``        | the row's index in its split                              |
| ``reasoning_gym`` | g * S + j: problem j of generator g, S problems each  |

A per-prompt table (SPO's Beta tracker and its revisit memory, HAPO's length
history, Knapsack-RL's success tracker, sGPO's profile) has a configured
``capacity`` and declares in its registry metadata how ids reach it
(``prompt_ids``, a mode or a function of the options):

  exact  slot = id; an id outside [0, capacity) has no slot, and a config
         whose training ids reach past the table fails at build
         (`check_config`), naming the capacity field;
  hash   slot = id mod capacity: a larger problem space folds into the
         table, problems sharing a slot share their state.

The two agree wherever exact is allowed (every id below the capacity).
A table or a lookup by id (the prioritised draw, reference rows) needs the
ids to be distinct: a JSONL file with a repeated ``id`` is a build error.
So is an ``id`` that is not an integer >= 0 (``"a-1"``, ``3.5``, ``true``),
or one some records lack: silently numbering such a file by position would
key per-prompt state on ids the file does not say (`record_ids`).
"""

from typing import Any, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from grpo_jax import registry

MODES = ("exact", "hash")

# Records in GSM8K's train split (arXiv 2110.14168; tfds ``gsm8k``): its
# ids are 0 .. 7472, known without loading it.
GSM8K_TRAIN_SIZE = 7473

# The field a JSONL record's own id is read from.
ID_KEY = "id"


def check_mode(mode: str) -> None:
  if mode not in MODES:
    raise registry.OptionError(
        "prompt_ids", f"prompt_ids={mode!r} is unknown; choose one of "
        f"{', '.join(MODES)} (exact: one slot per id, hash: ids folded into "
        "the table).")


def check_capacity(capacity) -> None:
  """`registry.OptionError` unless a table's ``capacity`` is an integer
  >= 1 (an exact table's fit to the task's ids is `check_config`'s)."""
  if isinstance(capacity, bool) or not isinstance(capacity, int) \
      or capacity < 1:
    raise registry.OptionError(
        "capacity", f"capacity={capacity!r} must be an integer >= 1 (one "
        "slot per problem of the task, data.Example.index); set the task's "
        "number of problems or more, or prompt_ids='hash' to fold the ids "
        "into fewer slots.")


def slots(prompt_index, capacity: int, mode: str = "exact", *, xp=np):
  """([N] int32 slot, [N] bool tracked) of the ids `prompt_index` in a table
  of `capacity` slots: exact, slot = id where 0 <= id < capacity; hash, slot
  = id mod capacity for every id >= 0. An untracked id (-1: none; or past
  an exact table) gets slot 0 and tracked False. `xp`: numpy, or jax.numpy
  inside a jitted function."""
  check_mode(mode)
  index = xp.asarray(prompt_index).astype(xp.int64 if xp is np else xp.int32)
  if mode == "hash":
    tracked = index >= 0
    slot = xp.where(tracked, index % capacity, 0)
  else:
    tracked = (index >= 0) & (index < capacity)
    slot = xp.where(tracked, index, 0)
  return slot.astype(xp.int32), tracked


def record_ids(records: Sequence[dict], *, key: str = ID_KEY,
               source: str = "records",
               lines: Optional[Sequence[int]] = None) -> list:
  """The id of each JSONL record: its `key` field (an int >= 0, or a string
  of ASCII digits), or its index among the records when no record has the
  field. A value of another kind (a string such as "a-1", a float, a bool,
  a negative number, null), or a field some records lack, is a ValueError
  naming `source`, the record's line (`lines`, 1-based; default its
  position) and the fix: integer ids, or no id field at all.
  (The ``hash`` mode folds integer ids; it does not take strings.)"""
  lines = list(range(1, len(records) + 1)) if lines is None else list(lines)
  present = [key in record for record in records]
  if not any(present):
    return list(range(len(records)))
  fix = (f"give every record an integer {key!r} >= 0, or drop (or rename) "
         f"the {key!r} field in every record to number the records by "
         "their order in the file.")
  ids = []
  for record, line, has in zip(records, lines, present):
    if not has:
      raise ValueError(
          f"{source}:{line}: has no {key!r} field, but the record on line "
          f"{lines[present.index(True)]} has one; {fix}")
    value = record[key]
    if isinstance(value, str) and value.isascii() and value.isdigit():
      value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
      raise ValueError(
          f"{source}:{line}: {key!r} is {record[key]!r}, not an integer "
          f">= 0 (a problem's id keys its per-prompt state); {fix}")
    ids.append(value)
  return ids


def duplicates(ids: Sequence[int]) -> Tuple[int, ...]:
  """The ids that occur more than once, ascending."""
  values, counts = np.unique(np.asarray(ids, np.int64), return_counts=True)
  return tuple(int(v) for v in values[counts > 1])


class IdSpace(NamedTuple):
  """What a config's training problems' ids are, known before any compute.

  Attributes:
    bound: every training id is below it (an exact table needs this many
      slots).
    count: the training problems (a draw without replacement gives at most
      this many).
    duplicates: ids shared by several training problems (JSONL ``id``
      fields), ascending.
    source: what the ids are, for messages.
  """
  bound: int
  count: int
  duplicates: Tuple[int, ...] = ()
  source: str = ""


def id_space(data_config, *, seed: int = 0) -> Optional[IdSpace]:
  """The `IdSpace` of a config's ``data`` block; the arithmetic tasks are
  counted, GSM8K is known (`GSM8K_TRAIN_SIZE`), a JSONL file is read (no
  model, no tokenizer). None for a task it does not know."""
  from grpo_jax import data  # pylint: disable=g-import-not-at-top
  task = data_config.task
  if task in ("arithmetic", "segments"):
    built = data.make_task(data_config, seed=seed)
    try:  # the problems not held out, where the space can be enumerated
      count = len(built.train_indices())
    except (AttributeError, ValueError):
      count = built.num_problems
    return IdSpace(bound=built.num_problems, count=count,
                   source=f"data.task={task!r}")
  if task == "gsm8k":
    return IdSpace(bound=GSM8K_TRAIN_SIZE, count=GSM8K_TRAIN_SIZE,
                   source="data.task='gsm8k' (its train split)")
  if task in ("jsonl", "hf"):  # a file's own errors (line, key, id) raise
    built = data.make_task(data_config, seed=seed)
    ids = [e.index for e in built.train_examples]
    return IdSpace(bound=max(ids) + 1, count=len(ids),
                   duplicates=duplicates(ids),
                   source=f"data.path={data_config.path!r}")
  if task == "reasoning_gym":
    built = data.make_task(data_config, seed=seed)
    return IdSpace(bound=built.num_problems, count=len(built.train_indices()),
                   source=f"data.generators={tuple(built.generators)!r}")
  return None


class Table(NamedTuple):
  """A per-prompt table of a config: its capacity field and mode."""
  field: str  # e.g. "advantage.kwargs.capacity"
  capacity: int
  mode: str
  component: str  # e.g. "estimator 'spo'"


def check_table(table: Table, ids: IdSpace) -> None:
  """ValueError ``config.<capacity field>: ...; fix.`` when an exact table
  cannot hold every training id."""
  check_mode(table.mode)
  if table.mode == "exact" and table.capacity < ids.bound:
    mode_field = table.field.rsplit(".", 1)[0] + ".prompt_ids"
    raise ValueError(
        f"config.{table.field}: {table.capacity} slots cannot hold the "
        f"{ids.bound} problems of {ids.source} ({table.component} keeps one "
        "slot per data.Example.index, prompt_ids='exact'); set "
        f"--config.{table.field}={ids.bound} or more, or "
        f"--config.{mode_field}=hash to fold the ids into the table.")


def prompt_ids_option(prompt_ids: str = "exact", **_: Any) -> str:
  """Metadata ``prompt_ids`` of a table whose mode is its ``prompt_ids``
  option (checked)."""
  check_mode(prompt_ids)
  return prompt_ids
