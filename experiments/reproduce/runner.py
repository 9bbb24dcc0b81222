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

import functools
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
from grpo_jax.runtime import allocator
from grpo_jax.runtime import checkpoint
from grpo_jax import config as config_lib
from grpo_jax import evaluation
from grpo_jax.train import saved_runs
from grpo_jax.runtime import metrics
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
    "experiments/reproduce/results (docs/reproductions.md's) for every arm with the "
    "default seeds at the quickstart preset, else WORKDIR/results.")
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
  return train_lib.validate(config)


def run_directory(workdir: str, arm: Arm, seed: int) -> str:
  return os.path.join(workdir, arm.label, f"seed{seed}")


def check_same_run(run_dir: str, config) -> None:
  """Stops if `run_dir` holds a run whose config differs from `config` in a
  field both have (`runs.run_identity`: the seed and bookkeeping aside;
  fields added to the code since are not compared)."""
  saved = metrics.read_config(run_dir)
  if saved is None:
    return
  seed = saved.get("seed", config.seed)
  saved = runs.run_identity(saved)
  wanted = runs.run_identity(json.loads(config.to_json_best_effort()))
  differ = sorted(k for k in saved.keys() & wanted.keys()
                  if saved[k] != wanted[k])
  if seed != config.seed:
    differ.append("seed")
  if differ:
    raise SystemExit(
        f"{run_dir} holds a run of another config (fields {differ[:5]} "
        "differ): remove that directory or give another --workdir")


def run_arm(config, run_dir: str, keep_checkpoints: bool = False) -> None:
  """Trains `config` in `run_dir` unless its run there has finished."""
  check_same_run(run_dir, config)
  runs.train_unless_finished(config, run_dir)
  if not keep_checkpoints:
    shutil.rmtree(train_lib.checkpoint_directory(run_dir), ignore_errors=True)


def finished_records(run_dir: str, config) -> Optional[list]:
  """The step records of the run of `config` in `run_dir` if it has
  evaluated after its last step, else None."""
  check_same_run(run_dir, config)
  done = runs.last_accuracy(run_dir)
  if done is None or done[0] < config.train.num_steps:
    return None
  return metrics.read(os.path.join(run_dir, metrics.METRICS_FILE))


# The plot of the claims about objectives off policy (GMPO, stale data).
RATIO_PANELS = (
    ("sampled accuracy", "accuracy"),
    ("held-out greedy accuracy", runs.ACCURACY),
    ("importance ratio max - min", "ratio_spread"),
    ("entropy", "entropy"),
)


def summarize(seed_runs: Sequence[list], columns: Sequence[str]) -> dict:
  """column -> (mean, sample standard deviation, runs) over `seed_runs`
  (each run's step records, measured by the column); the deviation None
  for a single run, the mean None where no run measures it."""
  summary = {}
  for name in columns:
    measure = runs.COLUMNS[name].measure
    values = [v for v in (measure(rs) for rs in seed_runs)
              if v is not None]
    summary[name] = (float(np.mean(values)) if values else None,
                     float(np.std(values, ddof=1)) if len(values) > 1
                     else None, len(values))
  return summary


def markdown(summaries: Mapping[str, dict], columns: Sequence[str],
             seeds: Mapping[str, Sequence[int]]) -> str:
  """A table, one row per arm: each column's mean +- its standard
  deviation over the arm's seeds."""
  def cell(column, mean, std, _):
    if mean is None:
      return "-"
    shown = lambda x: f"{x:.{runs.COLUMNS[column].decimals}f}"
    return shown(mean) if std is None else f"{shown(mean)} ± {shown(std)}"
  headers = [runs.COLUMNS[c].header for c in columns]
  lines = ["| arm | seeds | " + " | ".join(headers) + " |",
           "|---|---|" + "---|" * len(columns)]
  for label, summary in summaries.items():
    lines.append(f"| {label} | {','.join(map(str, seeds[label]))} | "
                 + " | ".join(cell(c, *summary[c]) for c in columns) + " |")
  return "\n".join(lines)


def base_accuracy(arms: Sequence[Arm], preset: str, workdir: str) -> float:
  """The base model's held-out greedy accuracy on the arms' task and
  prompts (one for all of them), measured once under `workdir`."""
  configs = [arm_config(arm, 0, preset) for arm in arms]
  keys = {runs.baseline_key(config) for config in configs}
  if len(keys) > 1:
    raise ValueError("the arms' base models are evaluated on different "
                     "tasks or prompts: one claim, one task")
  key, = keys
  path = os.path.join(workdir, "base_model.json")
  known = {}
  if os.path.exists(path):
    with open(path) as f:
      known = json.load(f)
  if key not in known:
    known[key] = evaluation.evaluate(
        configs[0], k=(), num_problems=configs[0].eval.num_problems,
        load_policy=functools.partial(saved_runs.policy_to_evaluate,
                                      configs[0]))[
            "greedy_accuracy"]
    os.makedirs(workdir, exist_ok=True)
    metrics.write_atomically(path, json.dumps(known))
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
  if not seeds:
    raise SystemExit("--seeds: give at least one seed")
  # Every arm's config checked before any compute.
  configs = {(arm.label, seed): arm_config(arm, seed, preset)
             for arm in arms for seed in seeds}
  for arm in arms:
    if only is None or arm.label in only:
      for seed in seeds:
        run_arm(configs[arm.label, seed], run_directory(workdir, arm, seed),
                keep_checkpoints)
  finished = {}
  for arm in arms:
    done = {seed: finished_records(run_directory(workdir, arm, seed),
                                   configs[arm.label, seed])
            for seed in seeds}
    done = {seed: records for seed, records in done.items() if records}
    if done:
      finished[arm.label] = done
  if not finished:
    raise SystemExit(f"{claim}: no run has finished under {workdir}")
  before = base_accuracy(arms, preset, workdir)
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
    # The published results (docs/reproductions.md) only from a full run: every arm, default seeds.
    full = (preset == "quickstart" and _ARMS.value is None
            and _SEEDS.value == _SEEDS.default)
    out = _OUT.value or (RESULTS if full else os.path.join(workdir,
                                                            "results"))
    reproduce(claim, arms, columns, panels,
              seeds=[int(s) for s in _SEEDS.value], preset=preset,
              workdir=workdir, out=out, only=_ARMS.value,
              keep_checkpoints=_KEEP_CHECKPOINTS.value)
  # Re-executes the script once (its imports load twice), before training.
  allocator.enable()
  app.run(run)
