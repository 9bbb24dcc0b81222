"""RePO wired into the step (VARIANTS.md 4.9): the group strategy ``repo``,
its per-prompt cache in TrainState, the step's stages of G + K rows per group
(`rollout.repo`), the update's split loss, the config checks, a `:tiny`
step with the mechanism acting and an exact resume. The pure parts
(`repo_retrieve`, `repo_advantages`, ...) are tested in
tests/test_strategies_data.py; expected values here are hand-derived."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import repo as repo_config
from grpo_jax import advantages as advantages_lib
from grpo_jax.train import batch as batch_lib
from grpo_jax import measures
from grpo_jax import objectives
from grpo_jax.rollout import repo as repo_rollout
from grpo_jax import rollout
from grpo_jax import strategies
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.train import update as update_lib
from grpo_jax.objectives import regularisers
from grpo_jax.strategies import repo

T = 2
LAYOUT = strategies.GroupLayout(num_generations=4, max_new_tokens=T,
                                prompt_len=4, weights=(1.0, 0.0))


def make_round(accuracy, prompt_index, *, tag=0):
  """A `rollout.Round` of P groups with the accuracy [P, G] given (format
  column weighted 0); tokens tagged 100 * tag + member."""
  accuracy = np.asarray(accuracy, np.float32)
  p, g = accuracy.shape
  tokens = (100 * tag + np.arange(g)[None, :, None]
            + np.zeros((p, 1, T), np.int32)).astype(np.int32)
  return rollout.Round(
      prompt_ids=[[5, 9]] * p, tokens=tokens,
      mask=np.ones((p, g, T), np.float32), lengths=np.full((p, g), T),
      truncated=np.zeros((p, g), bool),
      sampler_logp=np.full((p, g, T), -1.0 - tag, np.float32),
      rewards=np.stack([accuracy, np.ones_like(accuracy)], axis=-1),
      columns=("accuracy", "format"), errors=np.zeros(1),
      entropies=np.ones((p, g), np.float32),
      prompt_index=np.asarray(prompt_index, np.int32))


def strategy(**options):
  return strategies.make_group_strategy("repo", layout=LAYOUT, **options)


def apply(s, state, rnd, step=1, key=0):
  return s.apply(state, lambda r: rnd, len(rnd.prompt_ids), step=step,
                 key=jax.random.PRNGKey(key))


def test_variants_vector_through_the_wired_path():
  """VARIANTS 4.9: a cache holding rewards [1, 0, 0, 1, 1, 0, 1, 1]
  (oldest first), highest_k with k = 3 replays FIFO entries [0, 3, 4]; on
  fresh [1, 0, 0, 0] and replayed [1, 1, 1], split gives the fresh
  (R - 1/4) / (1/2 + eps) and the replayed 0 (equal rewards), mixed one
  z-score over the seven: mean 4/7, std sqrt(2/7)."""
  options = dict(capacity=4, max_cache_size=8, min_cache_to_replay=8,
                 num_replays=3)
  s = strategy(**options)
  stored = make_round(np.array([[1, 0, 0, 1, 1, 0, 1, 1]], np.float32), [2],
                      tag=1)
  _, state = apply(strategy(**dict(options, min_cache_to_replay=1)),
                   s.init(), stored._replace(
                       tokens=np.arange(16, dtype=np.int32).reshape(1, 8, 2),
                       mask=np.ones((1, 8, T), np.float32),
                       sampler_logp=np.full((1, 8, T), -2.0, np.float32)),
                   step=3)
  fresh = make_round([[1, 0, 0, 0]], [2])
  selected, new = apply(s, state, fresh, step=5)
  rep = selected.replay
  np.testing.assert_array_equal(rep.valid, [[True, True, True]])
  # Entries 0, 3, 4 (token pairs 2j, 2j + 1), in the order drawn.
  np.testing.assert_array_equal(rep.tokens[0], [[0, 1], [6, 7], [8, 9]])
  np.testing.assert_array_equal(rep.rewards, [[1, 1, 1]])
  np.testing.assert_array_equal(rep.behaviour_logp, -2.0)
  assert selected.measurements == {
      "repo/replaying_groups": 1.0, "repo/replay_rows": 1.0,
      "repo/mean_age": 2.0, "repo/untracked_groups": 0.0}
  # The fresh group entered after the draw: the newest four are its own.
  np.testing.assert_array_equal(new.rewards[2], [1, 0, 1, 1, 1, 0, 0, 0])
  assert int(new.size[2]) == 8
  estimator = advantages_lib.make("grpo", eps=1e-6)
  extra = (np.zeros((1, 4)), np.full((1, 4), T))
  off_extra = (np.zeros((1, 3)), np.full((1, 3), T))
  on, off, _ = repo_rollout.advantages(
      estimator, (), np.array([[1.0, 0, 0, 0]]), rep.rewards, rep.valid,
      mode="split", on_extra=extra, off_extra=off_extra,
      prompt_index=[2])
  np.testing.assert_allclose(on, [[1.499997, -0.499999, -0.499999,
                                   -0.499999]], atol=1e-6)
  np.testing.assert_array_equal(off, 0.0)
  on, off, _ = repo_rollout.advantages(
      estimator, (), np.array([[1.0, 0, 0, 0]]), rep.rewards, rep.valid,
      mode="mixed", on_extra=extra, off_extra=off_extra, prompt_index=[2])
  std = math.sqrt(2 / 7)
  np.testing.assert_allclose(on, [[3 / 7 / std] + [-4 / 7 / std] * 3],
                             atol=1e-5)
  np.testing.assert_allclose(off, [[3 / 7 / std] * 3], atol=1e-5)
  np.testing.assert_allclose(on[0, 0], 0.801782, atol=2e-6)


def test_replay_starts_once_the_cache_is_ready_and_never_replays_itself():
  """M = 4, min 4: step 1 stores each group's four members and replays
  nothing; step 2 replays step 1's (highest_k, k = 2: the two rewarded of
  prompt 0; prompt 1's equal rewards in FIFO order); an id outside the
  exact table neither stores nor replays."""
  s = strategy(capacity=8, max_cache_size=4, min_cache_to_replay=4,
               num_replays=2)
  first = make_round([[0, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]], [0, 3, 8],
                     tag=1)
  selected, state = apply(s, s.init(), first, step=1)
  assert not selected.replay.valid.any()
  assert selected.measurements["repo/untracked_groups"] == pytest.approx(
      1 / 3)
  np.testing.assert_array_equal(np.asarray(state.size)[[0, 3]], [4, 4])
  assert int(np.asarray(state.size).sum()) == 8
  second = make_round([[1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]], [0, 3, 8],
                      tag=2)
  selected, state = apply(s, state, second, step=2)
  rep = selected.replay
  np.testing.assert_array_equal(rep.valid, [[True, True], [True, True],
                                            [False, False]])
  np.testing.assert_array_equal(rep.tokens[0, :, 0], [101, 103])
  np.testing.assert_array_equal(rep.tokens[1, :, 0], [100, 101])
  np.testing.assert_array_equal(rep.mask[2], 0.0)  # no slot: empty rows
  np.testing.assert_array_equal(rep.step[:2], 1)
  assert selected.measurements["repo/replaying_groups"] == pytest.approx(
      2 / 3)
  # Now the cache holds step 2's members only (FIFO of 4).
  np.testing.assert_array_equal(np.asarray(state.tokens)[0, :, 0],
                                [200, 201, 202, 203])


def test_random_k_is_fixed_by_the_key():
  s = strategy(capacity=2, max_cache_size=8, min_cache_to_replay=8,
               num_replays=3, strategy="random_k")
  _, state = apply(strategy(capacity=2, max_cache_size=8,
                            min_cache_to_replay=1), s.init(),
                   make_round(np.zeros((1, 8)), [1]))
  picks = set()
  for k in range(8):
    a, _ = apply(s, state, make_round(np.zeros((1, 4)), [1]), key=k)
    b, _ = apply(s, state, make_round(np.zeros((1, 4)), [1]), key=k)
    np.testing.assert_array_equal(a.replay.tokens, b.replay.tokens)
    assert len(set(a.replay.tokens[0, :, 0].tolist())) == 3
    picks.add(tuple(a.replay.tokens[0, :, 0]))
  assert len(picks) > 1  # the key decides


def test_config_errors_name_the_field_and_the_fix():
  train.validate(repo_config.get_config("tiny"))
  cases = [
      (("objective.name", "ppo_clip"), r"config\.objective\.name: 'ppo_clip'"
       r".*decoupled_ppo"),
      (("groups.kwargs.capacity", 50),
       r"config\.groups\.kwargs\.capacity: 50 slots .*100 problems"),
      (("groups.kwargs.min_cache_to_replay", 9),
       r"config\.groups\.kwargs\.min_cache_to_replay: "
       r"min_cache_to_replay=9 exceeds"),
      (("groups.kwargs.strategy", "best"),
       r"config\.groups\.kwargs\.strategy: strategy='best'"),
      (("groups.kwargs.off_policy_coef", -1.0),
       r"config\.groups\.kwargs\.off_policy_coef: "),
      (("filter.name", "gfpo"), r"config\.filter\.name"),
      (("credit.name", "gtpo"), r"config\.credit\.name"),
      (("rows.name", "mask_truncated"), r"config\.rows\.name"),
      (("advantage.name", "spo"), r"config\.advantage\.name"),
      (("train.num_minibatches", 3),
       r"config\.train\.num_minibatches: 3 does not divide the N=16 rows"
       r".*\+ 4 replay rows"),
  ]
  for (field, value), pattern in cases:
    config = repo_config.get_config("tiny")
    node = config
    *parents, leaf = field.split(".")
    for part in parents:
      node = node[part]
    node[leaf] = value
    if field == "objective.name":
      config.objective.kwargs = dict(clip_low=0.2, clip_high=0.2)
    if field == "advantage.name":
      config.advantage.kwargs = {}
      config.rewards.weights = (1.0,) + (0.0,) * (
          len(config.rewards.functions) - 1)  # SPO's rewards in [0, 1]
    if field == "filter.name":
      config.filter.kwargs = {"k": 2}
    if field == "credit.name":
      config.credit.kwargs = {}
    with pytest.raises(ValueError, match=pattern):
      train.validate(config)
  config = repo_config.get_config("tiny")
  config.groups.kwargs.capacity = 8
  config.groups.kwargs.prompt_ids = "hash"  # 100 ids folded into 8 slots
  train.validate(config)


@pytest.mark.parametrize("option,value,match", [
    ("capacity", 0, r"capacity=0 must be an integer >= 1.*set the task's "
     r"number of problems"),
    ("capacity", 2.5, r"capacity=2\.5 must be an integer"),
    ("prompt_ids", "mod", r"prompt_ids='mod' is unknown; choose one of "
     r"exact, hash"),
    ("max_cache_size", 0, r"max_cache_size must be an integer >= 1.*; "
     r"got 0: set an integer >= 1"),
    ("min_cache_to_replay", 0, r"min_cache_to_replay must be an integer "
     r">= 1"),
    ("num_replays", True, r"num_replays must be an integer >= 1.*got True"),
    ("advantage_mode", "joint", r"advantage_mode='joint' is unknown; choose "
     r"one of split, mixed"),
    ("off_policy_coef", float("nan"), r"off_policy_coef must be >= 0.*; got "
     r"nan: set a value >= 0"),
])
def test_option_values_fail_at_validation_naming_the_field(option, value,
                                                           match):
  """Each RePO option out of range is a `registry.OptionError`:
  train.validate names ``config.groups.kwargs.<option>`` and the fix, and
  the strategy's own build refuses it too."""
  testing.check_group_option_error(repo_config.get_config("tiny"), "repo",
                                   option, value, match)


def test_max_variance_k_over_too_many_subsets_names_num_replays():
  config = repo_config.get_config("tiny")
  config.groups.kwargs.update(strategy="max_variance_k", max_cache_size=40,
                              min_cache_to_replay=8, num_replays=8)
  # C(40, 8) = 76,904,685 subsets: more than the 100,000 it scores.
  with pytest.raises(ValueError, match=r"^config\.groups\.kwargs\."
                     r"num_replays: max_variance_k scores all C\(40, 8\) = "
                     r"76904685 subsets.*lower num_replays"):
    train.validate(config)


# --------------------------------------------------------- the split loss


@pytest.mark.slow  # ~10 s: the gradient compiles twice
def test_the_update_aggregates_fresh_and_replayed_rows_apart():
  """Rows [fresh, fresh, replayed, replayed] of one prompt, the trainer's
  log-probs as old_logp (r = 1), mu = old - d per row: decoupled PPO's
  token term is -min(e^d, 2) A. With seq_mean_token_mean, c_off = 0.5 and
  KL (k3, beta 0.1) on the fresh rows only:
    L = mean_fresh(-w A) + 0.5 mean_replayed(-w A) + 0.1 mean_fresh(k3)."""
  model_config, params, _, _ = train.load_policy(
      repo_config.get_config("tiny"))
  rng = np.random.default_rng(0)
  n, t, sp = 4, 3, 5
  tokens = rng.integers(3, 60, (n, sp + t)).astype(np.int32)
  input_mask = np.ones((n, sp + t), np.float32)
  mask = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], np.float32)
  logp = np.asarray(batch_lib.batched_logprobs(
      params, model_config, jnp.asarray(tokens),
      jnp.asarray(input_mask), sp, temperature=jnp.ones(n), chunk_size=64))
  d = np.array([0.1, -0.2, 0.3, 1.0])[:, None]  # the last one truncated at 2
  adv = np.array([1.0, -0.5, 2.0, -1.0])
  ref_shift = np.array([0.2, 0.2, 0.9, 0.9])[:, None]  # ref = logp - shift
  batch = batch_lib.Batch(
      tokens=jnp.asarray(tokens), input_mask=jnp.asarray(input_mask),
      completion_mask=jnp.asarray(mask), advantages=jnp.asarray(adv),
      old_logp=jnp.asarray(logp), ref_logp=jnp.asarray(logp - ref_shift),
      sampler_logp=jnp.asarray(logp - d), temperature=jnp.ones(n),
      replayed=jnp.asarray([0.0, 0.0, 1.0, 1.0]))
  objective = objectives.make("decoupled_ppo", clip_low=0.2, clip_high=0.2,
                              is_cap=2.0, aggregation="seq_mean_token_mean")
  kl = regularisers.make("kl", beta=0.1, estimator="k3",
                         aggregation="seq_mean_token_mean")
  fns = update_lib.make_loss_functions(
      model_config=model_config, objective=objective, regularisers=[kl],
      chunk_size=64, replay_coef=0.5)
  _, loss, records = update_lib.minibatch_gradient(
      fns, params, {"objective": (), "kl": ()}, batch)
  w = np.minimum(np.exp(d), 2.0)
  row = lambda x: (x * mask).sum(-1) / mask.sum(-1)
  term = row(-w * adv[:, None] * np.ones((n, t)))
  k3 = row(np.exp(-ref_shift) + ref_shift - 1.0 + np.zeros((n, t)))
  hand = term[:2].mean() + 0.5 * term[2:].mean() + 0.1 * k3[:2].mean()
  np.testing.assert_allclose(float(loss), hand, rtol=1e-5)
  values = measures.values(records)
  # Each part's weights on its own tokens: fresh e^0.1 (3), e^-0.2 (2).
  np.testing.assert_allclose(
      values["is_weight_mean"], (3 * math.exp(0.1) + 2 * math.exp(-0.2)) / 5,
      rtol=1e-5)
  np.testing.assert_allclose(values["replayed/is_weight_mean"],
                             (math.exp(0.3) + 3 * 2.0) / 4, rtol=1e-5)
  # Without the split the same batch is one aggregate, KL on every row.
  plain = update_lib.make_loss_functions(
      model_config=model_config, objective=objective, regularisers=[kl],
      chunk_size=64)
  _, loss_plain, _ = update_lib.minibatch_gradient(
      plain, params, {"objective": (), "kl": ()}, batch)
  np.testing.assert_allclose(float(loss_plain),
                             term.mean() + 0.1 * k3.mean(), rtol=1e-5)


# ------------------------------------------------------ the `:tiny` step


def test_the_tiny_step_trains_replayed_rows_through_decoupled_ppo():
  """Scored by accuracy (`testing.ungraded`), the tiny model earns no
  reward. The cache holds, for both of step 1's prompts, two earlier groups with accuracy [1, 0, 0, 0] and behaviour
  log-probs 0.3 below the sampler's: step 1 replays k = 4 of them
  (highest_k: rewards [1, 1, 0, 0], split advantages +-1/(2 std) with std
  sqrt(1/3)), the fresh rows' advantages are 0, and decoupled PPO weighs
  the replayed rows by pi_old / mu = e^0.3: the split loss's gradient is
  2 e^0.3 times REINFORCE's over the minibatch (fresh rows carry no
  advantage, and the replayed part is a mean over 4 rows, not 8)."""
  config = testing.ungraded(repo_config.get_config("tiny"))
  config.rewards.workers = 0
  run = train.build(config)
  p, g = config.rollout.num_prompts, config.rollout.num_generations
  seed_round = testing.sample_round(run, 1)
  accuracy = np.zeros((p, g), np.float32)
  accuracy[:, 0] = 1.0
  cache = run.state.states["groups"]
  for _ in range(2):
    cache = repo.repo_push(
        cache, seed_round.prompt_index, seed_round.tokens, seed_round.mask,
        seed_round.sampler_logp - 0.3, accuracy, 0)
  batch, m, new_states = testing.rollout_step(run, 1, groups=cache)
  k = config.groups.kwargs.num_replays
  w = g + k
  assert batch.tokens.shape[0] == p * w
  np.testing.assert_array_equal(np.asarray(batch.replayed),
                                np.tile([0] * g + [1] * k, p))
  assert m["repo/replaying_groups"] == 1.0 and m["repo/mean_age"] == 1.0
  adv = np.asarray(batch.advantages).reshape(p, w)
  z = 0.5 / (math.sqrt(1 / 3) + 1e-4)  # eps 1e-4 (configs/repo.py)
  np.testing.assert_allclose(adv[:, :g], 0.0)
  np.testing.assert_allclose(adv[:, g:], np.tile([z, z, -z, -z], (p, 1)),
                             rtol=1e-5)
  # The replayed rows carry the stored behaviour log-probs.
  stored = np.asarray(seed_round.sampler_logp) - 0.3
  logp = np.asarray(batch.sampler_logp).reshape(p, w, -1)
  for i in range(p):
    np.testing.assert_allclose(logp[i, g], stored[i, 0], rtol=1e-6)
  assert m["logprob/sampler_trainer_max_abs_diff"] < 0.1
  assert int(np.asarray(new_states["groups"].size).max()) == 8
  part = update_lib.minibatches(batch, config.train.num_minibatches)[0]
  objective = objectives.make(config.objective.name,
                              **config.objective.kwargs)
  grads, values = testing.loss_gradient(run, objective, (), run.state.params,
                                        part, replay_coef=1.0)
  np.testing.assert_allclose(values["replayed/is_weight_mean"],
                             math.exp(0.3), rtol=1e-3)
  testing.assert_scaled_reinforce_gradient(
      run, grads, part, 2 * math.exp(0.3), aggregation="seq_mean_token_mean")


# ---------------------------------------------------------- exact resume


@pytest.mark.slow
def test_a_crashed_run_resumes_exactly_with_its_cache(tmp_path):
  """Crash after step 2's metrics (before its checkpoint), resume: the
  state and every metric but timing equal a straight run's, bit for bit;
  the cache was replaying when the run crashed (one hashed slot: every
  prompt shares it, so it is ready from step 1)."""
  config = testing.short_run_config(repo_config.get_config("tiny"))
  config.groups.kwargs.update(capacity=1, prompt_ids="hash",
                              min_cache_to_replay=4)
  run = testing.coin_accuracy(train.build(config))
  _, records = testing.check_resume_is_exact(config, str(tmp_path), run=run)
  assert records[0]["repo/replaying_groups"] == 0.0
  assert all(r["repo/replaying_groups"] == 1.0 for r in records[1:])


def test_reward_shapers_reach_the_replay_cache():
  """RePO's rows are a stage of the one generate, which shapes rewards: the
  cache stores each completion's total over every column, the repetition
  column included (scored by accuracy, `testing.ungraded`, the tiny model
  earns no verifier reward)."""
  config = testing.with_repetition_shaper(
      testing.ungraded(repo_config.get_config("tiny")))
  train.validate(config)  # shapers are carried with RePO's rows
  run = train.build(config)
  _, m, states = testing.rollout_step(run, 0)
  cache = jax.device_get(states["groups"])
  width = cache.rewards.shape[1]  # right-aligned FIFOs: the last `size`
  filled = np.arange(width)[None, :] >= (width - cache.size)[:, None]
  assert filled.sum() == (config.rollout.num_prompts
                          * config.rollout.num_generations)
  want = [0.5 * testing.repetition_by_hand(row[:int(n)])
          for row, n in zip(cache.tokens[filled], cache.mask[filled].sum(-1))]
  np.testing.assert_allclose(cache.rewards[filled], want, rtol=1e-6)
  assert min(want) < 0  # the shaper acted
  assert m["shaping/repetition_penalty/changed"] > 0
