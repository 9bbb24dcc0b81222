"""What every reproduction shares: arms x seeds of short runs, read back
once finished, summarised into a JSON, a PNG and a markdown table.

An arm is a config under configs/ run at the quickstart's scale (2 prompts
x 4 completions, 40 steps, lr 2e-5, no KL; `config.use_quickstart_scale`)
on the comparison task (`config.use_comparison_task`), with the fields the
claim varies set after the scale. A run lives in ``WORKDIR/<arm>/seed<k>``;
arms of the same name in several claims share their runs, a finished run
is read back instead of rerun, and an interrupted one resumes from its
checkpoint. A finished run's checkpoints are deleted (``--keep_checkpoints``
keeps them): the metrics are what the claims are read from, and 51 runs'
checkpoints would not fit on this machine's disk.
"""

import importlib
import json
import os
import shutil
from typing import Any, Mapping, NamedTuple, Optional, Sequence

from absl import app
from absl import flags
import ml_collections
import numpy as np

from experiments import runs
from grpo_jax import checkpoint
from grpo_jax import config as config_lib
from grpo_jax import evaluation
from grpo_jax import metrics
from grpo_jax import train as train_lib

_WORKDIR = flags.DEFINE_string(
    "workdir", "runs/reproduce", "One directory per arm and seed under this.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "config.seed of each run.")
_PRESET = flags.DEFINE_enum(
    "preset", "quickstart", ["quickstart", "tiny"],
    "quickstart: the embedded model at the quickstart's scale; tiny: the "
    "random tiny model (`config.use_tiny`), seconds per run.")
_ARMS = flags.DEFINE_list(
    "arms", None, "Run only these arms (the outputs still show every arm "
    "whose runs have finished).")
_OUT = flags.DEFINE_string(
    "out", None, "Where <claim>.json, .png and .md go; default "
    "experiments/reproduce/results (the README's), WORKDIR/results with "
    "--preset=tiny.")
_KEEP_CHECKPOINTS = flags.DEFINE_bool(
    "keep_checkpoints", False, "Keep a finished run's checkpoints.")

RESULTS = os.path.join(os.path.dirname(__file__), "results")


class Arm(NamedTuple):
  """One arm of a claim.

  Attributes:
    label: its name in the plot and the table, and its run directory's.
    config: the config module under configs/.
    overrides: dotted config fields and their values, set after the scale.
    rescale: run the config at the quickstart's scale (a config whose own
      scale is the base run's); False for a config already at that scale.
  """
  label: str
  config: str
  overrides: Mapping[str, Any] = {}
  rescale: bool = True


def arm_config(arm: Arm, seed: int, preset: str = "quickstart"
               ) -> ml_collections.ConfigDict:
  """The validated config of `arm` with `seed` at `preset`, evaluated on
  the held-out problems after its last step."""
  module = importlib.import_module(f"configs.{arm.config}")
  if preset == "tiny":
    config = config_lib.use_comparison_task(module.get_config("tiny"))
    config.data.heldout_size = config.eval.num_problems = 4
  else:
    config = module.get_config()
    if arm.rescale:
      config = config_lib.use_quickstart_scale(config)
    config = config_lib.use_comparison_task(config)
  config.update_from_flattened_dict(dict(arm.overrides))
  config.seed = seed
  config.eval.every = config.train.num_steps
  return config_lib.validate(config)


def _flat(tree: Mapping, prefix: str = "") -> dict:
  flat = {}
  for key, value in tree.items():
    if isinstance(value, Mapping):
      flat.update(_flat(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def check_same_run(run_dir: str, config) -> None:
  """Stops if `run_dir` holds a run whose config differs from `config` in a
  field both have (fields added to the code since are not compared)."""
  saved = metrics.read_config(run_dir)
  if saved is None:
    return
  saved, wanted = _flat(saved), _flat(json.loads(
      config.to_json_best_effort()))
  differ = sorted(k for k in saved.keys() & wanted.keys()
                  if saved[k] != wanted[k])
  if differ:
    raise SystemExit(
        f"{run_dir} holds a run of another config (fields {differ[:5]} "
        "differ): remove that directory or give another --workdir")


def run_arm(arm: Arm, seed: int, preset: str, workdir: str,
            keep_checkpoints: bool = False) -> list:
  """The step records of `arm` with `seed`: trained unless finished."""
  config = arm_config(arm, seed, preset)
  run_dir = os.path.join(workdir, arm.label, f"seed{seed}")
  check_same_run(run_dir, config)
  done = runs.last_accuracy(run_dir)
  if done is None or done[0] < config.train.num_steps:
    print(f"{arm.label}, seed {seed}: training in {run_dir}", flush=True)
    train_lib.train(config, run_dir)
    done = runs.last_accuracy(run_dir)
    if done is None or done[0] < config.train.num_steps:
      raise SystemExit(f"{run_dir}: stopped before its last step; rerun the "
                       "same command to resume")
  if not keep_checkpoints:
    shutil.rmtree(train_lib.checkpoint_directory(run_dir), ignore_errors=True)
  return finished_records(run_dir, config.train.num_steps)


def finished_records(run_dir: str, num_steps: int) -> Optional[list]:
  """The step records of a run in `run_dir` that has evaluated after its
  step `num_steps`, else None."""
  done = runs.last_accuracy(run_dir)
  if done is None or done[0] < num_steps:
    return None
  return metrics.read(os.path.join(run_dir, metrics.METRICS_FILE))


def _mean(records, key, last: int = 0):
  values = [float(r[key]) for r in records if key in r]
  values = values[-last:] if last else values
  return float(np.mean(values)) if values else None


# The table's columns: name -> (header, what one run's records give).
COLUMNS: Mapping[str, tuple] = {
    "heldout": ("held-out greedy", lambda rs: _mean(rs, runs.ACCURACY, 1)),
    "accuracy_last10": ("sampled accuracy, last 10 steps",
                        lambda rs: _mean(rs, "accuracy", 10)),
    "rollouts": ("rollouts", lambda rs: sum(r["reward/scored"] for r in rs)),
    "nonzero_share": ("nonzero-gradient share",
                      lambda rs: _mean(rs, "rollout/nonzero_gradient_share")),
    "collapse": ("collapse rate (verifier rewards)",
                 lambda rs: _mean(rs, "advantage/collapse_rate")),
    "length_first5": ("length, first 5 steps",
                      lambda rs: _mean(rs[:5], "completion_length/mean")),
    "length_last5": ("length, last 5 steps",
                     lambda rs: _mean(rs, "completion_length/mean", 5)),
    "clip_fraction": ("clip fraction", lambda rs: _mean(rs, "clip_fraction")),
    "ratio_spread": ("ratio max - min", lambda rs: _mean(
        runs.with_ratio_spread(rs), "ratio_spread")),
    "ratio_spread_max": ("largest ratio max - min", lambda rs: max(
        (r["ratio_spread"] for r in runs.with_ratio_spread(rs)
         if "ratio_spread" in r), default=None)),
    "ratio_var": ("ratio variance", lambda rs: _mean(rs, "ratio_var")),
    "entropy_last10": ("entropy, last 10 steps",
                       lambda rs: _mean(rs, "entropy", 10)),
    "grad_norm": ("gradient norm", lambda rs: _mean(rs, "grad_norm")),
    "abs_advantage": ("mean |advantage|",
                      lambda rs: _mean(rs, "advantage/abs_mean")),
}


def summarize(runs: Sequence[list], columns: Sequence[str]) -> dict:
  """column -> (mean, sample standard deviation, runs) over `runs`; the
  deviation None for a single run, the mean None where no run measures."""
  summary = {}
  for name in columns:
    values = [v for v in (COLUMNS[name][1](rs) for rs in runs)
              if v is not None]
    summary[name] = (float(np.mean(values)) if values else None,
                     float(np.std(values, ddof=1)) if len(values) > 1
                     else None, len(values))
  return summary


def markdown(summaries: Mapping[str, dict], columns: Sequence[str],
             seeds: Mapping[str, Sequence[int]]) -> str:
  """A table, one row per arm: each column's mean +- its standard
  deviation over the arm's seeds."""
  def cell(mean, std, _):
    if mean is None:
      return "-"
    shown = lambda x: f"{x:.0f}" if abs(mean) >= 100 else f"{x:.3f}"
    return shown(mean) if std is None else f"{shown(mean)} ± {shown(std)}"
  lines = ["| arm | seeds | " + " | ".join(COLUMNS[c][0] for c in columns)
           + " |", "|---|---|" + "---|" * len(columns)]
  for label, summary in summaries.items():
    lines.append(f"| {label} | {','.join(map(str, seeds[label]))} | "
                 + " | ".join(cell(*summary[c]) for c in columns) + " |")
  return "\n".join(lines)


def base_accuracy(arm: Arm, preset: str, workdir: str) -> float:
  """The base model's held-out greedy accuracy on `arm`'s task and
  prompts, measured once per task under `workdir`."""
  config = arm_config(arm, 0, preset)
  path = os.path.join(workdir, "base_model.json")
  known = json.load(open(path)) if os.path.exists(path) else {}
  key = runs.baseline_key(config)
  if key not in known:
    known[key] = evaluation.evaluate(
        config, k=(), num_problems=config.eval.num_problems)[
            "greedy_accuracy"]
    os.makedirs(workdir, exist_ok=True)
    with open(path, "w") as f:
      json.dump(known, f)
  return known[key]


def reproduce(claim: str, arms: Sequence[Arm], columns: Sequence[str],
              panels=runs.OVERLAY_PANELS, *, seeds: Sequence[int],
              preset: str, workdir: str, out: str,
              only: Optional[Sequence[str]] = None,
              keep_checkpoints: bool = False) -> dict:
  """Runs `arms` x `seeds` (`only`: these arms' runs), then writes
  ``out/<claim>.json`` (per arm and seed, the step records), ``.png`` (an
  overlay of `panels`) and ``.md`` (the table of `columns` and the base
  model's held-out greedy accuracy) from every run of the claim that has
  finished. Returns the JSON's content."""
  labels = [arm.label for arm in arms]
  unknown = sorted(set(only or ()) - set(labels))
  if unknown:
    raise SystemExit(f"--arms: {unknown} are not arms of {claim}; its arms "
                     f"are {labels}")
  if len(set(labels)) != len(labels):
    raise ValueError(f"{claim}: two arms share a label ({labels})")
  for arm in arms:
    arm_config(arm, seeds[0], preset)  # every arm's config checked first
  for arm in arms:
    if only is None or arm.label in only:
      for seed in seeds:
        run_arm(arm, seed, preset, workdir, keep_checkpoints)
  finished = {}
  for arm in arms:
    steps = arm_config(arm, seeds[0], preset).train.num_steps
    done = {seed: finished_records(
        os.path.join(workdir, arm.label, f"seed{seed}"), steps)
            for seed in seeds}
    done = {seed: records for seed, records in done.items() if records}
    if done:
      finished[arm.label] = done
  before = base_accuracy(arms[0], preset, workdir)
  result = dict(claim=claim, preset=preset, base_heldout_greedy=before,
                runs={label: {str(s): r for s, r in done.items()}
                      for label, done in finished.items()})
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, f"{claim}.json"), "w") as f:
    json.dump(result, f)
  runs.overlay({label: list(done.values())
                for label, done in finished.items()},
               os.path.join(out, f"{claim}.png"), panels)
  table = markdown({label: summarize(list(done.values()), columns)
                    for label, done in finished.items()}, columns,
                   {label: sorted(done) for label, done in finished.items()})
  table += (f"\n\nBase model, held-out greedy accuracy: {before:.3f} "
            f"({preset} preset).\n")
  with open(os.path.join(out, f"{claim}.md"), "w") as f:
    f.write(table)
  print(table)
  return result


def main(claim: str, arms: Sequence[Arm], columns: Sequence[str],
         panels=runs.OVERLAY_PANELS) -> None:
  """A reproduction script's entry point: `reproduce` under the flags."""
  def run(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments {argv[1:]}")
    checkpoint.quiet_orbax_logs()
    preset, workdir = _PRESET.value, _WORKDIR.value
    out = _OUT.value or (os.path.join(workdir, "results") if preset == "tiny"
                         else RESULTS)
    reproduce(claim, arms, columns, panels,
              seeds=[int(s) for s in _SEEDS.value], preset=preset,
              workdir=workdir, out=out, only=_ARMS.value,
              keep_checkpoints=_KEEP_CHECKPOINTS.value)
  app.run(run)
