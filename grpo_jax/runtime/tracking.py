"""Weights & Biases logging, beside metrics.jsonl and TensorBoard.

Optional: ``--config.metrics.wandb=True`` (the ``wandb`` extra installs
the package). The run logs its config once and then every step's record,
the same one metrics.jsonl holds, at that step. Only the process that writes
metrics.jsonl (process 0) logs. A run resumed in the same workdir continues
the same W&B run (its id is kept in ``workdir/wandb_run_id``); a step it
logs again (one after the last checkpoint) W&B ignores, its steps only
increasing, where metrics.jsonl drops the old record instead.

W&B's own files go under the workdir unless ``WANDB_DIR`` is set; the mode
(online, offline, disabled) is ``metrics.wandb_mode``, or W&B's own choice
(``WANDB_MODE``, then online) when that is "".
"""

import importlib.util
import os
import uuid
from typing import Mapping, NamedTuple, Optional

# W&B's modes; "" leaves the choice to W&B (``WANDB_MODE``, then online).
MODES = ("", "online", "offline", "disabled")
RUN_ID_FILE = "wandb_run_id"  # in the workdir: a resumed run logs to it


class Settings(NamedTuple):
  """What `WandbRun` passes to ``wandb.init``; "" leaves W&B's default."""
  project: str = "grpo_jax"
  entity: str = ""
  name: str = ""
  mode: str = ""


def settings_from_config(metrics_config) -> Optional[Settings]:
  """The `Settings` of ``config.metrics``; None when ``metrics.wandb`` is
  off."""
  if not metrics_config.get("wandb", False):
    return None
  return Settings(project=metrics_config.wandb_project,
                  entity=metrics_config.wandb_entity,
                  name=metrics_config.wandb_name,
                  mode=metrics_config.wandb_mode)


def is_installed() -> bool:
  """True when the wandb package is installed."""
  return importlib.util.find_spec("wandb") is not None


def run_id(workdir: str) -> str:
  """The W&B run id of the run in `workdir`: the one saved there, or a new
  one, saved (so that a resumed run continues the same W&B run)."""
  path = os.path.join(workdir, RUN_ID_FILE)
  if os.path.exists(path):
    with open(path) as f:
      saved = f.read().strip()
    if saved:
      return saved
  new = uuid.uuid4().hex[:12]
  with open(path + ".tmp", "w") as f:
    f.write(new + "\n")
  os.replace(path + ".tmp", path)
  return new


class WandbRun:
  """One W&B run: ``log(step, record)`` per step, ``close()`` at the end.

  Args:
    workdir: the run's directory (the run id's file; W&B's files unless
      ``WANDB_DIR`` is set).
    settings: project, entity, name and mode.
    config: the run's config as a dict, logged once.
  """

  def __init__(self, workdir: str, settings: Settings,
               config: Optional[Mapping] = None):
    import wandb  # pylint: disable=g-import-not-at-top
    # WANDB_DIR and WANDB_MODE as they are now: W&B reads the environment
    # once per process, and a process may train several runs (a notebook).
    self._run = wandb.init(
        project=settings.project or None, entity=settings.entity or None,
        name=settings.name or os.path.basename(os.path.abspath(workdir)),
        mode=settings.mode or os.environ.get("WANDB_MODE") or None,
        dir=os.environ.get("WANDB_DIR") or workdir,
        id=run_id(workdir), resume="allow", config=dict(config or {}),
        # The run's own output stays the terminal's: no wrapper around this
        # process's stdout and stderr.
        settings=wandb.Settings(console="off"))

  @property
  def directory(self) -> str:
    """Where W&B writes this run's files (``.../run-<id>.wandb``)."""
    return self._run.dir

  def log(self, step: int, record: Mapping[str, float]) -> None:
    """Logs one step's record (`metrics.to_record`; its "step" is the
    step)."""
    self._run.log({k: v for k, v in record.items() if k != "step"},
                  step=int(step))

  def close(self, failed: bool = False) -> None:
    """Finishes the run; a run that ended on an error is marked failed."""
    self._run.finish(exit_code=1 if failed else 0)
