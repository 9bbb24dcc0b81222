"""SD-GRPO (grpo_jax/advantages/segments.py), the multi-part task it trains
on (arithmetic.SegmentTask), its segment rewards and token map
(rewards.verifiers) and an off-policy learning test (every estimator
config's one-step run is in tests/test_estimators_stateless.py).

Expected values come from VARIANTS.md 1.12's vector, checked here by hand,
and from a float64 numpy transcription written token by token and member
by member (Python loops, `statistics.stdev`), not from the library.
"""

import importlib
import math
import re
import statistics

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import advantages
from grpo_jax.data import arithmetic
from grpo_jax import train as train_lib
from grpo_jax import data
from grpo_jax import groups as groups_lib
from grpo_jax import testing
from grpo_jax.testing import learning
from grpo_jax.rewards import verifiers
# The module's persistent compilation cache, shared with its one-step run.
EPS = 1e-6


def estimate(rewards, seg, valid, ids, **options):
  estimator = advantages.make("sd_grpo", **options)
  out, _ = estimator.estimate((), groups_lib.from_rewards(
      np.asarray(rewards, np.float32),
      segment_rewards=np.asarray(seg, np.float32),
      segment_valid=np.asarray(valid, bool),
      segment_ids=np.asarray(ids, np.int32)))
  return testing.numpy(out)


def z_of(values, eps=EPS, ddof=1, scale="group"):
  """z-scores of a list; 0 for one value or all equal."""
  values = [float(v) for v in values]
  if len(values) < 2 or len(set(values)) == 1:
    return [0.0] * len(values)
  mean = sum(values) / len(values)
  if scale == "none":
    return [v - mean for v in values]
  sd = (statistics.stdev(values) if ddof == 1
        else statistics.pstdev(values))
  return [(v - mean) / (sd + eps) for v in values]


def reference(rewards, seg, valid, ids, *, lam=0.0, blend_at="reward",
              scale="group", unsegmented="holistic", eps=EPS, ddof=1):
  """SD-GRPO token by token: [P, G, T] float64."""
  rewards, seg = np.asarray(rewards, float), np.asarray(seg, float)
  valid, ids = np.asarray(valid, bool), np.asarray(ids)
  p, g, s = seg.shape
  out = np.zeros(ids.shape)
  for i in range(p):
    holistic = z_of(rewards[i], eps, ddof, scale)
    per_segment = np.zeros((g, s))
    for k in range(s):
      members = [j for j in range(g) if valid[i, j, k]]
      if blend_at == "reward":
        blended = [(1 - lam) * seg[i, j, k] + lam * rewards[i, j]
                   for j in members]
        values = z_of(blended, eps, ddof, scale)
      else:
        zs = z_of([seg[i, j, k] for j in members], eps, ddof, scale)
        values = [(1 - lam) * zs[n] + lam * holistic[j]
                  for n, j in enumerate(members)]
      for n, j in enumerate(members):
        per_segment[j, k] = values[n]
    for j in range(g):
      for t in range(ids.shape[-1]):
        k = ids[i, j, t]
        if 0 <= k < s:
          out[i, j, t] = per_segment[j, k]
        else:
          out[i, j, t] = holistic[j] if unsegmented == "holistic" else 0.0
  return out


# ------------------------------------------------------------- estimator

# VARIANTS 1.12: G = 3, S = 2; tokens 0-1 are segment 0, 2-3 segment 1, 4
# none.
VECTOR_SEG = [[[1, 0], [0, 0], [1, 1]]]
VECTOR_IDS = [[[0, 0, 1, 1, -1]] * 3]
VECTOR_HOLISTIC = [[1, 0, 2]]  # sum over segments


def test_sd_grpo_variants_vector():
  out = estimate(VECTOR_HOLISTIC, VECTOR_SEG, np.ones((1, 3, 2)),
                 VECTOR_IDS).reshape(3, 5)
  # Segment 0 = [1, 0, 1]: mean 2/3, std sqrt(1/3); 1/3 / sqrt(1/3).
  a = (1 / 3) / (math.sqrt(1 / 3) + EPS)
  np.testing.assert_allclose(out[:, 0], [0.577349, -1.154699, 0.577349],
                             atol=1e-6)
  np.testing.assert_allclose(out[:, 1], [a, -2 * a, a], rtol=1e-6)
  np.testing.assert_allclose(out[:, 2], [-0.577349, -0.577349, 1.154699],
                             atol=1e-6)
  # Token 4 has no segment: z of the holistic [1, 0, 2] = [0, -1, 1].
  np.testing.assert_allclose(out[:, 4], [0.0, -1.0, 1.0], atol=1e-5)
  blend = estimate(VECTOR_HOLISTIC, VECTOR_SEG, np.ones((1, 3, 2)),
                   VECTOR_IDS, lam=0.5).reshape(3, 5)
  # R~ = [1, 0, 1.5]: mean 5/6, deviations 1/6, -5/6, 2/3, var 7/12.
  sd = math.sqrt(7 / 12) + EPS
  np.testing.assert_allclose(blend[:, 0], [0.218218, -1.091088, 0.872870],
                             atol=1e-5)
  np.testing.assert_allclose(blend[:, 0], [1 / 6 / sd, -5 / 6 / sd,
                                           2 / 3 / sd], rtol=1e-5)
  at_advantage = estimate(VECTOR_HOLISTIC, VECTOR_SEG, np.ones((1, 3, 2)),
                          VECTOR_IDS, lam=0.5,
                          blend_at="advantage").reshape(3, 5)
  np.testing.assert_allclose(at_advantage[:, 0],
                             [0.288675, -1.077349, 0.788674], atol=1e-5)


@pytest.mark.parametrize("options", [
    {}, {"lam": 0.3}, {"lam": 0.7, "blend_at": "advantage"},
    {"scale": "none"}, {"unsegmented": "zero", "lam": 1.0}, {"ddof": 0}])
def test_sd_grpo_matches_its_definition(options):
  rng = np.random.default_rng(0)
  p, g, s, t = 3, 5, 3, 7
  rewards = rng.uniform(size=(p, g))
  seg = rng.integers(0, 2, size=(p, g, s)).astype(float)
  valid = rng.uniform(size=(p, g, s)) < 0.75
  ids = rng.integers(-1, s + 1, size=(p, g, t))  # s: outside, as -1
  out = estimate(rewards, seg, valid, ids, **options)
  assert out.shape == (p * g, t) and out.dtype == np.float32
  np.testing.assert_allclose(
      out, reference(rewards, seg, valid, ids, **options).reshape(p * g, t),
      atol=1e-5, rtol=1e-5)
  # Rows [N, T] as the token map give the same.
  rows = estimate(rewards, seg, valid, ids.reshape(p * g, t), **options)
  np.testing.assert_array_equal(rows, out)


def test_sd_grpo_edge_cases():
  ids = [[[0, 1, -1]] * 3]
  # Segment 1 missing in member 1: normalised over members 0 and 2.
  valid = [[[True, True], [True, False], [True, True]]]
  out = estimate([[0.0, 0.0, 0.0]], [[[1, 1], [0, 5], [1, 0]]], valid,
                 ids).reshape(3, 3)
  pair = 0.5 / (math.sqrt(0.5) + EPS)
  np.testing.assert_allclose(out[:, 1], [pair, 0.0, -pair], rtol=1e-6)
  # The holistic rewards are constant: tokens of no segment get 0.
  np.testing.assert_array_equal(out[:, 2], 0.0)
  # Every segment invalid: all 0, never NaN.
  none_valid = estimate([[1.0, 0.0, 1.0]], [[[1, 1]] * 3],
                        np.zeros((1, 3, 2), bool), ids).reshape(3, 3)
  np.testing.assert_array_equal(none_valid[:, :2], 0.0)
  # All equal everywhere, and a group of one: exactly 0.
  for out in (estimate([[0.5] * 3], [[[1, 0]] * 3], np.ones((1, 3, 2)), ids,
                       lam=0.5),
              estimate([[0.5]], [[[1, 0]]], [[[True, True]]], [[[0, 1, -1]]],
                       lam=0.5, blend_at="advantage")):
    np.testing.assert_array_equal(out, np.zeros(out.shape))


def test_sd_grpo_credits_each_segment_with_its_own_sign():
  """Member 0 solves part (a), member 1 part (b): GRPO on the holistic
  fraction gives both 0; SD-GRPO pushes each up on its right part and down
  on its wrong one."""
  out = estimate([[0.5, 0.5]], [[[1, 0], [0, 1]]], np.ones((1, 2, 2)),
                 [[[0, 1]] * 2]).reshape(2, 2)
  assert out[0, 0] > 0 > out[0, 1] and out[1, 1] > 0 > out[1, 0]
  grpo, _ = advantages.make("grpo").estimate(
      (), groups_lib.from_rewards(np.array([[0.5, 0.5]], np.float32)))
  np.testing.assert_array_equal(testing.numpy(grpo), 0.0)


def test_sd_grpo_fails_at_build_on_bad_options_and_missing_data():
  c = importlib.import_module("configs.sd_grpo").get_config("tiny")
  for option, value, match in (
      ("lam", 1.5, r"lam must be in \[0, 1\] .*got 1\.5"),
      ("blend_at", "token", r"blend_at='token' is unknown.*"
       r"reward, advantage"),
      ("scale", "batch", r"scale='batch' is unknown.*group, none")):
    bad = importlib.import_module("configs.sd_grpo").get_config("tiny")
    bad.advantage.kwargs[option] = value
    with pytest.raises(ValueError, match=rf"^config\.advantage\.kwargs\."
                       rf"{option}: {match}"):
      train_lib.validate(bad)
  c.data.task = "arithmetic"
  with pytest.raises(ValueError, match=r"config\.data\.task: 'arithmetic' "
                     r"gives no per-segment rewards.*'sd_grpo' reads "
                     r"GroupData\.segment_rewards; set "
                     r"--config\.data\.task=segments"):
    train_lib.validate(c)
  with pytest.raises(ValueError, match=r"'sd_grpo' reads "
                     r"GroupData\.segment_rewards"):
    advantages.make("sd_grpo").estimate(
        (), groups_lib.from_rewards(np.zeros((1, 2))))


# ------------------------------------------------- task, rewards, tokens


def test_boxed_answers_nest_and_skip_an_open_box():
  text = r"(a) \boxed{7} then \boxed{\frac{1}{2}} and \boxed{3"
  assert verifiers.boxed_answers(text) == [
      (text.index("7") + 2, "7"),
      (text.index(r"\frac") + len(r"\frac{1}{2}") + 1, r"\frac{1}{2}")]
  assert verifiers.boxed_answers("no box") == []


def test_segment_scores_and_the_holistic_rewards():
  answer = "7; 12; 3"
  cases = {  # completion: (segment rewards, all right, share right)
      r"(a) \boxed{7} (b) \boxed{12} (c) \boxed{3}": ([1, 1, 1], 1.0, 1.0),
      r"\boxed{7} \boxed{3 + 9} \boxed{3}": ([1, 0, 1], 0.0, 2 / 3),
      r"\boxed{12} \boxed{7}": ([0, 0, 0], 0.0, 0.0),
      r"(a) \boxed{7}, then I stop": ([1, 0, 0], 0.0, 1 / 3),
  }
  for completion, (segment, every, share) in cases.items():
    rewards, valid = verifiers.segment_scores(completion, answer,
                                              max_segments=4)
    np.testing.assert_array_equal(rewards, segment + [0])
    np.testing.assert_array_equal(valid, [True, True, True, False])
    assert verifiers.all_segments([""], [completion], [answer]) == [every]
    np.testing.assert_allclose(
        verifiers.segment_fraction([""], [completion], [answer]), [share])


def test_a_boxed_number_earns_the_box_reward_right_or_wrong():
  """box_reward = 0.1: a right part 1.1, a boxed wrong number 0.1; a box
  holding no number (empty, '?', an expression), a missing box and an
  invalid slot 0. The holistic rewards ignore it."""
  rewards, valid = verifiers.segment_scores(
      r"\boxed{7} \boxed{-4} \boxed{}", "7; 12; 3; 5", max_segments=5,
      box_reward=0.1)
  np.testing.assert_allclose(rewards, [1.1, 0.1, 0.0, 0.0, 0.0])
  np.testing.assert_array_equal(valid, [True] * 4 + [False])
  for box in ("?", "3 + 9", r"\frac{1}{2}"):
    rewards, _ = verifiers.segment_scores(rf"\boxed{{{box}}}", "12; 3",
                                          max_segments=2, box_reward=0.1)
    np.testing.assert_array_equal(rewards, [0, 0])
  assert verifiers.all_segments([""], [r"\boxed{7} \boxed{-4}"],
                                ["7; 12"]) == [0.0]
  with pytest.raises(ValueError, match="box_reward"):
    arithmetic.SegmentTask(box_reward=-0.1)
  for bad in (-0.1, float("nan"), float("inf")):
    config = importlib.import_module("configs.sd_grpo").get_config()
    config.data.box_reward = bad
    with pytest.raises(ValueError, match=r"^config\.data\.box_reward: "):
      train_lib.validate(config)


def char_decode(text):
  return lambda k: text[:k]


def test_segment_token_ids_by_hand():
  text = r"ab\boxed{1}cd\boxed{2}e"
  first_end = text.index("}") + 1  # 11 characters: tokens 0..10
  second_end = text.index("}", first_end) + 1  # tokens 11..21
  ids = verifiers.segment_token_ids(char_decode(text), len(text),
                                    num_segments=2, max_tokens=26)
  expected = [0] * first_end + [1] * (second_end - first_end) + [-1] * 4
  np.testing.assert_array_equal(ids, expected)
  # Three parts but two boxes: the rest is the failed attempt at part 3.
  ids = verifiers.segment_token_ids(char_decode(text), len(text),
                                    num_segments=3, max_tokens=24)
  np.testing.assert_array_equal(ids[second_end:], [2, -1])
  # One part: the second box and what follows belong to no segment.
  ids = verifiers.segment_token_ids(char_decode(text), len(text),
                                    num_segments=1, max_tokens=len(text))
  np.testing.assert_array_equal(ids, [0] * first_end
                                + [-1] * (len(text) - first_end))
  assert (verifiers.segment_token_ids(char_decode(""), 0, num_segments=2,
                                      max_tokens=3) == -1).all()


def test_segment_token_ids_with_multi_character_tokens():
  """Tokens of several characters (a word-piece tokenizer): a box closed
  inside a token gives that whole token to its segment."""
  pieces = ["So ", r"\box", "ed{", "4}", " and", r" \boxed", "{5", "} ok"]
  decode = lambda k: "".join(pieces[:k])
  ids = verifiers.segment_token_ids(decode, len(pieces), num_segments=2,
                                    max_tokens=9)
  np.testing.assert_array_equal(ids, [0, 0, 0, 0, 1, 1, 1, 1, -1])


def test_segment_token_ids_with_the_tiny_tokenizer():
  tokenizer = testing.tiny_tokenizer()
  text = r"x\boxed{3}y\boxed{4}"
  tokens = tokenizer.encode(text, add_special_tokens=False)
  decode = lambda k: tokenizer.decode(tokens[:k], skip_special_tokens=True)
  assert decode(len(tokens)) == text
  ids = verifiers.segment_token_ids(decode, len(tokens), num_segments=2,
                                    max_tokens=len(tokens))
  np.testing.assert_array_equal(ids, [0] * 10 + [1] * 10)


def test_segment_task_is_deterministic_disjoint_and_right():
  task = data.make_task(
      importlib.import_module("configs.sd_grpo").get_config().data, seed=3)
  assert isinstance(task, arithmetic.SegmentTask) and task.max_segments == 3
  batch = task.train(5, 64)
  assert batch == task.train(5, 64) and batch != task.train(6, 64)
  heldout = task.heldout(20)
  assert not {e.question for e in heldout} & {
      e.question for step in range(10) for e in task.train(step, 64)}
  counts = set()
  for example in batch + heldout:
    listed, boxes = example.question.split(". Write each result in its box: ")
    parts = re.findall(r"\([a-c]\) (\d+) \+ (\d+)", listed)
    counts.add(len(parts))
    assert example.answer == "; ".join(str(int(a) + int(b))
                                       for a, b in parts)
    # Each part laid out again with an empty box to fill.
    assert boxes == " ".join(f"({'abc'[i]}) {a} + {b} = \\boxed{{}}"
                             for i, (a, b) in enumerate(parts))
  assert counts == {2, 3}
  # A stable index per problem: 100 one-part sums, so 100**2 + 100**3.
  assert task.num_problems == 100**2 + 100**3
  by_question = {e.question: e.index for e in batch + heldout}
  assert len(set(by_question.values())) == len(by_question)
  for example in batch + heldout:
    # One part "a + b" is problem a * 10 + b of the one-digit sums.
    listed = example.question.split(". Write")[0]
    parts = [int(a) * 10 + int(b)
             for a, b in re.findall(r"(\d+) \+ (\d+)", listed)]
    offset = 0 if len(parts) == 2 else 100**2
    assert example.index == offset + sum(
        d * 100**(len(parts) - 1 - i) for i, d in enumerate(parts))
  with pytest.raises(ValueError, match="max_segments"):
    arithmetic.SegmentTask(max_segments=1)


# ---------------------------------------------------------------- learning


def two_parts(out, reward, resample):
  """A two-part toy task: tokens 0-1 answer part (a), tokens 2-3 part (b);
  a part's reward is the share of TARGET among its tokens, the holistic
  reward (`reward`) their mean."""
  del resample
  p, g = reward.shape
  t = out.tokens.shape[-1]
  seg = (out.tokens == learning.TARGET).astype(jnp.float32).reshape(
      p, g, 2, t // 2).mean(-1)
  ids = jnp.broadcast_to(jnp.repeat(jnp.arange(2, dtype=jnp.int32), t // 2),
                         (p, g, t))
  return groups_lib.from_rewards(
      seg.mean(-1), segment_rewards=seg,
      segment_valid=jnp.ones(seg.shape, bool), segment_ids=ids)


@pytest.mark.parametrize("options", [{}, {"lam": 0.5, "blend_at": "advantage"}])
def test_sd_grpo_learns_a_trivial_task_off_policy(options):
  history, _ = learning.learn_trivial_task(
      advantages.make("sd_grpo", **options), group_data=two_parts)
  learning.check_learned(history)


def test_the_rollout_fills_the_segment_fields_of_the_sampled_members():
  """`rollout.fields.segments` on two prompts of G = 2 members and ReMax's extra
  row (w = 3 rows per prompt, the last never trained): rewards, valid
  slots and token ids, with the tiny character tokenizer."""
  import types  # pylint: disable=g-import-not-at-top
  from grpo_jax import rollout  # pylint: disable=g-import-not-at-top
  from grpo_jax.rollout import fields as rollout_fields  # pylint: disable=g-import-not-at-top
  tokenizer = testing.tiny_tokenizer()
  texts = [r"\boxed{7}\boxed{9}", r"\boxed{7}", "greedy row",
           r"a\boxed{1}", r"\boxed{2}\boxed{3}", "greedy row"]
  t = 20
  rows = [tokenizer.encode(x, add_special_tokens=False) for x in texts]
  out = types.SimpleNamespace(
      tokens=np.asarray([r + [0] * (t - len(r)) for r in rows]),
      lengths=np.asarray([len(r) for r in rows]))
  pipeline = types.SimpleNamespace(
      sampler=types.SimpleNamespace(num_generations=2, max_new_tokens=t),
      task=types.SimpleNamespace(max_segments=3), tokenizer=tokenizer)
  examples = [data.Example("q", "7; 8"), data.Example("q", "1; 2; 3")]
  fields = rollout_fields.segments(pipeline, examples, out, 3)
  assert set(fields) == set(rollout.SEGMENT_FIELDS)
  np.testing.assert_array_equal(fields["segment_rewards"],
                                [[[1, 0, 0], [1, 0, 0]], [[1, 0, 0],
                                                          [0, 0, 0]]])
  np.testing.assert_array_equal(fields["segment_valid"][:, 0],
                                [[1, 1, 0], [1, 1, 1]])
  ids = fields["segment_ids"]
  assert ids.shape == (2, 2, t) and ids.dtype == np.int32
  np.testing.assert_array_equal(ids[0, 0], [0] * 9 + [1] * 9 + [-1] * 2)
  # One box of two parts: nothing follows it, padding is -1.
  np.testing.assert_array_equal(ids[0, 1], [0] * 9 + [-1] * 11)
  # Second box closes segment 1; part 3 (no third box) owns nothing.
  np.testing.assert_array_equal(ids[1, 1], [0] * 9 + [1] * 9 + [-1] * 2)
  np.testing.assert_array_equal(ids[1, 0], [0] * 10 + [-1] * 10)


def test_sd_grpo_traces_once_into_a_jitted_function():
  """No host round trip: one trace for new rewards, segment rewards and
  token maps of the same shapes."""
  rng = np.random.default_rng(1)
  make_data = lambda: groups_lib.from_rewards(
      rng.uniform(size=(2, 3)).astype(np.float32),
      segment_rewards=rng.integers(0, 2, (2, 3, 3)).astype(np.float32),
      segment_valid=rng.uniform(size=(2, 3, 3)) < 0.8,
      segment_ids=rng.integers(-1, 3, (2, 3, 5)).astype(np.int32))
  estimator, traces = advantages.make("sd_grpo", lam=0.5), []

  def run(data):
    traces.append(1)
    return estimator.estimate((), data)[0]

  jitted = jax.jit(run)
  for _ in range(3):
    assert jitted(make_data()).shape == (6, 5)
  assert len(traces) == 1
