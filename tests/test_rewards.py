"""Tests for grpo_jax.rewards: accuracy, format, overlong penalty, score."""

import threading

import numpy as np
import pytest

from grpo_jax import rewards
from grpo_jax import testing


def _accuracy(completions, answer="8"):
  n = len(completions)
  return rewards.accuracy([""] * n, completions, [answer] * n)


@pytest.mark.parametrize("completion", [
    "\\boxed{8}",
    "3 + 5 = 8, so the answer is \\boxed{8}.",
    "The answer is 8.",
    "8",
    "We add them: 3 + 5 = 8",
    "Answer: 8\nI hope this helps!",
    "$\\boxed{8.0}$",
])
def test_accuracy_correct(completion):
  assert _accuracy([completion]) == [1.0]


@pytest.mark.parametrize("completion", [
    "\\boxed{7}",
    "The answer is 9.",
    "3 + 5 = 9",
    "-8",
])
def test_accuracy_incorrect(completion):
  assert _accuracy([completion]) == [0.0]


def test_accuracy_boxed_beats_earlier_numbers():
  # The box is the final answer even when other numbers come after it.
  assert _accuracy(["I think 7. \\boxed{8} (not 9)"]) == [1.0]
  assert _accuracy(["I think 8. \\boxed{7} (not 8)"]) == [0.0]


@pytest.mark.parametrize("completion", ["", "blah blah", "}{\\boxed{", "???"])
def test_accuracy_garbage_is_zero(completion):
  assert _accuracy([completion]) == [0.0]


@pytest.mark.parametrize("completion", [
    "\\boxed{3 + 5}", "3 + 5 = ?", "The answer is 3+5."])
def test_accuracy_rejects_echoed_expression(completion):
  # math-verify alone calls "3 + 5" equal to 8; echoing the question must not
  # earn the reward.
  assert _accuracy([completion]) == [0.0]


def test_accuracy_negative_and_large_answers():
  assert _accuracy(["\\boxed{-52}"], answer="-52") == [1.0]
  assert _accuracy(["\\boxed{52}"], answer="-52") == [0.0]
  assert _accuracy(["The answer is 1436."], answer="1436") == [1.0]


def test_accuracy_batch_is_elementwise():
  got = rewards.accuracy(["p"] * 3, ["\\boxed{1}", "\\boxed{2}", "\\boxed{4}"],
                         ["1", "3", "4"])
  assert got == [1.0, 0.0, 1.0]


def test_accuracy_unparsable_reference_raises():
  with pytest.raises(ValueError, match="reference answer"):
    rewards.accuracy([""], ["\\boxed{8}"], ["no number here"])


def test_accuracy_mismatched_lengths_raise():
  with pytest.raises(ValueError, match="one entry per completion"):
    rewards.accuracy(["", ""], ["8"], ["8"])


def test_accuracy_outside_main_thread():
  # math-verify's signal-based timeout fails off the main thread.
  result = {}
  thread = threading.Thread(
      target=lambda: result.update(value=_accuracy(["\\boxed{8}", "7"])))
  thread.start()
  thread.join()
  assert result["value"] == [1.0, 0.0]


def test_answer_classes_group_equivalent_answers():
  """Equal answers share the index of their first holder, written
  differently or not; an answer that does not parse is a class of its own."""
  texts = ["so \\boxed{7}", "no digits here", "\\boxed{3}", "It is 7.",
           "\\boxed{\\frac{6}{2}}", "nothing"]
  assert rewards.verifiers.answer_classes(texts) == [0, -1, 2, 0, 2, -1]
  assert rewards.verifiers.answer_classes([]) == []


@pytest.mark.parametrize("completion,expected", [
    ("So the sum is \\boxed{8}", 1.0),
    ("\\boxed{8}.", 1.0),
    ("$\\boxed{\\frac{1}{2}}$\n", 1.0),
    ("\\boxed{8} and then more words", 0.0),
    ("The answer is 8.", 0.0),
    ("\\boxed{}", 0.0),
    ("", 0.0),
])
def test_format_reward(completion, expected):
  assert rewards.format_reward([""], [completion], [""]) == [expected]


def test_format_matches_instruction():
  assert "\\boxed{}" in rewards.ANSWER_INSTRUCTION


def test_overlong_penalty_hand_values():
  # max 10, cache 4: free up to 6, then -1/4 per token, -1 beyond 10.
  lengths = np.array([0, 5, 6, 7, 8, 10, 11, 100])
  expected = np.array([0, 0, 0, -0.25, -0.5, -1, -1, -1], np.float32)
  got = rewards.overlong_penalty(lengths, max_length=10, cache_length=4)
  assert got.dtype == np.float32
  testing.assert_close(got, expected)


def test_overlong_penalty_zero_cache_is_hard_cut():
  got = rewards.overlong_penalty([9, 10, 11], max_length=10, cache_length=0)
  testing.assert_close(got, np.array([0, 0, -1], np.float32))


def test_overlong_penalty_full_cache():
  got = rewards.overlong_penalty([0, 1, 4], max_length=4, cache_length=4)
  testing.assert_close(got, np.array([0, -0.25, -1], np.float32))


def test_overlong_penalty_rejects_character_lengths_and_bad_args():
  with pytest.raises(ValueError, match="integer token counts"):
    rewards.overlong_penalty(np.array([1.5]), max_length=4, cache_length=2)
  with pytest.raises(ValueError, match="cache_length"):
    rewards.overlong_penalty([1], max_length=4, cache_length=5)
  with pytest.raises(ValueError, match="max_length"):
    rewards.overlong_penalty([1], max_length=0, cache_length=0)
  with pytest.raises(ValueError, match=r"\[N\]"):
    rewards.overlong_penalty([[1]], max_length=4, cache_length=2)


def _constant(value):
  return lambda prompts, completions, answers: [value] * len(completions)


def test_score_weighted_sum():
  completions = ["\\boxed{8}", "8", "\\boxed{7}"]
  result = rewards.score(
      {"accuracy": (rewards.accuracy, 2.0),
       "format": (rewards.format_reward, 0.5)},
      ["p"] * 3, completions, ["8"] * 3)
  expected = np.array([[1, 1], [1, 0], [0, 1]], np.float32)
  assert result.per_function.dtype == np.float32
  testing.assert_close(result.per_function, expected)
  testing.assert_close(result.total, np.array([2.5, 2.0, 0.5], np.float32))
  assert result.names == ("accuracy", "format")
  testing.assert_close(result.weights, np.array([2.0, 0.5], np.float32))
  assert result.num_errors == {"accuracy": 0, "format": 0}


def test_score_raising_function_costs_only_its_completion():
  calls = []

  def fragile(prompts, completions, answers):
    calls.append(len(completions))
    if any(c == "boom" for c in completions):
      raise RuntimeError("cannot score")
    return [1.0] * len(completions)

  result = rewards.score(
      {"fragile": (fragile, 1.0), "constant": (_constant(0.25), 1.0)},
      ["p"] * 3, ["a", "boom", "c"], ["x"] * 3)
  testing.assert_close(result.per_function,
                       np.array([[1, 0.25], [0, 0.25], [1, 0.25]], np.float32))
  testing.assert_close(result.total, np.array([1.25, 0.25, 1.25], np.float32))
  assert result.num_errors == {"fragile": 1, "constant": 0}
  assert calls == [3, 1, 1, 1]  # one batch call, then one per completion


def test_score_wrong_count_and_nan_are_errors():
  wrong_count = lambda p, c, a: [1.0]
  nan = lambda p, c, a: [float("nan")] * len(c)
  result = rewards.score({"wrong": (wrong_count, 1.0), "nan": (nan, 1.0)},
                         ["p"] * 2, ["a", "b"], ["x"] * 2)
  # Per completion, wrong_count returns its one value and succeeds.
  testing.assert_close(result.per_function,
                       np.array([[1, 0], [1, 0]], np.float32))
  assert result.num_errors == {"wrong": 0, "nan": 2}


def test_score_rejects_bad_entries():
  with pytest.raises(ValueError, match="empty"):
    rewards.score({}, [""], [""], [""])
  with pytest.raises(ValueError, match=r"\(fn, weight\)"):
    rewards.score({"a": rewards.accuracy}, [""], [""], [""])


def test_group_advantages_sum_is_grpo_on_total():
  per = np.array([[1, 0], [0, 0], [1, 1], [0, 1]], np.float32)
  result = rewards.ScoreResult(per, per @ np.array([1.0, 2.0], np.float32),
                               {}, ("a", "b"), np.array([1, 2], np.float32))
  got = np.asarray(rewards.group_advantages(result, group_size=2))
  # Groups: totals (1, 0) and (3, 2); ddof-1 std of a pair 1 apart is 1/sqrt2.
  half = 0.5 / (np.sqrt(0.5) + 1e-6)
  testing.assert_close(got, np.array([[half, -half], [half, -half]]),
                       rtol=1e-5)


def test_group_advantages_normalize_then_sum_uses_each_column():
  # Column b is constant within every group: only column a carries signal.
  per = np.array([[1, 5], [0, 5], [0, 3], [1, 3]], np.float32)
  result = rewards.ScoreResult(per, per.sum(-1), {}, ("a", "b"),
                               np.array([1, 1], np.float32))
  got = np.asarray(rewards.group_advantages(
      result, group_size=2, mode="normalize_then_sum"))
  assert got.shape == (2, 2)
  assert got[0, 0] > 0 > got[0, 1] and got[1, 1] > 0 > got[1, 0]
  with pytest.raises(ValueError, match="mode"):
    rewards.group_advantages(result, group_size=2, mode="mean")
  with pytest.raises(ValueError, match="group_size"):
    rewards.group_advantages(result, group_size=3)


def test_registry():
  assert rewards.get("accuracy") is rewards.accuracy
  assert rewards.get("format") is rewards.format_reward
  with pytest.raises(ValueError, match="unknown"):
    rewards.get("nope")
