"""Save and restore the training state with orbax, and resume a run.

A checkpoint is one orbax step directory holding two items: ``state`` (the
`TrainState` pytree of arrays) and ``metadata`` (a small JSON dict: the config,
the step, anything the loop wants to read back without the arrays).

Saves are atomic: orbax writes into a temporary directory
(``<step>.orbax-checkpoint-tmp-*``) and renames it once every file is on disk,
and only a renamed directory counts as a checkpoint. A process killed in the
middle of a save leaves a temporary directory that `latest_step` ignores, so
the previous checkpoint stays the latest one.
"""

import os
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp

STATE = "state"
METADATA = "metadata"


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
        self.directory, options=options, item_names=(STATE, METADATA))

  def save(self, step: int, state: Any, metadata: Optional[dict] = None
           ) -> None:
    """Writes `state` and `metadata` as checkpoint `step` (atomic)."""
    metadata = dict(metadata or {}, step=int(step))
    self._manager.save(
        int(step),
        args=ocp.args.Composite(**{
            STATE: ocp.args.StandardSave(state),
            METADATA: ocp.args.JsonSave(metadata),
        }),
        force=True)
    self._manager.wait_until_finished()

  def all_steps(self) -> list:
    """The steps of every complete checkpoint, oldest first."""
    self._manager.reload()
    return sorted(self._manager.all_steps())

  def latest_step(self) -> Optional[int]:
    """The newest complete checkpoint's step, or None if there is none."""
    steps = self.all_steps()
    return steps[-1] if steps else None

  def restore(self, template: Any, step: Optional[int] = None
              ) -> tuple:
    """Restores checkpoint `step` (default: the latest).

    Args:
      template: a pytree with the structure, shapes and dtypes of the state
        (arrays or `jax.ShapeDtypeStruct`s), e.g. a freshly initialised state.
      step: which checkpoint; None for the latest.

    Returns:
      (state, metadata).
    """
    if step is None:
      step = self.latest_step()
    if step is None:
      raise FileNotFoundError(f"no checkpoint in {self.directory}.")
    abstract = jax.tree.map(_abstract, template)
    restored = self._manager.restore(
        int(step),
        args=ocp.args.Composite(**{
            STATE: ocp.args.StandardRestore(abstract),
            METADATA: ocp.args.JsonRestore(),
        }))
    return restored[STATE], dict(restored[METADATA])

  def metadata(self, step: Optional[int] = None) -> dict:
    """The JSON metadata of checkpoint `step` (default: the latest) alone."""
    if step is None:
      step = self.latest_step()
    if step is None:
      raise FileNotFoundError(f"no checkpoint in {self.directory}.")
    restored = self._manager.restore(
        int(step), args=ocp.args.Composite(**{
            METADATA: ocp.args.JsonRestore()}))
    return dict(restored[METADATA])

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()


def _abstract(x):
  return jax.ShapeDtypeStruct(x.shape, x.dtype,
                              sharding=getattr(x, "sharding", None))
