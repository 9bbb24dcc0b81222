"""Settings that used to be ignored without a word (issue 45): an evaluate
override on a checkpoint, a data file the task does not read, a resume
under another config, and groups of one that leave every advantage 0."""

import importlib
import json
import logging
import os
import subprocess
import sys

import jax.numpy as jnp
import pytest

from grpo_jax import advantages
from grpo_jax import train
from grpo_jax.runtime import checkpoint
from grpo_jax.train import resume
from grpo_jax.train import saved_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config_of(name: str, arg="tiny"):
  return importlib.import_module(f"configs.{name}").get_config(arg)


def evaluate_cli(*flags):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
             JAX_DISABLE_MOST_OPTIMIZATIONS="true")
  return subprocess.run(
      [sys.executable, "-m", "experiments.evaluate", *flags], cwd=ROOT,
      env=env, capture_output=True, text=True, timeout=600)


# -------------------------------------- evaluate: overrides on a checkpoint


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
  """A one-step run of configs/grpo.py:tiny (temperature 1.0)."""
  workdir = str(tmp_path_factory.mktemp("grpo_run"))
  config = config_of("grpo")
  config.train.num_steps = 1
  config.checkpoint.every = 1
  config.rewards.workers = 0
  train.train(config, workdir)
  return workdir


@pytest.mark.parametrize("config_file", [None, "configs/grpo.py:tiny"])
def test_evaluate_applies_config_overrides_to_the_checkpoints_config(
    trained_run, tmp_path, config_file):
  """Without --config (an unknown flag before) and with it (the override
  was ignored: the run's temperature 1.0 was reported)."""
  _, saved = saved_runs.restore_config(trained_run)
  assert saved.rollout.temperature == 1.0
  out = tmp_path / "eval.json"
  given = [f"--config={config_file}"] if config_file else []
  result = evaluate_cli(*given, f"--checkpoint={trained_run}",
                        "--config.rollout.temperature=0.3", "--k=1",
                        "--num_problems=2", f"--json={out}")
  assert result.returncode == 0, result.stderr[-3000:]
  figures = json.loads(out.read_text())
  assert figures["temperature"] == pytest.approx(0.3)
  assert figures["num_problems"] == 2 and figures["step"] == 1
  if config_file:  # its own values are not read: said, not silent
    assert "the run's own config is evaluated" in result.stderr


def test_evaluate_refuses_overrides_of_the_trained_policy(trained_run):
  result = evaluate_cli(f"--checkpoint={trained_run}",
                        "--config.model.name=smollm2-135m-instruct",
                        "--config.lora.rank=4")
  assert result.returncode != 0
  assert "config.model.name, config.lora.rank" in result.stderr
  assert "come from its checkpoint" in result.stderr


def test_with_overrides_changes_a_copy_and_names_every_policy_field():
  config = config_of("grpo")
  changed = saved_runs.with_overrides(
      config, {"rollout.temperature": 0.3, "eval.num_problems": 7})
  assert (changed.rollout.temperature, changed.eval.num_problems) == (0.3, 7)
  assert config.rollout.temperature == 1.0  # the run's config is untouched
  with pytest.raises(ValueError, match=r"config\.model\.dtype, config\.seed:"):
    saved_runs.with_overrides(config, {"model.dtype": "bfloat16", "seed": 3,
                                       "rollout.temperature": 0.3})


# ------------------------------------------- a file the task does not read


def test_a_data_path_without_a_task_that_reads_it_is_refused():
  config = config_of("grpo")
  config.data.path = "my.jsonl"
  with pytest.raises(ValueError, match=r"config\.data\.task: 'arithmetic' "
                     r"reads no file.*set --config\.data\.task=hf or jsonl"):
    train.validate(config)
  config.data.task = "jsonl"  # the fix; the file itself is build's check
  train.validate(config)


# --------------------------------------------- resuming under another config


def save_checkpoint(workdir, config, step=1):
  """A checkpoint of `config` in `workdir`, as a run writes its metadata
  (the state does not matter: the check reads the metadata alone)."""
  ckpt = checkpoint.Checkpointer(train.checkpoint_directory(str(workdir)))
  ckpt.save(step, {"x": jnp.zeros(2)},
            {"config": config.to_json_best_effort()})
  ckpt.close()


class Built(Exception):
  pass


@pytest.fixture
def no_build(monkeypatch):
  """train.train stops where the model would load."""
  def build(config):
    raise Built()
  monkeypatch.setattr(train, "build_validated", build)


def test_resuming_with_another_config_is_refused_before_the_model_loads(
    tmp_path, no_build):
  save_checkpoint(tmp_path, config_of("gspo"))
  with pytest.raises(ValueError) as error:
    train.train(config_of("cispo"), str(tmp_path))
  message = str(error.value)
  assert "checkpoint 1 in" in message
  assert "objective.name: 'gspo' -> 'cispo'" in message
  assert "objective.kwargs.clip_low: 0.0003 -> 1.0" in message
  assert "--config.train.allow_config_change=True" in message
  assert not (tmp_path / "config.json").exists()  # nothing overwritten


def test_a_forced_config_change_resumes_with_a_warning(tmp_path, no_build,
                                                      caplog):
  save_checkpoint(tmp_path, config_of("gspo"))
  config = config_of("cispo")
  config.train.allow_config_change = True
  with caplog.at_level(logging.WARNING), pytest.raises(Built):
    train.train(config, str(tmp_path))
  assert "objective.name: 'gspo' -> 'cispo'" in caplog.text


def test_resuming_may_extend_a_run_and_change_its_bookkeeping(tmp_path,
                                                             no_build):
  config = config_of("gspo")
  save_checkpoint(tmp_path, config)
  config.train.num_steps *= 2
  config.checkpoint.every = 7
  config.eval.every = 3
  config.metrics.plot = False
  config.train.microbatch_size = 2
  with pytest.raises(Built):  # past the check, to the model
    train.train(config, str(tmp_path))
  config.optimizer.learning_rate *= 2
  with pytest.raises(ValueError, match="1 field.*optimizer.learning_rate"):
    train.train(config, str(tmp_path))


def test_a_pinned_revision_is_no_change_and_a_fresh_run_has_none(tmp_path):
  config = config_of("grpo")
  pinned = config.copy_and_resolve_references()
  pinned.model.revision = "0123abcd"  # what training pins a hub id to
  assert resume.changed_fields(pinned.to_json_best_effort(), config) == []
  config.model.revision = "v2"
  assert resume.changed_fields(pinned.to_json_best_effort(), config) == [
      ("model.revision", "0123abcd", "v2")]
  assert resume.saved_config(str(tmp_path / "fresh")) is None


# ------------------------------------------------------------ groups of one


def test_one_generation_per_prompt_is_refused_where_advantages_need_two():
  config = config_of("grpo")
  config.rollout.num_generations = 1
  with pytest.raises(ValueError, match=r"config\.rollout\.num_generations: "
                     r"1 .*'grpo'.*every advantage would be 0.*"
                     r"num_generations=2 or more.*remax.*spo"):
    train.validate(config)


@pytest.mark.parametrize("name,kwargs", [
    ("remax", {}), ("reinforce_plus_plus", {}), ("mdp_grpo", {}),
    ("riskpo", {})])
def test_one_generation_is_fine_where_the_baseline_is_not_the_group(
    name, kwargs):
  config = config_of("grpo")
  config.rollout.num_generations = 1
  config.advantage.name, config.advantage.kwargs = name, kwargs
  train.validate(config)


def test_spo_trains_one_generation_per_prompt_as_its_paper_does():
  config = config_of("spo", None)
  assert config.rollout.num_generations == 1
  train.validate(config)


def test_an_estimators_options_decide_its_group_size():
  assert advantages.meta("mdp_grpo").min_group_size == 1
  assert advantages.meta("mdp_grpo", mix=0.0).min_group_size == 2
  assert advantages.meta("riskpo", quantiles="batch").min_group_size == 2
  config = config_of("grpo")
  config.rollout.num_generations = 1
  config.advantage.name = "mdp_grpo"
  config.advantage.kwargs = dict(mix=0.0)
  with pytest.raises(ValueError, match="num_generations: 1 .*'mdp_grpo'"):
    train.validate(config)
