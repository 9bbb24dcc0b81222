"""The entry points as a new user meets them, in subprocesses: --list,
--dry_run, config errors in one line, --help, the end-of-run summary and a
rerun of a complete run."""

import json
import os
import subprocess
import sys

import pytest

from grpo_jax import config as config_lib
from grpo_jax import objectives
from grpo_jax import train as train_lib
from grpo_jax.config import errors as config_errors
from grpo_jax.runtime import metrics
from grpo_jax.runtime import summary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(module, *flags, cwd=ROOT):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
             JAX_DISABLE_MOST_OPTIMIZATIONS="true")
  return subprocess.run([sys.executable, "-m", module, *flags], cwd=cwd,
                        env=env, capture_output=True, text=True, timeout=900)


def section(text, title):
  """The block of `text` (blocks are separated by blank lines) whose first
  line starts with `title`."""
  return next(b for b in text.split("\n\n") if b.startswith(title))


def line_of(text, word):
  """The first line of `text` whose first word is `word`."""
  return next(l for l in text.splitlines() if l.split()[:1] == [word])


# --------------------------------------------------------------- --list


def test_list_names_variants_and_components_with_their_papers():
  result = run("experiments.train", "--list")  # no --config, no --workdir
  assert result.returncode == 0, result.stderr[-3000:]
  out = result.stdout
  # The variants with the papers they reproduce (DAPO: arXiv 2503.14476,
  # GSPO: arXiv 2507.18071).
  variants = section(out, "variants (")
  assert "arXiv 2503.14476" in line_of(variants, "dapo")
  assert "arXiv 2507.18071" in line_of(variants, "gspo")
  files = {f[:-3] for f in os.listdir(os.path.join(ROOT, "configs"))
           if f.endswith(".py") and not f.startswith("_")}
  assert len(variants.splitlines()) == 1 + len(files)
  for name in files:
    assert line_of(variants, name)
  # Every registered objective, with its paper where it declares one (a
  # long reference cut to its first 57 characters).
  listed = section(out, "objectives (--config.objective.name):")
  assert len(listed.splitlines()) == 1 + len(objectives.names())
  for entry in objectives.OBJECTIVES.entries():
    assert entry.meta.paper[:57] in line_of(listed, entry.name)
  assert "arXiv 2507.18071" in line_of(variants, "gspo")
  assert "2507.18071" in line_of(listed, "gspo")  # GSPO's objective
  for title in ("advantage estimators", "credit rules", "group strategies",
                "member filters", "budgets", "reward shapers",
                "reward functions", "corrections"):
    assert f"\n{title} (--config." in out, title


# ------------------------------------------------------------ --dry_run


def test_dry_run_prints_the_resolved_config_and_writes_nothing(tmp_path):
  workdir = tmp_path / "run"
  dapo = os.path.join(ROOT, "configs", "dapo.py")
  result = run("experiments.train", f"--config={dapo}:tiny",
               f"--workdir={workdir}", "--config.objective.kwargs.clip_high=0.31",
               "--config.train.num_steps=7", "--dry_run", cwd=tmp_path)
  assert result.returncode == 0, result.stderr[-3000:]
  out = result.stdout
  assert "  objective.kwargs.clip_high = 0.31\n" in out  # not DAPO's 0.28
  assert "  train.num_steps = 7\n" in out
  assert "  objective.kwargs.aggregation = 'token_mean'\n" in out  # DAPO's
  assert "dynamic_sampling" in line_of(out, "groups.name:")
  assert "arXiv 2503.14476" in line_of(out, "rewards.shapers.overlong:")
  assert not workdir.exists()
  assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_dry_run_stops_at_a_config_error():
  result = run("experiments.train", "--config=configs/grpo.py:tiny",
               "--config.train.num_steps=0", "--dry_run")
  assert result.returncode == 1
  assert "config.train.num_steps" in result.stderr


# ---------------------------------------------------------- config errors


def test_a_config_error_is_one_line_naming_the_field(tmp_path):
  flags = ("--config=configs/grpo.py:tiny", f"--workdir={tmp_path / 'run'}",
           "--config.optimizer.learning_rate=-1")
  result = run("experiments.train", *flags)
  assert result.returncode == 1
  lines = result.stderr.strip().splitlines()
  assert len(lines) <= 3, result.stderr
  assert "config.optimizer.learning_rate" in result.stderr
  assert "-1" in result.stderr and "Traceback" not in result.stderr
  assert not (tmp_path / "run").exists()  # refused before the workdir
  verbose = run("experiments.train", *flags, "--verbose")
  assert verbose.returncode == 1 and "Traceback" in verbose.stderr


def test_a_misspelt_key_names_the_field_and_the_right_one():
  result = run("experiments.train", "--config=configs/grpo.py:tiny",
               "--config.optimizer.learnig_rate=1e-5", "--dry_run")
  assert result.returncode == 1
  assert result.stderr.strip().splitlines() == [
      "error: config.optimizer.learnig_rate is not a field; did you mean "
      "learning_rate?"]


def test_the_other_entry_points_print_config_errors_alone():
  result = run("experiments.plan", "--config=configs/grpo.py:tiny",
               "--config.train.num_steps=0")
  assert result.returncode == 1
  assert len(result.stderr.strip().splitlines()) <= 3, result.stderr
  assert "config.train.num_steps" in result.stderr
  result = run("experiments.evaluate", "--config=configs/grpo.py:tiny",
               "--config.rollout.num_prompts=0")
  assert result.returncode == 1
  assert len(result.stderr.strip().splitlines()) <= 3, result.stderr
  assert "config.rollout.num_prompts" in result.stderr


def invalid(**kwargs):
  """The ConfigError of grpo's tiny config with these objective options."""
  config = config_lib.use_tiny(config_lib.get_base_config())
  config.objective.kwargs.update(kwargs)
  with pytest.raises(config_errors.ConfigError) as error:
    train_lib.validate(config)
  return str(error.value)


def test_an_objective_option_error_names_that_option():
  message = invalid(clip_high=-0.5)
  assert message.startswith("config.objective.kwargs.clip_high: ")
  # The fix: ppo_clip's own default (PPO's epsilon, 0.2).
  assert "--config.objective.kwargs.clip_high=0.2 " in message
  assert "horizon" not in message

  message = invalid(aggregation="token_meen")
  assert message.startswith("config.objective.kwargs.aggregation: ")
  assert "token_mean" in message and "horizon" not in message

  # A constant normaliser without its constant: the horizon, T = 8 here.
  message = invalid(aggregation="seq_mean_token_sum_norm")
  assert message.startswith("config.objective.kwargs.horizon: ")
  assert "--config.objective.kwargs.horizon=8 " in message


def test_option_named_only_names_options_of_the_component():
  assert config_errors.option_named("n_min=5 exceeds n_max",
                                    ("n_min", "n_max")) == "n_min"
  assert config_errors.option_named("clip must be > 0", ("clip_high",)) == ""


# ------------------------------------------------------------------ --help


@pytest.mark.parametrize("module, example", [
    ("experiments.plan", "  python -m experiments.plan --config=configs/"
     "grpo.py \\\n      --config.model.name=qwen2.5-7b --devices=8"),
    ("experiments.export", "  python -m experiments.export --checkpoint="
     "runs/x --step=40 --dtype=bfloat16 \\\n      --out=exported-bf16/"),
    ("experiments.train", "--workdir=/tmp/x \\\n      "
     "--config.train.num_steps=3"),
])
def test_help_exits_0_with_the_usage_examples_as_written(module, example):
  result = run(module, "--help")
  assert result.returncode == 0, result.stderr[-3000:]
  assert example in result.stdout


# ------------------------------------------------------ the run's summary


def test_the_summary_of_a_run_and_of_its_rerun(tmp_path):
  workdir = str(tmp_path / "run")
  flags = ("--config=configs/grpo.py:tiny", f"--workdir={workdir}",
           "--config.train.num_steps=1", "--config.rewards.workers=0")
  first = run("experiments.train", *flags)
  assert first.returncode == 0, first.stderr[-3000:]
  records = metrics.read(os.path.join(workdir, metrics.METRICS_FILE))
  assert len(records) == 1
  out = first.stdout
  assert f"{workdir}: complete at step 1 of 1 (1 trained now)." in out
  figures = records[0]
  assert line_of(out, "last").split() == [
      "last", "step", "(1):", "reward", f"{figures['reward/total']:.3g},",
      "accuracy", f"{figures['accuracy']:.3g}"]
  assert "held-out" not in out  # eval.every = 0: not measured
  assert line_of(out, "metrics").split() == [
      "metrics", os.path.join(workdir, "metrics.jsonl")]
  assert line_of(out, "curves").split()[1] == os.path.join(workdir,
                                                           "curves.png")
  assert line_of(out, "checkpoints").split()[1:] == [
      os.path.join(workdir, "checkpoints"), "(newest:", "step", "1)"]
  assert line_of(out, "TensorBoard").split()[1:] == [
      "tensorboard", "--logdir", os.path.join(workdir, "tensorboard")]
  assert line_of(out, "evaluate").split()[1:] == [
      "python", "-m", "experiments.evaluate", f"--checkpoint={workdir}"]
  assert line_of(out, "export").split()[1:4] == [
      "python", "-m", "experiments.export"]

  again = run("experiments.train", *flags)
  assert again.returncode == 0, again.stderr[-3000:]
  assert (f"{workdir}: already complete at step 1; nothing to do; raise "
          "--config.train.num_steps to continue.") in again.stdout
  assert "0/1" not in again.stderr  # no progress bar of nothing
  assert metrics.read(os.path.join(workdir, metrics.METRICS_FILE)) == records


def test_the_headline_of_a_stopped_run():
  line = summary.headline("runs/x", step=2, num_steps=5, trained=2)
  assert line == ("runs/x: stopped at step 2 of 5; rerun the same command "
                  "to resume.")


def test_the_figures_skip_what_was_not_measured(tmp_path):
  records = [{"step": 0, "accuracy": 0.5}, {"step": 1, "reward/total": 0.25}]
  assert summary.figures(records) == ["  last step (2): reward 0.25"]
  # The latest held-out evaluation, wherever it was, with its step.
  records = [{"step": 0, "eval/greedy_accuracy": 0.125},
             {"step": 1, "eval/greedy_accuracy": 0.375},
             {"step": 2, "reward/total": "nan", "accuracy": 1.0}]
  assert summary.figures(records) == [
      "  last step (3): reward nan, accuracy 1",
      "  held-out greedy accuracy: 0.375 (after step 2)"]
  path = tmp_path / metrics.METRICS_FILE
  path.write_text("".join(json.dumps(r) + "\n" for r in records))
  text = summary.describe(str(tmp_path), str(tmp_path / "checkpoints"),
                          step=0, num_steps=2, trained=0)
  assert "evaluate" not in text and "checkpoints" not in text  # none saved
