"""Tests of the training step: accumulation, skipping, KL, iterations, rollout,
and a fast learning test for every registered objective."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import common
from configs import dapo as dapo_config
from configs import grpo as grpo_config
from grpo_jax import advantages
from grpo_jax import models
from grpo_jax import objectives
from grpo_jax import rollout
from grpo_jax import sampling
from grpo_jax import testing
from grpo_jax import train

VOCAB = 8
TARGET = 5  # the learning tests reward emitting this token


def small_config():
  return models.ModelConfig(
      model_type="llama", vocab_size=VOCAB, hidden_size=16,
      intermediate_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
      head_dim=8, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def model():
  config = small_config()
  return config, models.init_params(config, jax.random.PRNGKey(0))


def random_batch(config, params, key, *, prompts=2, group=4, sp=4, t=5,
                 beta=0.0, off_policy=0.0):
  """A batch of random tokens with ragged completions; old_logp perturbed by
  `off_policy` so that ratios differ from 1."""
  k1, k2, k3, k4, k5 = jax.random.split(key, 5)
  n = prompts * group
  prompt_tokens = jax.random.randint(k1, (prompts, sp), 1, VOCAB)
  prompt_mask = np.ones((prompts, sp), np.float32)
  prompt_mask[0, :2] = 0.0  # left padding
  completion = jax.random.randint(k2, (n, t), 1, VOCAB)
  mask = testing.random_mask(k3, (n, t))
  adv = jax.random.normal(k4, (n,))
  batch = rollout.assemble_batch(
      params, params if beta > 0 else None, prompt_tokens, prompt_mask,
      completion, mask, mask, adv, model_config=config, temperature=0.9,
      chunk_size=16, beta=beta)
  noise = off_policy * jax.random.normal(k5, (n, t))
  batch = batch._replace(old_logp=batch.old_logp + noise)
  if beta > 0:
    batch = batch._replace(ref_logp=batch.ref_logp - noise)
  return batch


def make_state(params, optimizer, objective="ppo_clip"):
  return train.init_state(jax.tree.map(jnp.copy, params), optimizer, seed=0,
                          objective_name=objective)


def update(config, optimizer, **kwargs):
  options = dict(model_config=config, optimizer=optimizer,
                 objective_name="ppo_clip", objective_kwargs={},
                 aggregation="seq_mean_token_mean", temperature=0.9,
                 chunk_size=16)
  options.update(kwargs)
  return train.make_update_fn(**options)


# -------------------------------------------------------- accumulation


@pytest.mark.parametrize("objective,aggregation", [
    ("ppo_clip", "seq_mean_token_mean"), ("gspo", "token_mean")])
def test_microbatch_size_does_not_change_the_update(model, objective,
                                                    aggregation):
  config, params = model
  batch = random_batch(config, params, jax.random.PRNGKey(1), beta=0.1,
                       off_policy=0.3)
  # SGD: the update is the gradient itself, so this compares gradients.
  optimizer = optax.sgd(1.0)
  results = []
  for micro in (1, 2, 4):
    fn = update(config, optimizer, objective_name=objective,
                aggregation=aggregation, beta=0.1, microbatch_size=micro)
    state, m = fn(make_state(params, optimizer), batch)
    results.append((state.params, m["loss"], m["kl"]))
  for other in results[1:]:
    testing.assert_close(other[0], results[0][0], rtol=1e-4, atol=1e-6)
    testing.assert_close(other[1], results[0][1], rtol=1e-5, atol=1e-6)
    testing.assert_close(other[2], results[0][2], rtol=1e-5, atol=1e-7)
  assert not np.allclose(testing.numpy(results[0][0]["embed"]),
                         testing.numpy(params["embed"]))


def test_microbatch_must_divide_minibatch(model):
  config, params = model
  batch = random_batch(config, params, jax.random.PRNGKey(1))
  fn = update(config, optax.sgd(1.0), microbatch_size=3, jit=False)
  with pytest.raises(ValueError, match="microbatch_size"):
    fn(make_state(params, optax.sgd(1.0)), batch)


# ---------------------------------------------------------- skipping


def test_non_finite_loss_skips_the_update(model):
  config, params = model
  optimizer = train.make_optimizer(learning_rate=1e-2)
  fn = update(config, optimizer)
  good = random_batch(config, params, jax.random.PRNGKey(2))
  poisoned = good._replace(advantages=good.advantages.at[0].set(jnp.nan))
  state = make_state(params, optimizer)
  before = jax.device_get((state.params, state.opt_state))
  state, m = fn(state, poisoned)
  assert float(m["skipped_updates"]) == 1.0
  after = jax.device_get((state.params, state.opt_state))
  chex_equal = jax.tree.map(np.array_equal, before, after)
  assert all(jax.tree.leaves(chex_equal))
  state, m = fn(state, good)
  assert float(m["skipped_updates"]) == 0.0
  assert not np.array_equal(testing.numpy(state.params["embed"]),
                            before[0]["embed"])


# -------------------------------------------------- KL and reference


def test_beta_zero_never_runs_the_reference_forward(model, monkeypatch):
  config, params = model
  calls = []
  original = rollout.batched_logprobs

  def counting(p, *args, **kwargs):
    calls.append(p)
    return original(p, *args, **kwargs)

  monkeypatch.setattr(rollout, "batched_logprobs", counting)
  batch = random_batch(config, params, jax.random.PRNGKey(3), beta=0.0)
  assert len(calls) == 1 and batch.ref_logp is None
  random_batch(config, params, jax.random.PRNGKey(3), beta=0.5)
  assert len(calls) == 3
  # update_fn with beta == 0 never reads ref_logp (it is None here).
  optimizer = optax.sgd(0.1)
  _, m = update(config, optimizer, beta=0.0)(make_state(params, optimizer),
                                             batch)
  assert "kl" not in m


def test_no_reference_params_kept_when_beta_is_zero():
  config = grpo_config.get_config("tiny")
  config.kl.beta = 0.0
  assert train.build(config).ref_params is None
  config.kl.beta = 0.1
  assert train.build(config).ref_params is not None


def test_kl_is_zero_at_the_reference_and_positive_away(model):
  config, params = model
  batch = random_batch(config, params, jax.random.PRNGKey(4), beta=0.1)
  optimizer = optax.sgd(0.0)
  fn = update(config, optimizer, beta=0.1)
  _, m = fn(make_state(params, optimizer), batch)
  assert abs(float(m["kl"])) < 1e-6
  moved = batch._replace(ref_logp=batch.ref_logp - 0.5)
  _, m = fn(make_state(params, optimizer), moved)
  # k3 with d = ref - logp = -0.5: exp(-0.5) + 0.5 - 1 per token.
  np.testing.assert_allclose(float(m["kl"]), np.exp(-0.5) - 0.5, rtol=1e-4)


# ------------------------------------------------------- iterations


def test_second_iteration_sees_ratios_different_from_one(model):
  config, params = model
  optimizer = optax.adam(1e-2)
  fn = update(config, optimizer)
  batch = random_batch(config, params, jax.random.PRNGKey(5))
  state = make_state(params, optimizer)
  state, first = fn(state, batch)
  assert float(first["ratio_max"]) == pytest.approx(1.0, abs=1e-6)
  assert float(first["ratio_min"]) == pytest.approx(1.0, abs=1e-6)
  _, second = fn(state, batch)
  spread = max(float(second["ratio_max"]) - 1.0,
               1.0 - float(second["ratio_min"]))
  assert spread > 1e-3


def test_r2vpo_dual_variable_is_updated(model):
  config, params = model
  optimizer = optax.sgd(0.0)
  # A copy: update_fn donates the state, and `params` is shared by the module.
  state = train.init_state(jax.tree.map(jnp.copy, params), optimizer, seed=0,
                           objective_name="r2vpo",
                           objective_state_kwargs={"lam0": 0.0, "eta": 1.0})
  fn = update(config, optimizer, objective_name="r2vpo",
              objective_kwargs={"delta": 0.0}, aggregation="token_mean",
              objective_state_kwargs={"eta": 1.0})
  batch = random_batch(config, params, jax.random.PRNGKey(6), off_policy=0.3)
  state, m = fn(state, batch)
  # lam <- max(0, 0 + 1 * (Var - 0)) = the measured variance about 1.
  assert float(state.objective_state.lam) > 0
  np.testing.assert_allclose(float(m["objective/lam"]),
                             float(state.objective_state.lam))


# --------------------------------------------------------- optimiser


def test_schedule_warmup_then_cosine():
  schedule = train.make_schedule(learning_rate=1.0, warmup_steps=4,
                                 decay="cosine", total_steps=14,
                                 final_lr_fraction=0.0)
  np.testing.assert_allclose(float(schedule(0)), 0.0)
  np.testing.assert_allclose(float(schedule(2)), 0.5)
  np.testing.assert_allclose(float(schedule(4)), 1.0)
  # Half way through the 10 decay steps: (1 + cos(pi/2)) / 2 = 0.5.
  np.testing.assert_allclose(float(schedule(9)), 0.5, atol=1e-6)
  np.testing.assert_allclose(float(schedule(14)), 0.0, atol=1e-6)


def test_optimizer_clips_the_global_norm():
  optimizer = train.make_optimizer(learning_rate=1.0, max_grad_norm=1.0,
                                   b1=0.9)
  params = {"w": jnp.zeros(2)}
  state = optimizer.init(params)
  grads = {"w": jnp.array([30.0, 40.0])}  # norm 50 -> [0.6, 0.8]
  _, state = optimizer.update(grads, state, params)
  # Adam's first moment after one step is (1 - b1) * the clipped gradient
  # (Adam's own step would hide the clipping: it divides the scale away).
  mu = [node.mu for node in jax.tree.leaves(
      state, is_leaf=lambda x: hasattr(x, "mu")) if hasattr(node, "mu")]
  np.testing.assert_allclose(np.asarray(mu[0]["w"]), [0.06, 0.08], rtol=1e-5)


def test_logged_learning_rate_is_the_one_each_update_used(model):
  """Warmup 0 -> 1 over 4 steps: updates 0, 1, 2 use 0, 0.25, 0.5."""
  config, params = model
  optimizer = train.make_optimizer(learning_rate=1.0, warmup_steps=4,
                                   total_steps=10)
  fn = update(config, optimizer)
  batch = random_batch(config, params, jax.random.PRNGKey(7))
  state = make_state(params, optimizer)
  rates = []
  for _ in range(3):
    state, m = fn(state, batch)
    rates.append(float(m["learning_rate"]))
  np.testing.assert_allclose(rates, [0.0, 0.25, 0.5], atol=1e-7)


# ----------------------------------------------------------- rollout


def test_on_policy_update_equals_the_recomputed_old_logp_update(model):
  """Without old_logp the update uses its own log-probs, detached: the same
  step as with the old log-prob pass (which computes the same numbers)."""
  config, params = model
  batch = random_batch(config, params, jax.random.PRNGKey(2), beta=0.1)
  on_policy = batch._replace(old_logp=None,
                             sampler_logp=batch.old_logp + 1e-3)
  optimizer = optax.sgd(1.0)
  fn = update(config, optimizer, beta=0.1, microbatch_size=4)
  expected, m_expected = fn(make_state(params, optimizer), batch)
  got, m_got = fn(make_state(params, optimizer), on_policy)
  testing.assert_close(got.params, expected.params, rtol=1e-5, atol=1e-7)
  for name in ("loss", "kl", "ratio_mean", "ratio_max", "clip_fraction"):
    testing.assert_close(m_got[name], m_expected[name], rtol=1e-5, atol=1e-7)
  assert float(m_got["ratio_mean"]) == pytest.approx(1.0)
  # The sampler's log-probs, 1e-3 off the trainer's, are measured.
  assert float(m_got["logprob/sampler_trainer_max_abs_diff"]) == (
      pytest.approx(1e-3, rel=1e-2))
  assert "logprob/sampler_trainer_max_abs_diff" not in m_expected
  assert not np.allclose(testing.numpy(got.params["embed"]),
                         testing.numpy(params["embed"]))


@pytest.mark.parametrize("iterations,minibatch,expected", [
    (1, 0, True), (1, 16, True), (2, 0, False), (1, 8, False)])
def test_on_policy_means_one_optimizer_step_per_batch(iterations, minibatch,
                                                      expected):
  c = grpo_config.get_config("tiny")
  c.rollout.num_prompts, c.rollout.num_generations = 2, 8
  c.train.num_iterations, c.train.minibatch_size = iterations, minibatch
  assert rollout.is_on_policy(c) == expected


@pytest.fixture(scope="module")
def tiny_rollout():
  config_, params, tokenizer = rollout.load_model("tiny")
  return config_, params, tokenizer


def run_generate(tiny_rollout, reward, *, dynamic, mask_truncated=False,
                 temperature=0.7, on_policy=False):
  config, params, tokenizer = tiny_rollout
  c = dapo_config.get_config("tiny")
  settings = rollout.Settings(
      num_prompts=2, num_generations=2, max_new_tokens=4,
      temperature=temperature, prompt_buckets=(80,), reward_weights=(1.0,),
      dynamic_sampling=dynamic, max_rounds=3, mask_truncated=mask_truncated,
      chunk_size=64, on_policy=on_policy)
  eos_ids, pad_id = rollout.eos_and_pad(tokenizer)
  from grpo_jax import data  # pylint: disable=g-import-not-at-top
  return rollout.generate(
      params, None, 0, jax.random.PRNGKey(0), settings=settings,
      model_config=config, tokenizer=tokenizer,
      task=rollout.make_task(c.data, seed=0), format_prompt=data.format_prompt,
      reward_fns={"r": reward}, estimator=advantages.grpo,
      estimator_kwargs={}, eos_ids=eos_ids, pad_id=pad_id)


def constant_reward(prompts, completions, answers):
  return [0.0] * len(completions)


def test_dynamic_sampling_changes_the_batch(tiny_rollout):
  plain, m_plain = run_generate(tiny_rollout, constant_reward, dynamic=False)
  dynamic, m_dyn = run_generate(tiny_rollout, constant_reward, dynamic=True)
  # Every group lacks signal: without the filter they train (with A = 0),
  # with it the sampler tries max_rounds times and masks them all out.
  assert float(plain.completion_mask.sum()) > 0
  assert float(dynamic.completion_mask.sum()) == 0
  assert m_plain["rollout/rounds"] == 1 and m_dyn["rollout/rounds"] == 3
  assert m_dyn["rollout/groups_with_signal"] == 0


def test_dynamic_sampling_resamples_until_groups_have_signal(tiny_rollout):
  """Round 0 scores every completion alike (no signal), round 1 varies:
  sampling stops after round 1 and every group of the batch has signal
  (nonzero advantages) and stays in the loss."""
  calls = []

  def varies_from_round_one(prompts, completions, answers):
    calls.append(list(completions))
    if len(calls) == 1:
      return [0.0] * len(completions)
    return [float(i % 2) for i in range(len(completions))]

  batch, m = run_generate(tiny_rollout, varies_from_round_one, dynamic=True)
  assert len(calls) == 2 and m["rollout/rounds"] == 2
  assert m["rollout/groups_with_signal"] == 1.0
  # The loss sees every sampled token of round 1's completions.
  np.testing.assert_array_equal(
      np.asarray(batch.completion_mask),
      np.asarray(batch.input_mask)[:, -batch.completion_mask.shape[1]:])
  assert np.abs(np.asarray(batch.advantages)).min() > 0


def test_select_groups_prefers_groups_with_signal():
  def fake_round(rewards):
    rewards = np.asarray(rewards)[..., None]
    return rollout._Round(
        *([None] * 6), rewards=rewards, errors=None,
        signal=rollout.has_signal(rewards, [1.0],
                                  multi_reward_mode="sum_then_normalize"))
  rounds = [fake_round([[1, 1], [0, 1]]), fake_round([[0, 0], [1, 0]])]
  chosen, filler = rollout._select_groups(rounds, 2)
  assert chosen == [(0, 1), (1, 1)] and filler == []
  chosen, filler = rollout._select_groups(rounds[:1], 2)
  assert chosen == [(0, 1)] and filler == [(0, 0)]


def test_signal_is_in_the_weighted_rewards_that_advantages_see():
  # [P=3, G=2, K=2]: group 0 varies only in a weight-0 reward; group 1's
  # rewards vary but their sum does not; group 2's sum varies.
  rewards = np.asarray([[[0, 1], [0, 0]], [[1, 0], [0, 1]],
                        [[1, 1], [0, 0]]], np.float32)
  summed = rollout.has_signal(rewards, [1.0, 0.0],
                              multi_reward_mode="sum_then_normalize")
  np.testing.assert_array_equal(summed, [False, True, True])
  summed = rollout.has_signal(rewards, [1.0, 1.0],
                              multi_reward_mode="sum_then_normalize")
  np.testing.assert_array_equal(summed, [True, False, True])
  # GDPO normalises each reward alone: group 1 has signal there.
  gdpo = rollout.has_signal(rewards, [1.0, 1.0],
                            multi_reward_mode="normalize_then_sum")
  np.testing.assert_array_equal(gdpo, [True, True, True])
  # Summed, signal is exactly where GRPO's advantages are nonzero.
  adv = rollout.combine_advantages(
      rewards, [1.0, 1.0], estimator=advantages.grpo, estimator_kwargs={},
      multi_reward_mode="sum_then_normalize")
  np.testing.assert_array_equal(np.abs(np.asarray(adv)).max(-1) > 0, summed)


def test_truncated_completions_leave_mask_and_denominator(tiny_rollout):
  def varied(prompts, completions, answers):
    return [float(len(c) % 3) for c in completions]
  kept, _ = run_generate(tiny_rollout, varied, dynamic=False)
  dropped, m = run_generate(tiny_rollout, varied, dynamic=False,
                            mask_truncated=True)
  kept_rows = np.asarray(kept.completion_mask)
  dropped_rows = np.asarray(dropped.completion_mask)
  assert 0 < m["truncation_rate"] < 1  # both kinds of rows occur
  # Same sample (same key): rows survive whole or vanish whole; the ones that
  # vanish are exactly the truncated share, so the denominator shrinks too.
  survived = (dropped_rows == kept_rows).all(axis=-1)
  vanished = (dropped_rows == 0).all(axis=-1) & (kept_rows.sum(-1) > 0)
  assert np.all(survived | vanished)
  assert vanished.mean() == pytest.approx(m["truncation_rate"])


def test_sampler_and_trainer_logprobs_agree(tiny_rollout):
  _, m = run_generate(tiny_rollout, constant_reward, dynamic=False,
                      temperature=0.6)
  assert m["logprob/sampler_trainer_max_abs_diff"] < 1e-4


def test_on_policy_rollout_skips_the_old_logprob_pass(tiny_rollout):
  """On policy the batch carries the sampler's log-probs instead, and the
  update measures the sampler/trainer gap from its own forward pass."""
  config, params, _ = tiny_rollout
  off, _ = run_generate(tiny_rollout, constant_reward, dynamic=False,
                        temperature=0.6)
  on, m_on = run_generate(tiny_rollout, constant_reward, dynamic=False,
                          temperature=0.6, on_policy=True)
  assert on.old_logp is None and off.sampler_logp is None
  assert "logprob/sampler_trainer_max_abs_diff" not in m_on
  mask = np.asarray(on.completion_mask)
  testing.assert_close(np.asarray(on.sampler_logp) * mask,
                       np.asarray(off.old_logp) * mask, atol=1e-4)
  optimizer = optax.sgd(0.0)
  fn = update(config, optimizer, temperature=0.6)
  _, m = fn(make_state(params, optimizer), on)
  assert 0 < float(m["logprob/sampler_trainer_max_abs_diff"]) < 1e-4


# ------------------------------------------------------------ learning


def learn(objective, *, steps=25, prompts=2, group=8, t=4, lr=5e-2):
  """Rewards of a short run where reward = share of TARGET tokens emitted."""
  config = small_config()
  params = models.init_params(config, jax.random.PRNGKey(0))
  optimizer = train.make_optimizer(learning_rate=lr)
  fn = train.make_update_fn(
      model_config=config, optimizer=optimizer, objective_name=objective,
      objective_kwargs={}, aggregation="token_mean", temperature=1.0,
      chunk_size=16)
  state = train.init_state(params, optimizer, seed=0, objective_name=objective)
  prompt_tokens = jnp.array([[1, 2, 3], [3, 2, 1]], jnp.int32)[:prompts]
  prompt_mask = jnp.ones_like(prompt_tokens)
  history = []
  for step in range(steps):
    out = sampling.sample(
        state.params, config, prompt_tokens, prompt_mask,
        jax.random.fold_in(state.key, step), num_samples=group,
        max_new_tokens=t, temperature=1.0, eos_ids=(), pad_id=0)
    reward = (out.tokens == TARGET).mean(axis=-1)
    history.append(float(reward.mean()))
    adv = advantages.grpo(reward.reshape(prompts, group)).reshape(-1)
    batch = rollout.assemble_batch(
        state.params, None, prompt_tokens, prompt_mask, out.tokens, out.mask,
        out.mask, adv, model_config=config, temperature=1.0, chunk_size=16)
    state, m = fn(state, batch)
    assert float(m["skipped_updates"]) == 0.0
  return history


@pytest.mark.parametrize("objective", objectives.names())
def test_every_objective_learns_a_trivial_task(objective):
  history = learn(objective)
  start, end = np.mean(history[:3]), np.mean(history[-3:])
  # Uniform over 8 tokens: ~1/8 of tokens are TARGET at the start.
  assert start < 0.35, history
  assert end > start + 0.3, history


def test_config_validation_runs_before_build():
  config = grpo_config.get_config("tiny")
  config.rollout.num_generations = 0
  with pytest.raises(ValueError, match="rollout.num_generations"):
    train.build(config)
  common.validate(grpo_config.get_config("tiny"))
