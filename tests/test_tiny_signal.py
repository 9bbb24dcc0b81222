"""The ``:tiny`` presets train on a reward the random tiny model partly
earns (`config.use_tiny`): their first steps carry nonzero advantages, so
a smoke run exercises the objective, not only the plumbing."""

import importlib

import pytest

from experiments import tiny_metrics
from grpo_jax import config as config_lib
from grpo_jax import rewards
from grpo_jax import testing


def load(name, arg="tiny"):
  return importlib.import_module(f"configs.{name}").get_config(arg)


def graded(completion, answer):
  return rewards.get("graded_accuracy")([""], [completion], [answer])[0]


def test_graded_accuracy_credits_the_last_number_by_its_distance():
  assert graded("so \\boxed{8}", "8") == 1.0
  assert graded("12 then 7", "8") == 1 / (1 + 1)  # the last number, 7
  assert graded("x7y", "10") == 1 / (1 + 3)
  assert graded("-3", "-3") == 1.0 and graded("3", "-3") == 1 / (1 + 6)
  assert graded("2.5", "2") == 1 / (1 + 0.5)
  assert graded("no number here", "8") == 0.0
  with pytest.raises(ValueError, match="plain number"):
    graded("8", "\\frac{1}{2}")


def test_tiny_grades_accuracy_in_its_place():
  plain, tiny = load("dapo", None), load("dapo")
  assert tiny.rewards.functions == (config_lib.TINY_REWARD, "format",
                                    "accuracy")
  assert tiny.rewards.weights == tuple(plain.rewards.weights) + (0.0,)
  assert tiny.groups.kwargs.signal_reward == config_lib.TINY_REWARD
  assert load("bppo").filter.kwargs.correct_reward == config_lib.TINY_REWARD
  assert load("bppo", None).filter.kwargs.correct_reward == "accuracy"
  # POW3R's rubric reads every column as a criterion: none is added.
  pow3r = load("pow3r")
  assert pow3r.rewards.functions[0] == config_lib.TINY_REWARD
  assert len(pow3r.rewards.functions) == len(
      load("pow3r", None).rewards.functions)
  # SD-GRPO's segments task has no accuracy column to grade.
  assert load("sd_grpo").rewards.functions == load(
      "sd_grpo", None).rewards.functions


@pytest.mark.parametrize("name", ["dapo", "bppo", "pow3r", "lcpo",
                                  "sd_grpo", "edge_grpo"])
def test_ungraded_gives_a_tiny_preset_its_accuracy_back(name):
  """`testing.ungraded` (for tests of all-wrong groups) undoes the swap:
  the rewards and the stage options naming accuracy are the plain
  config's again."""
  plain, tiny = load(name, None), testing.ungraded(load(name))
  assert tiny.rewards.functions == plain.rewards.functions
  assert tiny.rewards.weights == plain.rewards.weights
  for stage in config_lib.STAGES:
    named = lambda c: {k for k, v in c[stage].kwargs.items()
                       if v == "accuracy"}
    assert named(tiny) == named(plain), stage


def test_without_signal_names_the_configs_that_never_trained():
  trained = {"step": 0, "advantage/abs_mean": 0.5,
             "rollout/nonzero_gradient_share": 1.0}
  idle = {"step": 0, "advantage/abs_mean": 0.0,
          "rollout/nonzero_gradient_share": 0.0}
  found = tiny_metrics.without_signal(
      {"a": [idle, dict(trained, step=1)], "b": [idle, dict(idle, step=1)],
       "c": {"error": "x"}})
  assert [name for name, _ in found] == ["b", "c"]
  assert "advantage/abs_mean=0.0" in found[0][1]


# Representative objectives and step paths: the plain P x G path (GRPO,
# GSPO's sequence ratio, CISPO's clipped weights), DAPO's dynamic sampling
# (it keeps only groups with signal) and Knapsack-RL's budgets.
@pytest.mark.parametrize("name", ["grpo", "dapo", "gspo", "cispo",
                                  "knapsack_rl"])
def test_a_tiny_run_trains_on_nonzero_advantages(name):
  records = tiny_metrics.run_config(name, 2)
  assert tiny_metrics.without_signal({name: records}) == []
  if name == "dapo":  # groups kept, updates applied: before, none of either
    assert max(r["rollout/groups_with_signal"] for r in records) > 0
    minibatches = load(name).train.num_minibatches
    assert min(r["skipped_updates"] for r in records) < minibatches
