"""Reading finished runs: the comparison task's configs, a run's last
held-out accuracy, the measures its tables are read from (`COLUMNS`, one
run's step records -> a number), and several runs' curves overlaid in one
plot (`overlay`). Used by `experiments.compare` and the reproductions
(`experiments.reproduce`); no flags, so that both can import it.
"""

import importlib
import json
import os
import re
from typing import Callable, Mapping, NamedTuple, Optional, Sequence

import numpy as np

from grpo_jax import config as config_lib
from grpo_jax import evaluation
from grpo_jax.runtime import metrics
from grpo_jax import train as train_lib

ACCURACY = "eval/greedy_accuracy"
# Config fields that do not change what a run computes: left out where
# runs are matched by their config.json (`run_identity`).
BOOKKEEPING = ("seed", "checkpoint.", "train.compilation_cache_dir",
               "model.revision")
# The overlay's panels: (title, metric); "ratio_spread" is ratio_max -
# ratio_min (`with_ratio_spread`).
OVERLAY_PANELS = (
    ("reward", "reward/total"),
    ("sampled accuracy", "accuracy"),
    ("held-out greedy accuracy", ACCURACY),
    ("completion length", "completion_length/mean"),
    ("importance ratio max - min", "ratio_spread"),
    ("clip fraction", "clip_fraction"),
    ("entropy", "entropy"),
)


def comparison_config(name: str, scale: str = "own"):
  """configs/<name>.py on the comparison task, at its own scale or the
  quickstart's (`scale`), evaluated after its last step only."""
  config = importlib.import_module(f"configs.{name}").get_config()
  if scale == "quickstart":
    config = config_lib.use_quickstart_scale(config)
  config = config_lib.use_comparison_task(config)
  config.eval.every = config.train.num_steps
  train_lib.validate(config)
  return config


def last_accuracy(workdir: str):
  """(steps done, greedy accuracy) at the last evaluation in `workdir`'s
  metrics, or None; a record's step counts from 0."""
  records = metrics.read(os.path.join(workdir, metrics.METRICS_FILE))
  evaluated = [r for r in records if ACCURACY in r]
  if not evaluated:
    return None
  return evaluated[-1]["step"] + 1, evaluated[-1][ACCURACY]


def train_unless_finished(config, workdir: str) -> tuple:
  """(steps, held-out greedy accuracy) of the run of `config` in
  `workdir`, trained (or resumed) first unless it has evaluated after its
  last step; SystemExit if a stop signal ended it early (its checkpoint
  is saved: the same command resumes it)."""
  done = last_accuracy(workdir)
  if done is None or done[0] < config.train.num_steps:
    print(f"training in {workdir}", flush=True)
    train_lib.train(config, workdir)
    done = last_accuracy(workdir)
  if done is None or done[0] < config.train.num_steps:
    raise SystemExit(f"{workdir}: stopped before step "
                     f"{config.train.num_steps}; rerun the same command to "
                     "continue")
  return done


def run_identity(config: Mapping) -> dict:
  """A run's config (a config.json's dict) as flat ``a.b: value`` pairs,
  without the seed and the `BOOKKEEPING` fields: two runs with equal
  identities compute the same thing up to their seed."""
  def flat(tree, prefix=""):
    for key, value in tree.items():
      if isinstance(value, Mapping):
        yield from flat(value, f"{prefix}{key}.")
      else:
        yield f"{prefix}{key}", value
  return {k: v for k, v in flat(config)
          if not any(k == b or (b.endswith(".") and k.startswith(b))
                     for b in BOOKKEEPING)}


def baseline_key(config) -> str:
  """What the base model's held-out accuracy depends on: the task, its
  prompts (the shapers' instructions) and the evaluation's settings; runs
  that share it share one "before" measurement."""
  evaluation_settings = config.eval.to_dict()
  evaluation_settings.pop("every")
  return json.dumps(dict(data=config.data.to_dict(),
                         shapers=evaluation.prompt_shapers(config),
                         max_new_tokens=config.rollout.max_new_tokens,
                         eval=evaluation_settings), sort_keys=True,
                    default=str)


def with_ratio_spread(records: Sequence[dict]) -> list:
  """The records with ``ratio_spread`` = ratio_max - ratio_min where both
  are logged."""
  return [dict(r, ratio_spread=r["ratio_max"] - r["ratio_min"])
          if "ratio_max" in r and "ratio_min" in r else r for r in records]


def _mean(records, key, first: int = 0, last: int = 0):
  """The mean of `key` over `records` that log it (the first or the last
  few of them), None if none does."""
  values = [float(r[key]) for r in records if key in r]
  values = values[:first] if first else values[-last:] if last else values
  return float(np.mean(values)) if values else None


class Column(NamedTuple):
  """A table column: its header, what one run's step records give, and
  the decimals its cells show."""
  header: str
  measure: Callable[[list], Optional[float]]
  decimals: int = 3


COLUMNS: Mapping[str, Column] = {
    "heldout": Column("held-out greedy, last step",
                      lambda rs: _mean(rs, ACCURACY, last=1)),
    "accuracy_last10": Column("sampled accuracy, last 10 steps",
                              lambda rs: _mean(rs, "accuracy", last=10)),
    # Sampling, scoring and updating (the first step's compilation
    # included); evaluations aside. Wall time: it counts only on a machine
    # that ran nothing else.
    "train_s": Column("training time (s)", lambda rs: sum(
        r["time/rollout_s"] + r["time/update_s"] for r in rs), 0),
    "rollouts": Column("rollouts scored", lambda rs: sum(
        r.get("reward/scored", 0) for r in rs), 0),
    "nonzero_share": Column(
        "nonzero-gradient share",
        lambda rs: _mean(rs, "rollout/nonzero_gradient_share")),
    "collapse": Column("collapse rate (verifier rewards)",
                       lambda rs: _mean(rs, "advantage/collapse_rate")),
    "length_first5": Column(
        "length, first 5 steps",
        lambda rs: _mean(rs, "completion_length/mean", first=5), 1),
    "length_last5": Column(
        "length, last 5 steps",
        lambda rs: _mean(rs, "completion_length/mean", last=5), 1),
    "clip_fraction": Column("clip fraction",
                            lambda rs: _mean(rs, "clip_fraction")),
    "ratio_spread": Column("ratio max - min", lambda rs: _mean(
        with_ratio_spread(rs), "ratio_spread")),
    "ratio_spread_max": Column("largest ratio max - min", lambda rs: max(
        (r["ratio_spread"] for r in with_ratio_spread(rs)
         if "ratio_spread" in r), default=None)),
    "ratio_var": Column("ratio variance", lambda rs: _mean(rs, "ratio_var"),
                        4),
    "entropy_last10": Column("entropy, last 10 steps",
                             lambda rs: _mean(rs, "entropy", last=10)),
    "grad_norm": Column("gradient norm", lambda rs: _mean(rs, "grad_norm")),
    "abs_advantage": Column("mean absolute advantage",
                            lambda rs: _mean(rs, "advantage/abs_mean")),
}


# What `experiments.compare` prints beside each run's accuracy: the
# data-strategy claims' rollouts, signal and lengths, and the objective
# claims' clipped share and ratio spread (None where no step logs them).
SUMMARY = ("rollouts", "nonzero_share", "length_first5", "length_last5",
           "clip_fraction", "ratio_spread")


def run_summary(workdir: str, columns: Sequence[str] = SUMMARY) -> dict:
  """`columns` of `COLUMNS` measured over the run's metrics records."""
  records = metrics.read(os.path.join(workdir, metrics.METRICS_FILE))
  return {name: COLUMNS[name].measure(records) for name in columns}


def step_band(runs: Sequence[Sequence[dict]], key: str, smooth: int = 1):
  """(steps, mean, low, high) of `key` over `runs` (each a list of step
  records) at the steps every run logs it; each run's values first
  averaged over a trailing window of `smooth` logged steps. None where no
  step is logged by all of them (or `runs` is empty)."""
  if not runs:
    return None
  per_run = []
  for records in runs:
    logged = [(r["step"], float(r[key])) for r in records if key in r]
    values = np.array([v for _, v in logged])
    if smooth > 1 and len(values):
      window = np.ones(smooth)
      values = (np.convolve(values, window)[:len(values)]
                / np.convolve(np.ones(len(values)), window)[:len(values)])
    per_run.append(dict(zip([s for s, _ in logged], values)))
  steps = sorted(set.intersection(*(set(v) for v in per_run)))
  if not steps:
    return None
  table = np.array([[values[s] for s in steps] for values in per_run])
  return (np.array(steps), table.mean(0), table.min(0), table.max(0))


def overlay(curves: Mapping[str, Sequence[Sequence[dict]]], path: str,
            panels=OVERLAY_PANELS, smooth: int = 5) -> str:
  """Draws one line per label of `curves` (label -> its runs' step records)
  into a PNG at `path`: the mean over the label's runs, a band from their
  lowest to their highest value where there are several. Metrics logged at
  every step are averaged over `smooth` steps first; sparse ones (the
  held-out evaluation) are drawn as points, the range as error bars."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  curves = {label: [with_ratio_spread(r) for r in runs]
            for label, runs in curves.items() if runs}
  if not curves:
    raise ValueError("overlay: no runs to draw")
  last_step = max(r["step"] for runs in curves.values() for records in runs
                  for r in records)
  columns = min(len(panels), 4)
  rows = -(-len(panels) // columns)
  fig = Figure(figsize=(4.2 * columns, 3.3 * rows))
  axes = np.atleast_1d(fig.subplots(rows, columns)).ravel()
  for ax, (title, key) in zip(axes, panels):
    ax.set_title(title)
    ax.set_xlabel("step")
    drawn = False
    for index, (label, runs) in enumerate(curves.items()):
      every_step = all(all(key in r for r in records) for records in runs)
      band = step_band(runs, key, smooth if every_step else 1)
      if band is None:
        continue
      steps, mean, low, high = band
      name = f"{label} ({len(runs)})" if len(runs) > 1 else label
      color = f"C{index % 10}"  # a label's colour in every panel
      if every_step:
        ax.plot(steps, mean, color=color, label=name)
        if len(runs) > 1:
          ax.fill_between(steps, low, high, color=color, alpha=0.2)
      else:  # a few evaluations: points with the range as error bars,
        # side by side
        ax.errorbar(steps + 0.3 * index, mean, yerr=[mean - low, high - mean],
                    color=color, marker="o", capsize=3, label=name)
      drawn = True
    ax.set_xlim(-1, last_step + 2)
    if not drawn:
      ax.text(0.5, 0.5, "not measured", ha="center", va="center",
              transform=ax.transAxes)
    ax.grid(alpha=0.3)
  for ax in axes[len(panels):]:
    ax.axis("off")
  legend = {}  # every label drawn in some panel, once
  for ax in axes:
    for handle, label in zip(*ax.get_legend_handles_labels()):
      legend.setdefault(label, handle)
  handles, labels = list(legend.values()), list(legend)
  if handles:
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4),
               fontsize="small")
  note = (f"per-step metrics: mean of the last {smooth} steps; "
          if smooth > 1 else "")
  fig.suptitle(f"{note}lines: mean over runs (n), bands: lowest to highest",
               fontsize="small")
  fig.tight_layout(rect=(0, 0.06, 1, 0.97))
  fig.savefig(path, dpi=80)
  return path


def runs_by_config(run_dirs: Sequence[str]) -> dict:
  """Run directories grouped by their ``config.json`` (`run_identity`: the
  seed and bookkeeping left out), label -> list of their step records; a
  group is labelled by its first directory's name (its parent's where the
  name is ``seed<k>``; the path where two groups would share a name), a
  run without a ``config.json`` is its own group."""
  groups, labels = {}, {}
  for run_dir in run_dirs:
    records = metrics.read(os.path.join(run_dir, metrics.METRICS_FILE))
    if not records:
      raise SystemExit(f"{run_dir}: no {metrics.METRICS_FILE}; give run "
                       "directories (a train run's --workdir)")
    config = metrics.read_config(run_dir)
    key = run_dir if config is None else json.dumps(run_identity(config),
                                                      sort_keys=True)
    if key not in groups:
      name = os.path.basename(os.path.normpath(run_dir))
      if re.fullmatch(r"seed\d+", name):
        name = os.path.basename(os.path.dirname(os.path.normpath(run_dir)))
      labels[key] = run_dir if name in labels.values() else name
      groups[key] = []
    groups[key].append(records)
  return {labels[key]: runs for key, runs in groups.items()}
