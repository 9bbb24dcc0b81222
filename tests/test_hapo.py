"""HAPO: the normalised entropy, the entropy-adaptive sampler, the token-mean
estimator, the adaptive clip objective, their config checks and a short
off-policy learning run. Expected values are hand-derived (VARIANTS.md 3.6)
or from the numpy reference below, written from the authors' torch code."""

import importlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import advantages
from grpo_jax.train import batch as batch_lib
from grpo_jax import config as config_lib
from grpo_jax.sampling import entropy_norm
from grpo_jax import logprobs as logprobs_lib
from grpo_jax import measures
from grpo_jax import models
from grpo_jax import objectives
from grpo_jax.train import optim
from grpo_jax import rollout
from grpo_jax.rollout import build as rollout_build
from grpo_jax import sampling
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.train import update as update_lib
from grpo_jax.testing import learning
from grpo_jax.testing import objective_laws as laws

ENT = np.array([[0.05, 0.3, 1.2, 2.5]])
H_HAT = np.array([[-1.0, -0.436209, 0.0, 1.0]])  # VARIANTS.md 3.6


def reference_h_hat(ent, mask, pivot=0.8, legacy=False):
  """numpy, float64, from `compute_entropy_h`: torch's 'nearest' quantile
  (Python's round, halves to even), RMS about it, the two scales."""
  ent, valid = np.asarray(ent, np.float64), np.asarray(mask) > 0
  ell = np.log(np.maximum(ent, 1e-8))
  values = np.sort(ell[valid])
  m = values[round(pivot * (len(values) - 1))]
  s = math.sqrt(max(((ell - m)[valid] ** 2).mean(), 1e-8))
  h = (ell - m) / s
  pos = max(h[valid & (h > 0)].max(initial=0.0), 1e-8)
  neg = min(h[valid & (h < 0)].min(initial=0.0), -1e-8)
  h_hat = np.where(h > 0, h / pos, h / (neg if legacy else -neg))
  return np.where(valid, h_hat, 0.0), (m, s, 1 / pos, 1 / neg if legacy
                                       else -1 / neg)


# --------------------------------------------------- (a) normalised entropy


def test_the_variants_vector():
  h_hat, stats = entropy_norm.normalised_entropy(ENT, np.ones((1, 4)))
  np.testing.assert_allclose(h_hat, H_HAT, atol=1e-6)
  np.testing.assert_allclose(stats.pivot, math.log(1.2), rtol=1e-6)
  np.testing.assert_allclose(stats.pivot, 0.182322, atol=1e-6)
  # h = l - m over s: s = sqrt(mean(h^2)); the scales undo it for h_hat.
  h = np.log(ENT[0]) - math.log(1.2)
  np.testing.assert_allclose(stats.scale, math.sqrt((h ** 2).mean()),
                             rtol=1e-5)
  np.testing.assert_allclose(stats.scale_pos, stats.scale / h[3], rtol=1e-5)
  np.testing.assert_allclose(stats.scale_neg, -stats.scale / h[0], rtol=1e-5)
  assert float(stats.ready) == 1.0


def test_legacy_sign_makes_every_token_non_negative():
  h_hat, stats = entropy_norm.normalised_entropy(ENT, np.ones((1, 4)),
                                                 legacy_sign=True)
  np.testing.assert_allclose(h_hat, [[1.0, 0.436209, 0.0, 1.0]], atol=1e-6)
  assert float(stats.scale_neg) < 0


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("pivot", [0.8, 0.5, 0.3])
def test_matches_the_reference_on_a_padded_batch(pivot, legacy):
  rng = np.random.default_rng(0)
  ent = rng.gamma(1.0, 1.0, (5, 7)).astype(np.float32)
  ent[0, 0] = 0.0  # log of the 1e-8 floor
  mask = (np.arange(7)[None] < rng.integers(1, 8, (5, 1))).astype(np.float32)
  padded = np.where(mask > 0, ent, 99.0)  # padding must change nothing
  h_hat, stats = entropy_norm.normalised_entropy(
      padded, mask, pivot=pivot, legacy_sign=legacy)
  want, (m, s, pos, neg) = reference_h_hat(ent, mask, pivot, legacy)
  np.testing.assert_allclose(h_hat, want, atol=2e-5)
  np.testing.assert_allclose([stats.pivot, stats.scale, stats.scale_pos,
                              stats.scale_neg], [m, s, pos, neg], rtol=1e-4)
  valid = mask > 0
  assert np.abs(np.asarray(h_hat))[valid].max() == pytest.approx(1.0)


def test_nearest_quantile_rounds_halves_to_even():
  # n = 4, q = 0.5: index 1.5 -> 2 (torch's round); n = 6: 2.5 -> 2.
  four = entropy_norm.nearest_quantile(np.array([4.0, 1.0, 3.0, 2.0]),
                                       np.ones(4), 0.5)
  six = entropy_norm.nearest_quantile(np.arange(6.0)[::-1], np.ones(6), 0.5)
  assert float(four) == 3.0 and float(six) == 2.0


def test_no_valid_token_is_not_ready_and_keeps_the_last_statistics():
  h_hat, stats = entropy_norm.normalised_entropy(ENT, np.zeros((1, 4)))
  assert float(stats.ready) == 0.0
  np.testing.assert_array_equal(h_hat, 0.0)
  _, last = entropy_norm.normalised_entropy(ENT, np.ones((1, 4)))
  kept = entropy_norm.newer(stats, last)
  np.testing.assert_array_equal(jax.tree.leaves(kept), jax.tree.leaves(last))


def test_bad_pivot_is_an_error():
  for pivot in (0.0, 1.0, float("nan")):
    with pytest.raises(ValueError, match="pivot"):
      entropy_norm.entropy_stats(ENT, np.ones((1, 4)), pivot=pivot)


# ------------------------------------------------ (b) adaptive temperature


def test_adaptive_temperature_by_hand():
  _, stats = entropy_norm.normalised_entropy(ENT, np.ones((1, 4)))
  rule = entropy_norm.TemperatureRule(jnp.float32(0.05), stats)
  # The batch's own tokens: T (1 + 0.05 h_hat); beyond its range clipped.
  ent = np.array([0.05, 0.3, 1.2, 2.5, 1e-4, 50.0])
  got = entropy_norm.adaptive_temperature(ent, 0.8, rule)
  want = 0.8 * (1 + 0.05 * np.array([-1, -0.436209, 0, 1, -1, 1]))
  np.testing.assert_allclose(got, want, atol=1e-6)
  # A greedy row stays greedy; statistics not ready keep T.
  assert float(entropy_norm.adaptive_temperature(2.5, 0.0, rule)) == 0.0
  cold = rule._replace(stats=entropy_norm.init_stats())
  np.testing.assert_allclose(
      entropy_norm.adaptive_temperature(ent, 0.8, cold), 0.8)


PROMPTS = ([1, 2, 3], [4, 5, 6, 7, 8])
G, T = 3, 6


@pytest.fixture(scope="module")
def model():
  return testing.peaked_tiny_model(6.0)  # entropies that vary


def _sample(model, rule, temperature, key=4):
  config, params = model
  tokens, mask = sampling.pad_prompts(PROMPTS, buckets=(8,))
  out = jax.device_get(sampling.sample(
      params, config, tokens, mask, jax.random.key(key), num_samples=G,
      max_new_tokens=T, temperature=temperature, eos_ids=(),
      temperature_rule=rule))
  return out, tokens, mask


def _trainer(model, out, prompt_tokens, prompt_mask, temperature):
  """The trainer's teacher-forced (logp, entropy) at `temperature`."""
  config, params = model
  tokens = np.concatenate([np.repeat(prompt_tokens, G, 0), out.tokens], 1)
  mask = np.concatenate([np.repeat(prompt_mask, G, 0),
                         np.ones_like(out.tokens)], 1)
  return batch_lib.policy_logprobs(
      params, config, jnp.asarray(tokens), jnp.asarray(mask),
      prompt_tokens.shape[1], temperature=temperature, group_size=G)


ROWS = np.array([1.0, 0.7, 0.0, 1.3, 1.0, 0.5], np.float32)


def test_the_sampler_draws_each_token_at_the_rule_s_temperature(model):
  plain, prompts, prompt_mask = _sample(model, None, ROWS)
  assert plain.temperatures is None
  # Statistics that spread h_hat over [-1, 1] on these tokens.
  ell = np.log(plain.entropies[ROWS > 0])
  stats = entropy_norm.EntropyStats(
      *(jnp.float32(x) for x in (np.median(ell), ell.std() / 2, 1.0, 1.0,
                                  1.0)))
  rule = entropy_norm.TemperatureRule(jnp.float32(0.3), stats)
  out, _, _ = _sample(model, rule, ROWS)
  # The rule reads the entropy of each row's distribution at its own T.
  _, base_entropy = _trainer(model, out, prompts, prompt_mask, ROWS)
  h = (np.log(np.asarray(base_entropy, np.float64)) - float(stats.pivot)) / (
      float(stats.scale))
  want = ROWS[:, None] * (1 + 0.3 * np.clip(h, -1, 1))
  np.testing.assert_allclose(out.temperatures, want, rtol=1e-4)
  sampled = ROWS > 0
  assert np.abs(out.temperatures[sampled] - ROWS[sampled, None]).min() > 0
  assert (np.abs(h[sampled]) > 1).any() and (np.abs(h[sampled]) < 1).any()
  np.testing.assert_array_equal(out.temperatures[~sampled], 0.0)  # greedy
  # The recorded base entropies are the trainer's at the rows' own T (what
  # HAPO's statistics are taken over), not those of the adapted draw.
  assert plain.base_entropies is None
  np.testing.assert_allclose(out.base_entropies, base_entropy, atol=1e-4)
  assert np.abs(out.base_entropies - out.entropies)[sampled].max() > 1e-3


def test_sampler_and_trainer_agree_at_per_token_temperatures(model):
  _, stats = entropy_norm.normalised_entropy(ENT * 20, np.ones((1, 4)))
  rule = entropy_norm.TemperatureRule(jnp.float32(0.3), stats)
  out, prompts, prompt_mask = _sample(model, rule, ROWS, key=9)
  logp, entropy = _trainer(model, out, prompts, prompt_mask,
                           jnp.asarray(out.temperatures))
  np.testing.assert_allclose(out.tempered_logprobs, logp, atol=1e-4)
  np.testing.assert_allclose(out.entropies, entropy, atol=1e-4)
  # The check can fail: scored at the rows' temperatures, the adapted
  # tokens disagree.
  at_rows, _ = _trainer(model, out, prompts, prompt_mask, ROWS)
  assert np.abs(np.asarray(at_rows) - out.tempered_logprobs).max() > 1e-3


def test_per_token_temperature_gradient_matches_the_naive_softmax():
  key = jax.random.split(jax.random.PRNGKey(0), 4)
  hidden = jax.random.normal(key[0], (2, 5, 4))
  w = jax.random.normal(key[1], (4, 11))
  targets = jax.random.randint(key[2], (2, 5), 0, 11)
  tau = jax.random.uniform(key[3], (2, 5), minval=0.5, maxval=1.5)
  tau = tau.at[1, 2].set(0.0)  # a greedy token is scored at 1

  def chunked(h, u):
    out = logprobs_lib.token_logprobs(h, u, targets, temperature=tau,
                                      chunk_size=4)
    return (out.logp * jnp.arange(10.0).reshape(2, 5)).sum() + (
        out.entropy ** 2).sum()

  def naive(h, u):
    z = (h @ u) / jnp.where(tau > 0, tau, 1.0)[..., None]
    logp_all = jax.nn.log_softmax(z, -1)
    logp = jnp.take_along_axis(logp_all, targets[..., None], -1)[..., 0]
    entropy = -(jnp.exp(logp_all) * logp_all).sum(-1)
    return (logp * jnp.arange(10.0).reshape(2, 5)).sum() + (entropy ** 2).sum()

  np.testing.assert_allclose(chunked(hidden, w), naive(hidden, w), rtol=1e-5)
  for got, want in zip(jax.grad(chunked, (0, 1))(hidden, w),
                       jax.grad(naive, (0, 1))(hidden, w)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  with pytest.raises(ValueError, match="per-token temperature"):
    logprobs_lib.token_logprobs(hidden, w, targets, temperature=tau[:, :4])


def test_a_rule_of_another_type_is_an_error(model):
  with pytest.raises(ValueError, match="temperature_rule"):
    _sample(model, (0.05,), 1.0)
  bad = entropy_norm.TemperatureRule(-1.0, entropy_norm.init_stats())
  with pytest.raises(ValueError, match="tau"):
    _sample(model, bad, 1.0)


# ------------------------------------------------------ (c) token mean


def test_token_mean_estimator_vector_and_fallback():
  rewards = np.array([[1.0, 0, 0], [1.0, 0, 0], [0.5, 0.5, 0.5],
                      [1.0, 0, 0]])
  lengths = np.array([[10, 30, 60], [1, 100, 100], [3, 4, 5], [0, 0, 0]])
  got = advantages.hapo_token_mean(rewards, lengths=lengths)
  np.testing.assert_allclose(got[0], [2.999990, -0.333332, -0.333332],
                             atol=1e-6)
  # mu = 1/201, sigma = sqrt(200)/201: A_0 = 200/sqrt(200) = 14.1 >= 5, so
  # GRPO's (1, 0, 0) with the unbiased std sqrt(1/3): 2/sqrt(3), -1/sqrt(3).
  grpo = np.array([2, -1, -1]) / math.sqrt(3) * (1 / (1 + 1e-6 * math.sqrt(3)))
  np.testing.assert_allclose(got[1], grpo, atol=1e-6)
  np.testing.assert_array_equal(got[2], 0.0)  # equal rewards
  # No lengths known: equal weights, std sqrt(2)/3, A = (2/3) / that.
  np.testing.assert_allclose(got[3, 0], (2 / 3) / (math.sqrt(2) / 3),
                             rtol=1e-5)
  lower = advantages.hapo_token_mean(rewards[:1], lengths=lengths[:1],
                                     fallback_threshold=2.0)
  np.testing.assert_allclose(lower[0], [1.154699, -0.577349, -0.577349],
                             atol=1e-6)


def test_token_mean_estimator_record_zeroes_fillers():
  est = advantages.make("hapo_token_mean")
  groups = advantages.GroupData(
      rewards=jnp.array([[[1.0], [0.0], [0.0]], [[1.0], [0.0], [0.0]]]),
      weights=jnp.ones((1,)), valid=jnp.array([True, False]),
      lengths=jnp.array([[10, 30, 60], [10, 30, 60]]))
  adv, _ = est.estimate(est.init(), groups)
  np.testing.assert_allclose(adv[0], [2.999990, -0.333332, -0.333332],
                             atol=1e-6)
  np.testing.assert_array_equal(adv[1], 0.0)
  with pytest.raises(ValueError, match="fallback_threshold"):
    advantages.hapo_token_mean(jnp.ones((1, 2)), fallback_threshold=0.0)


# -------------------------------------------------- (d) + (e) the objective


def _hapo(h_hat, ratio, adv, **options):
  logp = jnp.log(jnp.asarray([ratio], jnp.float32))
  old = jnp.zeros_like(logp)
  mask = jnp.ones_like(logp)
  fn = lambda lp: objectives.hapo(lp, old, jnp.asarray([adv], jnp.float32),
                                  mask, entropy_hat=jnp.asarray(h_hat),
                                  **options)
  loss, aux = fn(logp)
  return loss, aux, jax.grad(lambda lp: fn(lp)[0])(logp)[0]


def test_the_variants_vector_bands_and_redistribution():
  h = jnp.asarray(H_HAT, jnp.float32)
  eps_low, eps_high = objectives.adaptive.adaptive_bands(h, 0.2, 0.2, 1.0)
  np.testing.assert_allclose(eps_low, [[0.4, 0.287242, 0.2, 0.2]], atol=1e-6)
  np.testing.assert_allclose(eps_high, [[0.2, 0.2, 0.2, 0.4]], atol=1e-6)
  adv = objectives.adaptive.redistributed_advantages(
      jnp.array([[1.0, 1, -1, -1]]), h, jnp.array([[1.0, 1.3, 1.0, 0.7]]),
      eps_low, eps_high, 1.0)
  np.testing.assert_allclose(adv, [[0, 1, -1, -2]], atol=1e-6)
  # The loss: A' = [0, 1, -1, -2]; token 1 clipped at 1.2, token 3 at
  # 1 - 0.2 = 0.8: (0 - 1.2 + 1 + 1.6) / 4.
  loss, aux, grad = _hapo(H_HAT, [1.0, 1.3, 1.0, 0.7], [1, 1, -1, -1])
  np.testing.assert_allclose(loss, 0.35, atol=1e-6)
  np.testing.assert_allclose(grad, [0, 0, 0.25, 0], atol=1e-6)
  assert float(aux.extra["redistributed"].value()) == 0.5  # tokens 0 and 3
  assert float(aux.clip_fraction) == 0.5


def test_value_and_gradient_by_hand():
  """h_hat = [-1, -0.5, 0.5, 1], A = [1, -1, 1, -1], r = [1.15, .95, 1.25, 1.15]:
  token 0 (low) outside the zone (0.8, 1.1): A' = 1; token 1 (low)
  inside (0.85, 1.1): A' = -0.5; token 2 (high) outside (0.9, 1.15): A' =
  1.5; token 3 (high) inside (0.9, 1.2): A' = -1. No band binds ([0.6, 1.2],
  [0.7, 1.2], [0.8, 1.3], [0.8, 1.4]): L_t = -A' r, dL/dlogp_t = -A' r / 4."""
  r = np.array([1.15, 0.95, 1.25, 1.15])
  a_used = np.array([1.0, -0.5, 1.5, -1.0])
  loss, aux, grad = _hapo([[-1.0, -0.5, 0.5, 1.0]], r, [1, -1, 1, -1])
  np.testing.assert_allclose(loss, (-a_used * r).sum() / 4, rtol=1e-6)
  np.testing.assert_allclose(grad, -a_used * r / 4, rtol=1e-5)
  assert float(aux.clip_fraction) == 0.0
  assert float(aux.extra["redistributed"].value()) == 0.5
  # PPO (every h_hat 0) differs: A' = A, gradient -A r / 4, and token 2
  # clipped at 1.2.
  _, _, ppo = _hapo([[0.0] * 4], r, [1, -1, 1, -1])
  np.testing.assert_allclose(ppo, -np.array([1, -1, 0, -1]) * r / 4,
                             rtol=1e-5)


def test_widened_bands_and_the_dual_clip_by_hand():
  # Token 0: low (h = -1), A = -1, r = 0.65: inside [0.6, 1.2] only because
  # the lower band doubled; outside the zone (0.8, 1.1): A' = A, gradient
  # -A r / 2. Token 1: h = 0, A = -1, r = 30: the dual clip caps the loss
  # at c |A| = 10, no gradient.
  loss, aux, grad = _hapo([[-1.0, 0.0]], [0.65, 30.0], [-1, -1])
  np.testing.assert_allclose(loss, (0.65 + 10.0) / 2, rtol=1e-6)
  np.testing.assert_allclose(grad, [0.65 / 2, 0.0], atol=1e-6)
  assert float(aux.clip_fraction) == 0.5
  # Without the widened band (clip_alpha 0) token 0 is clipped at 0.8.
  loss, _, grad = _hapo([[-1.0, 0.0]], [0.65, 30.0], [-1, -1],
                        clip_alpha=0.0)
  np.testing.assert_allclose(grad, [0.0, 0.0], atol=1e-6)
  np.testing.assert_allclose(loss, (0.8 + 10.0) / 2, rtol=1e-6)


def test_on_policy_gradient_is_reinforce_with_the_redistributed_advantage():
  # r = 1 lies in every zone: low-entropy tokens take A (1 + h_hat).
  h, a = [[-1.0, -0.25, 0.0, 0.6]], np.array([2.0, 2.0, -1.0, -1.0])
  _, _, grad = _hapo(h, [1.0] * 4, a)
  np.testing.assert_allclose(grad, -a * np.array([0, 0.75, 1, 1]) / 4,
                             atol=1e-6)


def _derived_h_hat(logp, old_logp, advantages, mask, *, aggregation,
                   horizon=None, token_weights=None):
  """hapo with h_hat a per-token function of old_logp (so the contract laws,
  which pass no read arrays, exercise the mechanism)."""
  h_hat = jnp.where(mask > 0, jnp.tanh(3.0 * (old_logp + 0.6)), 0.0)
  return objectives.hapo(logp, old_logp, advantages, mask,
                         entropy_hat=jnp.nan_to_num(h_hat),
                         aggregation=aggregation, horizon=horizon,
                         token_weights=token_weights)


def test_the_contract_laws_with_an_acting_h_hat():
  with objectives.OBJECTIVES.scoped():
    objectives.OBJECTIVES.register(
        "hapo_derived_h", level="token", mechanism="clip",
        examples=({"aggregation": "token_mean"},))(_derived_h_hat)
    for law in laws.OBJECTIVE_LAWS:
      if law is laws.law_on_policy_gradient_is_reinforce:
        continue  # A' is not A on policy: tested by hand above
      law("hapo_derived_h", {"aggregation": "token_mean"})
    _, aux = laws.loss_and_aux(objectives.make("hapo_derived_h",
                                               aggregation="token_mean"),
                               *laws.off_policy_batch())
    assert float(aux.extra["redistributed"].value()) > 0


def test_objective_option_and_shape_errors():
  for options in ({"clip_alpha": -0.1}, {"adv_beta": float("nan")},
                  {"dual_clip": 1.0}):
    with pytest.raises(ValueError, match=next(iter(options))):
      objectives.make("hapo", **options)
  with pytest.raises(ValueError, match="entropy_hat"):
    objectives.make("hapo", entropy_hat=jnp.zeros((1, 1)))
  with pytest.raises(ValueError, match="entropy_hat must be"):
    objectives.hapo(jnp.zeros((2, 3)), jnp.zeros((2, 3)), jnp.ones(2),
                    jnp.ones((2, 3)), entropy_hat=jnp.zeros((2, 2)))


# --------------------------------------------------------------- configs


def _tiny(**rollout):
  c = importlib.import_module("configs.hapo").get_config("tiny")
  c.rewards.workers = 0
  for key, value in rollout.items():
    c.rollout[key] = value
  return c


@pytest.mark.parametrize("field,value,match", [
    ("temperature_tau", -0.05, "config.rollout.temperature_tau"),
    ("temperature_tau", float("nan"), "config.rollout.temperature_tau"),
    # T (1 - tau) at h_hat = -1 would be <= 0.
    ("temperature_tau", 1.0, "config.rollout.temperature_tau.*below 1"),
    ("entropy_pivot", 1.0, "config.rollout.entropy_pivot"),
    ("entropy_pivot", 0.0, "config.rollout.entropy_pivot"),
])
def test_config_field_checks(field, value, match):
  with pytest.raises(ValueError, match=match):
    train.validate(_tiny(**{field: value}))


def test_the_objective_needs_the_sampler_rule():
  with pytest.raises(ValueError, match=r"config.rollout.temperature_tau.*"
                     r"per-token temperatures.*temperature_tau=0.05"):
    train.validate(_tiny(temperature_tau=0.0))
  c = _tiny()
  c.objective.kwargs.clip_alpha = -1.0
  with pytest.raises(ValueError, match="config.objective.kwargs.*clip_alpha"):
    train.validate(c)
  c = _tiny()
  c.advantage.kwargs.fallback_threshold = -1.0
  with pytest.raises(ValueError, match="config.advantage.kwargs"):
    train.validate(c)


def test_the_config_follows_the_recipe():
  c = importlib.import_module("configs.hapo").get_config()
  train.validate(c)
  assert (c.rollout.temperature_tau, c.rollout.entropy_pivot) == (0.05, 0.8)
  assert (c.objective.name, c.advantage.name) == ("hapo",
                                                  "hapo_token_mean")
  assert c.objective.kwargs.dual_clip == 10.0
  assert not rollout.is_on_policy(c)
  stage = rollout_build.make_components(c)["temperature"]
  assert stage.tau == 0.05 and stage.entropy_hat
  off = config_lib.get_base_config()
  assert not rollout_build.make_components(off)["temperature"].active
  assert rollout_build.make_components(off)["temperature"].init() == ()


def test_two_tiny_steps_adapt_the_temperature_and_redistribute():
  """Step 0 samples at T (no statistics yet) and leaves its batch's
  statistics in the state; step 1 draws tokens at other temperatures, the
  batch carries them and h_hat, and the trainer's old log-probs, scored at
  them, agree with the sampler's; HAPO's update redistributes advantages."""
  c = _tiny()
  c.groups.name, c.groups.kwargs = "all_groups", {}  # no reward signal here
  run = train.build(c)
  state = jax.tree.map(jnp.copy, run.state)
  assert state.states["temperature"].ready == 0
  seen = []
  for step in range(2):
    batch, m, stage_states = testing.rollout_step(run, step, state=state)
    state = state._replace(states=dict(state.states, **stage_states))
    seen.append((batch, m))
  (first, m0), (second, m1) = seen
  assert m0["sampler/adapted_share"] == 0.0
  assert m1["sampler/adapted_share"] > 0.5
  assert float(state.states["temperature"].ready) == 1.0
  assert second.temperature.shape == second.completion_mask.shape
  assert second.entropy_hat.shape == second.completion_mask.shape
  columns = second.completion_mask.shape[1]
  sampled = np.asarray(second.input_mask)[:, -columns:] > 0
  adapted = np.asarray(second.temperature)[sampled]
  assert np.abs(adapted - 1.0).max() > 0 and np.abs(adapted - 1.0).max() <= (
      0.05 + 1e-6)
  assert m1["logprob/sampler_trainer_max_abs_diff"] < 1e-4
  rows = second.tokens.shape[0]
  second = second._replace(
      advantages=jax.random.normal(jax.random.PRNGKey(1), (rows,)),
      completion_mask=jnp.asarray(sampled, jnp.float32))
  records = []
  for part in update_lib.minibatches(second, c.train.num_minibatches):
    state, r = run.update_fn(state, part)
    records.append(measures.values(r))
  assert all(rec["redistributed"] > 0 for rec in records), records
  assert max(rec["ratio_max"] - rec["ratio_min"] for rec in records) > 1e-4


# -------------------------------------------------------- learning


def test_hapo_learns_the_trivial_task_off_policy():
  """Every part at once on `testing.learning`'s task: the adaptive sampler
  (tau 0.3, statistics carried), h_hat of each batch, the token-mean
  advantage, the objective over 2 minibatches per batch."""
  config = learning.model_config()
  objective = objectives.make("hapo")
  optimizer = optim.make_optimizer(learning_rate=5e-2)
  update = update_lib.make_update_fn(model_config=config,
                                     optimizer=optimizer,
                                     objective=objective, chunk_size=16)
  estimator = advantages.make("hapo_token_mean")
  state = train.init_state(models.init_params(config, jax.random.PRNGKey(0)),
                           optimizer, seed=0,
                           components={"objective": objective})
  prompts = jnp.array([[1, 2, 3], [3, 2, 1]], jnp.int32)
  prompt_mask = jnp.ones_like(prompts)
  stats, history, adapted, redistributed = entropy_norm.init_stats(), [], [], []
  for step in range(25):
    out = jax.device_get(sampling.sample(
        state.params, config, prompts, prompt_mask,
        jax.random.fold_in(state.key, step), num_samples=4, max_new_tokens=4,
        temperature=1.0, eos_ids=(),
        temperature_rule=entropy_norm.TemperatureRule(jnp.float32(0.3),
                                                      stats)))
    reward = (out.tokens == learning.TARGET).mean(-1).reshape(2, 4)
    history.append(float(reward.mean()))
    adapted.append(float((out.temperatures != 1.0).mean()))
    adv, _ = estimator.estimate((), advantages.GroupData(
        rewards=reward[..., None], weights=jnp.ones((1,)),
        valid=jnp.ones((2,), bool), lengths=out.lengths.reshape(2, 4)))
    h_hat, new = entropy_norm.normalised_entropy(out.entropies, out.mask)
    stats = entropy_norm.newer(new, stats)
    batch = batch_lib.assemble_batch(
        state.params, None, prompts, prompt_mask, out.tokens, out.mask,
        out.mask, np.asarray(adv).reshape(-1), model_config=config,
        temperature=out.temperatures, chunk_size=16, entropy_hat=h_hat)
    for part in update_lib.minibatches(batch, 2):
      state, r = update(state, part)
      assert measures.values(r)["skipped_updates"] == 0
      redistributed.append(float(measures.values(r)["redistributed"]))
  assert adapted[0] == 0.0 and min(adapted[1:]) > 0.5
  assert max(redistributed) > 0
  learning.check_learned(history)
