"""A training run's end in words, as `experiments.train` prints it: how far
the run got (complete, stopped, or already complete before this call), its
last figures, where its outputs are, and the commands that evaluate and
export it. Read from the workdir (metrics.jsonl, the files present), so it
says the same after a rerun as after the run itself.
"""

import math
import os
import shlex
from typing import Optional

from grpo_jax.runtime import metrics as metrics_lib

# (label, metrics.jsonl name): the last step's figures shown.
STEP_FIGURES = (("reward", "reward/total"), ("accuracy", "accuracy"))
HELD_OUT = "eval/greedy_accuracy"


def headline(workdir: str, *, step: int, num_steps: int, trained: int) -> str:
  """One line: complete, already complete (nothing trained), or stopped.

  Args:
    workdir: the run directory.
    step: the run's steps completed now (its newest checkpoint's step).
    num_steps: ``config.train.num_steps``.
    trained: the steps this call trained.
  """
  if step >= num_steps and not trained:
    return (f"{workdir}: already complete at step {step}; nothing to do; "
            "raise --config.train.num_steps to continue.")
  if step >= num_steps:
    return (f"{workdir}: complete at step {step} of {num_steps} "
            f"({trained} trained now).")
  return (f"{workdir}: stopped at step {step} of {num_steps}; rerun the "
          "same command to resume.")


def figures(records) -> list:
  """The last record's reward and accuracy, and the latest held-out greedy
  accuracy with its step, as indented lines ([] for no records). Steps
  count as the checkpoints do: record ``step`` s ends step s + 1."""
  if not records:
    return []
  last = records[-1]
  shown = [f"{label} {_number(last[name])}" for label, name in STEP_FIGURES
           if name in last]
  lines = [f"  last step ({last['step'] + 1}): {', '.join(shown)}"] \
      if shown else []
  evaluated = [r for r in records if HELD_OUT in r]
  if evaluated:
    lines.append(f"  held-out greedy accuracy: "
                 f"{_number(evaluated[-1][HELD_OUT])} (after step "
                 f"{evaluated[-1]['step'] + 1})")
  return lines


def _number(value) -> str:
  if isinstance(value, float) and math.isfinite(value):
    return f"{value:.3g}"
  return str(value)  # "nan" as metrics.jsonl keeps it


def outputs(workdir: str, ckpt_dir: str, *, step: int) -> list:
  """Where each output is (those present), then the commands that
  evaluate and export the newest checkpoint (when there is one)."""
  rows = []
  for label, name in (("metrics", metrics_lib.METRICS_FILE),
                      ("curves", metrics_lib.PLOT_FILE),
                      ("config", metrics_lib.CONFIG_FILE)):
    path = os.path.join(workdir, name)
    if os.path.exists(path):
      rows.append((label, path))
  if step:
    rows.append(("checkpoints", f"{ckpt_dir} (newest: step {step})"))
  tensorboard = os.path.join(workdir, "tensorboard")
  if os.path.isdir(tensorboard):
    rows.append(("TensorBoard", f"tensorboard --logdir {shlex.quote(tensorboard)}"))
  if step:
    run = shlex.quote(workdir)
    rows.append(("evaluate", f"python -m experiments.evaluate "
                 f"--checkpoint={run}"))
    rows.append(("export", f"python -m experiments.export --checkpoint={run} "
                 f"--out={shlex.quote(os.path.join(workdir, 'hf'))}"))
  return [f"  {label:<12} {text}" for label, text in rows]


def describe(workdir: str, ckpt_dir: str, *, step: int, num_steps: int,
             trained: int, records: Optional[list] = None) -> str:
  """The summary: `headline`, `figures` (of `records`, default the
  workdir's metrics.jsonl) and `outputs`, one line each."""
  if records is None:
    records = metrics_lib.read(os.path.join(workdir, metrics_lib.METRICS_FILE))
  return "\n".join(
      [headline(workdir, step=step, num_steps=num_steps, trained=trained)]
      + figures(records) + outputs(workdir, ckpt_dir, step=step))
