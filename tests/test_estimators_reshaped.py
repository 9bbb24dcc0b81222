"""Hand-derived tests of the reshaped estimators NGRPO, SEED-GRPO, LamPO and
EDGE-GRPO (grpo_jax/advantages/reshaped.py) and an off-policy learning test
each (every estimator config's one-step run is in
tests/test_estimators_stateless.py).

Expected values come from VARIANTS.md's vectors, checked here by hand, and
from float64 numpy transcriptions of each formula written member by member
(Python loops, `collections.Counter`, `np.std`), not from the library.
"""

import collections
import importlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import advantages
from grpo_jax import train as train_lib
from grpo_jax import groups as groups_lib
from grpo_jax import testing
from grpo_jax.testing import learning

EPS = 1e-6


def estimate(name, rewards, **fields_and_options):
  """Advantages of the registered record on `GroupData` (fillers zeroed)."""
  fields = {k: fields_and_options.pop(k) for k in list(fields_and_options)
            if k in groups_lib.GroupData._fields}
  estimator = advantages.make(name, **fields_and_options)
  data = groups_lib.from_rewards(np.asarray(rewards, np.float32), **fields)
  out, _ = estimator.estimate(estimator.init(), data)
  return testing.numpy(out)


def zscore(r, *, eps=EPS, ddof=1):
  """(r - mean) / (std + eps) of one group, 0 where constant or G = 1."""
  r = np.asarray(r, np.float64)
  if len(r) == 1 or np.all(r == r[0]):
    return np.zeros_like(r)
  return (r - r.mean()) / (np.std(r, ddof=ddof) + eps)


# --------------------------------------------------------------------- NGRPO


def ngrpo_reference(rewards, *, r_max=1.0, m=1, eps=EPS, ddof=1):
  """Each group's z-scores over its rewards and m copies of r_max."""
  out = []
  for row in np.asarray(rewards, np.float64):
    if len(row) == 1:
      out.append([0.0])
      continue
    augmented = list(row) + [r_max] * m
    out.append(zscore(augmented, eps=eps, ddof=ddof)[:len(row)])
  return np.array(out)


def test_ngrpo_variants_vectors():
  # [0,0,0,0] + 1: mu' = 1/5, var' = (4/25 + 16/25) / 4 = 1/5.
  all_wrong = -0.2 / (math.sqrt(0.2) + EPS)
  # [1,0,0,0] + 1: mu' = 2/5, var' = (2 * 9/25 + 3 * 4/25) / 4 = 3/10.
  sd = math.sqrt(0.3) + EPS
  expected = np.array([[all_wrong] * 4, [0.6 / sd] + [-0.4 / sd] * 3,
                       [0.0] * 4])
  testing.assert_close(expected[:2], np.array(
      [[-0.447213] * 4, [1.095443] + [-0.730295] * 3]), atol=1e-6)
  out = advantages.ngrpo(np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]],
                                  np.float32))
  testing.assert_close(out, expected, atol=1e-5)
  np.testing.assert_array_equal(testing.numpy(out)[2], np.zeros(4))


@pytest.mark.parametrize("options", [
    {}, {"n_virtual": 3}, {"r_max": 2.0, "n_virtual": 2}, {"ddof": 0}])
def test_ngrpo_matches_its_definition(options):
  r = np.random.default_rng(0).integers(0, 3, (6, 5)).astype(np.float32) / 2
  testing.assert_close(
      estimate("ngrpo", r, **options),
      ngrpo_reference(r, r_max=options.get("r_max", 1.0),
                      m=options.get("n_virtual", 1),
                      ddof=options.get("ddof", 1)), atol=1e-5)


def test_ngrpo_shifts_every_group_down():
  """All-wrong groups get a negative signal, mixed groups a negative
  mean: the virtual maximum raises the baseline; only a group all at
  r_max gets 0. Not shift invariant, as its metadata says."""
  r = np.array([[0, 0, 0], [1, 0, 1], [0.5, 0.5, 0.5], [1, 1, 1]],
               np.float32)
  out = testing.numpy(advantages.ngrpo(r))
  assert np.all(out[0] < 0) and np.all(out[2] < 0)
  assert out[1].sum() < 0 and np.all(out[1][[0, 2]] > 0)
  np.testing.assert_array_equal(out[3], np.zeros(3))
  assert out[2, 0] > out[0, 0]  # closer to r_max, a smaller penalty
  assert not np.allclose(testing.numpy(advantages.ngrpo(r + 0.5)), out)
  info = advantages.meta("ngrpo")
  assert not info.shift_invariant and not info.constant_group_zero
  assert info.reward_range == (-math.inf, 1.0)


def test_ngrpo_group_of_one_gives_zero():
  """The authors' code gives G = 1 mean 0 and std 1 (A = R); here 0."""
  np.testing.assert_array_equal(
      testing.numpy(advantages.ngrpo(np.array([[0.0], [1.0], [0.3]]))),
      np.zeros((3, 1)))


def test_ngrpo_options_and_reward_range_fail_at_validation():
  c = importlib.import_module("configs.ngrpo").get_config()
  assert c.advantage.kwargs.r_max == pytest.approx(1.0)  # binary reward
  train_lib.validate(c)
  c.rewards.functions = ("accuracy", "format")
  c.rewards.weights = (1.0, 0.1)  # accuracy + 0.1 format reaches 1.1
  with pytest.raises(ValueError) as error:
    train_lib.validate(c)
  for part in ("config.advantage", "'ngrpo'", "[-inf, 1]",
               "1*accuracy + 0.1*format reaches [0, 1.1]",
               "advantage.kwargs.r_max=1.1"):
    assert part in str(error.value), (part, str(error.value))
  c.advantage.kwargs.r_max = 1.1
  c.advantage.kwargs.n_virtual = 0
  with pytest.raises(ValueError, match=r"config\.advantage\.kwargs\."
                     r"n_virtual: n_virtual must be an integer >= 1"):
    train_lib.validate(c)
  with pytest.raises(ValueError, match="r_max"):
    advantages.ngrpo(np.zeros((1, 2)), r_max=math.inf)


# ----------------------------------------------------------------- SEED-GRPO


def seed_reference(rewards, answer_ids, *, alpha=0.5):
  """z(R) (1 - alpha SE / log G), the classes counted with a Counter."""
  out = []
  for r, ids in zip(np.asarray(rewards, np.float64), np.asarray(answer_ids)):
    g = len(r)
    # A missing answer (-1) is its own class: label it by its position.
    labels = [("answer", a) if a >= 0 else ("none", i)
              for i, a in enumerate(ids)]
    p = np.array(list(collections.Counter(labels).values())) / g
    se = -(p * np.log(p)).sum()
    factor = 1.0 - alpha * se / math.log(g) if g > 1 else 1.0
    out.append(zscore(r) * factor)
  return np.array(out)


def test_seed_grpo_variants_vector():
  # Classes {7: 2, 3: 1, 5: 1}: SE = -(1/2 log 1/2 + 2 * 1/4 log 1/4)
  # = 1.5 log 2, SE / log 4 = 3/4, factor 1 - 0.5 * 3/4 = 5/8.
  se = 1.5 * math.log(2)
  testing.assert_close(se, 1.039721, atol=1e-6)
  expected = np.array([1, 1, -1, -1]) * 0.5 / (1 / math.sqrt(3) + EPS) * 5 / 8
  testing.assert_close(expected, np.array([0.541265, 0.541265, -0.541265,
                                          -0.541265]), atol=1e-6)
  out = estimate("seed_grpo", [[1, 1, 0, 0]], answer_ids=[[7, 7, 3, 5]])
  testing.assert_close(out[0], expected, atol=1e-5)
  # The rollout's labels (index of the first member alike) give the same.
  testing.assert_close(
      estimate("seed_grpo", [[1, 1, 0, 0]], answer_ids=[[0, 0, 2, 3]])[0],
      expected, atol=1e-5)


def test_semantic_entropy_extremes_and_missing_answers():
  ids = np.array([[0, 0, 0, 0], [0, 1, 2, 3], [-1, -1, -1, -1],
                  [0, 0, -1, -1], [0, 0, 2, 2]])
  # Two classes of two: log 2 / log 4; two plus two singletons: 3/4.
  expected = np.array([0.0, 1.0, 1.0, 0.75, 0.5])
  testing.assert_close(advantages.reshaped.semantic_entropy(ids)[:, 0],
                       expected, atol=1e-6)
  np.testing.assert_array_equal(
      testing.numpy(advantages.reshaped.semantic_entropy([[3], [-1]])),
      np.zeros((2, 1)))


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_seed_grpo_matches_its_definition(alpha):
  rng = np.random.default_rng(1)
  r = rng.integers(0, 2, (8, 5)).astype(np.float32)
  ids = rng.integers(-1, 3, (8, 5))
  testing.assert_close(
      estimate("seed_grpo", r, answer_ids=ids, alpha=alpha),
      seed_reference(r, ids, alpha=alpha), atol=1e-5)


def test_seed_grpo_limits():
  """alpha = 0 and a group agreeing on one answer are GRPO; alpha = 1 and
  G distinct answers give 0; so do equal rewards and G = 1."""
  r = np.array([[1, 0, 1, 0], [1, 0, 0, 0]], np.float32)
  grpo = testing.numpy(advantages.grpo(r))
  agree = np.zeros((2, 4), int)
  distinct = np.tile(np.arange(4), (2, 1))
  testing.assert_close(estimate("seed_grpo", r, answer_ids=distinct,
                                alpha=0.0), grpo, atol=1e-6)
  testing.assert_close(estimate("seed_grpo", r, answer_ids=agree), grpo,
                       atol=1e-6)
  np.testing.assert_array_equal(
      estimate("seed_grpo", r, answer_ids=distinct, alpha=1.0),
      np.zeros((2, 4)))
  np.testing.assert_array_equal(
      estimate("seed_grpo", np.full((1, 4), 0.7), answer_ids=distinct[:1]),
      np.zeros((1, 4)))
  np.testing.assert_array_equal(
      estimate("seed_grpo", [[1.0], [0.0]], answer_ids=[[0], [-1]]),
      np.zeros((2, 1)))


def test_seed_grpo_checks_alpha_and_its_group_data():
  c = importlib.import_module("configs.seed_grpo").get_config()
  train_lib.validate(c)
  c.advantage.kwargs.alpha = 1.5
  with pytest.raises(ValueError, match=r"config\.advantage\.kwargs\.alpha: "
                     r"alpha must be in \[0, 1\] .*got 1\.5"):
    train_lib.validate(c)
  estimator = advantages.make("seed_grpo")
  with pytest.raises(ValueError, match=r"'seed_grpo' reads "
                     r"GroupData\.answer_ids.*answer_ids=\.\.\."):
    estimator.estimate((), groups_lib.from_rewards(np.zeros((1, 4))))
  with pytest.raises(ValueError, match="answer_ids must be"):
    advantages.seed_grpo(np.zeros((2, 4)), answer_ids=np.zeros((2, 3)))


# --------------------------------------------------------------------- LamPO


def lampo_reference(rewards, scores, *, beta=1.0, scale="none", ddof=1):
  """Pairs summed one by one with the RankNet weight 2 / (1 + exp(x))."""
  out = np.zeros(np.shape(rewards))
  for p, (r, s) in enumerate(zip(np.asarray(rewards, np.float64),
                                 np.asarray(scores, np.float64))):
    g = len(r)
    for i in range(g):
      for j in range(g):
        if i != j and r[i] != r[j]:
          x = beta * np.sign(r[i] - r[j]) * (s[i] - s[j])
          out[p, i] += 2.0 / (1.0 + math.exp(x)) * (r[i] - r[j]) / (g - 1)
    if scale == "std" and g > 1 and np.any(r != r[0]):
      out[p] /= np.std(r, ddof=ddof) + EPS
  return out


S = np.array([[-0.5, -0.2, -1.0, -0.1]])


def test_lampo_variants_vectors():
  r = np.array([[1, 0, 1, 0]], np.float32)
  # A_0 = (2 sigmoid(0.3) + 2 sigmoid(0.4)) / 3: 1 beats 0 in both pairs,
  # and the policy ranks 0 (s = -0.5) below both losers.
  sig = lambda x: 1 / (1 + math.exp(-x))
  a0 = (2 * sig(0.3) + 2 * sig(0.4)) / 3
  testing.assert_close(a0, 0.782087, atol=1e-6)
  expected = np.array([[0.782087, -0.842945, 0.933949, -0.873091]])
  testing.assert_close(lampo_reference(r, S), expected, atol=1e-6)
  ones = np.ones((1, 4))
  out = estimate("lampo", r, sequence_logprobs=S, lengths=ones)
  testing.assert_close(out, expected, atol=1e-5)
  testing.assert_close(
      estimate("lampo", r, sequence_logprobs=S, lengths=ones, beta=0.0),
      np.array([[2, -2, 2, -2]]) / 3, atol=1e-6)


@pytest.mark.parametrize("options", [
    {}, {"beta": 0.0}, {"beta": 3.0}, {"score": "sum"}, {"scale": "std"},
    {"scale": "std", "ddof": 0}])
def test_lampo_matches_its_definition(options):
  rng = np.random.default_rng(2)
  r = rng.integers(0, 3, (6, 5)).astype(np.float32)
  lengths = rng.integers(0, 9, (6, 5))  # some empty completions
  total = np.where(lengths > 0, -rng.uniform(0, 2, (6, 5)) * lengths, 0.0)
  scores = (total if options.get("score") == "sum"
            else total / np.maximum(lengths, 1))
  ref_options = {k: v for k, v in options.items() if k != "score"}
  testing.assert_close(
      estimate("lampo", r, sequence_logprobs=total, lengths=lengths,
               **options),
      lampo_reference(r, scores, **ref_options), atol=1e-5)


def test_lampo_properties():
  """Zero sum per group, beta = 0 is RLOO, equal rewards and G = 1 give
  0, and a pair the policy already ranks right weighs less than 1."""
  rng = np.random.default_rng(3)
  r = rng.integers(0, 2, (5, 4)).astype(np.float32)
  r[0] = 1.0
  logp = -rng.uniform(0, 3, (5, 4))
  lengths = np.full((5, 4), 3)
  out = estimate("lampo", r, sequence_logprobs=logp, lengths=lengths)
  testing.assert_close(out.sum(-1), np.zeros(5), atol=1e-6)
  np.testing.assert_array_equal(out[0], np.zeros(4))
  testing.assert_close(
      estimate("lampo", r, sequence_logprobs=logp, lengths=lengths,
               beta=0.0), testing.numpy(advantages.rloo(r)), atol=1e-6)
  np.testing.assert_array_equal(
      estimate("lampo", r[:, :1], sequence_logprobs=logp[:, :1],
               lengths=lengths[:, :1]), np.zeros((5, 1)))
  pair = np.array([[1.0, 0.0]], np.float32)
  right = estimate("lampo", pair, sequence_logprobs=[[-1.0, -2.0]],
                   lengths=[[1, 1]])  # the winner more likely
  wrong = estimate("lampo", pair, sequence_logprobs=[[-2.0, -1.0]],
                   lengths=[[1, 1]])
  testing.assert_close(right[0], np.array([1, -1]) * 2 / (1 + math.e),
                       atol=1e-6)
  testing.assert_close(wrong[0], np.array([1, -1]) * 2 / (1 + 1 / math.e),
                       atol=1e-6)


def test_lampo_scores_carry_no_gradient():
  r = jnp.array([[1.0, 0.0, 0.0]])
  fn = lambda s: (advantages.lampo(r, sequence_logprobs=s,
                                   lengths=jnp.ones((1, 3)))**2).sum()
  grad = jax.grad(fn)(jnp.array([[-1.0, -0.5, -2.0]]))
  np.testing.assert_array_equal(testing.numpy(grad), np.zeros((1, 3)))


def test_lampo_checks_its_options():
  c = importlib.import_module("configs.lampo").get_config()
  train_lib.validate(c)
  for key, value, message in [
      ("beta", -1.0, r"beta: beta must be >= 0 .*got -1\.0"),
      ("score", "max", r"score: score='max' is unknown; choose one of mean, "
       "sum"),
      ("scale", "batch", r"scale: scale='batch' is unknown")]:
    bad = importlib.import_module("configs.lampo").get_config()
    bad.advantage.kwargs[key] = value
    with pytest.raises(ValueError, match=r"config\.advantage\.kwargs\."
                       + message):
      train_lib.validate(bad)
  with pytest.raises(ValueError, match=r"'lampo' reads "
                     r"GroupData\.sequence_logprobs"):
    advantages.make("lampo").estimate(
        (), groups_lib.from_rewards(np.zeros((1, 4))))


# ----------------------------------------------------------------- EDGE-GRPO


def edge_reference(rewards, entropies, *, lengths=None, valid=None,
                   normalizer="batch", eps=1e-4, ddof=1, floor=1e-6):
  rewards = np.asarray(rewards, np.float64)
  entropies = np.asarray(entropies, np.float64)
  p, g = rewards.shape
  lengths = np.ones((p, g)) if lengths is None else np.asarray(lengths)
  valid = np.ones(p, bool) if valid is None else np.asarray(valid)
  used = [(q, i) for q in range(p) for i in range(g)
          if valid[q] and lengths[q, i] > 0]
  out = np.zeros((p, g))
  for q, i in used:
    pool = [entropies[a, b] for a, b in used
            if normalizer == "batch" or a == q]
    z = zscore(rewards[q], eps=eps, ddof=ddof)[i]
    out[q, i] = z * np.mean(pool) / max(entropies[q, i], floor)
  return out


def test_edge_grpo_variants_vector():
  # A = +-0.5 / (1/sqrt(3) + eps), mean H = 1: A * [2, 1, 1/2, 2].
  r = np.array([[1, 0, 1, 0]], np.float32)
  h = np.array([[0.5, 1.0, 2.0, 0.5]])
  z = np.array([1, -1, 1, -1]) * 0.5 / (1 / math.sqrt(3) + EPS)
  expected = (z * np.array([2, 1, 0.5, 2]))[None]
  testing.assert_close(expected, np.array([[1.732050, -0.866025, 0.433013,
                                           -1.732050]]), atol=1e-5)
  lengths = np.full((1, 4), 5)
  testing.assert_close(
      estimate("edge_grpo", r, entropies=h, lengths=lengths, eps=EPS),
      expected, atol=1e-5)
  # The default eps is the authors' 1e-4.
  testing.assert_close(
      estimate("edge_grpo", r, entropies=h, lengths=lengths),
      expected * (1 / math.sqrt(3) + EPS) / (1 / math.sqrt(3) + 1e-4),
      atol=1e-6)


@pytest.mark.parametrize("options", [
    {}, {"normalizer": "group"}, {"ddof": 0, "eps": 1e-6}])
def test_edge_grpo_matches_its_definition(options):
  rng = np.random.default_rng(4)
  r = rng.integers(0, 2, (5, 4)).astype(np.float32)
  h = rng.uniform(0.05, 3.0, (5, 4))
  lengths = rng.integers(0, 6, (5, 4))  # some empty completions
  valid = np.array([True, True, False, True, True])
  ref_options = {"normalizer": options.get("normalizer", "batch"),
                 "eps": options.get("eps", 1e-4),
                 "ddof": options.get("ddof", 1)}
  out = estimate("edge_grpo", r, entropies=h, lengths=lengths, valid=valid,
                 **options)
  testing.assert_close(out, edge_reference(r, h, lengths=lengths,
                                           valid=valid, **ref_options),
                       atol=1e-5)
  np.testing.assert_array_equal(out[2], np.zeros(4))
  np.testing.assert_array_equal(out[lengths == 0], 0.0)


def test_edge_grpo_edge_cases():
  """Equal rewards and G = 1 give 0; a zero entropy is clamped to 1e-6
  (finite, large); every row empty gives 0, not 0/0."""
  h = np.array([[0.5, 1.0, 0.0, 1.5]])
  lengths = np.full((1, 4), 3)
  np.testing.assert_array_equal(
      estimate("edge_grpo", np.full((1, 4), 0.4), entropies=h,
               lengths=lengths), np.zeros((1, 4)))
  np.testing.assert_array_equal(
      estimate("edge_grpo", [[1.0], [0.0]], entropies=[[0.3], [0.0]],
               lengths=[[2], [2]]), np.zeros((2, 1)))
  r = np.array([[0, 0, 1, 0]], np.float32)
  out = estimate("edge_grpo", r, entropies=h, lengths=lengths)
  testing.assert_finite(out)
  z = zscore(r[0], eps=1e-4)[2]
  testing.assert_close(out[0, 2], z * 0.75 / 1e-6, rtol=1e-5)
  np.testing.assert_array_equal(
      estimate("edge_grpo", r, entropies=np.zeros((1, 4)),
               lengths=np.zeros((1, 4), int)), np.zeros((1, 4)))


def test_edge_grpo_entropies_carry_no_gradient():
  r = jnp.array([[1.0, 0.0, 0.0]])
  fn = lambda h: (advantages.edge_grpo(r, entropies=h)**2).sum()
  grad = jax.grad(fn)(jnp.array([[0.4, 1.0, 2.0]]))
  np.testing.assert_array_equal(testing.numpy(grad), np.zeros((1, 3)))


def test_edge_grpo_batch_mean_couples_groups_and_checks_options():
  assert not advantages.meta("edge_grpo").independent_groups
  assert advantages.meta("edge_grpo", normalizer="group").independent_groups
  c = importlib.import_module("configs.edge_grpo").get_config()
  train_lib.validate(c)
  c.advantage.kwargs.normalizer = "microbatch"
  with pytest.raises(ValueError, match=r"config\.advantage\.kwargs\."
                     r"normalizer: normalizer='microbatch' is unknown; "
                     r"choose one of batch, group"):
    train_lib.validate(c)
  c.advantage.kwargs.normalizer = "batch"
  c.advantage.kwargs.min_entropy = 0.0
  with pytest.raises(ValueError, match=r"config\.advantage\.kwargs\."
                     r"min_entropy: min_entropy must be > 0"):
    train_lib.validate(c)
  with pytest.raises(ValueError, match=r"'edge_grpo' reads "
                     r"GroupData\.entropies"):
    advantages.make("edge_grpo").estimate(
        (), groups_lib.from_rewards(np.zeros((1, 4))))


# ------------------------------------------------------------------ configs


def test_ngrpo_config_sets_the_papers_clip():
  c = importlib.import_module("configs.ngrpo").get_config()
  assert (c.objective.name, c.objective.kwargs.clip_low,
          c.objective.kwargs.clip_high, c.objective.kwargs.aggregation) == (
              "ppo_clip", 0.16, 0.24, "token_mean")
  assert c.kl.beta == 0.0 and c.train.num_minibatches == 4
  assert importlib.import_module("configs.ngrpo").get_config(
      "tiny").train.num_minibatches == 4
  # EDGE-GRPO's guided error correction is its group strategy.
  assert importlib.import_module(
      "configs.edge_grpo").get_config().groups.name == "guided_correction"


# ------------------------------------------------------------ learning


@pytest.mark.parametrize("name,options", [
    ("ngrpo", {}), ("seed_grpo", {}), ("lampo", {}), ("edge_grpo", {})])
def test_estimator_learns_a_trivial_task_off_policy(name, options):
  """The advantages from `name` on the sampler's group data."""
  history, _ = learning.learn_trivial_task(advantages.make(name, **options))
  learning.check_learned(history)
