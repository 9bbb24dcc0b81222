"""The two entry points end to end on the tiny model, in subprocesses."""

import glob
import json
import os
import subprocess
import sys

from grpo_jax.runtime import checkpoint
from grpo_jax.runtime import metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(module, *flags, cache_dir):
  env = dict(os.environ, JAX_DISABLE_MOST_OPTIMIZATIONS="true",
             JAX_COMPILATION_CACHE_DIR=str(cache_dir),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", PYTHONPATH=ROOT)
  result = subprocess.run([sys.executable, "-m", module, *flags], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-4000:]
  return result


def test_train_then_evaluate_the_checkpoint(tmp_path):
  workdir = tmp_path / "dapo"
  run("experiments.train", "--config=configs/dapo.py:tiny",
      f"--workdir={workdir}", "--config.train.num_steps=3",
      "--config.checkpoint.every=2", cache_dir=tmp_path / "cache")

  records = metrics.read(str(workdir / metrics.METRICS_FILE))
  assert [r["step"] for r in records] == [0, 1, 2]
  for name in ("reward/total", "accuracy", "reward/overlong",
               "completion_length/mean", "truncation_rate", "clip_fraction",
               "ratio_mean", "approx_kl", "entropy", "grad_norm",
               "learning_rate", "skipped_updates", "time/sample_s",
               "time/logprob_s", "time/update_s", "tokens_per_s",
               "logprob/sampler_trainer_max_abs_diff", "rollout/rounds",
               "advantage/collapse_rate"):
    assert name in records[-1], name
  assert "kl" not in records[-1]  # DAPO: beta = 0
  assert glob.glob(str(workdir / "tensorboard" / "events.out.tfevents.*"))
  png = workdir / metrics.PLOT_FILE
  assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert checkpoint.Checkpointer(str(workdir / "checkpoints")).all_steps() \
      == [2, 3]
  config = metrics.read_config(str(workdir))  # the config as it ran
  assert config["train"]["num_steps"] == 3 and config["checkpoint"]["every"] == 2
  assert config["objective"]["kwargs"]["clip_high"] == 0.28  # DAPO's

  overlaid = tmp_path / "overlay.png"
  run("experiments.compare", str(workdir), f"--out={overlaid}",
      cache_dir=tmp_path / "cache")
  assert overlaid.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

  out = tmp_path / "eval.json"
  run("experiments.evaluate", f"--checkpoint={workdir}", "--k=2",
      f"--json={out}", cache_dir=tmp_path / "cache")
  figures = json.loads(out.read_text())
  assert figures["step"] == 3 and figures["k"] == [2]
  assert figures["num_samples"] == 2  # the largest k
  assert figures["num_problems"] == 4 and figures["benchmark"] == "heldout"
  for name in ("greedy_accuracy", "pass@2", "maj@2"):
    assert 0.0 <= figures[name] <= 1.0, name
