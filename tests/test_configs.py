"""Every config file loads and validates; bad values and keys fail early."""

import glob
import importlib
import os
import subprocess
import sys

import pytest
from grpo_jax import train as train_lib
from grpo_jax import data
from grpo_jax.runtime import metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = sorted(
    os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "configs",
                                                             "*.py"))
    if not os.path.basename(p).startswith("_"))


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
  assert train_lib.validate(config) is config
  module = importlib.import_module(f"configs.{name}")
  assert "python -m experiments.train" in module.__doc__
  assert "Expect" in module.__doc__


def test_variants_set_what_their_papers_say():
  dapo = load("dapo")
  assert dapo.objective.kwargs.clip_high == 0.28
  assert dapo.objective.kwargs.aggregation == "token_mean"
  assert dapo.train.num_minibatches == 4  # off policy, as the paper
  assert load("gspo").train.num_minibatches == 4  # "four minibatches"
  assert load("dapo", "tiny").train.num_minibatches == 4
  assert dapo.kl.beta == 0.0
  assert dapo.groups.name == "dynamic_sampling"
  assert dapo.groups.kwargs.signal_reward == "accuracy"  # not the shaped sum
  assert "overlong" in dapo.rewards.shapers
  assert load("two_grpo").rollout.num_generations == 2
  assert load("two_grpo", "tiny").rollout.num_generations == 2
  dr = load("dr_grpo")
  assert dr.objective.kwargs.horizon == dr.rollout.max_new_tokens
  assert load("rgra").objective.name == "reinforce"
  assert load("quickstart").model.name == "smollm2-135m-instruct"
  assert load("grpo", "tiny").model.name == "tiny"


@pytest.mark.parametrize("field,value,named", [
    ("objective.name", "ppo", "objective.name"),
    ("advantage.name", "nope", "advantage.name"),
    ("objective.kwargs.aggregation", "mean", "objective.kwargs"),
    ("objective.kwargs.clip_low", -0.1, "objective.kwargs"),
    ("kl.estimator", "k4", "kl.estimator"),
    ("rollout.num_generations", 0, "rollout.num_generations"),
    ("optimizer.learning_rate", -1e-3, "optimizer.learning_rate"),
    ("train.microbatch_size", 3, "train.microbatch_size"),
    ("train.num_minibatches", 5, "train.num_minibatches"),
    ("rollout.top_p", 1.5, "rollout.top_p"),
    ("kl.beta", -0.1, "kl.beta"),
    ("optimizer.decay", "step", "optimizer.decay"),
    ("data.ops", ("^",), "data.ops"),
    ("data.task", "mnist", "data.task"),
    ("groups.name", "dynamic", "groups.name"),
    ("rows.name", "truncated", "rows.name"),
    ("credit.name", "nope", "credit.name"),
    ("llds.coef", -0.1, "llds.coef"),
    ("llds.coef", 0.2, "llds.coef"),  # grpo is on policy: llds would be 0
    ("llds.gate", "token", "llds.gate"),
])
def test_invalid_values_name_the_field(field, value, named):
  config = load("grpo")
  *path, key = field.split(".")
  node = config
  for part in path:
    node = node[part]
  node[key] = value
  with pytest.raises(ValueError, match=named.replace(".", r"\.")):
    train_lib.validate(config)


def test_gdpo_is_an_estimator_and_its_options_are_checked():
  """GDPO is advantage.name="gdpo" (there is no rewards.multi_reward_mode);
  an option it does not take is an error, not silently dropped."""
  config = load("dapo")
  assert "multi_reward_mode" not in config.rewards
  config.advantage.name = "gdpo"
  with pytest.raises(ValueError, match=r"advantage\.kwargs.*'scale'.*eps, ddof"):
    train_lib.validate(config)  # GDPO has no scale
  config.advantage.kwargs = {"eps": 1e-4, "ddof": 1}
  train_lib.validate(config)


def test_signal_reward_names_a_configured_reward():
  config = load("dapo")
  for name in ("accuracy", "format", "overlong", ""):
    config.groups.kwargs.signal_reward = name
    train_lib.validate(config)
  config.groups.kwargs.signal_reward = "length"
  with pytest.raises(ValueError,
                     match=r"groups\.kwargs\.signal_reward.*overlong"):
    train_lib.validate(config)
  config.groups.kwargs.signal_reward = "overlong"
  config.rewards.shapers = {}
  with pytest.raises(ValueError, match=r"groups\.kwargs\.signal_reward"):
    train_lib.validate(config)


def test_stage_options_are_checked_by_their_components():
  config = load("dapo")
  config.groups.kwargs.max_round = 2  # dynamic_sampling calls it max_rounds
  with pytest.raises(ValueError, match=r"groups\.kwargs.*max_rounds"):
    train_lib.validate(config)
  config = load("dapo")
  config.rewards.shapers.overlong.cache = 3
  with pytest.raises(ValueError, match=r"rewards\.shapers\.overlong.*cache_length"):
    train_lib.validate(config)
  config = load("grpo")
  config.rewards.shapers = {"overlong": dict(weight=1.0, max_length=1000,
                                             cache_length=10)}
  with pytest.raises(ValueError, match=r"overlong\.max_length.*max_new_tokens"):
    train_lib.validate(config)


@pytest.mark.parametrize("name,key,named", [
    ("r2vpo", "etta", r"objective\.kwargs\.etta.*lam0, eta"),
    ("r2vpo", "lam", r"objective\.kwargs\.lam\b"),  # state: set lam0
    ("grpo", "eta", r"objective\.kwargs\.eta"),  # ppo_clip keeps no state
])
def test_objective_state_options_are_checked(name, key, named):
  config = load(name)
  config.objective.kwargs[key] = 0.1
  with pytest.raises(ValueError, match=named):
    train_lib.validate(config)


def test_horizon_is_required_by_the_constant_normaliser():
  config = load("grpo")
  config.objective.kwargs.aggregation = "seq_mean_token_sum_norm"
  with pytest.raises(ValueError, match=r"objective\.kwargs.*horizon"):
    train_lib.validate(config)
  config.objective.kwargs.horizon = 96
  train_lib.validate(config)


def test_unknown_objective_hyperparameter_names_the_key():
  config = load("gspo")
  config.objective.kwargs.eps_high = 0.2  # gspo calls it clip_high
  with pytest.raises(ValueError, match=r"objective\.kwargs\.eps_high"):
    train_lib.validate(config)


def test_mismatched_reward_weights_fail():
  config = load("grpo")
  config.rewards.weights = (1.0,)
  with pytest.raises(ValueError, match=r"rewards\.weights"):
    train_lib.validate(config)


def test_fields_derived_from_max_new_tokens_follow_an_override():
  """A command-line --config.rollout.max_new_tokens=256 (an assignment after
  get_config) moves DAPO's overlong window and Dr. GRPO's horizon with it;
  a copy would leave a hidden cap at the old length."""
  dapo = load("dapo")
  dapo.rollout.max_new_tokens = 256
  assert dapo.rewards.shapers.overlong.max_length == 256
  assert dapo.rewards.shapers.overlong.cache_length == 64
  train_lib.validate(dapo)
  dr_grpo = load("dr_grpo")
  dr_grpo.rollout.max_new_tokens = 256
  assert dr_grpo.objective.kwargs.horizon == 256


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


def test_the_comparison_at_quickstart_scale_keeps_the_variant():
  """--scale=quickstart: a base-scale config (200 steps of 8 x 8) runs 40
  steps of 2 x 4 on the comparison task, with its own objective and
  minibatches (the passes that take it off policy) kept."""
  from experiments import runs  # pylint: disable=g-import-not-at-top
  own = runs.comparison_config("ce_gppo")
  small = runs.comparison_config("ce_gppo", "quickstart")
  assert (own.train.num_steps, own.rollout.num_prompts) == (200, 8)
  assert (small.train.num_steps, small.rollout.num_prompts,
          small.rollout.num_generations) == (40, 2, 4)
  assert small.eval.every == 40 and small.eval.num_problems == 200
  assert small.objective.to_dict() == own.objective.to_dict()
  assert small.train.num_minibatches == own.train.num_minibatches == 4


def test_the_comparison_task_holds_200_heldout_problems(tmp_path):
  """experiments/compare.py's task: one-digit +, -, * with 200 distinct
  held-out problems none of which training draws; an SD-GRPO config keeps
  its own task; the after-accuracy is read from the run's last evaluation
  (steps counted from 1)."""
  from experiments import runs  # pylint: disable=g-import-not-at-top
  config = runs.comparison_config("quickstart")
  assert config.data.ops == ("+", "-", "*") and config.eval.every == 40
  task = data.make_task(config.data, seed=0)
  heldout = {e.question for e in task.heldout(200)}
  assert len(heldout) == 200
  assert not heldout & {e.question for step in range(40)
                        for e in task.train(step, 8)}
  assert runs.comparison_config("sd_grpo").data.task == "segments"
  writer = metrics.MetricsWriter(str(tmp_path), tensorboard=False)
  writer.write(19, {"eval/greedy_accuracy": 0.5, "loss": 1.0})
  writer.write(20, {"loss": 1.0})
  writer.write(39, {"eval/greedy_accuracy": 0.625})
  writer.close()
  assert runs.last_accuracy(str(tmp_path)) == (40, 0.625)
  assert runs.last_accuracy(str(tmp_path / "missing")) is None


def test_the_comparison_summarises_rollouts_signal_and_length(tmp_path):
  """Seven steps: rollouts summed (a pilot-only step scores 4), the
  nonzero-gradient share averaged over every step (one that trains nothing
  counts 0), lengths over the first and the last five steps; the clip
  fraction and ratio spread over the steps that log them."""
  from experiments import runs  # pylint: disable=g-import-not-at-top
  writer = metrics.MetricsWriter(str(tmp_path), tensorboard=False)
  for step, (scored, share, length) in enumerate(
      [(8, 0.5, 40), (4, 0.0, 30), (8, 1.0, 20), (8, 0.5, 10), (8, 0.0, 10),
       (8, 1.0, 6), (8, 0.5, 4)]):
    objective = (dict(clip_fraction=0.1 * step, ratio_max=1.0 + 0.1 * step,
                      ratio_min=1.0 - 0.1 * step) if step >= 4 else {})
    writer.write(step, {"reward/scored": scored,
                        "rollout/nonzero_gradient_share": share,
                        "completion_length/mean": length, **objective})
  writer.write(6, {"eval/greedy_accuracy": 0.5})  # an evaluation record
  writer.close()
  summary = runs.run_summary(str(tmp_path))
  assert summary["rollouts"] == 52
  assert summary["nonzero_share"] == pytest.approx(3.5 / 7)
  assert summary["length_first5"] == pytest.approx(110 / 5)
  assert summary["length_last5"] == pytest.approx(50 / 5)
  # Steps 4, 5, 6 log them: clip 0.4, 0.5, 0.6; spread 0.8, 1.0, 1.2.
  assert summary["clip_fraction"] == pytest.approx(0.5)
  assert summary["ratio_spread"] == pytest.approx(1.0)
  writer = metrics.MetricsWriter(str(tmp_path / "plain"), tensorboard=False)
  writer.write(0, {"reward/scored": 8, "rollout/nonzero_gradient_share": 1.0,
                   "completion_length/mean": 5})
  writer.close()
  plain = runs.run_summary(str(tmp_path / "plain"))
  assert plain["clip_fraction"] is None and plain["ratio_spread"] is None


def test_the_comparison_measures_the_base_model_once_per_task_and_prompts():
  """SD-GRPO's own task and LCPO's prompts get their own "before"; configs
  that differ only in how they train share one."""
  from experiments import runs  # pylint: disable=g-import-not-at-top
  key = lambda name: runs.baseline_key(runs.comparison_config(name))
  assert key("quickstart") == key("ebpo") == key("dvao")
  assert key("sd_grpo") != key("quickstart")
  assert key("lcpo") != key("quickstart")
