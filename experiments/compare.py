"""Held-out greedy accuracy before and after one run per config, on the
comparison task: ``python -m experiments.compare``.

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
"""

import importlib
import json
import os

from absl import app
from absl import flags

from grpo_jax import config as config_lib
from grpo_jax import evaluation
from grpo_jax import metrics
from grpo_jax import train as train_lib

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

ACCURACY = "eval/greedy_accuracy"


def comparison_config(name: str, scale: str = "own"):
  """configs/<name>.py on the comparison task, at its own scale or the
  quickstart's (`scale`), evaluated after its last step only."""
  config = importlib.import_module(f"configs.{name}").get_config()
  if scale == "quickstart":
    config = config_lib.use_quickstart_scale(config)
  config = config_lib.use_comparison_task(config)
  config.eval.every = config.train.num_steps
  config_lib.validate(config)
  return config


def last_accuracy(workdir: str):
  """(steps done, greedy accuracy) at the last evaluation in `workdir`'s
  metrics, or None; a record's step counts from 0."""
  evaluated = [r for r in metrics.read(os.path.join(workdir, "metrics.jsonl"))
               if ACCURACY in r]
  if not evaluated:
    return None
  return evaluated[-1]["step"] + 1, evaluated[-1][ACCURACY]


def run_summary(workdir: str) -> dict:
  """What the data-strategy claims are read from, over the run's steps:
  the rollouts it scored (``reward/scored``: a pilot's too), the mean share
  of trained rows with a nonzero advantage
  (``rollout/nonzero_gradient_share``; a step that trains nothing counts
  0), the mean completion length over its first and last 5 steps, and
  what the objective claims are read from: the mean clipped share
  (``clip_fraction``) and the mean spread of the importance ratio
  (``ratio_max - ratio_min``) over the steps that log them (None where
  none does)."""
  records = [r for r in metrics.read(os.path.join(workdir, "metrics.jsonl"))
             if "reward/scored" in r]
  mean = lambda values: sum(values) / max(len(values), 1)
  logged = lambda values: mean(values) if values else None
  lengths = [r["completion_length/mean"] for r in records]
  return dict(
      rollouts=int(sum(r["reward/scored"] for r in records)),
      nonzero_share=mean([r["rollout/nonzero_gradient_share"]
                          for r in records]),
      length_first=mean(lengths[:5]), length_last=mean(lengths[-5:]),
      clip_fraction=logged([r["clip_fraction"] for r in records
                            if "clip_fraction" in r]),
      ratio_spread=logged([r["ratio_max"] - r["ratio_min"] for r in records
                           if "ratio_max" in r]))


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


def main(argv):
  del argv
  configs = {name: comparison_config(name, _SCALE.value)
             for name in _CONFIGS.value}
  befores = {}  # the base model once per `baseline_key`
  rows = []
  for name, config in configs.items():
    key = baseline_key(config)
    if key not in befores:
      befores[key] = evaluation.evaluate(
          config, k=(), num_problems=config.eval.num_problems)
    before = befores[key]
    workdir = os.path.join(_WORKDIR.value, name)
    done = last_accuracy(workdir)
    if done is None or done[0] < config.train.num_steps:
      train_lib.train(config, workdir)
      done = last_accuracy(workdir)
    if done is None or done[0] < config.train.num_steps:
      # A stop signal (preemption) ended the run before its last
      # evaluation: its checkpoint is saved; the rest waits for a rerun.
      raise SystemExit(f"{name}: stopped before step "
                       f"{config.train.num_steps}; rerun the same command to "
                       "continue (no table is written for a partial run)")
    rows.append(dict(config=name, steps=done[0],
                     before=before["greedy_accuracy"], after=done[1],
                     num_problems=before["num_problems"],
                     **run_summary(workdir)))
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
          f"{row['after']:.3f} | {row['rollouts']} | "
          f"{row['nonzero_share']:.3f} | {row['length_first']:.1f} -> "
          f"{row['length_last']:.1f} | {shown(row['clip_fraction'])} | "
          f"{shown(row['ratio_spread'])} |")
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(rows, f, indent=2)


if __name__ == "__main__":
  app.run(main)
