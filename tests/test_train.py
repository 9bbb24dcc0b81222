"""Tests of the training step: accumulation, exact measurements, skipping, KL,
iterations, and an off-policy learning test for every registered objective
and every stateless advantage estimator."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import grpo as grpo_config
from grpo_jax import advantages
from grpo_jax.train import batch as batch_lib
from grpo_jax import config as config_lib
from grpo_jax import evaluation
from grpo_jax import measures
from grpo_jax import models
from grpo_jax import objectives
from grpo_jax.objectives import regularisers
from grpo_jax import rollout
from grpo_jax.rollout import build as rollout_build
from grpo_jax import sampling
from grpo_jax.runtime import sharding
from grpo_jax import testing
from grpo_jax.testing import estimator_laws as laws
from grpo_jax.testing import learning
from grpo_jax.train import optim
from grpo_jax import train
from grpo_jax.train import update as update_lib

VOCAB = learning.VOCAB
TARGET = learning.TARGET  # the learning tests reward emitting this token
small_config = learning.model_config


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
  batch = batch_lib.assemble_batch(
      params, params if beta > 0 else None, prompt_tokens, prompt_mask,
      completion, mask, mask, adv, model_config=config, temperature=0.9,
      chunk_size=16, beta=beta)
  noise = off_policy * jax.random.normal(k5, (n, t))
  batch = batch._replace(old_logp=batch.old_logp + noise)
  if beta > 0:
    batch = batch._replace(ref_logp=batch.ref_logp - noise)
  return batch


def with_topk(batch, key, k=3):
  """`batch` with a sampler's top-K record (random ids, log-probs of mass
  below 1) and its log-probs, for objectives reading them (dppo_topk)."""
  n, t = batch.completion_mask.shape
  k1, k2 = jax.random.split(key)
  return batch._replace(
      sampler_logp=batch.old_logp,
      sampler_topk_ids=jax.random.randint(k1, (n, t, k), 1, VOCAB),
      sampler_topk_logp=jnp.log(jax.random.uniform(k2, (n, t, k), minval=0.05,
                                                   maxval=0.3)))


def setup(config, params, optimizer, objective="ppo_clip", options=None, *,
          beta=0.0, **update_kwargs):
  """(update_fn returning measurement values, a fresh-state factory)."""
  record = objectives.make(objective, **(options or {}))
  components = dict(objective=record)
  if beta > 0:
    components["kl"] = regularisers.make(
        "kl", beta=beta, aggregation=record.aggregation,
        horizon=record.horizon)
  kwargs = dict(chunk_size=16)
  kwargs.update(update_kwargs)
  fn = update_lib.make_update_fn(
      model_config=config, optimizer=optimizer, objective=record,
      regularisers=[c for k, c in components.items() if k != "objective"],
      **kwargs)

  def update_fn(state, batch):
    state, records = fn(state, batch)
    return state, measures.values(records)

  def fresh_state():
    # A copy: update_fn donates the state, and `params` is the module's.
    return train.init_state(jax.tree.map(jnp.copy, params), optimizer,
                            seed=0, components=components)
  return update_fn, fresh_state


# -------------------------------------------------------- accumulation

# Clip-Cov's random draw takes the minibatch whole (a split is refused:
# tests/test_clip_cov_draw.py); its `top` rule microbatches exactly.
MICROBATCH_CASES = [(name, {}) for name in objectives.names()
                    if name != "clip_cov"] + [
    ("clip_cov", {"clip_cov_rule": "top"}),
    ("ppo_clip", {"aggregation": "token_mean"}),
    ("ppo_clip", {"aggregation": "seq_mean_token_sum"}),
    ("ppo_clip", {"aggregation": "seq_mean_token_sum_norm", "horizon": 5}),
    ("r2vpo", {"lam0": 2.0, "center": "mean"}),
    ("r2vpo", {"lam0": 2.0, "aggregation": "seq_mean_token_mean"}),
]


@pytest.mark.parametrize(
    "objective,options", MICROBATCH_CASES,
    ids=[f"{n}-{'-'.join(map(str, o.values()))}" for n, o in MICROBATCH_CASES])
def test_microbatch_size_does_not_change_the_update(model, objective,
                                                    options):
  """Params after one SGD step (the gradient), the loss, the KL and every
  measurement (ratio variance and extremes included) are the same one-shot
  and in 8 microbatches of one row (the accumulating path, whatever its
  number of microbatches)."""
  config, params = model
  batch = random_batch(config, params, jax.random.PRNGKey(1), beta=0.1,
                       off_policy=0.3)
  if "topk_logp" in objectives.make(objective, **options).reads:
    batch = with_topk(batch, jax.random.PRNGKey(2))
  optimizer = optax.sgd(1.0)
  results = []
  for micro in (0, 1):
    fn, fresh = setup(config, params, optimizer, objective, options,
                      beta=0.1, microbatch_size=micro)
    state, m = fn(fresh(), batch)
    results.append((state.params, state.states, m))
  for other in results[1:]:
    testing.assert_close(other[0], results[0][0], rtol=1e-4, atol=1e-6)
    testing.assert_close(other[1], results[0][1], rtol=1e-5, atol=1e-6)
    testing.assert_close(other[2], results[0][2], rtol=1e-5, atol=1e-6)
  assert float(results[0][2]["ratio_var"]) > 1e-3  # off policy
  assert not np.allclose(testing.numpy(results[0][0]["embed"]),
                         testing.numpy(params["embed"]))


def test_a_shared_prompt_runs_once_with_the_full_forwards_values(model):
  """Rows in blocks of G with one prompt: running the prompt once and
  repeating its keys/values gives the full forward's log-probs, entropies
  and gradient (left padding and ragged completions included). Rows of
  different prompts in one block do not: the path reads one prompt each."""
  config, params = model
  batch = random_batch(config, params, jax.random.PRNGKey(1))
  weights = jax.random.normal(jax.random.PRNGKey(2), batch.old_logp.shape)

  def loss(params, batch, group_size):
    logp, entropy = batch_lib.policy_logprobs(
        params, config, batch.tokens, batch.input_mask, 4,
        temperature=batch.temperature, chunk_size=16, group_size=group_size)
    mask = batch.completion_mask
    return ((weights * logp + entropy) * mask).sum(), (logp * mask,
                                                       entropy * mask)

  grad = jax.jit(jax.grad(loss, has_aux=True), static_argnums=2)
  full_grad, full = grad(params, batch, 1)
  for group_size in (2, 4):
    shared_grad, shared = grad(params, batch, group_size)
    testing.assert_close(shared, full, rtol=1e-5, atol=1e-6)
    testing.assert_close(shared_grad, full_grad, rtol=1e-4, atol=1e-6)
  # Rows 0..7 hold prompts 0,0,0,0,1,1,1,1; interleaved, a block of 4 mixes
  # both prompts, and only its first row's prompt is run.
  order = np.array([0, 4, 1, 5, 2, 6, 3, 7])
  mixed = jax.tree.map(lambda x: x[order], batch)
  _, (mixed_logp, _) = grad(params, mixed, 4)
  assert not np.allclose(mixed_logp, full[0][order], atol=1e-3)


def test_microbatch_must_divide_minibatch(model):
  config, params = model
  batch = random_batch(config, params, jax.random.PRNGKey(1))
  fn, fresh = setup(config, params, optax.sgd(1.0), microbatch_size=3,
                    jit=False)
  with pytest.raises(ValueError, match="microbatch_size"):
    fn(fresh(), batch)


def test_ratio_statistics_merge_exactly_across_minibatches(model):
  """Two optimiser steps' records merged = the statistics of all their
  tokens' ratios together (not the mean of the two variances)."""
  config, params = model
  batch = random_batch(config, params, jax.random.PRNGKey(8), off_policy=0.4)
  objective = objectives.make("ppo_clip")
  fn = update_lib.make_update_fn(model_config=config,
                                 optimizer=optax.sgd(0.0),
                                 objective=objective,
                                 chunk_size=16)
  state = train.init_state(jax.tree.map(jnp.copy, params), optax.sgd(0.0),
                           seed=0, components={"objective": objective})
  halves = update_lib.minibatches(batch, 2)
  records = []
  for half in halves:
    state, r = fn(state, half)
    records.append(r)
  merged = measures.values(measures.merge_all(jax.device_get(records)))
  # Independently: the ratios from the trainer's log-probs, in float64.
  start = batch.tokens.shape[1] - batch.completion_mask.shape[1]
  logp, _ = batch_lib.policy_logprobs(params, config, batch.tokens,
                                      batch.input_mask, start,
                                      temperature=0.9, chunk_size=16)
  m = np.asarray(batch.completion_mask) > 0
  r = np.exp(np.asarray(logp, np.float64) - np.asarray(batch.old_logp))[m]
  np.testing.assert_allclose(
      [merged["ratio_mean"], merged["ratio_var"], merged["ratio_max"],
       merged["ratio_min"]], [r.mean(), r.var(), r.max(), r.min()],
      rtol=1e-4)
  assert merged["optimizer_steps"] == 2.0


# ---------------------------------------------------------- skipping


def test_non_finite_loss_skips_the_update(model):
  config, params = model
  optimizer = optim.make_optimizer(learning_rate=1e-2)
  fn, fresh = setup(config, params, optimizer)
  good = random_batch(config, params, jax.random.PRNGKey(2))
  poisoned = good._replace(advantages=good.advantages.at[0].set(jnp.nan))
  state = fresh()
  before = jax.device_get((state.params, state.opt_state))
  state, m = fn(state, poisoned)
  assert float(m["skipped_updates"]) == 1.0
  after = jax.device_get((state.params, state.opt_state))
  assert all(jax.tree.leaves(jax.tree.map(np.array_equal, before, after)))
  state, m = fn(state, good)
  assert float(m["skipped_updates"]) == 0.0
  assert not np.array_equal(testing.numpy(state.params["embed"]),
                            before[0]["embed"])


def test_a_skipped_update_still_advances_clip_covs_draw_key(model):
  """Clip-Cov's draw key moves every optimiser step, applied or skipped
  (split(key)[0]): the minibatch after a non-finite one draws a new
  pattern. R2VPO's dual variable, updated from the step's measures, holds."""
  config, params = model
  optimizer = optim.make_optimizer(learning_rate=1e-2)
  good = random_batch(config, params, jax.random.PRNGKey(2))
  poisoned = good._replace(advantages=good.advantages.at[0].set(jnp.nan))
  fn, fresh = setup(config, params, optimizer, "clip_cov",
                    {"clip_cov_ratio": 0.5, "seed": 3})
  state = fresh()
  key = np.asarray(state.states["objective"].key)  # PRNGKey(3)
  state, m = fn(state, poisoned)
  assert float(m["skipped_updates"]) == 1.0
  np.testing.assert_array_equal(np.asarray(state.states["objective"].key),
                                np.asarray(jax.random.split(key)[0]))
  fn, fresh = setup(config, params, optimizer, "r2vpo")
  state = fresh()
  before = jax.device_get(state.states["objective"])
  state, m = fn(state, poisoned)
  assert float(m["skipped_updates"]) == 1.0
  testing.assert_close(jax.device_get(state.states["objective"]), before,
                       rtol=0, atol=0)


def test_a_skipped_update_reports_the_last_applied_rate_and_holds_the_schedule(
    model):
  """Warmup 0 -> 1e-2 over 4 steps: the rates are 0, 2.5e-3, 5e-3, ... by
  optimiser step. A skipped update neither advances the schedule nor
  reports a rate it did not use."""
  config, params = model
  optimizer = optim.make_optimizer(learning_rate=1e-2, warmup_steps=4,
                                   decay="constant", total_steps=10)
  fn, fresh = setup(config, params, optimizer)
  good = random_batch(config, params, jax.random.PRNGKey(2))
  poisoned = good._replace(advantages=good.advantages.at[0].set(jnp.nan))
  rates = []
  state = fresh()
  for batch in (good, poisoned, good):
    state, m = fn(state, batch)
    rates.append(float(m["learning_rate"]))
  np.testing.assert_allclose(rates, [0.0, 0.0, 2.5e-3], atol=1e-9)


def test_a_minibatch_without_loss_tokens_takes_no_step(model):
  """After a real step AdamW's momentum is nonzero, so an update on a
  minibatch without loss tokens would still move the params: it is skipped
  and counted instead."""
  config, params = model
  optimizer = optim.make_optimizer(learning_rate=1e-2)
  fn, fresh = setup(config, params, optimizer)
  good = random_batch(config, params, jax.random.PRNGKey(2))
  empty = good._replace(completion_mask=jnp.zeros_like(good.completion_mask))
  state, _ = fn(fresh(), good)
  before = jax.device_get((state.params, state.opt_state))
  state, m = fn(state, empty)
  assert float(m["skipped_updates"]) == 1.0
  assert float(m["empty_minibatches"]) == 1.0
  after = jax.device_get((state.params, state.opt_state))
  assert all(jax.tree.leaves(jax.tree.map(np.array_equal, before, after)))


def test_applied_tokens_count_only_the_updates_that_ran():
  records = [{"skipped_updates": measures.Sum(np.float32(flag))}
             for flag in (0, 1, 0)]
  assert update_lib.applied_tokens(records, [10.0, 20.0, 30.0]) == 10 + 30
  skipped = [{"skipped_updates": measures.Sum(np.float32(1))}] * 2
  assert update_lib.applied_tokens(skipped, [10.0, 20.0]) == 0


def test_update_throughput_is_zero_when_every_update_was_skipped():
  """A step whose minibatches have no loss tokens skips each update: it
  trains on no token, so its update throughput is 0, not the batch's
  tokens over the time the skips took."""
  config = grpo_config.get_config("tiny")
  config.train.num_minibatches = 2
  run = train.build(config)
  state, m = train.train_step(run, jax.tree.map(jnp.copy, run.state), 0)
  assert m["skipped_updates"] == 0 and m["time/update_tokens_per_s"] > 0

  def without_loss_tokens(*args):
    batch, measurements, states = run.rollout_fn(*args)
    batch = batch._replace(
        completion_mask=jnp.zeros_like(batch.completion_mask))
    return batch, measurements, states
  empty = run._replace(rollout_fn=without_loss_tokens)
  _, m = train.train_step(empty, state, 1)
  assert m["skipped_updates"] == m["optimizer_steps"] == 2
  assert m["time/update_tokens_per_s"] == 0
  assert m["time/update_s"] > 0


# -------------------------------------------------- KL and reference


def test_beta_zero_never_runs_the_reference_forward(model, monkeypatch):
  config, params = model
  calls = []
  original = batch_lib.batched_logprobs

  def counting(p, *args, **kwargs):
    calls.append(p)
    return original(p, *args, **kwargs)

  monkeypatch.setattr(batch_lib, "batched_logprobs", counting)
  batch = random_batch(config, params, jax.random.PRNGKey(3), beta=0.0)
  assert len(calls) == 1 and batch.ref_logp is None
  random_batch(config, params, jax.random.PRNGKey(3), beta=0.5)
  assert len(calls) == 3
  # Without the KL regulariser update_fn never reads ref_logp (None here).
  fn, fresh = setup(config, params, optax.sgd(0.1))
  _, m = fn(fresh(), batch)
  assert "kl" not in m


def test_no_reference_params_kept_when_beta_is_zero():
  config = grpo_config.get_config("tiny")
  config.kl.beta = 0.0
  run = train.build(config)
  assert run.ref_params is None
  # Every component's state, stateless ones too; no KL without beta.
  assert set(run.state.states) == set(rollout.STAGES) | {"objective"}
  config.kl.beta = 0.1
  run = train.build(config)
  assert run.ref_params is not None and "kl" in run.state.states


def test_kl_is_zero_at_the_reference_and_positive_away(model):
  config, params = model
  batch = random_batch(config, params, jax.random.PRNGKey(4), beta=0.1)
  fn, fresh = setup(config, params, optax.sgd(0.0), beta=0.1)
  _, m = fn(fresh(), batch)
  assert abs(float(m["kl"])) < 1e-6
  moved = batch._replace(ref_logp=batch.ref_logp - 0.5)
  _, m = fn(fresh(), moved)
  # k3 with d = ref - logp = -0.5: exp(-0.5) + 0.5 - 1 per token.
  np.testing.assert_allclose(float(m["kl"]), np.exp(-0.5) - 0.5, rtol=1e-4)


# ------------------------------------------------------- iterations


def test_second_iteration_sees_ratios_different_from_one(model):
  config, params = model
  fn, fresh = setup(config, params, optax.adam(1e-2))
  batch = random_batch(config, params, jax.random.PRNGKey(5))
  state, first = fn(fresh(), batch)
  assert float(first["ratio_max"]) == pytest.approx(1.0, abs=1e-6)
  assert float(first["ratio_min"]) == pytest.approx(1.0, abs=1e-6)
  _, second = fn(state, batch)
  spread = max(float(second["ratio_max"]) - 1.0,
               1.0 - float(second["ratio_min"]))
  assert spread > 1e-3


@pytest.mark.parametrize("microbatch_size", [0, 2])
def test_r2vpo_dual_variable_ascends_on_the_exact_variance(model,
                                                           microbatch_size):
  """lam <- max(0, 0 + eta * (Var - delta)) with Var about 1 of the step's
  ratios, computed here in float64 from the trainer's log-probs, whatever
  the microbatch size."""
  config, params = model
  fn, fresh = setup(config, params, optax.sgd(0.0), "r2vpo",
                    {"delta": 0.001, "eta": 2.0, "lam0": 0.0},
                    microbatch_size=microbatch_size)
  batch = random_batch(config, params, jax.random.PRNGKey(6), off_policy=0.3)
  state, m = fn(fresh(), batch)
  start = batch.tokens.shape[1] - batch.completion_mask.shape[1]
  logp, _ = batch_lib.policy_logprobs(params, config, batch.tokens,
                                      batch.input_mask, start,
                                      temperature=0.9, chunk_size=16)
  mask = np.asarray(batch.completion_mask, np.float64)
  r = np.exp(np.asarray(logp, np.float64) - np.asarray(batch.old_logp))
  var = (((r - 1.0) ** 2) * mask).sum() / mask.sum()
  assert var > 0.001
  np.testing.assert_allclose(float(state.states["objective"].lam),
                             2.0 * (var - 0.001), rtol=1e-4)
  np.testing.assert_allclose(float(m["objective/lam"]),
                             2.0 * (var - 0.001), rtol=1e-4)


# --------------------------------------------------------- optimiser


def test_schedule_warmup_then_cosine():
  schedule = optim.make_schedule(learning_rate=1.0, warmup_steps=4,
                                 decay="cosine", total_steps=14,
                                 final_lr_fraction=0.0)
  np.testing.assert_allclose(float(schedule(0)), 0.0)
  np.testing.assert_allclose(float(schedule(2)), 0.5)
  np.testing.assert_allclose(float(schedule(4)), 1.0)
  # Half way through the 10 decay steps: (1 + cos(pi/2)) / 2 = 0.5.
  np.testing.assert_allclose(float(schedule(9)), 0.5, atol=1e-6)
  np.testing.assert_allclose(float(schedule(14)), 0.0, atol=1e-6)


def test_optimizer_clips_the_global_norm():
  optimizer = optim.make_optimizer(learning_rate=1.0, max_grad_norm=1.0,
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


def test_adamw_b2_default_is_the_peers_0999():
  state = optim.make_optimizer(learning_rate=1.0).init({"w": jnp.zeros(1)})
  found = [node.hyperparams["b2"] for node in jax.tree.leaves(
      state, is_leaf=lambda x: hasattr(x, "hyperparams"))
           if hasattr(node, "hyperparams")]
  assert [float(b2) for b2 in found] == [pytest.approx(0.999)]
  assert config_lib.get_base_config().optimizer.b2 == 0.999


def test_logged_learning_rate_is_the_one_each_update_used(model):
  """Warmup 0 -> 1 over 4 steps: updates 0, 1, 2 use 0, 0.25, 0.5."""
  config, params = model
  optimizer = optim.make_optimizer(learning_rate=1.0, warmup_steps=4,
                                   total_steps=10)
  fn, fresh = setup(config, params, optimizer)
  batch = random_batch(config, params, jax.random.PRNGKey(7))
  state = fresh()
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
  batch = batch._replace(sampler_logp=batch.old_logp + 1e-3)
  on_policy = batch._replace(old_logp=None)
  fn, fresh = setup(config, params, optax.sgd(1.0), beta=0.1,
                    microbatch_size=4)
  expected, m_expected = fn(fresh(), batch)
  got, m_got = fn(fresh(), on_policy)
  testing.assert_close(got.params, expected.params, rtol=1e-5, atol=1e-7)
  testing.assert_close({k: m_got[k] for k in m_expected}, m_expected,
                       rtol=1e-5, atol=1e-7)
  # Off policy the rollout measures the gap (the params may have moved).
  assert "logprob/sampler_trainer_max_abs_diff" not in m_expected
  assert float(m_got["ratio_mean"]) == pytest.approx(1.0)
  # The sampler's log-probs, 1e-3 off the trainer's, are measured.
  assert float(m_got["logprob/sampler_trainer_max_abs_diff"]) == (
      pytest.approx(1e-3, rel=1e-2))
  assert not np.allclose(testing.numpy(got.params["embed"]),
                         testing.numpy(params["embed"]))


def test_on_policy_mismatch_leaves_out_replayed_rows(model):
  """Rows replayed from earlier steps (POPO, RePO: `Batch.replayed`) carry
  an older policy's sampler log-probs, 0.3 off here; the on-policy gap
  measures the fresh rows' numerics alone (1e-3)."""
  config, params = model
  batch = random_batch(config, params, jax.random.PRNGKey(2))
  replayed = np.zeros(8, np.float32)
  replayed[4:] = 1.0  # the second group, refilled
  offset = np.where(replayed[:, None] > 0, -0.3, 1e-3)
  batch = batch._replace(sampler_logp=batch.old_logp + offset, old_logp=None,
                         replayed=jnp.asarray(replayed))
  fn, fresh = setup(config, params, optax.sgd(1.0))
  _, m = fn(fresh(), batch)
  assert float(m["logprob/sampler_trainer_max_abs_diff"]) == (
      pytest.approx(1e-3, rel=1e-2))


@pytest.mark.parametrize("iterations,minibatches,expected", [
    (1, 1, True), (2, 1, False), (1, 2, False)])
def test_on_policy_means_one_optimizer_step_per_batch(iterations, minibatches,
                                                      expected):
  c = grpo_config.get_config("tiny")
  c.train.num_iterations, c.train.num_minibatches = iterations, minibatches
  assert rollout.is_on_policy(c) == expected


# ------------------------------------------------------------ learning


def learn(objective, *, estimator="grpo", weights=(1.0, 0.0)):
  """`learning.learn_trivial_task` with G = 8 and the objective `objective`
  (token_mean where it is token level); returns (rewards, the widest ratio
  spread of an update).

  Off policy: each batch feeds 2 optimiser steps, so every step after the
  first sees ratios away from 1 and the trust region acts. The advantages
  come from the stateless `estimator` over two reward columns of `weights`:
  the share of TARGET tokens (the reward recorded) and whether the first
  token is TARGET.
  """
  level = objectives.OBJECTIVES.entry(objective).meta.level
  record = objectives.make(objective, **(
      {"aggregation": "token_mean"} if level == "token" else {}))

  def two_columns(out, reward, resample):
    del resample
    p, g = reward.shape
    first = (out.tokens[:, 0] == TARGET).reshape(p, g)
    return laws.sampled_groups(out, jnp.stack([reward, first], -1), p, g,
                               weights)

  def ratio_spread(reward, adv, records):
    del reward, adv
    return max(float(m["ratio_max"] - m["ratio_min"]) for m in records)

  history, spreads = learning.learn_trivial_task(
      advantages.make(estimator), objective=record, group_data=two_columns,
      group=8, on_step=ratio_spread,
      # The sampler's top-3 of the 8 ids, for objectives reading a top-K.
      record_topk=3 if "topk_logp" in record.reads else 0)
  return history, max(spreads)


@pytest.mark.parametrize("objective", objectives.names())
def test_every_objective_learns_a_trivial_task(objective):
  history, ratio_spread = learn(objective)
  learning.check_learned(history)
  assert ratio_spread > 1e-2  # it learned off policy


# A greedy row (ReMax) or segment rewards (SD-GRPO) are not in this toy
# sample: those learn in their own files.
OWN_SAMPLE = ("greedy_rewards", "segment_rewards")


@pytest.mark.parametrize("estimator", [
    name for name in advantages.names()
    if advantages.meta(name).state is None
    and not set(advantages.meta(name).reads) & set(OWN_SAMPLE)])
def test_every_stateless_estimator_learns_a_trivial_task(estimator):
  """Both reward columns weigh 1, so DVAO has two to weigh and BNPO two to
  decompose (each in [0, 1]); stateful estimators learn in
  tests/test_estimators_stateful.py and tests/test_estimators_trackers.py."""
  history, ratio_spread = learn("ppo_clip", estimator=estimator,
                                weights=(1.0, 1.0))
  learning.check_learned(history)
  assert ratio_spread > 1e-2


def test_compilation_cache_keeps_every_program_or_stays_off(monkeypatch,
                                                           tmp_path):
  updates = {}
  monkeypatch.setattr(jax.config, "update",
                      lambda name, value: updates.__setitem__(name, value))
  train.enable_compilation_cache("")
  assert not updates
  train.enable_compilation_cache(str(tmp_path))
  assert updates == {
      "jax_compilation_cache_dir": str(tmp_path),
      "jax_persistent_cache_min_compile_time_secs": 0.0,
      "jax_persistent_cache_min_entry_size_bytes": -1}
  assert config_lib.use_tiny(grpo_config.get_config()).train[
      "compilation_cache_dir"] == ""


def test_config_validation_runs_before_build():
  config = grpo_config.get_config("tiny")
  config.rollout.num_generations = 0
  with pytest.raises(ValueError, match="rollout.num_generations"):
    train.build(config)
  train.validate(grpo_config.get_config("tiny"))


# ------------------------------------------------- held-out evaluation


def test_training_evaluates_the_heldout_split_every_n_steps(tmp_path):
  from grpo_jax.runtime import metrics  # pylint: disable=g-import-not-at-top
  config = grpo_config.get_config("tiny")
  config.train.num_steps, config.checkpoint.every = 3, 3
  config.eval.every, config.eval.num_samples = 2, 2
  run = train.build(config)
  traces = []
  train.train(config, str(tmp_path), run=run,
              callback=lambda step, record: traces.append(
                  sampling.trace_count()))
  records = metrics.read(str(tmp_path / metrics.METRICS_FILE))
  # After step 2 (every 2) and after the last, step 3.
  assert ["eval/greedy_accuracy" in r for r in records] == [False, True, True]
  for name in ("eval/greedy_accuracy", "eval/pass@1", "eval/pass@2",
               "eval/maj@1", "eval/maj@2"):
    assert 0.0 <= records[1][name] <= 1.0 and name in records[2], name
  assert records[2]["time/eval_s"] > 0
  assert "reward/total" in records[1]  # beside the training measurements
  # Its own shape compiles at most once; the second evaluation not at all.
  assert traces[1] - traces[0] <= 1 and traces[2] == traces[1]
  events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
  assert any(b"eval/greedy_accuracy" in p.read_bytes() for p in events)
  assert (tmp_path / "curves.png").exists()


def test_evaluation_shaped_like_the_rollout_reuses_its_sampler():
  config = grpo_config.get_config("tiny")
  config.kl.beta = 0.0  # on policy without KL: the rollout samples, scores
  # P prompts per call, 1 greedy + (G - 1) sampled rows each: the rollout's
  # [P*G] rows; 4 problems take two calls.
  config.eval.every, config.eval.num_problems = 1, 4
  config.eval.batch_size = config.rollout.num_prompts
  config.eval.num_samples = config.rollout.num_generations - 1
  model_config, params, tokenizer = models.load_model("tiny", seed=0)
  components = rollout_build.make_components(config)
  rollout_fn = rollout_build.from_config(config, model_config, tokenizer,
                                         components)
  evaluate_fn = evaluation.from_config(config, model_config, tokenizer)
  sampling._sample.clear_cache()  # pylint: disable=protected-access
  start = sampling.trace_count()
  # Under the mesh, as train_step and train's evaluation run them.
  with jax.set_mesh(sharding.mesh_from_config(config.mesh)):
    rollout_fn(params, None, 0, jax.random.PRNGKey(0),
               {name: c.init() for name, c in components.items()})
    assert sampling.trace_count() - start == 1
    figures = evaluate_fn(params)
  assert sampling.trace_count() - start == 1
  assert set(figures) == {"greedy_accuracy", "pass@1", "maj@1", "pass@3",
                          "maj@3"}


def test_a_rematerialised_run_takes_the_plain_runs_step():
  """`model.remat` through `train.build` and two `train_step`s (the
  rollout's prefill under `nn.remat`, the update's scans checkpointed): the
  same rollouts and, up to rounding, the same params after them."""
  steps = []
  for remat in (False, True):
    config = grpo_config.get_config("tiny")
    config.model.remat = remat
    config.entropy.coef = 0.01  # a gradient whatever the tiny rewards
    run = train.build(config)
    assert run.model_config.remat is remat
    state, initial = run.state, jax.device_get(run.state.params)
    for step in range(2):  # step 0's learning rate is warm-up's 0
      state, measurements = train.train_step(run, state, step)
    steps.append((jax.device_get(state.params), measurements))
  (plain, plain_m), (remat, remat_m) = steps
  assert remat_m["skipped_updates"] == plain_m["skipped_updates"] == 0.0
  assert remat_m["reward/total"] == plain_m["reward/total"]
  moved = jax.tree.map(lambda a, b: float(np.abs(a - b).max()), plain,
                       initial)
  assert max(jax.tree.leaves(moved)) > 0  # the steps changed the params
  testing.assert_close(remat, plain, rtol=1e-5, atol=1e-7)
