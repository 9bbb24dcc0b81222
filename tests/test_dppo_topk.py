"""DPPO's top-K forms end to end: the sampler's recorded top-K, the trainer's
gathered top-K log-probs (no [N, T, V] array), the objective `dppo_topk`
(hand-derived values and gradients), its config checks and a short
off-policy learning run."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import advantages
from grpo_jax.train import batch as batch_lib
from grpo_jax import config as config_lib
from grpo_jax import logprobs as logprobs_lib
from grpo_jax import models
from grpo_jax import objectives
from grpo_jax import sampling
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.train import update as update_lib
from grpo_jax.objectives import divergence
from grpo_jax.testing import learning

# ------------------------------------------------ the divergence, by hand


def test_topk_divergence_matches_the_variants_example():
  """VARIANTS.md 2.2: V = 4, mu = [.6, .3, .07, .03], pi = [.5, .35, .1,
  .05], K = 2 (mu's top two: ids 0, 1). By hand: rest mu .1, pi .15;
  D_TV = 1/2 (.1 + .05 + .05) = 0.1; D_KL = .6 log(.6/.5) + .3 log(.3/.35)
  + .1 log(.1/.15) = 0.109393 - 0.046245 - 0.040547 = 0.022601. With K = V
  (the rest empty, floored at 1e-12) both are the full divergences: TV 0.1,
  KL 0.022856."""
  mu = np.array([.6, .3, .07, .03])
  pi = np.array([.5, .35, .1, .05])
  top = lambda x, k: jnp.asarray(np.log(x[:k]), jnp.float32)
  d = lambda k, form: float(divergence.topk_divergence(
      top(pi, k), top(mu, k), form))
  np.testing.assert_allclose(d(2, "tv"), 0.1, atol=1e-6)
  np.testing.assert_allclose(d(2, "kl"), 0.022601, atol=1e-6)
  np.testing.assert_allclose(d(4, "tv"), 0.1, atol=1e-6)
  np.testing.assert_allclose(d(4, "kl"), 0.022856, atol=1e-6)


# ------------------------------------------------- the objective, by hand

# One row of four tokens; three top-K ids per position, the sampled token
# first. Token by token (delta 0.15 both sides, TV):
#  0: A = +1, mu_s .3 -> pi_s .32 (up, +0.02: binary TV keeps it), but the
#     head moved: mu [.3, .5, .1] rest .1, pi [.32, .2, .4] rest .08:
#     D = 1/2 (.02 + .3 + .3 + .02) = .32 > .15 and pi > mu: masked.
#  1: A = -1, mu [.4, .3, .2] rest .1, pi [.1, .5, .3] rest .1:
#     D = 1/2 (.3 + .2 + .1 + 0) = .3 > .15 and pi < mu: masked.
#  2: A = +1, the same head as 1 (pi_s < mu_s: a move against A): kept.
#  3: A = +1, mu [.05, .6, .2] rest .15, pi [.08, .58, .19] rest .15:
#     D = 1/2 (.03 + .02 + .01 + 0) = .03: kept; ratio .08/.05 = 1.6.
MU = np.array([[[.3, .5, .1], [.4, .3, .2], [.4, .3, .2], [.05, .6, .2]]])
PI = np.array([[[.32, .2, .4], [.1, .5, .3], [.1, .5, .3], [.08, .58, .19]]])
ADV = np.array([[1., -1., 1., 1.]])
D_TV = np.array([[.32, .3, .3, .03]])


def _numpy_dppo_topk(mu, pi, adv, mask, *, form, delta, cap):
  """Per-token loss terms and d loss / d logp of `dppo_topk` (token mean),
  from the spec in float64: a separate derivation."""
  mu_rest = np.maximum(1 - mu.sum(-1), 1e-12)
  pi_rest = np.maximum(1 - pi.sum(-1), 1e-12)
  if form == "tv":
    d = 0.5 * (np.abs(mu - pi).sum(-1) + np.abs(mu_rest - pi_rest))
  else:
    d = ((mu * np.log(mu / pi)).sum(-1)
         + mu_rest * np.log(mu_rest / pi_rest))
  p_s, mu_s = pi[..., 0], mu[..., 0]
  blocked = np.where(adv > 0, (d > delta) & (p_s > mu_s),
                     (d > delta) & (p_s < mu_s))
  weight = np.minimum(p_s / mu_s, cap)
  keep = (~blocked) * mask
  count = mask.sum()
  terms = -adv * weight * np.log(p_s) * keep
  return terms.sum() / count, -adv * weight * keep / count, d, blocked


def _call(mu, pi, adv, mask=None, **options):
  mask = np.ones(adv.shape) if mask is None else mask
  f32 = lambda x: jnp.asarray(x, jnp.float32)
  logp, behav = f32(np.log(pi[..., 0])), f32(np.log(mu[..., 0]))
  objective = objectives.make("dppo_topk", **options)

  def loss(lp):
    return objective.loss((), lp, behav, f32(adv), f32(mask),
                          sampler_logp=behav,
                          sampler_topk_logp=f32(np.log(mu)),
                          topk_logp=f32(np.log(pi)))
  (value, aux), grad = jax.value_and_grad(loss, has_aux=True)(logp)
  return float(value), np.asarray(grad), aux


def test_topk_tv_masks_tokens_by_hand():
  value, grad, aux = _call(MU, PI, ADV, divergence="tv")
  want, want_grad, d, blocked = _numpy_dppo_topk(
      MU, PI, ADV, np.ones(ADV.shape), form="tv", delta=0.15, cap=20.0)
  np.testing.assert_allclose(d, D_TV, atol=1e-12)
  np.testing.assert_array_equal(blocked, [[True, True, False, False]])
  # Kept: token 2 (-A w logp = -1 * .25 * log .1) and 3 (-1.6 log .08).
  hand = (-0.25 * math.log(0.1) - 1.6 * math.log(0.08)) / 4
  np.testing.assert_allclose(want, hand, rtol=1e-12)
  np.testing.assert_allclose(value, hand, rtol=1e-5)
  np.testing.assert_allclose(grad, [[0, 0, -0.25 / 4, -1.6 / 4]], atol=1e-6)
  np.testing.assert_allclose(grad, want_grad, atol=1e-6)
  assert float(aux.clip_fraction) == 0.5
  np.testing.assert_allclose(float(aux.extra["topk_divergence"].mean),
                             D_TV.mean(), atol=1e-6)


def test_topk_tv_masks_where_the_binary_form_keeps():
  """Token 0's own probability moved by 0.02, so binary TV keeps it; the
  head moved by 0.32, so the top-K form masks it."""
  f32 = lambda x: jnp.asarray(x, jnp.float32)
  behav = f32(np.log(MU[..., 0]))
  grad = jax.grad(lambda lp: objectives.dppo(
      lp, behav, f32(ADV), jnp.ones((1, 4)), sampler_logp=behav)[0])(
          f32(np.log(PI[..., 0])))
  assert float(grad[0, 0]) != 0.0
  assert _call(MU, PI, ADV)[1][0, 0] == 0.0


def test_topk_kl_and_the_cap_by_hand():
  """KL form, delta 0.05: per token D_KL (numpy) decides; the cap C = 1.2
  binds on token 3 (ratio 1.6). Against the numpy derivation, and by hand
  for token 3: D_KL = .05 log(.05/.08) + .6 log(.6/.58) + .2 log(.2/.19) =
  -0.023500 + 0.020341 + 0.010259 = 0.007100 < .05: kept, weight 1.2."""
  value, grad, _ = _call(MU, PI, ADV, divergence="kl", is_cap=1.2)
  want, want_grad, d, _ = _numpy_dppo_topk(
      MU, PI, ADV, np.ones(ADV.shape), form="kl", delta=0.05, cap=1.2)
  np.testing.assert_allclose(d[0, 3], 0.007100, atol=1e-6)
  np.testing.assert_allclose(value, want, rtol=1e-5)
  np.testing.assert_allclose(grad, want_grad, atol=1e-6)
  np.testing.assert_allclose(grad[0, 3], -1.2 / 4, atol=1e-6)


def test_padding_and_random_heads_match_the_numpy_derivation():
  rng = np.random.default_rng(0)
  n, t, k, v = 3, 6, 4, 9
  for form, delta in (("tv", 0.15), ("kl", 0.05)):
    mu_full = rng.dirichlet(np.ones(v) * 0.7, size=(n, t))
    pi_full = rng.dirichlet(np.ones(v) * 0.7, size=(n, t))
    order = np.argsort(-mu_full, axis=-1)[..., :k]
    # The sampled token is the first of mu's top-K here.
    mu = np.take_along_axis(mu_full, order, -1)
    pi = np.take_along_axis(pi_full, order, -1)
    adv = rng.normal(size=(n, t))
    mask = (np.arange(t)[None] < np.array([[6], [3], [1]])).astype(float)
    value, grad, _ = _call(mu, pi, adv, mask, divergence=form)
    want, want_grad, _, blocked = _numpy_dppo_topk(
        mu, pi, adv, mask, form=form, delta=delta, cap=20.0)
    assert (blocked * mask).sum() > 0  # the mask acts on real tokens
    np.testing.assert_allclose(value, want, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, atol=1e-6)


def test_without_topk_arrays_the_set_is_the_sampled_token():
  """Both arrays None (a direct call): the binary forms, as `dppo`
  anchored on the sampler (TV exactly; KL with its own floors)."""
  f32 = lambda x: jnp.asarray(x, jnp.float32)
  mu, pi = np.array([[.1, .9, .5, .01]]), np.array([[.3, .97, .3, .05]])
  adv, mask = f32([[1., 1., -1., 1.]]), jnp.ones((1, 4))
  for form in ("tv", "kl"):
    got = jax.grad(lambda lp: objectives.dppo_topk(
        lp, f32(np.log(mu)), adv, mask, divergence=form)[0])(f32(np.log(pi)))
    want = jax.grad(lambda lp: objectives.dppo(
        lp, f32(np.log(mu)), adv, mask, divergence=form)[0])(f32(np.log(pi)))
    np.testing.assert_allclose(got, want, atol=1e-7)
  # VARIANTS.md 2.2's TV gradient (token mean over 4): [0, -1.077778, 0, -5].
  tv = jax.grad(lambda lp: objectives.dppo_topk(
      lp, f32(np.log(mu)), adv, mask)[0])(f32(np.log(pi)))
  np.testing.assert_allclose(tv, [[0, -1.077778 / 4, 0, -5 / 4]], atol=1e-6)


def test_bad_topk_arrays_name_them():
  objective = objectives.make("dppo_topk")
  ones = jnp.ones((1, 2))
  with pytest.raises(ValueError, match="together"):
    objective.loss((), -ones, -ones, jnp.ones((1,)), ones,
                   topk_logp=-jnp.ones((1, 2, 3)))
  with pytest.raises(ValueError, match="same shape"):
    objective.loss((), -ones, -ones, jnp.ones((1,)), ones,
                   sampler_topk_logp=-jnp.ones((1, 2, 3)),
                   topk_logp=-jnp.ones((1, 2, 4)))
  with pytest.raises(ValueError, match="delta_high"):
    objectives.make("dppo_topk", delta_high=-0.1)
  # The arrays come from the batch and the trainer, never from a config.
  with pytest.raises(ValueError, match="'topk_logp' from the trainer"):
    objectives.check_options("dppo_topk", {"topk_logp": 0.0})


# -------------------------------------------- the trainer's chunked gather


def test_chunked_topk_logprobs_equal_the_full_log_softmax():
  """Values and gradients (both outputs, per-row temperatures with a greedy
  row) against a naive [N, T, V] log-softmax gather."""
  keys = jax.random.split(jax.random.PRNGKey(0), 5)
  n, t, d, v, k = 3, 7, 5, 11, 3
  hidden = jax.random.normal(keys[0], (n, t, d))
  unembedding = jax.random.normal(keys[1], (d, v))
  targets = jax.random.randint(keys[2], (n, t), 0, v)
  ids = jax.random.randint(keys[3], (n, t, k), 0, v)
  tau = jnp.array([0.7, 1.0, 0.0])
  cotangent = jax.random.normal(keys[4], (n, t, k))

  def naive(h, w):
    log_p = logprobs_lib.tempered_log_softmax(
        jnp.einsum("ntd,dv->ntv", h, w), tau)
    return (jnp.take_along_axis(log_p, targets[..., None], -1)[..., 0],
            jnp.take_along_axis(log_p, ids, -1))

  def chunked(h, w):
    out = logprobs_lib.token_logprobs(h, w, targets, temperature=tau,
                                      chunk_size=6, topk_ids=ids)
    return out.logp, out.topk_logp

  for a, b in zip(naive(hidden, unembedding), chunked(hidden, unembedding)):
    np.testing.assert_allclose(a, b, atol=2e-6)
  scalar = lambda fn: lambda h, w: ((fn(h, w)[1] * cotangent).sum()
                                    + jnp.square(fn(h, w)[0]).sum())
  want = jax.grad(scalar(naive), (0, 1))(hidden, unembedding)
  got = jax.grad(scalar(chunked), (0, 1))(hidden, unembedding)
  for a, b in zip(want, got):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
  plain = logprobs_lib.token_logprobs(hidden, unembedding, targets,
                                      temperature=tau, chunk_size=6)
  assert isinstance(plain, logprobs_lib.TokenLogprobs)
  with pytest.raises(ValueError, match="topk_ids"):
    logprobs_lib.token_logprobs(hidden, unembedding, targets,
                                topk_ids=ids[:, :2])


def _topk_batch(config, n, sp, t, k, seed=0):
  keys = jax.random.split(jax.random.PRNGKey(seed), 4)
  tokens = jax.random.randint(keys[0], (n, sp + t), 0, config.vocab_size)
  mask = jnp.ones((n, t))
  topk = jax.random.normal(keys[1], (n, t, k)) - 3.0
  return batch_lib.Batch(
      tokens=tokens, input_mask=jnp.ones((n, sp + t)), completion_mask=mask,
      advantages=jax.random.normal(keys[2], (n,)),
      old_logp=-3.0 + 0.1 * jax.random.normal(keys[3], (n, t)),
      ref_logp=None, sampler_logp=jnp.full((n, t), -3.0),
      temperature=jnp.ones((n,)),
      sampler_topk_ids=jax.random.randint(keys[1], (n, t, k), 0,
                                          config.vocab_size),
      sampler_topk_logp=topk)


def test_the_update_never_holds_the_n_t_v_logits():
  """The compiled gradient of a dppo_topk minibatch (N = 8, T = 32, V =
  8192, K = 4) needs less temporary memory than one [N, T, V] float32
  array (8 MiB); a naive top-K gather from the full log-softmax needs more
  (the check can fail)."""
  config = models.ModelConfig(
      model_type="llama", vocab_size=8192, hidden_size=16,
      intermediate_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
      head_dim=8, tie_word_embeddings=True)
  n, sp, t, k = 8, 4, 32, 4
  params = models.init_params(config, jax.random.PRNGKey(0))
  batch = _topk_batch(config, n, sp, t, k)
  objective = objectives.make("dppo_topk")
  fns = update_lib.make_loss_functions(model_config=config,
                                       objective=objective, chunk_size=64)
  step = jax.jit(lambda p, b: update_lib.minibatch_gradient(
      fns, p, {"objective": ()}, b))
  logits_bytes = n * t * config.vocab_size * 4
  temp = step.lower(params, batch).compile().memory_analysis()
  assert temp.temp_size_in_bytes < logits_bytes, temp.temp_size_in_bytes
  grads, _, records = step(params, batch)
  assert all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(grads))
  assert "topk_divergence" in records

  def naive(p):
    hidden = batch_lib.completion_hidden(p, config, batch.tokens,
                                         batch.input_mask, sp)
    log_p = jax.nn.log_softmax(logprobs_lib.project_logits(
        hidden, models.unembedding(p, config)))
    logp = jnp.take_along_axis(log_p, batch.tokens[:, sp:, None], -1)[..., 0]
    return objective.loss(
        (), logp, batch.old_logp, batch.advantages, batch.completion_mask,
        sampler_logp=batch.sampler_logp,
        sampler_topk_logp=batch.sampler_topk_logp,
        topk_logp=jnp.take_along_axis(log_p, batch.sampler_topk_ids, -1))[0]
  naive_temp = jax.jit(jax.grad(naive)).lower(params).compile(
  ).memory_analysis().temp_size_in_bytes
  assert naive_temp > logits_bytes, naive_temp


def test_trainer_without_recorded_topk_says_what_to_switch_on():
  config = learning.model_config()
  params = models.init_params(config, jax.random.PRNGKey(0))
  batch = _topk_batch(config, 2, 3, 4, 2)._replace(sampler_topk_ids=None,
                                                   sampler_topk_logp=None)
  fns = update_lib.make_loss_functions(model_config=config,
                                       objective=objectives.make("dppo_topk"),
                                       chunk_size=8)
  with pytest.raises(ValueError, match="rollout.record_topk"):
    update_lib.minibatch_gradient(fns, params, {"objective": ()}, batch)


# ---------------------------------------------------------------- sampler


@pytest.fixture(scope="module")
def model():
  # Peaked logits, as tests/test_sampling.py: a clear top-K order.
  return testing.peaked_tiny_model(20.0)


PROMPTS = ([1, 2, 3], [4, 5, 6, 7, 8, 9, 10])
G, T, K = 3, 6, 5
ROW_TEMPERATURES = np.array([0.7, 1.3, 0.0] * len(PROMPTS), np.float32)


def _sample(model, **kwargs):
  config, params = model
  tokens, mask = sampling.pad_prompts(PROMPTS, buckets=(8,))
  return tokens, mask, jax.device_get(sampling.sample(
      params, config, tokens, mask, jax.random.key(4), num_samples=G,
      max_new_tokens=T, eos_ids=(), **kwargs))


def test_sampler_topk_agrees_with_the_trainers_at_the_same_params(model):
  """The sampler's recorded top-K log-probs equal the trainer's chunked
  pass at the same ids and params (per-row temperatures, a greedy row at
  1), as `tempered_logprobs` equal its logp; the ids are the K most
  likely, in order, and the sampled token's entry agrees with its own."""
  config, params = model
  tokens, mask, out = _sample(model, temperature=ROW_TEMPERATURES,
                              record_topk=K)
  assert out.topk_ids.shape == (len(PROMPTS) * G, T, K)
  assert out.topk_logprobs.dtype == np.float32
  assert (np.diff(out.topk_logprobs, axis=-1) <= 0).all()
  assert (out.topk_logprobs[..., 0] >= out.tempered_logprobs - 1e-6).all()
  batch = batch_lib.assemble_batch(
      params, None, tokens, mask, out.tokens, out.mask, out.mask,
      np.zeros(len(out.tokens)), model_config=config,
      temperature=ROW_TEMPERATURES, chunk_size=16,
      sampler_logp=out.tempered_logprobs, sampler_topk_ids=out.topk_ids,
      sampler_topk_logp=out.topk_logprobs)
  logp, _, topk = batch_lib.policy_logprobs(
      params, config, batch.tokens, batch.input_mask, tokens.shape[1],
      temperature=batch.temperature, chunk_size=16,
      topk_ids=batch.sampler_topk_ids)
  np.testing.assert_allclose(logp, out.tempered_logprobs, atol=1e-4)
  np.testing.assert_allclose(topk, out.topk_logprobs, atol=1e-4)
  # The trainer's full log-softmax: no id outside the recorded K is likelier
  # than the K-th.
  hidden = batch_lib.completion_hidden(params, config, batch.tokens,
                                       batch.input_mask, tokens.shape[1])
  full = np.asarray(logprobs_lib.tempered_log_softmax(
      logprobs_lib.project_logits(hidden, models.unembedding(params, config)),
      ROW_TEMPERATURES))
  kth = np.sort(full, axis=-1)[..., -K]
  np.testing.assert_allclose(out.topk_logprobs[..., -1], kth, atol=1e-4)
  hit = out.topk_ids == out.tokens[..., None]
  rows, cols, slot = np.nonzero(hit)
  np.testing.assert_allclose(out.topk_logprobs[rows, cols, slot],
                             out.tempered_logprobs[rows, cols], atol=1e-5)


def test_sampler_records_nothing_when_off_and_compiles_no_top_k(model):
  config, params = model
  _, _, off = _sample(model, temperature=1.0)
  assert off.topk_ids is None and off.topk_logprobs is None
  tokens, mask = sampling.pad_prompts(PROMPTS, buckets=(8,))
  lower = lambda k: sampling._sample.lower(  # pylint: disable=protected-access
      params, jnp.asarray(tokens), jnp.asarray(mask) > 0, jax.random.key(0),
      np.ones((len(PROMPTS) * G,), np.float32), config=config,
      num_samples=G, max_new_tokens=T, top_k=None, top_p=None, greedy=False,
      eos_ids=(), pad_id=0, record_topk=k).as_text()
  off_text, on_text = lower(0), lower(K)
  assert "top_k" not in off_text and "top_k" in on_text
  # Same tokens whether recorded or not: recording changes no draw.
  _, _, on = _sample(model, temperature=1.0, record_topk=K)
  np.testing.assert_array_equal(on.tokens, off.tokens)
  np.testing.assert_array_equal(on.tempered_logprobs, off.tempered_logprobs)


@pytest.mark.parametrize("bad", [-1, 129, 2.0, True])
def test_sampler_rejects_a_bad_record_topk(model, bad):
  with pytest.raises(ValueError, match="record_topk"):
    _sample(model, record_topk=bad)


# ------------------------------------------------------------ the config


def test_config_needs_the_topk_recorded():
  c = config_lib.get_base_config()
  c.objective.name = "dppo_topk"
  c.objective.kwargs = dict(divergence="tv")
  with pytest.raises(ValueError, match=r"config\.rollout\.record_topk: is 0"):
    train.validate(c)
  c.rollout.record_topk = -2
  with pytest.raises(ValueError, match=r"config\.rollout\.record_topk"):
    train.validate(c)
  c.rollout.record_topk = 20
  train.validate(c)


def test_record_topk_above_the_vocabulary_fails_at_build():
  c = config_lib.finalize(config_lib.get_base_config(), "tiny")
  c.objective.name = "dppo_topk"
  c.objective.kwargs = dict(divergence="kl")
  c.rollout.record_topk = 100000
  with pytest.raises(ValueError, match=r"config\.rollout\.record_topk: "
                     r"100000 exceeds the model's vocabulary"):
    train.build(c)


def test_dppo_topk_config_is_off_policy_and_records_topk():
  from configs import dppo_topk  # pylint: disable=g-import-not-at-top
  c = dppo_topk.get_config()
  train.validate(c)
  assert c.rollout.record_topk > 0 and c.train.num_minibatches > 1
  assert c.objective.name == "dppo_topk"


# ------------------------------------------------------------ learning


@pytest.mark.parametrize("form", ["tv", "kl"])
def test_dppo_topk_learns_the_trivial_task_off_policy(form):
  """Two optimiser steps per batch (the second off policy), the sampler's
  top-3 of a vocabulary of 8 recorded and read by the mask."""
  masked = []
  history, _ = learning.learn_trivial_task(
      advantages.make("grpo"),
      objective=objectives.make("dppo_topk", divergence=form),
      record_topk=3, on_step=lambda r, a, records: masked.append(
          records[-1]["clip_fraction"]))
  learning.check_learned(history)
  assert max(masked) > 0.0  # the top-K mask acted on some step
