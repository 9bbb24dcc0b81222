"""Measurements to disk: metrics.jsonl, TensorBoard events, and the run's plot;
optionally to Weights & Biases (`runtime.tracking`).

One record per training step: ``{"step": s, name: float, ...}``; a step
followed by a held-out evaluation also holds its ``eval/*`` figures. On resume,
records at or after the resumed step are dropped first, so the file of a
resumed run reads like the file of an uninterrupted one.
"""

import fnmatch
import json
import math
import os
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from grpo_jax.runtime import tracking

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "curves.png"
CONFIG_FILE = "config.json"  # the run's config, as `train` ran it
# What the run's plot shows: per panel (title, candidates), the first
# candidate that some record holds; a candidate with "*" is a pattern
# (fnmatch) and draws every name it matches (the held-out figures
# eval/greedy_accuracy, eval/pass@k, ...). A candidate (name, title) titles
# the panel itself when it is the one drawn.
PLOT_PANELS = (
    ("reward", ("reward/total", "reward")),
    ("accuracy", ("accuracy",)),
    ("held-out accuracy", ("eval/*",)),
    ("completion length", ("completion_length/mean",)),
    # "kl" is the KL term's (runs with kl.beta > 0); without one, the
    # objective's estimate of the KL to the policy that sampled the batch.
    ("KL to reference", ("kl", ("approx_kl", "KL to old policy (approx)"))),
)


def to_float(value) -> float:
  """A scalar array or number as a plain float."""
  return float(np.asarray(value).reshape(()))


def read(path: str) -> list:
  """The records of a metrics.jsonl file, in order ([] if it is missing)."""
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def write_atomically(path: str, text: str) -> None:
  """Writes `text` to `path` through a temporary file: a crash leaves the
  old file or the new one, never a part."""
  with open(path + ".tmp", "w") as f:
    f.write(text)
  os.replace(path + ".tmp", path)


def write_config(workdir: str, config_json: str) -> None:
  """Writes ``workdir/config.json`` (atomically)."""
  write_atomically(os.path.join(workdir, CONFIG_FILE), config_json)


def read_config(workdir: str) -> Optional[dict]:
  """The config a run in `workdir` ran with, as a dict (None if it has no
  ``config.json``)."""
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def to_record(step: int, measurements: Mapping[str, float]) -> dict:
  """``{"step": step, name: float, ...}``, names sorted."""
  record = {"step": int(step)}
  for name, value in sorted(measurements.items()):
    record[name] = to_float(value)
  return record


class MetricsWriter:
  """Appends step records to ``workdir/metrics.jsonl``, TensorBoard and
  W&B.

  Args:
    workdir: the run's directory.
    start_step: the first step this writer will log; older records stay,
      newer ones (written before a crash, after the last checkpoint) go.
    tensorboard: also write TensorBoard events under ``workdir/tensorboard``.
    wandb: also log each record to W&B (`tracking.WandbRun`); None: off.
    config: the run's config as a dict, logged to W&B once.
  """

  def __init__(self, workdir: str, *, start_step: int = 0,
               tensorboard: bool = True,
               wandb: Optional[tracking.Settings] = None,
               config: Optional[Mapping] = None):
    os.makedirs(workdir, exist_ok=True)
    self.workdir = workdir
    self.path = os.path.join(workdir, METRICS_FILE)
    kept = [r for r in read(self.path) if r["step"] < start_step]
    write_atomically(self.path, "".join(json.dumps(r) + "\n" for r in kept))
    self._file = open(self.path, "a")
    self._tb, self.wandb = None, None
    try:
      if tensorboard:
        from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
        self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))
      if wandb is not None:
        self.wandb = tracking.WandbRun(workdir, wandb, config)
    except BaseException:  # a sink that cannot start: close the others
      self.close(failed=True)
      raise

  def write(self, step: int, measurements: Mapping[str, float]) -> dict:
    """Logs one step's scalars; returns the record written."""
    record = to_record(step, measurements)
    # json has no NaN; keep the line valid and the fact visible.
    line = {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v))
            for k, v in record.items()}
    self._file.write(json.dumps(line) + "\n")
    self._file.flush()
    if self._tb is not None:
      for name, value in record.items():
        if name != "step":
          self._tb.add_scalar(name, value, int(step))
    if self.wandb is not None:
      self.wandb.log(step, record)
    return record

  def close(self, failed: bool = False) -> None:
    """Closes every sink; W&B marks a `failed` run (one that ended on an
    error) as such."""
    self._file.close()
    if self._tb is not None:
      self._tb.close()
    if self.wandb is not None:
      self.wandb.close(failed=failed)


def panel_keys(records: Sequence[Mapping], candidates: Sequence) -> list:
  """The names a panel draws (`choose_panel`)."""
  return choose_panel(records, "", candidates)[1]


def choose_panel(records: Sequence[Mapping], title: str,
                 candidates: Sequence) -> tuple:
  """(title, names) of a panel: the names of the first candidate that some
  record holds (a "*" pattern: every name it matches, sorted), and `title`
  or that candidate's own (a (name, title) candidate); (title, []) if
  none."""
  names = sorted({k for r in records for k in r})
  for candidate in candidates:
    pattern, own = ((candidate, title) if isinstance(candidate, str)
                    else candidate)
    matched = (fnmatch.filter(names, pattern) if "*" in pattern
               else [pattern] if pattern in names else [])
    if matched:
      return own, matched
  return title, []


def plot(records: Iterable[Mapping], path: str,
         panels=PLOT_PANELS) -> Optional[str]:
  """Draws reward, accuracy, held-out accuracy, length and KL against step
  into a PNG (`figure`).

  Returns the path written, or None when there is nothing to plot.
  """
  records = list(records)
  if not records:
    return None
  fig = figure(records, panels)
  fig.savefig(path, dpi=80)
  return path


def figure(records: Sequence[Mapping], panels=PLOT_PANELS):
  """A matplotlib Figure of `panels` against step, one panel each. A
  measurement only some steps hold (the periodic held-out evaluation) is
  drawn at those steps, with markers."""
  # A bare Figure, not pyplot: the process's backend (a notebook's inline
  # one) stays as it is.
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=(4 * len(panels), 3.2))
  axes = fig.subplots(1, len(panels))
  for ax, (title, candidates) in zip(np.atleast_1d(axes), panels):
    title, keys = choose_panel(records, title, candidates)
    ax.set_title(title)
    ax.set_xlabel("step")
    if not keys:
      ax.text(0.5, 0.5, "not measured", ha="center", va="center",
              transform=ax.transAxes)
      continue
    for key in keys:
      held = [r for r in records if key in r]
      sparse = len(held) < len(records)
      ax.plot([r["step"] for r in held], [float(r[key]) for r in held],
              marker="o" if sparse else None, label=key)
    if len(keys) > 1:
      ax.legend(fontsize="small")
    else:
      ax.set_ylabel(keys[0])
    ax.grid(alpha=0.3)
  fig.tight_layout()
  return fig
