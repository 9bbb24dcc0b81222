"""Save and restore the training state with orbax, and resume a run.

A checkpoint is one orbax step directory holding two items: ``state`` (the
`TrainState` pytree of arrays) and ``metadata`` (a small JSON dict: the config,
the step, anything the loop wants to read back without the arrays).

Saves are atomic: orbax writes into a temporary directory
(``<step>.orbax-checkpoint-tmp-*``) and renames it once every file is on disk,
and only a renamed directory counts as a checkpoint. A process killed in the
middle of a save leaves a temporary directory that `latest_step` ignores, so
the previous checkpoint stays the latest one.

A checkpoint that cannot be restored (files truncated by an interrupted
copy or a full disk, a stray directory with a step's name) is never used
silently: `Checkpointer.restore_newest` names it and the newest readable
one, and with ``on_corrupt="previous"`` moves it aside (never deleting it)
and resumes from that one. `check_writable` probes the directory before a
run computes anything.
"""

import logging
import os
import shutil
import time
import uuid
from typing import Any, Optional

from etils import epath
import jax
import numpy as np
import orbax.checkpoint as ocp

STATE = "state"
METADATA = "metadata"
ON_CORRUPT = ("error", "previous")
# Where `restore_newest` moves unreadable checkpoints: a sibling directory
# (orbax would list a step-named directory inside `directory` as a step).
CORRUPT_SUFFIX = ".corrupt"


class _QuietOrbax(logging.Filter):
  """Lets orbax's warnings through, not its INFO lines (several per save)."""

  def filter(self, record):
    return "orbax" not in record.pathname or record.levelno >= logging.WARNING


def quiet_orbax_logs() -> None:
  """Keeps orbax's per-save INFO lines off absl's log (the console of the
  entry points); its warnings and errors still show."""
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  handler = absl_logging.get_absl_handler()
  if not any(isinstance(f, _QuietOrbax) for f in handler.filters):
    handler.addFilter(_QuietOrbax())


class CorruptCheckpoint(RuntimeError):
  """A checkpoint that exists but cannot be restored."""


class StateMismatch(ValueError):
  """A readable checkpoint of another state than the template's: the config
  changed since it was written (another number of prompts in a tracker,
  another model, LoRA on or off)."""


def _first_line(error: BaseException) -> str:
  text = str(error).strip().splitlines()
  return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


class Checkpointer:
  """An orbax CheckpointManager for a `TrainState` and a JSON metadata dict.

  Args:
    directory: where step directories go (created if missing).
    max_to_keep: how many of the newest checkpoints to keep.
  """

  def __init__(self, directory: str, *, max_to_keep: int = 3):
    if max_to_keep < 1:
      raise ValueError(f"max_to_keep must be >= 1; got {max_to_keep}.")
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep,
        create=True,
        # Synchronous saves: once save() returns the checkpoint is complete,
        # so a kill right after it cannot lose it.
        enable_async_checkpointing=False,
        # Leftovers of a save that was killed midway are removed at start-up.
        cleanup_tmp_directories=True,
    )
    # orbax needs an absolute path; local workdirs are often given relative
    # (URLs such as gs://bucket/run are absolute already).
    directory = str(directory)
    self.directory = (directory if "://" in directory
                      else os.path.abspath(directory))
    self._manager = ocp.CheckpointManager(
        self.directory, options=options,
        # Handlers named up front, so that metadata reads before any restore.
        item_handlers={STATE: ocp.StandardCheckpointHandler(),
                       METADATA: ocp.JsonCheckpointHandler()})

  def save(self, step: int, state: Any, metadata: Optional[dict] = None
           ) -> None:
    """Writes `state` and `metadata` as checkpoint `step` (atomic).

    Raises:
      OSError naming the step, the directory and the last complete
      checkpoint when the write fails (a full disk, lost permissions).
    """
    metadata = dict(metadata or {}, step=int(step))
    try:
      self._manager.save(
          int(step),
          args=ocp.args.Composite(**{
              STATE: ocp.args.StandardSave(state),
              METADATA: ocp.args.JsonSave(metadata),
          }),
          force=True)
      self._manager.wait_until_finished()
    except Exception as error:  # pylint: disable=broad-except
      try:
        steps = [s for s in self.all_steps() if s != int(step)]
        kept = (f"checkpoint {steps[-1]} is intact and stays the newest"
                if steps else "there is no earlier checkpoint")
      except Exception:  # pylint: disable=broad-except
        kept = "the earlier checkpoints were not touched"
      raise OSError(
          f"saving checkpoint {step} to {self.directory} failed "
          f"({_first_line(error)}); {kept}. A full disk or lost write "
          "permissions are the usual causes; fix that, then rerun the same "
          "command to resume.") from error

  def all_steps(self) -> list:
    """The steps of every complete checkpoint, oldest first."""
    self._manager.reload()
    return sorted(self._manager.all_steps())

  def latest_step(self) -> Optional[int]:
    """The newest complete checkpoint's step, or None if there is none."""
    steps = self.all_steps()
    return steps[-1] if steps else None

  def restore(self, template: Any, step: Optional[int] = None, *,
              hints=(), initial=()) -> tuple:
    """Restores checkpoint `step` (default: the latest).

    Args:
      template: a pytree with the structure, shapes and dtypes of the state
        (arrays or `jax.ShapeDtypeStruct`s), e.g. a freshly initialised state.
      step: which checkpoint; None for the latest.
      hints: (path prefix, text) pairs: a `StateMismatch` at an array under
        the prefix says the text too (the config field that sizes it).
      initial: paths of entries (``"states/objective"``) that keep the
        template's value, with a logged warning, when the checkpoint holds
        no array there (written before that component kept state); an
        entry the checkpoint holds arrays in is restored and checked as
        any other.

    Returns:
      (state, metadata).
    """
    if step is None:
      step = self.latest_step()
    if step is None:
      raise FileNotFoundError(f"no checkpoint in {self.directory}.")
    try:
      stored = self._manager.item_metadata(int(step))[STATE].tree
    except Exception as error:  # pylint: disable=broad-except
      raise CorruptCheckpoint(
          f"checkpoint {step} in {self.directory} cannot be restored: "
          f"{_first_line(error)}") from error
    given = template
    # Entries that start from the template: restored as the checkpoint's
    # empty ones, then put back.
    fresh = _entries_without_arrays(template, stored, initial)
    for path, empty in fresh.items():
      template = _replace_at(template, path.split("/"), empty)
    self._check_same_state(step, stored, template, hints)
    full, template = template, _without_new_empty_entries(template, stored)
    abstract = jax.tree.map(_abstract, template)
    try:
      restored = self._manager.restore(
          int(step),
          args=ocp.args.Composite(**{
              STATE: ocp.args.StandardRestore(abstract),
              METADATA: ocp.args.JsonRestore(),
          }))
    except Exception as error:  # pylint: disable=broad-except
      raise CorruptCheckpoint(
          f"checkpoint {step} in {self.directory} cannot be restored: "
          f"{_first_line(error)}") from error
    state = _with_entries_of(restored[STATE], full)
    for path in fresh:
      logging.warning(
          "checkpoint %s in %s holds no %s (written before that component "
          "kept state): it starts from its initial state.", step,
          self.directory, path)
      state = _replace_at(state, path.split("/"),
                          _entry_at(given, path.split("/")))
    return state, dict(restored[METADATA])

  def _check_same_state(self, step: int, stored, template, hints=()
                        ) -> None:
    """Raises StateMismatch naming the first array whose path or shape
    differs between checkpoint `step` (orbax's metadata) and `template`."""
    want, have = _leaf_shapes(template), _leaf_shapes(stored)
    problem = None
    for path in sorted(set(want) | set(have)):
      if path not in have:
        problem = f"has no {path} (this config's is {want[path]})"
      elif path not in want:
        problem = f"holds {path} {have[path]}, which this config lacks"
      elif tuple(want[path]) != tuple(have[path]):
        problem = (f"holds {path} of shape {tuple(have[path])}; this config "
                   f"makes it {tuple(want[path])}")
      if problem:
        problem += "".join(f" ({text})" for prefix, text in hints
                           if path.startswith(prefix))
        raise StateMismatch(
            f"checkpoint {step} in {self.directory} {problem}: the config "
            "changed since the checkpoint was written. Resume with the "
            "config it saved (experiments.evaluate and "
            "saved_runs.restore_config read it), or train in a new "
            "--workdir.")

  def restore_newest(self, template: Any, *, on_corrupt: str = "error",
                     hints=(), initial=()) -> Optional[tuple]:
    """(step, state, metadata) of the newest checkpoint, or None if none.

    A newest checkpoint that cannot be restored (twice: a passing storage
    error is not corruption) is an error naming it and the newest one that
    can; with ``on_corrupt="previous"`` the unreadable ones newer than that
    are moved to ``<directory>.corrupt/`` (on process 0) with a warning,
    and that one is restored. When none can be restored nothing is moved.
    On several processes a checkpoint counts as readable only if every
    process read it, so all resume from the same one. `hints`, `initial`:
    see `restore`.

    Raises:
      CorruptCheckpoint: as above.
      StateMismatch: a readable checkpoint of another config's state.
    """
    if on_corrupt not in ON_CORRUPT:
      raise ValueError(f"on_corrupt={on_corrupt!r}; choose one of "
                       f"{', '.join(ON_CORRUPT)}.")
    unreadable = []  # (step, error), newest first
    for step in reversed(self.all_steps()):
      restored, error = None, None
      for _ in range(2):
        try:
          restored = self.restore(template, step, hints=hints,
                                  initial=initial)
          break
        except CorruptCheckpoint as e:
          error = e
      if not _everyone(restored is not None):
        unreadable.append((step, error or CorruptCheckpoint(
            f"checkpoint {step} in {self.directory} cannot be restored on "
            "another process")))
        continue
      state, metadata = restored
      if unreadable and on_corrupt == "error":
        bad = ", ".join(str(s) for s, _ in unreadable)
        raise CorruptCheckpoint(
            f"{unreadable[0][1]}. The newest readable checkpoint is {step}. "
            "To resume from it, rerun with "
            "--config.checkpoint.on_corrupt=previous (the unreadable "
            f"checkpoint(s) {bad} are then moved to "
            f"{self.directory}{CORRUPT_SUFFIX}/, not deleted)."
        ) from unreadable[0][1]
      for bad, error in unreadable:
        moved = self.move_aside(bad)
        logging.warning("%s; moved it to %s and resuming from checkpoint %d.",
                        error, moved, step)
      return step, state, metadata
    if unreadable:
      newest, error = unreadable[0]
      raise CorruptCheckpoint(
          f"{error}. None of the {len(unreadable)} checkpoints in "
          f"{self.directory} can be restored with this config; if the config "
          "changed since they were written, train in a new --workdir (or "
          "move this one aside to start over).") from error
    return None

  def move_aside(self, step: int) -> str:
    """Moves checkpoint `step` to ``<directory>.corrupt/<step>-<time>``
    (process 0 renames, every process waits); returns the new path."""
    target = epath.Path(self.directory + CORRUPT_SUFFIX) / (
        f"{step}-{time.strftime('%Y%m%d-%H%M%S')}")
    if jax.process_index() == 0:
      target.parent.mkdir(parents=True, exist_ok=True)
      (epath.Path(self.directory) / str(step)).rename(target)
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
      multihost_utils.sync_global_devices(f"move_aside_{step}")
    self._manager.reload()
    return str(target)

  def metadata(self, step: Optional[int] = None) -> dict:
    """The JSON metadata of checkpoint `step` (default: the latest) alone."""
    if step is None:
      step = self.latest_step()
    if step is None:
      raise FileNotFoundError(f"no checkpoint in {self.directory}.")
    try:
      restored = self._manager.restore(
          int(step), args=ocp.args.Composite(**{
              METADATA: ocp.args.JsonRestore()}))
    except Exception as error:  # pylint: disable=broad-except
      raise CorruptCheckpoint(
          f"checkpoint {step} in {self.directory} cannot be read: "
          f"{_first_line(error)}") from error
    return dict(restored[METADATA])

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()


def _everyone(flag: bool) -> bool:
  """Whether `flag` holds on every process (an all-gather; every process
  must call it together)."""
  if jax.process_count() == 1:
    return flag
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return bool(np.all(multihost_utils.process_allgather(
      np.asarray([flag], np.int32))))


def _without_new_empty_entries(template, stored):
  """`template` less the dict entries that hold no array and that checkpoint
  metadata `stored` lacks: a stage added to the pipeline since the
  checkpoint was written (its state empty in this config) must not make the
  checkpoint unreadable. Entries with arrays are `_check_same_state`'s."""
  if isinstance(template, dict) and isinstance(stored, dict):
    return {k: _without_new_empty_entries(v, stored[k]) if k in stored else v
            for k, v in template.items()
            if k in stored or jax.tree.leaves(v)}
  if hasattr(template, "_fields") and isinstance(stored, dict):
    return template._replace(**{
        f: _without_new_empty_entries(getattr(template, f), stored[f])
        for f in template._fields if f in stored})
  return template


def _with_entries_of(restored, full):
  """`restored` with the dict entries of `full` it lacks put back (the
  empty ones `_without_new_empty_entries` left out)."""
  if isinstance(full, dict) and isinstance(restored, dict):
    return {k: _with_entries_of(restored[k], v) if k in restored else v
            for k, v in full.items()}
  if hasattr(full, "_fields") and hasattr(restored, "_fields"):
    return restored._replace(**{
        f: _with_entries_of(getattr(restored, f), getattr(full, f))
        for f in full._fields})
  return restored


def _entry_at(tree, keys):
  """The node of `tree` (dicts, NamedTuples) at `keys`; None if absent."""
  for key in keys:
    if isinstance(tree, dict):
      tree = tree.get(key)
    elif hasattr(tree, "_fields"):
      tree = getattr(tree, key, None)
    else:
      return None
  return tree


def _replace_at(tree, keys, value):
  """`tree` with its node at `keys` (an existing path) set to `value`."""
  if not keys:
    return value
  head, rest = keys[0], keys[1:]
  if isinstance(tree, dict):
    return {**tree, head: _replace_at(tree[head], rest, value)}
  return tree._replace(**{head: _replace_at(getattr(tree, head), rest,
                                            value)})


def _entries_without_arrays(template, stored, paths) -> dict:
  """{path: the checkpoint's empty node there, or () where it has none} for
  each of `paths` where `template` holds arrays and checkpoint metadata
  `stored` holds none."""
  out = {}
  for path in paths:
    keys = path.split("/")
    mine, theirs = _entry_at(template, keys), _entry_at(stored, keys)
    if jax.tree.leaves(mine) and not jax.tree.leaves(theirs):
      out[path] = () if theirs is None else theirs
  return out


def _leaf_shapes(tree) -> dict:
  """"opt_state/1/mu/w" -> shape for every array of a state, or of orbax's
  metadata of one (whose nodes are dicts where the state's are tuples)."""
  def name(key):
    for attr in ("name", "key", "idx"):
      if hasattr(key, attr):
        return str(getattr(key, attr))
    return str(key)
  return {"/".join(map(name, path)): leaf.shape
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def check_writable(directory: str, *, needed_bytes: int = 0) -> None:
  """Raises OSError naming `directory` and the fix unless a file can be
  written there and, for a local path, `needed_bytes` are free (a
  checkpoint's size): an unwritable or full disk found before any compute,
  not at the first save. Creates the directory."""
  if "://" in directory:  # a bucket: orbax reports its own errors
    return
  probe = os.path.join(directory, f".write_probe-{uuid.uuid4().hex}")
  try:
    os.makedirs(directory, exist_ok=True)
    with open(probe, "wb") as f:
      f.write(b"\0" * 4096)
      f.flush()
      os.fsync(f.fileno())
  except OSError as error:
    raise OSError(
        f"cannot write to {directory} ({_first_line(error)}); fix its "
        "permissions or free space, or give another --workdir.") from error
  finally:
    if os.path.exists(probe):
      os.remove(probe)
  free = shutil.disk_usage(directory).free
  if free < needed_bytes:
    raise OSError(
        f"{directory} has {free / 2**30:.2f} GiB free, and a checkpoint "
        f"needs about {needed_bytes / 2**30:.2f} GiB; free space or give "
        "another --workdir.")


def _abstract(x):
  return jax.ShapeDtypeStruct(x.shape, x.dtype,
                              sharding=getattr(x, "sharding", None))
