"""Every config's ``:tiny`` run for a few steps, its metrics in one JSON;
or two such files compared (a refactor that keeps behaviour changes none).

  python -m experiments.tiny_metrics --out=before.json   # on the old commit
  python -m experiments.tiny_metrics --out=after.json    # on the new one
  python -m experiments.tiny_metrics --compare=before.json,after.json
  python -m experiments.tiny_metrics --signal=after.json   # which trained

`--signal` names each config none of whose steps trained on a nonzero
advantage (`without_signal`): a ``:tiny`` run should train from its first
steps (`config.use_tiny`'s graded reward).

Timing figures (``time/*`` and throughputs) are left out: they differ from
run to run. Prints one line per config and, comparing, each differing
figure; exits 1 when any config differs or fails.
"""

import glob
import json
import os
import sys
import tempfile
import traceback

from absl import app
from absl import flags

FLAGS = flags.FLAGS


def define_flags():
  """Defined when run, not on import: tests import this module beside other
  experiments whose flags share these names."""
  flags.DEFINE_string("out", None, "Where to write {config: records}.")
  flags.DEFINE_list("configs", [], "Config names; default all.")
  flags.DEFINE_integer("steps", 2, "Steps per run.")
  flags.DEFINE_list("compare", [], "Two JSON files to compare.")
  flags.DEFINE_string("signal", None, "A JSON file whose configs without a "
                      "nonzero advantage in any step to name.")


def timing(key: str) -> bool:
  return key.startswith("time/") or key.endswith("_per_s")


def run_config(name: str, steps: int):
  """[record per step] of `configs/<name>.py:tiny` without timing keys."""
  import importlib  # pylint: disable=g-import-not-at-top
  from grpo_jax import testing  # pylint: disable=g-import-not-at-top
  from grpo_jax import train  # pylint: disable=g-import-not-at-top
  config = importlib.import_module(f"configs.{name}").get_config("tiny")
  testing.short_run_config(config, num_steps=steps, checkpoint_every=steps)
  config.eval.every = 0
  with tempfile.TemporaryDirectory() as workdir:
    train.train(config, workdir)
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      records = [json.loads(line) for line in f]
  return [{k: v for k, v in r.items() if not timing(k)} for r in records]


def differences(before: dict, after: dict) -> list:
  """(config, detail) of every config whose records differ."""
  found = []
  for name in sorted(set(before) | set(after)):
    a, b = before.get(name), after.get(name)
    if a == b:
      continue
    if not (isinstance(a, list) and isinstance(b, list)) or len(a) != len(b):
      found.append((name, "missing, failed or of another length"))
      continue
    for step, (x, y) in enumerate(zip(a, b)):
      for key in sorted(set(x) | set(y)):
        if x.get(key) != y.get(key):
          found.append((name, f"step {step} {key}: {x.get(key)} -> "
                              f"{y.get(key)}"))
  return found


# What shows that a step trained: the mean |advantage| of the rows that
# train (a token-level advantage as its row's mean over its tokens) and the
# share of them whose advantage is not 0.
SIGNAL_KEYS = ("advantage/abs_mean", "rollout/nonzero_gradient_share")


def without_signal(results: dict) -> list:
  """(config, why) of every config in `results` ({config: records}) none of
  whose steps shows both `SIGNAL_KEYS` above 0."""
  found = []
  for name, records in sorted(results.items()):
    if not isinstance(records, list):
      found.append((name, "failed"))
    elif not any(all(r.get(k, 0) > 0 for k in SIGNAL_KEYS) for r in records):
      found.append((name, "; ".join(
          f"step {r.get('step')}: " + ", ".join(f"{k}={r.get(k)}"
                                                for k in SIGNAL_KEYS)
          for r in records)))
  return found


def main(argv):
  del argv
  if FLAGS.signal:
    with open(FLAGS.signal) as f:
      results = json.load(f)
    found = without_signal(results)
    for name, why in found:
      print(f"{name}: no signal ({why})")
    print(f"{len(results)} configs, {len(found)} without signal")
    sys.exit(1 if found else 0)
  if FLAGS.compare:
    paths = FLAGS.compare
    if len(paths) != 2:
      raise app.UsageError("--compare takes two files: before,after.")
    before, after = (json.load(open(p)) for p in paths)
    found = differences(before, after)
    for name, detail in found:
      print(f"{name}: {detail}")
    print(f"{len(before)} / {len(after)} configs, "
          f"{len({n for n, _ in found})} differ")
    sys.exit(1 if found else 0)
  if not FLAGS.out:
    raise app.UsageError("give --out=FILE, --compare=A,B or --signal=FILE.")
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update("jax_disable_most_optimizations", True)
  names = FLAGS.configs or sorted(
      os.path.basename(p)[:-3] for p in glob.glob("configs/*.py")
      if not p.endswith("__init__.py"))
  results, failed = {}, False
  for name in names:
    try:
      results[name] = run_config(name, FLAGS.steps)
      print(f"{name}: ok", flush=True)
    except Exception:  # pylint: disable=broad-except
      results[name] = {"error": traceback.format_exc()[-2000:]}
      failed = True
      print(f"{name}: failed", flush=True)
    with open(FLAGS.out, "w") as f:
      json.dump(results, f, indent=0, sort_keys=True)
  sys.exit(1 if failed else 0)


if __name__ == "__main__":
  define_flags()
  app.run(main)
