"""Records of example files: JSON-lines reading and field lookup, shared by
the JSONL task and benchmark files (`data.jsonl`). Ids: `prompt_ids`."""

import json
import os
from typing import List, Optional, Sequence, Tuple

# Field names of benchmark files (MATH-500, AIME sets, GSM8K exports), tried
# in order, case-insensitively: `data.jsonl`'s default for benchmark files.
QUESTION_KEYS = ("question", "problem")
ANSWER_KEYS = ("answer", "solution")


def text(value) -> str:
  """A field's value as text (bytes decoded as UTF-8)."""
  if isinstance(value, bytes):
    return value.decode("utf-8")
  return str(value)


def find_key(record: dict, keys: Sequence[str]) -> Optional[str]:
  """The first of `keys` in `record`, an exact match before one that
  differs only in case ("Problem" for "problem"); None if none is."""
  for key in keys:
    if key in record:
      return key
    folded = [k for k in record if isinstance(k, str)
              and k.lower() == key.lower()]
    if folded:
      return folded[0]
  return None


def read_jsonl(path) -> List[Tuple[int, dict]]:
  """(line number, object) of every nonblank line of a JSON-lines file; a
  missing file, a malformed line or a line that is not an object is a
  ValueError naming the file and the line."""
  name = os.fspath(path)
  if not os.path.isfile(name):
    raise ValueError(f"{name}: no such file.")
  records = []
  with open(name, encoding="utf-8") as f:
    for line_number, line in enumerate(f, start=1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except json.JSONDecodeError as error:
        raise ValueError(
            f"{name}:{line_number}: not valid JSON ({error.msg}).") from error
      if not isinstance(record, dict):
        raise ValueError(
            f"{name}:{line_number}: expected a JSON object, got "
            f"{type(record).__name__}.")
      records.append((line_number, record))
  return records
