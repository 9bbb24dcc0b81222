"""Held-out greedy accuracy before and after one run per config, on the
comparison task: ``python -m experiments.compare``; or any finished runs'
curves overlaid in one plot: ``python -m experiments.compare RUN_DIR
[RUN_DIR ...] --out=plot.png``.

  python -m experiments.compare --configs=grpo,ebpo,avspo \
      --workdir=runs/compare --json=runs/compare/table.json
  python -m experiments.compare --configs=ce_gppo,dppo --scale=quickstart \
      --workdir=runs/compare_objectives

Each config trains as its file says (its scale, objective, sampling and
estimator; ``--scale=quickstart`` sets every config to the quickstart's
scale instead) on the comparison task (`config.use_comparison_task`) and is
evaluated greedily on the task's held-out problems after its last step;
"before" is the base model on the same problems, measured once per task,
prompt format and evaluation setting (a config with LCPO's target in its
prompts, or on its own task, has its own). A config
whose run already finished under ``--workdir`` is read back, not rerun, so
an interrupted comparison continues where it stopped. Prints a markdown
table, one row per config, with what the data-strategy claims are read
from (`run_summary`: rollouts scored, the nonzero-gradient share, the
completion length early and late).

Overlay mode (run directories as arguments): one line per run, or per
config where several runs differ only in their seed (their
``config.json``), drawn as the mean over those runs with the band between
their lowest and highest value, for reward, sampled and held-out accuracy,
completion length, the importance ratio's spread, the clip fraction and
the entropy.

  python -m experiments.compare runs/a/seed0 runs/a/seed1 runs/b/seed0 \
      --out=runs/a_vs_b.png
"""

import functools
import json
import os

if __name__ == "__main__":  # before the imports below, which a re-exec
  from grpo_jax.runtime import allocator  # would load twice
  allocator.enable()

from absl import app
from absl import flags

from experiments import runs
from grpo_jax.runtime import checkpoint
from grpo_jax import evaluation
from grpo_jax.train import saved_runs

_CONFIGS = flags.DEFINE_list(
    "configs", ["grpo"], "Config names under configs/ (comma separated).")
_WORKDIR = flags.DEFINE_string(
    "workdir", "runs/compare", "One run directory per config under this.")
_JSON = flags.DEFINE_string("json", None, "Write the table's rows here.")
_SCALE = flags.DEFINE_enum(
    "scale", "own", ["own", "quickstart"],
    "own: each config's own scale; quickstart: every config at the "
    "quickstart's (config.use_quickstart_scale: 2 prompts x 4 completions, "
    "40 steps, no KL), keeping its objective, estimator, minibatches and "
    "strategies, for configs whose own scale is the base run's (200 steps "
    "of 8 x 8).")
_OUT = flags.DEFINE_string(
    "out", None, "Overlay mode: the PNG to draw the run directories given as "
    "arguments into (--configs, --scale, --workdir and --json are not used "
    "there).")


def main(argv):
  checkpoint.quiet_orbax_logs()
  if len(argv) > 1 or _OUT.value:  # overlay mode: both or neither
    if len(argv) < 2 or not _OUT.value:
      raise app.UsageError("overlay mode takes run directories and --out: "
                           "python -m experiments.compare RUN_DIR "
                           "[RUN_DIR ...] --out=plot.png")
    print(runs.overlay(runs.runs_by_config(argv[1:]), _OUT.value))
    return
  configs = {name: runs.comparison_config(name, _SCALE.value)
             for name in _CONFIGS.value}
  befores = {}  # the base model once per `baseline_key`
  rows = []
  for name, config in configs.items():
    key = runs.baseline_key(config)
    if key not in befores:
      befores[key] = evaluation.evaluate(
          config, k=(), num_problems=config.eval.num_problems,
          load_policy=functools.partial(saved_runs.policy_to_evaluate,
                                        config))
    before = befores[key]
    workdir = os.path.join(_WORKDIR.value, name)
    # No table is written for a partial run: a stop signal ends it here.
    done = runs.train_unless_finished(config, workdir)
    rows.append(dict(config=name, steps=done[0],
                     before=before["greedy_accuracy"], after=done[1],
                     num_problems=before["num_problems"],
                     **runs.run_summary(workdir)))
    # Each row as it is done: a long comparison's rows before its table.
    print(f"{name}: {done[0]} steps, held-out greedy "
          f"{rows[-1]['before']:.3f} -> {done[1]:.3f}", flush=True)
  print("| config | steps | held-out greedy before | after | rollouts | "
        "nonzero-gradient share | length, first 5 -> last 5 steps | "
        "clip fraction | ratio max - min |")
  print("|---|---|---|---|---|---|---|---|---|")
  shown = lambda value: "-" if value is None else f"{value:.3f}"
  for row in rows:
    print(f"| `{row['config']}` | {row['steps']} | {row['before']:.3f} | "
          f"{row['after']:.3f} | {row['rollouts']:.0f} | "
          f"{row['nonzero_share']:.3f} | {row['length_first5']:.1f} -> "
          f"{row['length_last5']:.1f} | {shown(row['clip_fraction'])} | "
          f"{shown(row['ratio_spread'])} |")
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(rows, f, indent=2)


if __name__ == "__main__":
  app.run(main)
