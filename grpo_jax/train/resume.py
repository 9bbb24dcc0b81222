"""A workdir resumes under the config it was trained with.

Rerunning a workdir with another config (configs/cispo.py over a run of
configs/gspo.py) would continue the run as another method and overwrite
its config.json without a word. `check_config_unchanged` compares the
config with the one the newest checkpoint saved, before the model loads
(`train.train`), and refuses any difference outside `RESUMABLE`, naming
the fields; ``train.allow_config_change=True`` resumes anyway, with a
warning that names them.
"""

import json
import logging
from typing import Optional

import ml_collections

from grpo_jax import config as config_lib
from grpo_jax.runtime import checkpoint as checkpoint_lib

# The fields a resumed run may change (a field, or every field under a
# section): how long it runs (extending train.num_steps stretches a decaying
# learning-rate schedule from the resume on), how often it saves, evaluates
# and logs, how a step's work is split over memory and devices, and its
# fault limits; none changes what a step computes.
RESUMABLE = (
    "train.num_steps", "train.allow_config_change",
    "train.compilation_cache_dir", "train.microbatch_size",
    "train.logprob_batch_size", "train.chunk_size", "train.pack_rows",
    "train.max_nonfinite_updates", "rewards.max_failing_steps",
    "rewards.workers", "rewards.timeout_s", "rewards.deadline_s",
    "checkpoint", "eval", "metrics", "mesh", "model.remat",
)
_SHOWN = 8  # differences listed in the error; the rest are counted


def flat_fields(config_json: str) -> dict:
  """A config's JSON as ``{"a.b.c": value}``; an empty section is a field
  of its own (``rewards.shapers: {}``)."""
  def flatten(tree, prefix):
    for key, value in tree.items():
      if isinstance(value, dict) and value:
        yield from flatten(value, f"{prefix}{key}.")
      else:
        yield f"{prefix}{key}", value
  return dict(flatten(json.loads(config_json), ""))


def resumable(field: str) -> bool:
  return any(field == f or field.startswith(f + ".") for f in RESUMABLE)


def changed_fields(saved_json: str, config) -> list:
  """[(field, saved value, this config's value)] of every field outside
  `RESUMABLE` that differs between `saved_json` (a checkpoint's config;
  fields added to the library since take their defaults) and `config`; a
  field one of them lacks has the value None. ``model.revision`` left ""
  is no change: training pins it to the commit it loaded."""
  saved = flat_fields(config_lib.with_defaults(ml_collections.ConfigDict(
      json.loads(saved_json))).to_json_best_effort())
  now = flat_fields(config.to_json_best_effort())
  changes = [(field, saved.get(field), now.get(field))
             for field in sorted(set(saved) | set(now))
             if saved.get(field) != now.get(field) and not resumable(field)]
  return [c for c in changes if not (c[0] == "model.revision" and not c[2])]


def saved_config(ckpt_dir: str) -> Optional[tuple]:
  """(step, config JSON) of the newest checkpoint in `ckpt_dir` whose
  metadata reads, or None when there is none (a fresh run). An unreadable
  one is left to `Checkpointer.restore_newest`, which reports it."""
  checkpointer = checkpoint_lib.Checkpointer(ckpt_dir)
  try:
    for step in reversed(checkpointer.all_steps()):
      try:
        metadata = checkpointer.metadata(step)
      except checkpoint_lib.CorruptCheckpoint:
        continue
      if "config" in metadata:
        return step, metadata["config"]
    return None
  finally:
    checkpointer.close()


def _shown(value) -> str:
  text = "(none)" if value is None else repr(value)
  return text if len(text) <= 60 else text[:57] + "..."


def check_config_unchanged(config, ckpt_dir: str) -> None:
  """ValueError naming every changed field (`changed_fields`) when the
  newest checkpoint in `ckpt_dir` was written under another config,
  unless ``config.train.allow_config_change`` (then a warning names
  them); nothing for a fresh run."""
  saved = saved_config(ckpt_dir)
  if saved is None:
    return
  step, saved_json = saved
  changes = changed_fields(saved_json, config)
  if not changes:
    return
  listed = "; ".join(f"{field}: {_shown(old)} -> {_shown(new)}"
                     for field, old, new in changes[:_SHOWN])
  if len(changes) > _SHOWN:
    listed += f"; and {len(changes) - _SHOWN} more"
  if config.train.get("allow_config_change", False):
    logging.warning("resuming from checkpoint %d in %s with a changed config "
                    "(train.allow_config_change): %s", step, ckpt_dir, listed)
    return
  raise ValueError(
      f"config: checkpoint {step} in {ckpt_dir} was trained with another "
      f"config, and {len(changes)} field(s) differ (saved -> now): {listed}. "
      "Resume with the run's own config (its config.json), train this one "
      "in a new --workdir, or continue this run with the changes anyway: "
      "--config.train.allow_config_change=True. A resumed run may change "
      f"these freely: {', '.join(RESUMABLE)}.")
