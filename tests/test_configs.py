"""Every config file loads and validates; bad values and keys fail early."""

import glob
import importlib
import os
import subprocess
import sys

import pytest

from configs import common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = sorted(
    os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "configs",
                                                             "*.py"))
    if not os.path.basename(p).startswith(("_", "common")))


def load(name, arg=None):
  return importlib.import_module(f"configs.{name}").get_config(arg)


def test_all_variants_are_present():
  expected = {"grpo", "dr_grpo", "dapo", "two_grpo", "gspo", "gmpo", "cfpo",
              "r2vpo", "sapo", "cispo", "rgra", "quickstart"}
  assert expected <= set(VARIANTS)


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("arg", [None, "tiny"])
def test_every_config_loads_and_validates(name, arg):
  config = load(name, arg)
  assert common.validate(config) is config
  module = importlib.import_module(f"configs.{name}")
  assert "python -m experiments.train" in module.__doc__
  assert "Expect" in module.__doc__


def test_variants_set_what_their_papers_say():
  dapo = load("dapo")
  assert dapo.objective.kwargs.clip_high == 0.28
  assert dapo.objective.aggregation == "token_mean"
  assert dapo.kl.beta == 0.0
  assert dapo.rollout.dynamic_sampling and dapo.rewards.overlong.enabled
  assert load("two_grpo").rollout.num_generations == 2
  assert load("two_grpo", "tiny").rollout.num_generations == 2
  dr = load("dr_grpo")
  assert dr.objective.horizon == dr.rollout.max_new_tokens
  assert load("rgra").objective.name == "reinforce"
  assert load("quickstart").model.name == "smollm2-135m-instruct"
  assert load("grpo", "tiny").model.name == "tiny"


@pytest.mark.parametrize("field,value,named", [
    ("objective.name", "ppo", "objective.name"),
    ("advantage.name", "nope", "advantage.name"),
    ("objective.aggregation", "mean", "objective.aggregation"),
    ("kl.estimator", "k4", "kl.estimator"),
    ("rollout.num_generations", 0, "rollout.num_generations"),
    ("optimizer.learning_rate", -1e-3, "optimizer.learning_rate"),
    ("train.microbatch_size", 3, "train.microbatch_size"),
    ("train.minibatch_size", 5, "train.minibatch_size"),
    ("rollout.top_p", 1.5, "rollout.top_p"),
    ("kl.beta", -0.1, "kl.beta"),
    ("optimizer.decay", "step", "optimizer.decay"),
    ("data.ops", ("^",), "data.ops"),
])
def test_invalid_values_name_the_field(field, value, named):
  config = load("grpo")
  section, key = field.split(".")
  config[section][key] = value
  with pytest.raises(ValueError, match=named.replace(".", r"\.")):
    common.validate(config)


def test_gdpo_with_the_overlong_column_needs_grpo_advantages():
  """One reward function plus DAPO's overlong penalty is K=2 rewards, so
  GDPO would silently replace the configured estimator."""
  config = load("dapo")
  config.rewards.functions, config.rewards.weights = ("accuracy",), (1.0,)
  config.advantage.name, config.advantage.kwargs = "dr_grpo", {}
  common.validate(config)  # summed rewards: any estimator
  config.rewards.multi_reward_mode = "normalize_then_sum"
  with pytest.raises(ValueError, match=r"rewards\.multi_reward_mode"):
    common.validate(config)


@pytest.mark.parametrize("name,state,named", [
    ("r2vpo", dict(eta=0.1, etta=1.0), r"objective\.state\.etta"),
    ("r2vpo", dict(delta=0.02), r"objective\.state\.delta.*kwargs"),
    ("grpo", dict(eta=0.1), r"objective\.state.*keeps no state"),
])
def test_objective_state_options_are_checked(name, state, named):
  config = load(name)
  config.objective.state = state
  with pytest.raises(ValueError, match=named):
    common.validate(config)


def test_horizon_is_required_by_the_constant_normaliser():
  config = load("grpo")
  config.objective.aggregation = "seq_mean_token_sum_norm"
  with pytest.raises(ValueError, match=r"objective\.horizon.*max completion"):
    common.validate(config)
  config.objective.horizon = 96
  common.validate(config)


def test_unknown_objective_hyperparameter_names_the_key():
  config = load("gspo")
  config.objective.kwargs.eps_high = 0.2  # gspo calls it clip_high
  with pytest.raises(ValueError, match=r"objective\.kwargs\.eps_high"):
    common.validate(config)


def test_mismatched_reward_weights_fail():
  config = load("grpo")
  config.rewards.weights = (1.0,)
  with pytest.raises(ValueError, match=r"rewards\.weights"):
    common.validate(config)


def test_fields_derived_from_max_new_tokens_follow_an_override():
  """A command-line --config.rollout.max_new_tokens=256 (an assignment after
  get_config) moves DAPO's overlong window and Dr. GRPO's horizon with it;
  a copy would leave a hidden cap at the old length."""
  dapo = load("dapo")
  dapo.rollout.max_new_tokens = 256
  assert dapo.rewards.overlong.max_length == 256
  assert dapo.rewards.overlong.cache_length == 64
  common.validate(dapo)
  dr_grpo = load("dr_grpo")
  dr_grpo.rollout.max_new_tokens = 256
  assert dr_grpo.objective.horizon == 256


def test_unknown_config_argument_fails():
  with pytest.raises(ValueError, match="tiny"):
    load("grpo", "huge")


def run_train_cli(*flags):
  return subprocess.run(
      [sys.executable, "-m", "experiments.train", *flags],
      cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_cli_rejects_unknown_override_key_before_compute(tmp_path):
  result = run_train_cli("--config=configs/grpo.py:tiny",
                         f"--workdir={tmp_path}", "--config.rollout.nope=3")
  assert result.returncode != 0
  assert "nope" in result.stderr
  assert not os.path.exists(os.path.join(tmp_path, "metrics.jsonl"))


def test_cli_rejects_invalid_value_naming_the_field(tmp_path):
  result = run_train_cli("--config=configs/grpo.py:tiny",
                         f"--workdir={tmp_path}",
                         "--config.rollout.num_generations=0")
  assert result.returncode != 0
  assert "config.rollout.num_generations" in result.stderr
  assert not os.path.exists(os.path.join(tmp_path, "metrics.jsonl"))
