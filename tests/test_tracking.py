"""Weights & Biases logging (`grpo_jax.runtime.tracking`): a tiny run in
offline mode writes W&B's own run file, read back here with W&B's reader:
each step's record at its step, the config once, the exit code; a resumed
run keeps its W&B id; only process 0 logs; the config's fields are checked
before any compute."""

import glob
import json
import os
import subprocess
import sys

import pytest

from configs import grpo as grpo_config
from grpo_jax import config as config_lib
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.runtime import metrics
from grpo_jax.runtime import sharding
from grpo_jax.runtime import tracking


def tiny_config():
  config = testing.short_run_config(grpo_config.get_config("tiny"),
                                    num_steps=2, checkpoint_every=2)
  config.metrics.wandb = True
  config.metrics.wandb_project = "grpo_jax_tests"
  return config


@pytest.fixture(scope="module")
def built():
  """(config, run): one build, its compiled functions reused by each run."""
  pytest.importorskip("wandb")
  config = tiny_config()
  return config, train.build(config)


@pytest.fixture
def offline(tmp_path, monkeypatch):
  """W&B offline, its files under a fresh WANDB_DIR; returns that dir."""
  directory = tmp_path / "wandb_dir"
  directory.mkdir()
  monkeypatch.setenv("WANDB_MODE", "offline")
  monkeypatch.setenv("WANDB_DIR", str(directory))
  monkeypatch.setenv("WANDB_SILENT", "true")
  return directory


def offline_runs(directory) -> list:
  """The .wandb files of the offline runs under `directory`, oldest first."""
  return sorted(glob.glob(os.path.join(
      str(directory), "wandb", "offline-run-*", "run-*.wandb")))


def read_wandb_file(path) -> dict:
  """What a run's .wandb file holds, through W&B's own reader (``wandb leet
  inspect --json``: one JSON record a line): history {step: {name:
  value}}, config {name: value} and the exit code."""
  result = subprocess.run(
      [sys.executable, "-m", "wandb", "leet", "inspect", str(path), "--json"],
      capture_output=True, text=True, timeout=120, check=True)
  history, config, exit_code = {}, {}, None
  for line in result.stdout.splitlines():
    if not line.startswith("{"):
      continue
    record = json.loads(line)
    if record["type"] == "history":
      history[int(record["history"]["step"]["num"])] = (
          record["history"]["item"])
    elif record["type"] == "run":
      config.update(record["run"]["config"]["update"])
    elif record["type"] == "config":
      config.update(record["config"].get("update", {}))
    elif record["type"] == "exit":
      exit_code = record["exit"].get("exit_code", 0)
  return dict(history=history, config=config, exit_code=exit_code)


def test_a_run_logs_each_steps_record_and_its_config(built, offline, tmp_path):
  config, run = built
  workdir = tmp_path / "run"
  train.train(config, str(workdir), run=run)
  (path,) = offline_runs(offline)
  logged = read_wandb_file(path)
  records = metrics.read(str(workdir / metrics.METRICS_FILE))
  assert [r["step"] for r in records] == [0, 1]
  assert sorted(logged["history"]) == [0, 1]
  for record in records:
    history = logged["history"][record["step"]]
    assert history["reward/total"] == pytest.approx(record["reward/total"])
    assert history["loss"] == pytest.approx(record["loss"])
  # The config, once, as config.json holds it.
  saved = metrics.read_config(str(workdir))
  assert logged["config"]["rollout"] == saved["rollout"]
  assert logged["config"]["rollout"]["num_prompts"] == (
      config.rollout.num_prompts)
  assert logged["config"]["objective"]["name"] == config.objective.name
  assert logged["exit_code"] == 0
  # The run's id is kept in the workdir, and names its file.
  run_id = (workdir / tracking.RUN_ID_FILE).read_text().strip()
  assert os.path.basename(path) == f"run-{run_id}.wandb"


def test_a_failed_run_is_marked_and_its_rerun_logs_to_the_same_id(
    built, offline, tmp_path):
  config, run = built
  workdir = str(tmp_path / "run")

  def crash(step, record):
    del record
    if step == 0:
      raise RuntimeError("a fault in step 0")
  with pytest.raises(RuntimeError, match="a fault in step 0"):
    train.train(config, workdir, run=run, callback=crash)
  (failed,) = offline_runs(offline)
  logged = read_wandb_file(failed)
  assert logged["exit_code"] == 1
  assert sorted(logged["history"]) == [0]
  # The rerun (no checkpoint yet: from step 0) continues that W&B run: a
  # new offline directory (the same one within the same second) of its id.
  train.train(config, workdir, run=run)
  runs = offline_runs(offline)
  assert {os.path.basename(p) for p in runs} == {os.path.basename(failed)}
  logged = read_wandb_file(runs[-1])
  assert logged["exit_code"] == 0 and sorted(logged["history"]) == [0, 1]


def test_only_process_zero_logs(built, offline, tmp_path, monkeypatch):
  config, run = built
  monkeypatch.setattr(sharding, "is_main_process", lambda: False)
  train.train(config, str(tmp_path / "run"), run=run)
  assert offline_runs(offline) == []
  assert not (tmp_path / "run" / metrics.METRICS_FILE).exists()


def test_wandb_is_off_by_default():
  config = config_lib.get_base_config()
  assert config.metrics.wandb is False
  assert tracking.settings_from_config(config.metrics) is None
  config.metrics.wandb = True
  assert tracking.settings_from_config(config.metrics) == tracking.Settings(
      project="grpo_jax", entity="", name="", mode="")


def test_wandb_fields_are_checked_before_any_compute(monkeypatch):
  config = grpo_config.get_config("tiny")
  config.metrics.wandb_mode = "offlne"
  with pytest.raises(ValueError, match=r"config.metrics.wandb_mode: 'offlne' "
                     "is unknown; choose one of , online, offline"):
    train.validate(config)
  # Without the package: an error naming the field and the install.
  config = grpo_config.get_config("tiny")
  config.metrics.wandb = True
  monkeypatch.setattr(tracking, "is_installed", lambda: False)
  with pytest.raises(ValueError, match=r"config.metrics.wandb: is True but "
                     r"the wandb package is not installed; pip install"):
    config_lib.check_files(config)

