"""Measurements to disk: metrics.jsonl, TensorBoard events, and the run's plot.

One record per training step: ``{"step": s, name: float, ...}``. On resume,
records at or after the resumed step are dropped first, so the file of a
resumed run reads like the file of an uninterrupted one.
"""

import json
import math
import os
from typing import Iterable, Mapping, Optional

import numpy as np

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "curves.png"
# What the run's plot shows, first match wins per panel.
PLOT_PANELS = (
    ("reward", ("reward/total", "reward")),
    ("accuracy", ("accuracy",)),
    ("completion length", ("completion_length/mean",)),
    ("KL to reference", ("kl", "approx_kl")),
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


def to_record(step: int, measurements: Mapping[str, float]) -> dict:
  """``{"step": step, name: float, ...}``, names sorted."""
  record = {"step": int(step)}
  for name, value in sorted(measurements.items()):
    record[name] = to_float(value)
  return record


class MetricsWriter:
  """Appends step records to ``workdir/metrics.jsonl`` and TensorBoard.

  Args:
    workdir: the run's directory.
    start_step: the first step this writer will log; older records stay,
      newer ones (written before a crash, after the last checkpoint) go.
    tensorboard: also write TensorBoard events under ``workdir/tensorboard``.
  """

  def __init__(self, workdir: str, *, start_step: int = 0,
               tensorboard: bool = True):
    os.makedirs(workdir, exist_ok=True)
    self.workdir = workdir
    self.path = os.path.join(workdir, METRICS_FILE)
    kept = [r for r in read(self.path) if r["step"] < start_step]
    tmp = self.path + ".tmp"
    with open(tmp, "w") as f:
      for record in kept:
        f.write(json.dumps(record) + "\n")
    os.replace(tmp, self.path)
    self._file = open(self.path, "a")
    self._tb = None
    if tensorboard:
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
      self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

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
    return record

  def close(self) -> None:
    self._file.close()
    if self._tb is not None:
      self._tb.close()


def plot(records: Iterable[Mapping], path: str,
         panels=PLOT_PANELS) -> Optional[str]:
  """Draws reward, accuracy, length and KL against step into a PNG.

  Returns the path written, or None when there is nothing to plot.
  """
  records = list(records)
  if not records:
    return None
  # A bare Figure, not pyplot: the process's backend (a notebook's inline
  # one) stays as it is.
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=(4 * len(panels), 3.2))
  axes = fig.subplots(1, len(panels))
  steps = [r["step"] for r in records]
  for ax, (title, candidates) in zip(np.atleast_1d(axes), panels):
    key = next((k for k in candidates if any(k in r for r in records)), None)
    ax.set_title(title)
    ax.set_xlabel("step")
    if key is None:
      ax.text(0.5, 0.5, "not measured", ha="center", va="center",
              transform=ax.transAxes)
      continue
    values = [float(r.get(key, float("nan"))) for r in records]
    ax.plot(steps, values)
    ax.set_ylabel(key)
    ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=80)
  return path
