"""Hugging Face ``datasets`` as a task (``pip install -e ".[data]"``).

``data.task='hf'`` reads question/answer pairs from ``data.path``, one of

| ``data.path``                       | read with                           |
|-------------------------------------|-------------------------------------|
| a .json, .jsonl, .csv, .parquet or  | ``load_dataset(<format>,            |
| .arrow file                         | data_files=path)``, split "train"   |
| a directory written by              | ``load_from_disk``, a split by name |
| ``save_to_disk``                    |                                     |
| another directory of data files     | ``load_dataset(path)``              |
| a hub id, "org/name"                | ``load_dataset(id, data.subset)``,  |
|                                     | from the datasets cache             |

and trains on ``data.split`` ("train", or a slice such as "train[:1000]"
where ``load_dataset`` reads it), holding out ``data.heldout_split`` ("test")
or, when that is "", a hash-split share ``data.heldout_fraction`` of the
training split (`data.split_heldout`). The columns are ``data.question_key``
and ``data.answer_key``, matched case-insensitively; numbers become text.
Each example's id (`prompt_ids`) is its row's index in its split.

Nothing is downloaded at run time: datasets reads offline (as under
``HF_HUB_OFFLINE=1``), so a hub dataset that is not in the cache fails at
once, saying how to cache it, where online datasets would retry the
network first.
"""

import contextlib
import os
from typing import List

from grpo_jax import data
from grpo_jax.data import records

# A data file's format (a datasets packaged builder) by its extension.
FILE_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv",
                ".parquet": "parquet", ".arrow": "arrow"}
_INSTALL = 'pip install datasets (or pip install -e ".[data]")'


def import_datasets():
  """The datasets module, or a ValueError saying how to install it (its own
  import error kept: a missing dependency of it, too)."""
  try:
    import datasets  # pylint: disable=g-import-not-at-top
  except ImportError as error:
    raise ValueError(
        f"data.task='hf' needs the datasets package, which failed to import "
        f"({type(error).__name__}: {error}); {_INSTALL}.") from error
  return datasets


def is_saved_to_disk(path: str) -> bool:
  """Whether `path` is a directory written by ``save_to_disk`` (a Dataset's
  state.json or a DatasetDict's dataset_dict.json)."""
  return any(os.path.isfile(os.path.join(path, name))
             for name in ("state.json", "dataset_dict.json"))


@contextlib.contextmanager
def offline(datasets):
  """datasets and huggingface_hub offline for the block: the
  ``HF_HUB_OFFLINE`` flags they read once, at import, set and restored."""
  from huggingface_hub import constants  # pylint: disable=g-import-not-at-top
  saved = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
  datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
  try:
    yield
  finally:
    datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


def _hub_help(datasets, path: str, subset: str) -> str:
  """How to put a hub dataset where an offline run reads it."""
  subset_arg = f", {subset!r}" if subset else ""
  return (f"a local path that does not exist reads as a hub id, read "
          f"offline from the datasets cache "
          f"({datasets.config.HF_DATASETS_CACHE}): load it once where the "
          f"network allows, python -c \"import datasets; datasets."
          f"load_dataset({path!r}{subset_arg})\" (same HF_HOME), or save "
          "it with save_to_disk and set data.path to that directory")


def load_split(path: str, split: str, *, subset: str = ""):
  """The `datasets.Dataset` of `split` at `path` (module docstring); any
  failure is a ValueError naming data.path or data.split and the fix."""
  datasets = import_datasets()
  name = os.path.expanduser(os.fspath(path))
  if os.path.isdir(name) and is_saved_to_disk(name):
    saved = datasets.load_from_disk(name)
    if not isinstance(saved, datasets.DatasetDict):
      if split != "train":
        raise ValueError(
            f"data.split={split!r}: {name} holds one Dataset, no splits; "
            "set data.split='train' (all of it) and data.heldout_split=''.")
      return saved
    if split not in saved:
      raise ValueError(
          f"data.split={split!r} is not a split of {name} (splits: "
          f"{sorted(saved)}); a save_to_disk directory takes a split's "
          "name, no slice.")
    return saved[split]
  if os.path.isfile(name):
    extension = os.path.splitext(name)[1].lower()
    if extension not in FILE_FORMATS:
      raise ValueError(
          f"data.path={path!r}: {extension or 'no extension'} is not a "
          f"data file format datasets reads here; give a "
          f"{', '.join(FILE_FORMATS)} file.")
    arguments = (FILE_FORMATS[extension],)
    options = {"data_files": name}
    where = f"the file {name} (its one split is 'train')"
    fix = "check the file and data.split (e.g. 'train' or 'train[:100]')"
  elif os.path.isdir(name):
    arguments, options, where = (name,), {}, f"the directory {name}"
    fix = "check its data files and data.split"
  else:
    arguments = (name, subset) if subset else (name,)
    options, where = {}, f"the hub dataset {name!r}"
    fix = _hub_help(datasets, name, subset)
  try:
    with offline(datasets):
      return datasets.load_dataset(*arguments, split=split, **options)
  except Exception as error:  # pylint: disable=broad-except
    # datasets raises many types (missing split, file, cache entry).
    raise ValueError(
        f"data.path={path!r}, data.split={split!r}: datasets could not load "
        f"{where} ({type(error).__name__}: {error}); {fix}.") from error


def examples_of(rows, *, question_key: str, answer_key: str,
                source: str) -> List[data.Example]:
  """The rows of a `datasets.Dataset` as examples, each its row index as
  id; a missing column or empty value is a ValueError naming the field."""
  columns = list(rows.column_names)
  found = {}
  for option, key in (("question_key", question_key),
                      ("answer_key", answer_key)):
    found[option] = records.find_key(dict.fromkeys(columns), (key,))
    if found[option] is None:
      raise ValueError(
          f"data.{option}={key!r} is not a column of {source} (columns: "
          f"{columns}); set --config.data.{option} to the column's name.")
  examples = []
  questions, answers = rows[found["question_key"]], rows[found["answer_key"]]
  for i, (question, answer) in enumerate(zip(questions, answers)):
    if question is None or answer is None:
      raise ValueError(
          f"{source}: row {i} has no "
          f"{'question' if question is None else 'answer'} (None); drop "
          "the row or choose another column.")
    examples.append(data.Example(records.text(question),
                                 records.text(answer), i))
  if not examples:
    raise ValueError(f"{source}: holds no rows; check data.split.")
  return examples


def load_examples(path: str, split: str, *, subset: str = "",
                  question_key: str = "question",
                  answer_key: str = "answer") -> List[data.Example]:
  """`examples_of` the split (`load_split`)."""
  rows = load_split(path, split, subset=subset)
  return examples_of(rows, question_key=question_key, answer_key=answer_key,
                     source=f"data.path={path!r} (split {split!r})")


def load_task(path: str, *, seed: int = 0, subset: str = "",
              split: str = "train", heldout_split: str = "",
              question_key: str = "question", answer_key: str = "answer",
              heldout_fraction: float = 0.2) -> data.ListDataset:
  """The ``hf`` task (module docstring): `split`'s examples to train on,
  `heldout_split`'s held out, or a hash-split share of `split` when that
  is ""."""
  keys = dict(subset=subset, question_key=question_key, answer_key=answer_key)
  train = load_examples(path, split, **keys)
  if heldout_split:
    heldout = load_examples(path, heldout_split, **keys)
  else:
    train, heldout = data.split_heldout(train, fraction=heldout_fraction)
  return data.ListDataset(train, heldout, seed=seed)
