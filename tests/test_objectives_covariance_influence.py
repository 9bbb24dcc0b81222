"""Covariance and influence objectives and rejection masks: FIPO's influence weights (a
correction), verl's Clip-Cov and KL-Cov objectives, verl's rejection-
sampling masks (corrections `rejection`, `rejection_sequence`) and F-TIS's
kept-token denominator.

Expected values are VARIANTS.md's vectors (3.4) or are worked out here in
plain numpy / float64 loops from the formulas, never from the functions
under test; gradients are written out by hand (d L_t / d logp_t) and
compared with jax.grad of the code.
"""

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from grpo_jax import advantages
from grpo_jax import train as train_lib
from grpo_jax import objectives
from grpo_jax import testing
from grpo_jax.objectives import corrections
from grpo_jax.testing import learning

from configs import grpo as grpo_config


def row(values):
  return jnp.asarray(np.asarray(values, np.float64)[None, :], jnp.float32)


def random_batch(seed=0, n=4, t=7, spread=0.3, sampler_spread=0.3):
  rng = np.random.default_rng(seed)
  logp = -np.abs(rng.normal(size=(n, t))) - 0.1
  old = logp + spread * rng.normal(size=(n, t))
  sampler = old + sampler_spread * rng.normal(size=(n, t))
  adv = rng.normal(size=n)
  lengths = rng.integers(2, t + 1, size=n)
  mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.float64)
  return logp, old, sampler, adv, mask


def j(x):
  return jnp.asarray(x, jnp.float32)


def ppo_hand(logp, old, adv, lo=0.2, hi=0.2):
  """PPO's per-token loss and d/dlogp, by hand."""
  r = np.exp(logp - old)
  a = np.broadcast_to(np.asarray(adv, np.float64).reshape(-1, 1), r.shape)
  unclipped, clipped = r * a, np.clip(r, 1 - lo, 1 + hi) * a
  term = -np.minimum(unclipped, clipped)
  grad = np.where(unclipped <= clipped, -a * r, 0.0)
  cut = ((a > 0) & (r > 1 + hi)) | ((a < 0) & (r < 1 - lo))
  return term, grad, cut


# ---------------------------------------------------------------- FIPO


def fipo_hand(delta, mask, adv, ratio, *, tau=32.0, eps=0.2, high_only=True,
              safety=4.0, dual=None):
  """F_t by an explicit double loop, then the clip and the safety clamp."""
  n, t = delta.shape
  gamma = 2.0 ** (-1.0 / tau)
  d = np.where(mask > 0, delta, 0.0)
  if dual is not None:
    d = np.where(ratio > dual, 0.0, d)
  future = np.zeros_like(d)
  for i in range(n):
    for s in range(t):
      future[i, s] = sum(gamma ** (k - s) * d[i, k] for k in range(s, t))
  future = np.where(mask > 0, future, 0.0)
  lo = 1.0 if high_only else 1.0 - eps
  f = np.clip(np.exp(future), lo, 1.0 + eps)
  if safety is not None:
    a = np.broadcast_to(adv.reshape(-1, 1), f.shape)
    unsafe = (a < 0) & (ratio > safety)
    f = np.where(unsafe, np.clip(f, 0.8, 1.0), f)
  return np.where(mask > 0, f, 0.0), future


@pytest.mark.parametrize("tau,want_f,want_future", [
    (1.0, [1.133148, 1.051271, 1.2, 1.0], [0.125, 0.05, 0.2, 0.0]),
    (32.0, [1.2, 1.156866, 1.2, 1.0], [0.242592, 0.145714, 0.2, 0.0]),
])
def test_fipo_vectors(tau, want_f, want_future):
  delta = row([0.1, -0.05, 0.2, 0.0])
  out = objectives.influence.fipo(jnp.ones((1, 4)), logp=delta,
                                  old_logp=jnp.zeros((1, 4)),
                                  advantages=jnp.ones(1), half_life=tau)
  testing.assert_close(out.weights, row(want_f), atol=1e-6)
  testing.assert_close(out.statistic, row(want_future), atol=1e-6)


@pytest.mark.parametrize("options", [
    {}, {"clip_high_only": False, "half_life": 3.0},
    {"dual_clip": 1.2, "safety": 1.1, "clip_high_only": False},
    {"safety": None, "clip_range": 0.5}])
def test_fipo_matches_the_loop(options):
  logp, old, _, adv, mask = random_batch(spread=0.4)
  mask[1, 2] = 0.0  # a hole: it neither contributes nor receives
  kw = dict(tau=options.get("half_life", 32.0),
            eps=options.get("clip_range", 0.2),
            high_only=options.get("clip_high_only", True),
            safety=options.get("safety", 4.0), dual=options.get("dual_clip"))
  want, future = fipo_hand(logp - old, mask, adv, np.exp(logp - old), **kw)
  out = objectives.influence.fipo(j(mask), logp=j(logp), old_logp=j(old),
                                  advantages=j(adv), **options)
  testing.assert_close(out.weights, j(want), rtol=1e-5, atol=1e-6)
  testing.assert_close(out.statistic, j(future), rtol=1e-5, atol=1e-6)
  assert out.weights[1, 2] == 0.0
  assert (np.asarray(out.weights)[mask > 0] != 1.0).any()


def test_fipo_on_policy_is_one_and_the_safety_clamp_binds():
  logp, _, _, adv, mask = random_batch()
  out = objectives.influence.fipo(j(mask), logp=j(logp), old_logp=j(logp),
                                  advantages=j(adv))
  testing.assert_close(out.weights, j(mask))
  # A < 0, r = e^2 > 4 at token 0: exp(F) is huge, clamped to 1, not 1.2.
  out = objectives.influence.fipo(
      jnp.ones((2, 2)), logp=jnp.array([[2.0, 0.5], [2.0, 0.5]]),
      old_logp=jnp.zeros((2, 2)), advantages=jnp.array([-1.0, 1.0]))
  testing.assert_close(out.weights, jnp.array([[1.0, 1.2], [1.2, 1.2]]))


def test_fipo_weighs_ppo_clips_gradient_by_f():
  """The trainer's product: f_t times PPO's d L_t / d logp_t over the
  token count, f detached (the correction's weights are)."""
  logp, old, _, adv, mask = random_batch(spread=0.3)
  f, _ = fipo_hand(logp - old, mask, adv, np.exp(logp - old))
  record = corrections.make("fipo")
  w, _ = record.apply(j(mask), logp=j(logp), old_logp=j(old),
                      advantages=j(adv))
  ppo = objectives.make("ppo_clip", clip_high=0.28, aggregation="token_mean")
  loss, g = jax.value_and_grad(lambda lp: ppo.loss(
      (), lp, j(old), j(adv), j(mask), token_weights=w)[0])(j(logp))
  term, grad, _ = ppo_hand(logp, old, adv, hi=0.28)
  testing.assert_close(loss, (f * term * mask).sum() / mask.sum(), rtol=1e-5)
  testing.assert_close(g, j(f * grad * mask / mask.sum()), rtol=1e-5,
                       atol=1e-7)


@pytest.mark.parametrize("options,match", [
    ({"half_life": 0.0}, "half_life"), ({"clip_range": 1.5}, "clip_range"),
    ({"safety": 0.5}, "safety"), ({"dual_clip": 1.0}, "dual_clip"),
    ({"clip_range": "0.2"}, "clip_range"),
    ({"half_life": float("inf")}, "half_life.*finite"),
    ({"clip_high_only": "yes"}, "clip_high_only")])
def test_fipo_bad_options(options, match):
  with pytest.raises(ValueError, match=match):
    corrections.make("fipo", **options)


# ----------------------------------------------------------- rejection


def k_stats(x):
  return {"k1": -x, "k2": 0.5 * x * x, "k3": np.exp(x) - 1 - x}


@pytest.mark.parametrize("statistic,options", [
    ("k1", {}), ("k1", {"low": 0.8, "high": 1.5}), ("k2", {"high": 0.02}),
    ("k3", {"high": 0.01})])
def test_token_rejection(statistic, options):
  _, old, sampler, _, mask = random_batch(sampler_spread=0.5)
  x = old - sampler
  value = k_stats(x)[statistic]
  if statistic == "k1":
    high = options.get("high", 2.0)
    low = options.get("low", 1 / high)
    keep = (np.exp(x) >= low) & (np.exp(x) <= high)
  else:
    keep = value <= options["high"]
  keep &= mask > 0
  out = objectives.rejection.rejection(
      j(mask), old_logp=j(old), sampler_logp=j(sampler), statistic=statistic,
      **options)
  testing.assert_close(out.weights, j(keep))
  testing.assert_close(out.statistic, j(np.where(mask > 0, value, 0)),
                       rtol=1e-5, atol=1e-6)
  assert 0 < keep.sum() < (mask > 0).sum()


@pytest.mark.parametrize("statistic,aggregate,options", [
    ("k1", "mean", {"high": 1.05}), ("k1", "sum", {"low": 0.5, "high": 2.0}),
    ("k3", "mean", {"high": 0.03}), ("k2", "max", {"high": 0.1}),
    ("k3", "sum", {"high": 0.15})])
def test_sequence_rejection(statistic, aggregate, options):
  _, old, sampler, _, mask = random_batch(n=8, sampler_spread=0.3)
  x = old - sampler
  value = np.where(mask > 0, k_stats(x)[statistic], 0.0)
  s = {"sum": value.sum(-1), "mean": value.sum(-1) / mask.sum(-1),
       "max": np.where(mask > 0, value, -np.inf).max(-1)}[aggregate]
  if statistic == "k1":
    high = options["high"]
    low = options.get("low", 1 / high)
    keep = (np.exp(-s) >= low) & (np.exp(-s) <= high)
  else:
    keep = s <= options["high"]
  out = objectives.rejection.rejection_sequence(
      j(mask), old_logp=j(old), sampler_logp=j(sampler), statistic=statistic,
      aggregate=aggregate, **options)
  testing.assert_close(out.weights, j(keep[:, None] * mask))
  assert 0 < keep.sum() < len(keep), s


def test_rejection_masks_ppo_terms_and_keeps_the_count():
  logp, old, sampler, adv, mask = random_batch(sampler_spread=0.4)
  record = corrections.make("rejection", statistic="k3", high=0.02)
  w, m = record.apply(j(mask), old_logp=j(old), sampler_logp=j(sampler))
  x = old - sampler
  keep = ((np.exp(x) - 1 - x) <= 0.02) & (mask > 0)
  ppo = objectives.make("ppo_clip", aggregation="token_mean")
  g = jax.grad(lambda lp: ppo.loss((), lp, j(old), j(adv), j(mask),
                                   token_weights=w)[0])(j(logp))
  _, grad, _ = ppo_hand(logp, old, adv)
  testing.assert_close(g, j(keep * grad / mask.sum()), rtol=1e-5, atol=1e-7)
  from grpo_jax import measures  # pylint: disable=g-import-not-at-top
  values = measures.values(m)
  testing.assert_close(values["correction/rejection/masked_fraction"],
                       1 - keep.sum() / mask.sum(), rtol=1e-6)


@pytest.mark.parametrize("name,options,match", [
    ("rejection", {"statistic": "k4"}, "statistic"),
    ("rejection", {"statistic": "k3", "low": 0.5}, "low"),
    ("rejection", {"high": 0.0}, "high"),
    ("rejection", {"low": 2.0, "high": 1.5}, "low"),
    ("rejection_sequence", {"aggregate": "max"}, "aggregate"),
    ("rejection_sequence", {"aggregate": "median"}, "aggregate"),
])
def test_rejection_bad_options(name, options, match):
  with pytest.raises(ValueError, match=match):
    corrections.make(name, **options)


def test_correction_config_errors_name_the_field():
  config = grpo_config.get_config("tiny")
  config.corrections = ml_collections.ConfigDict(
      {"fipo": {"half_life": -1.0}})
  with pytest.raises(ValueError, match=r"corrections\.fipo.*half_life"):
    train_lib.validate(config)
  config.corrections = ml_collections.ConfigDict(
      {"rejection_sequence": {"statistic": "k1", "aggregate": "max"}})
  with pytest.raises(ValueError,
                     match=r"corrections\.rejection_sequence.*aggregate"):
    train_lib.validate(config)
  config.corrections = ml_collections.ConfigDict(
      {"fipo": {}, "rejection_sequence": {}})
  train_lib.validate(config)


# ---------------------------------------------------- Clip-Cov, KL-Cov


def top_covariance(adv_tok, logp, mask, share, candidates):
  """Indices (boolean [N, T]) of the k highest-covariance candidates,
  k = max(1, floor(share * real tokens)), by a plain sort."""
  real = mask > 0
  cov = ((adv_tok - adv_tok[real].mean()) * (logp - logp[real].mean()))
  k = max(1, int(math.floor(share * real.sum())))
  flat = np.where(candidates, cov, -np.inf).ravel()
  order = np.argsort(-flat, kind="stable")[:k]
  chosen = np.zeros(flat.shape, bool)
  chosen[order] = np.isfinite(flat[order])
  return chosen.reshape(cov.shape), cov


@pytest.mark.parametrize("share,band", [(0.2, (0.0, 5.0)), (0.5, (-1.0, 0.3)),
                                        (2e-4, (1.0, 5.0))])
def test_clip_cov_value_and_gradient(share, band):
  logp, old, _, adv, mask = random_batch(n=6, spread=0.3)
  a = np.broadcast_to(adv[:, None], logp.shape)
  term, grad, cut = ppo_hand(logp, old, adv)
  real = mask > 0
  cov = (a - a[real].mean()) * (logp - logp[real].mean())
  cand = real & ~cut & (cov > band[0]) & (cov < band[1])
  dropped, _ = top_covariance(a, logp, mask, share, cand)
  loss, g = jax.value_and_grad(lambda lp: objectives.clip_cov(
      lp, j(old), j(adv), j(mask), clip_cov_ratio=share, clip_cov_lb=band[0],
      clip_cov_ub=band[1], clip_cov_rule="top")[0])(j(logp))
  keep = real & ~dropped
  testing.assert_close(loss, (term * keep).sum() / real.sum(), rtol=1e-5)
  testing.assert_close(g, j(grad * keep / real.sum()), rtol=1e-5, atol=1e-7)
  _, aux = objectives.clip_cov(j(logp), j(old), j(adv), j(mask),
                               clip_cov_ratio=share, clip_cov_lb=band[0],
                               clip_cov_ub=band[1], clip_cov_rule="top")
  testing.assert_close(aux.extra["cov_selected"].value(),
                       dropped.sum() / real.sum())
  assert dropped.sum() == min(max(1, int(share * real.sum())), cand.sum())


def test_clip_cov_drops_gradients_on_policy_too():
  logp, _, _, adv, mask = random_batch(n=6)
  a = np.broadcast_to(adv[:, None], logp.shape)
  real = mask > 0
  dropped, _ = top_covariance(a, logp, mask, 0.3, real)
  g = jax.grad(lambda lp: objectives.clip_cov(
      lp, j(logp), j(adv), j(mask), clip_cov_ratio=0.3, clip_cov_lb=-10.0,
      clip_cov_ub=10.0, clip_cov_rule="top")[0])(j(logp))
  testing.assert_close(g, j(-a * (real & ~dropped) / real.sum()), atol=1e-7)
  assert dropped.sum() > 0


@pytest.mark.parametrize("share,coef", [(0.25, 1.0), (2e-4, 0.5),
                                        (1.0, 2.0)])
def test_kl_cov_value_and_gradient(share, coef):
  logp, old, _, adv, mask = random_batch(n=6, spread=0.3)
  a = np.broadcast_to(adv[:, None], logp.shape)
  real = mask > 0
  chosen, _ = top_covariance(a, logp, mask, share, real)
  x = logp - old
  r = np.exp(x)
  term = -a * r + coef * np.abs(x) * chosen
  grad = -a * r + coef * np.sign(x) * chosen
  loss, g = jax.value_and_grad(lambda lp: objectives.kl_cov(
      lp, j(old), j(adv), j(mask), kl_cov_ratio=share,
      ppo_kl_coef=coef)[0])(j(logp))
  testing.assert_close(loss, (term * real).sum() / real.sum(), rtol=1e-5)
  testing.assert_close(g, j(grad * real / real.sum()), rtol=1e-5, atol=1e-7)
  assert chosen.sum() == max(1, int(share * real.sum()))


def test_the_covariance_share_is_the_minibatchs_under_microbatching():
  """Two halves with the whole's pre-pass pool select what one shot does
  (not each half's own top share, as verl's per-micro-batch rule would)."""
  logp, old, _, adv, mask = random_batch(n=8, spread=0.3)
  for name, opts in (("kl_cov", {"kl_cov_ratio": 0.1}),
                     ("clip_cov", {"clip_cov_ratio": 0.1,
                                   "clip_cov_lb": -5.0,
                                   "clip_cov_rule": "top"})):
    objective = objectives.make(name, **opts)
    state = objective.init()
    args = [j(v) for v in (logp, old, adv, mask)]
    stats = objective.prepass(*args)
    _, whole = objective.loss(state, *args, batch_stats=stats)
    halves = [objective.loss(state, *[v[s] for v in args],
                             batch_stats=stats)[1]
              for s in (slice(0, 4), slice(4, 8))]
    own = [objective.loss(state, *[v[s] for v in args])[1]
           for s in (slice(0, 4), slice(4, 8))]
    total = lambda auxes: sum(float(x.extra["cov_selected"].total)
                              for x in auxes)
    assert total(halves) == float(whole.extra["cov_selected"].total)
    assert total(own) != total(halves)  # verl's per-micro-batch share


@pytest.mark.parametrize("name,options,match", [
    ("clip_cov", {"clip_cov_ratio": 0.0}, "clip_cov_ratio"),
    ("clip_cov", {"clip_cov_ratio": 1.5}, "clip_cov_ratio"),
    ("clip_cov", {"clip_cov_lb": 5.0, "clip_cov_ub": 1.0}, "clip_cov_lb"),
    ("kl_cov", {"kl_cov_ratio": -0.1}, "kl_cov_ratio"),
    ("kl_cov", {"ppo_kl_coef": -1.0}, "ppo_kl_coef"),
    # 0 * inf would be NaN wherever the penalty is off.
    ("kl_cov", {"ppo_kl_coef": float("inf")}, "ppo_kl_coef.*finite"),
    ("clip_cov", {"clip_cov_ratio": "0.1"}, "clip_cov_ratio"),
    ("kl_cov", {"pool": None}, "pool")])
def test_covariance_bad_options(name, options, match):
  with pytest.raises(ValueError, match=match):
    objectives.make(name, **options)


# --------------------------------------------------------------- F-TIS


def test_f_tis_kept_denominator_by_rows():
  """seq_mean_token_mean with the token filter: each row's mean over its
  kept tokens, averaged over the rows with a kept token."""
  mu = np.log([[0.1, 0.2, 0.3], [0.2, 0.2, 0.2]])
  ratios = np.array([[3.0, 1.5, 0.4], [4.0, 3.0, 5.0]])  # row 1: none kept
  logp = mu + np.log(ratios)
  adv = np.array([1.0, -2.0])
  mask = np.ones((2, 3))
  loss, g = jax.value_and_grad(lambda lp: objectives.f_tis(
      lp, j(logp), j(adv), j(mask), sampler_logp=j(mu), filter="token",
      aggregation="seq_mean_token_mean")[0])(j(logp))
  # Only token (0, 1) is kept: one row, one token.
  testing.assert_close(loss, -1.5 * 1.0 * logp[0, 1], rtol=1e-5)
  want = np.zeros((2, 3))
  want[0, 1] = -1.5
  testing.assert_close(g, j(want), atol=1e-6)


def test_f_tis_microbatched_with_the_sampler_equals_one_shot():
  logp, old, sampler, adv, mask = random_batch(n=8, spread=0.3,
                                               sampler_spread=0.6)
  objective = objectives.make("f_tis", band_low=0.8, band_high=1.25)
  args = [j(v) for v in (logp, old, adv, mask)]
  s = j(sampler)
  from grpo_jax import measures  # pylint: disable=g-import-not-at-top
  stats = measures.merge(
      objective.prepass(*[v[:4] for v in args], sampler_logp=s[:4]),
      objective.prepass(*[v[4:] for v in args], sampler_logp=s[4:]))
  count = objective.count(args[3])

  def accumulated(lp):
    return sum(objective.loss((), lp[r], *[v[r] for v in args[1:]],
                              batch_stats=stats, sampler_logp=s[r])[1].loss_sum
               for r in (slice(0, 4), slice(4, 8))) / count

  one = lambda lp: objective.loss((), lp, *args[1:], sampler_logp=s)[0]
  testing.assert_close(accumulated(args[0]), one(args[0]), rtol=1e-5)
  testing.assert_close(jax.grad(accumulated)(args[0]), jax.grad(one)(args[0]),
                       rtol=1e-5, atol=1e-7)
  # Some rows filtered, some kept: the scale is not 1.
  _, aux = objective.loss((), *args, sampler_logp=s)
  assert 0 < float(aux.clip_fraction) < 1


# ------------------------------------------------------------ learning


@pytest.mark.parametrize("objective,chosen", [
    (("ppo_clip", {"clip_high": 0.28, "aggregation": "token_mean"}),
     (("fipo", {"half_life": 2.0}),)),
    (("clip_cov", {"clip_cov_ratio": 0.05, "clip_cov_lb": 0.0}), ()),
    (("kl_cov", {"kl_cov_ratio": 0.05}), ()),
    (("f_tis", {}), ()),
])
def test_learns_the_trivial_task_off_policy(objective, chosen):
  name, options = objective
  history, _ = learning.learn_trivial_task(
      advantages.make("grpo"), objective=objectives.make(name, **options),
      corrections=[corrections.make(n, **o) for n, o in chosen])
  learning.check_learned(history)
