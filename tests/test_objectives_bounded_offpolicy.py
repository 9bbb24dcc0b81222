"""Bounded and off-policy objectives: CE-GPPO, DPPO, decoupled PPO (and its IS-weight
records), F-TIS, SPO (the cfpo alias), LUSPO, VESPO, ppo_clip's delta, the
LLDS regulariser and its config; token weights on GSPO, GMPO, GSPO-token,
LUSPO and VESPO; options that name an array the trainer passes.

Expected values are VARIANTS.md's float64 test vectors (section 2) or are
worked out here in plain numpy from the formulas, never taken from the
functions under test. Each objective also has an off-policy case where its
gradient differs from REINFORCE's and ppo_clip's, and edge cases with the
behaviour log-probs (`sampler_logp`) supplied: the registry-wide suites
(tests/contracts, tests/test_objectives.py) call objectives without them.
"""

import importlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import config as config_lib
from grpo_jax import measures
from grpo_jax import objectives
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.train import update as update_lib
from grpo_jax.objectives import corrections
from grpo_jax.objectives import divergence
from grpo_jax.objectives import regularisers

WAVE2 = ("ce_gppo", "dppo", "decoupled_ppo", "f_tis", "spo_simple", "luspo",
         "vespo")
READS_SAMPLER = ("dppo", "decoupled_ppo", "f_tis", "vespo")


def row(values):
  """[1, T] float32 from a list."""
  return jnp.asarray(np.asarray(values, np.float64)[None, :], jnp.float32)


def value_and_grad(fn, logp, *args, **kwargs):
  """(loss, d loss / d logp) of an objective."""
  return jax.value_and_grad(lambda lp: fn(lp, *args, **kwargs)[0])(logp)


def per_token(fn, logp, old, adv, mask, **kwargs):
  """Loss and gradient with ``seq_mean_token_sum`` over one row: the sum of
  the per-token terms, whose gradient is each token's own d L_t / d logp_t."""
  return value_and_grad(fn, logp, old, adv, mask,
                        aggregation="seq_mean_token_sum", **kwargs)


def off_policy(seed=0, n=4, t=6, spread=0.5, sampler_spread=0.4):
  """logp, old_logp, sampler_logp, advantages [N], ragged mask."""
  k = jax.random.split(jax.random.PRNGKey(seed), 5)
  logp = testing.random_logps(k[0], (n, t))
  old = logp + spread * jax.random.normal(k[1], (n, t))
  sampler = old + sampler_spread * jax.random.normal(k[2], (n, t))
  adv = jax.random.normal(k[3], (n,))
  mask = testing.random_mask(k[4], (n, t))
  return logp, old, sampler, adv, mask


def grads(name, logp, old, adv, mask, **kwargs):
  return jax.grad(
      lambda lp: objectives.get(name)(lp, old, adv, mask, **kwargs)[0])(logp)


# ------------------------------------------------------------- CE-GPPO

CE_R = [0.7, 1.3, 1.1, 0.5, 4.0]
CE_A = [-1.0, 1.0, 1.0, 1.0, -1.0]


def ce_inputs():
  old = row([-1.0] * 5)
  return old + jnp.log(row(CE_R)), old, row(CE_A), jnp.ones((1, 5))


def test_ce_gppo_vector_value_and_gradient():
  """VARIANTS 2.1: beta1 0.75, beta2 1, dual clip 3."""
  logp, old, adv, mask = ce_inputs()
  loss, g = value_and_grad(objectives.ce_gppo, logp, old, adv, mask)
  testing.assert_close(loss, 0.16, rtol=1e-5)  # token mean
  testing.assert_close(g * 5, row([0.6, -1.2, -1.1, -0.5, 0.0]), atol=1e-5)
  for r, a, want in zip(CE_R, CE_A, [0.6, -1.2, -1.1, -0.5, 3.0]):
    one = objectives.ce_gppo(jnp.log(jnp.full((1, 1), r)) - 1.0,
                             jnp.full((1, 1), -1.0), jnp.array([a]),
                             jnp.ones((1, 1)))[0]
    testing.assert_close(one, want, rtol=1e-5)


def test_ce_gppo_clip_fraction_counts_low_high_and_capped():
  logp, old, adv, mask = ce_inputs()
  _, aux = objectives.ce_gppo(logp, old, adv, mask)
  testing.assert_close(aux.clip_fraction, 3 / 5)  # low, high, capped
  _, aux = objectives.ce_gppo(logp, old, adv, mask, dual_clip=None)
  testing.assert_close(aux.clip_fraction, 2 / 5)  # share(low | high)


@pytest.mark.parametrize("beta_low,beta_high", [(1.0, 1.0), (0.25, 0.5)])
def test_ce_gppo_clipped_tokens_keep_a_bounded_gradient(beta_low, beta_high):
  """Clipped tokens: PPO's clipped value times beta, gradient -beta (1 -+ eps)
  A whatever the ratio; ppo_clip gives them no gradient at all. beta = 1 is
  GPPO, whose values equal ppo_clip's."""
  r = np.array([0.3, 0.6, 1.5, 3.0, 1.1])
  a = np.array([-2.0, -1.0, 1.0, 0.5, 1.0])
  old = row([-2.0] * 5)
  logp = old + jnp.log(row(r))
  kw = dict(beta_low=beta_low, beta_high=beta_high, dual_clip=None)
  loss, g = per_token(objectives.ce_gppo, logp, old, row(a), jnp.ones((1, 5)),
                      **kw)
  low, high = (a < 0) & (r < 0.8), (a > 0) & (r > 1.2)
  want_terms = np.where(low, -beta_low * 0.8 * a,
                        np.where(high, -beta_high * 1.2 * a, -r * a))
  want_grad = np.where(low, -beta_low * 0.8 * a,
                       np.where(high, -beta_high * 1.2 * a, -r * a))
  testing.assert_close(loss, want_terms.sum(), rtol=1e-5)
  testing.assert_close(g, row(want_grad), rtol=1e-5, atol=1e-6)
  _, g_ppo = per_token(objectives.ppo_clip, logp, old, row(a),
                       jnp.ones((1, 5)))
  assert np.all(np.asarray(g_ppo)[0][low | high] == 0.0)
  assert np.all(np.abs(np.asarray(g)[0][low | high]) > 0.1)
  if beta_low == beta_high == 1.0:
    testing.assert_close(loss, per_token(objectives.ppo_clip, logp, old,
                                         row(a), jnp.ones((1, 5)))[0])


# ---------------------------------------------------------------- DPPO

DPPO_MU = np.array([0.1, 0.9, 0.5, 0.01])
DPPO_PI = np.array([0.3, 0.97, 0.3, 0.05])
DPPO_A = np.array([1.0, 1.0, -1.0, 1.0])


def np_binary_kl(p, mu):
  return (mu * np.log(mu / p)
          + (1 - mu) * np.log((1 - mu + 1e-8) / (1 - p + 1e-8)))


def test_dppo_binary_kl_vector():
  want = [0.116322, 0.052986, 0.087177, 0.024736]
  np.testing.assert_allclose(np_binary_kl(DPPO_PI, DPPO_MU), want, atol=1e-6)
  got = divergence.binary_kl(jnp.asarray(DPPO_PI), jnp.asarray(DPPO_MU),
                             jnp.log(DPPO_PI), jnp.log(DPPO_MU))
  testing.assert_close(got, jnp.asarray(want, jnp.float32), atol=2e-6)


@pytest.mark.parametrize("div,valid", [("tv", [0, 1, 0, 1]),
                                       ("kl", [0, 0, 0, 1])])
def test_dppo_vector_masks_values_and_gradients(div, valid):
  """VARIANTS 2.2: the confident token (mu = .9) is kept by TV, blocked by
  KL; the rare one (mu = .01, ratio 5) is kept by both."""
  logp, mu = row(np.log(DPPO_PI)), row(np.log(DPPO_MU))
  valid = np.array(valid, float)
  weight = np.minimum(DPPO_PI / DPPO_MU, 20.0)
  want_terms = -DPPO_A * weight * np.log(DPPO_PI) * valid
  want_grad = -DPPO_A * weight * valid
  for kwargs in (dict(sampler_logp=mu, old_logp=logp),  # anchor behav
                 dict(sampler_logp=None, old_logp=mu, anchor="old")):
    old = kwargs.pop("old_logp")
    loss, g = per_token(objectives.dppo, logp, old, row(DPPO_A),
                        jnp.ones((1, 4)), divergence=div, **kwargs)
    testing.assert_close(loss, want_terms.sum(), rtol=1e-5)
    testing.assert_close(g, row(want_grad), rtol=1e-5, atol=1e-6)
    _, aux = objectives.dppo(logp, old, row(DPPO_A), jnp.ones((1, 4)),
                             divergence=div, **kwargs)
    testing.assert_close(aux.clip_fraction, 1.0 - valid.mean())
  if div == "tv":
    np.testing.assert_allclose(want_terms, [0, 0.032828, 0, 14.978661],
                               atol=1e-6)
    np.testing.assert_allclose(want_grad, [0, -1.077778, 0, -5], atol=1e-6)


def test_dppo_anchor_chooses_the_reference_and_is_cap_truncates():
  """With the behaviour policy as anchor the sampler's log-probs set both the
  weight and the mask; anchored on pi_old (= logp here) every token is
  valid with weight 1: REINFORCE."""
  logp, mu = row(np.log(DPPO_PI)), row(np.log(DPPO_MU))
  adv, mask = row(DPPO_A), jnp.ones((1, 4))
  _, g_old = per_token(objectives.dppo, logp, logp, adv, mask,
                       sampler_logp=mu, anchor="old")
  testing.assert_close(g_old, row(-DPPO_A))
  _, g = per_token(objectives.dppo, logp, logp, adv, mask, sampler_logp=mu,
                   is_cap=2.0)
  testing.assert_close(g, row([0.0, -0.97 / 0.9, 0.0, -2.0]), rtol=1e-5)


def test_dppo_explicit_thresholds():
  """delta_high 0.25 admits the first token's +0.2 move under TV."""
  logp, mu = row(np.log(DPPO_PI)), row(np.log(DPPO_MU))
  _, aux = objectives.dppo(logp, logp, row(DPPO_A), jnp.ones((1, 4)),
                           sampler_logp=mu, delta_high=0.25)
  testing.assert_close(aux.clip_fraction, 0.25)  # only the A < 0 token


@pytest.mark.parametrize("option,value,named", [
    ("divergence", "js", "divergence"), ("anchor", "ref", "anchor"),
    ("is_cap", 0.0, "is_cap"), ("delta_low", -0.1, "delta_low")])
def test_dppo_bad_options_name_themselves(option, value, named):
  with pytest.raises(ValueError, match=named):
    objectives.make("dppo", **{option: value})


# -------------------------------------------------------- decoupled PPO

DEC_PI = np.array([0.5, 0.2, 0.9])
DEC_PROX = np.array([0.4, 0.25, 0.9])
DEC_MU = np.array([0.2, 0.25, 0.6])
DEC_A = np.array([1.0, -1.0, 1.0])


def test_decoupled_ppo_vector():
  """VARIANTS 2.4: w = [2, 1, 1.5] (C_is = 2), r = [1.25, .8, 1]."""
  loss, g = per_token(objectives.decoupled_ppo, row(np.log(DEC_PI)),
                      row(np.log(DEC_PROX)), row(DEC_A), jnp.ones((1, 3)),
                      sampler_logp=row(np.log(DEC_MU)), is_cap=2.0)
  testing.assert_close(loss, -2.4 + 0.8 - 1.5, rtol=1e-5)
  # Token 0 is clipped (A > 0, r = 1.25); token 2 is -w A r = -1.5. Token 1
  # sits on the band's edge (r = 0.8), where the gradient is either side's.
  testing.assert_close(g[0, 0], 0.0)
  testing.assert_close(g[0, 2], -1.5, rtol=1e-5)


def test_decoupled_ppo_weight_by_hand_untruncated_and_capped():
  """r = 1.05 inside the band, w = pi_old / mu = 4: L = -w r A."""
  old, mu = row([math.log(0.4)]), row([math.log(0.1)])
  logp = old + math.log(1.05)
  for cap, w in ((None, 4.0), (2.5, 2.5)):
    for a in (1.5, -0.5):
      loss, g = per_token(objectives.decoupled_ppo, logp, old, row([a]),
                          jnp.ones((1, 1)), sampler_logp=mu, is_cap=cap)
      testing.assert_close(loss, -w * 1.05 * a, rtol=1e-5)
      testing.assert_close(g[0, 0], -w * 1.05 * a, rtol=1e-5)


@pytest.mark.parametrize("kwargs", [{}, {"dual_clip": 3.0},
                                    {"aggregation": "token_mean"}])
def test_decoupled_ppo_is_ppo_clip_when_behaviour_is_proximal(kwargs):
  logp, old, _, adv, mask = off_policy()
  want = value_and_grad(objectives.ppo_clip, logp, old, adv, mask, **kwargs)
  for sampler in (None, old):
    testing.assert_close(
        value_and_grad(objectives.decoupled_ppo, logp, old, adv, mask,
                       sampler_logp=sampler, **kwargs), want, rtol=1e-6)


def test_decoupled_ppo_reports_its_behaviour_weight_merged_exactly():
  """Row 1: pi_old / mu = [2, 1, 1.5] -> w = [1.8, 1, 1.5] at C_is 1.8; row
  2: [5, 1] and a padding token -> [1.8, 1]. Over the five real tokens:
  is_weight mean 7.1 / 5, max 1.8, min 1; truncated 2 / 5. Each row alone,
  its records merged, gives the same."""
  old = jnp.asarray(np.log([DEC_PROX, [0.5, 0.5, 0.5]]), jnp.float32)
  sampler = jnp.asarray(np.log([DEC_MU, [0.1, 0.5, 0.5]]), jnp.float32)
  mask = jnp.asarray([[1, 1, 1], [1, 1, 0]], jnp.float32)
  adv = jnp.asarray([1.0, -1.0])

  def records(rows):
    _, aux = objectives.decoupled_ppo(
        old[rows] + 0.01, old[rows], adv[rows], mask[rows],
        sampler_logp=sampler[rows], is_cap=1.8)
    return aux.measures()

  whole = measures.values(records(slice(None)))
  merged = measures.values(measures.merge(records(slice(0, 1)),
                                          records(slice(1, 2))))
  want = {"is_weight_mean": 7.1 / 5, "is_weight_max": 1.8,
          "is_weight_min": 1.0, "is_truncated": 2 / 5}
  for got in (whole, merged):
    for key, value in want.items():
      testing.assert_close(got[key], value, rtol=1e-5)
  assert {"ratio_mean", "clip_fraction", "approx_kl"} <= set(whole)


# ----------------------------------------------------------------- F-TIS


def test_f_tis_vector():
  """VARIANTS 2.4 (against pi): w = [2, .8, 1.5], geometric mean 1.44225."""
  np.testing.assert_allclose(np.exp(np.mean(np.log(DEC_PI / DEC_MU))),
                             1.442250, atol=1e-6)
  loss, g = per_token(objectives.f_tis, row(np.log(DEC_PI)),
                      row(np.log(DEC_PROX)), row(DEC_A), jnp.ones((1, 3)),
                      sampler_logp=row(np.log(DEC_MU)))
  testing.assert_close(loss, 1.386294 - 1.287550 + 0.158041, atol=2e-6)
  testing.assert_close(g, row([-2.0, 0.8, -1.5]), rtol=1e-5)


def test_f_tis_reports_its_truncated_weight():
  """pi / mu = [2.5, .8, 1.5] at C 2: is_weight [2, .8, 1.5], one token of
  three truncated."""
  _, aux = objectives.f_tis(row(np.log(DEC_PI)), row(np.log(DEC_PROX)),
                            row(DEC_A), jnp.ones((1, 3)),
                            sampler_logp=row(np.log(DEC_MU)))
  got = measures.values(aux.measures())
  testing.assert_close(
      (got["is_weight_mean"], got["is_weight_max"], got["is_truncated"]),
      (4.3 / 3, 2.0, 1 / 3), rtol=1e-5)


@pytest.mark.parametrize("ratios,filt,kept", [
    ([1.5, 1.5, 1.5], "sequence_mean", [1, 1, 1]),  # mean 1.5
    ([1.5, 1.5, 1.5], "sequence_sum", [0, 0, 0]),   # product 3.375
    ([3.0, 1.5, 0.4], "token", [0, 1, 0]),
    ([3.0, 1.5, 0.4], "sequence_mean", [1, 1, 1]),  # mean 1.217
    ([3.0, 3.0, 1.0], "sequence_mean", [0, 0, 0]),  # mean 2.08
])
def test_f_tis_filters(ratios, filt, kept):
  """The filter keeps a row (or token) whose statistic of pi / mu lies in
  [0.5, 2]; a dropped one has no loss, no gradient, and leaves the token
  mean's denominator (the reported count stays the mask's, the sum is
  scaled by mask count / kept count)."""
  ratios, kept = np.array(ratios), np.array(kept, float)
  mu = row(np.log([0.1, 0.2, 0.3]))
  logp = mu + jnp.log(row(ratios))
  adv, mask = row([1.0, -1.0, 2.0]), jnp.ones((1, 3))
  loss, g = value_and_grad(objectives.f_tis, logp, logp, adv, mask,
                           sampler_logp=mu, filter=filt)
  w = np.minimum(ratios, 2.0)
  a = np.array([1.0, -1.0, 2.0])
  lp = np.log([0.1, 0.2, 0.3]) + np.log(ratios)
  # A dropped token leaves the denominator too (VARIANTS.md 2.4).
  denominator = max(kept.sum(), 1.0)
  testing.assert_close(loss, (-w * a * lp * kept).sum() / denominator,
                       rtol=1e-5, atol=1e-6)
  testing.assert_close(g, row(-w * a * kept / denominator), rtol=1e-5,
                       atol=1e-7)
  _, aux = objectives.f_tis(logp, logp, adv, mask, sampler_logp=mu,
                            filter=filt)
  testing.assert_close(aux.loss_count, 3.0)
  testing.assert_close(aux.clip_fraction,
                       np.mean((ratios > 2.0) | (kept == 0)))


def test_f_tis_without_sampler_is_truncated_is_against_pi_old():
  logp, old, _, adv, mask = off_policy(spread=0.3)
  r = np.exp(np.asarray(logp - old))
  keep_rows = np.exp((np.log(r) * np.asarray(mask)).sum(-1)
                     / np.asarray(mask).sum(-1))
  keep = ((keep_rows >= 0.5) & (keep_rows <= 2.0))[:, None]
  want = -np.minimum(r, 2.0) * np.asarray(adv)[:, None] * keep
  g = grads("f_tis", logp, old, adv, mask)
  kept = np.broadcast_to(keep, want.shape) * np.asarray(mask)
  testing.assert_close(g, jnp.asarray(want * np.asarray(mask) / kept.sum(),
                                      jnp.float32), rtol=1e-5, atol=1e-7)


def test_f_tis_bad_options():
  with pytest.raises(ValueError, match="filter"):
    objectives.make("f_tis", filter="row")
  with pytest.raises(ValueError, match="band_low"):
    objectives.make("f_tis", band_low=1.5)


# ---------------------------------------------------- SPO (cfpo alias)


def test_spo_simple_is_cfpo_registered_again():
  assert objectives.get("spo_simple") is objectives.get("cfpo")
  assert objectives.spo_simple is objectives.cfpo
  assert objectives.OBJECTIVES.entry("spo_simple").meta.paper == (
      "2401.16025")


def test_spo_simple_vector():
  """VARIANTS 2.6: r = [.9, 1, 1.3], A = [1, -1, 1]; the last token is
  pulled back toward 1.2."""
  old = row([-1.0] * 3)
  loss, g = per_token(objectives.spo_simple, old + jnp.log(row([.9, 1, 1.3])),
                      old, row([1.0, -1.0, 1.0]), jnp.ones((1, 3)))
  testing.assert_close(loss, -0.875 + 1.0 - 1.075, rtol=1e-5)
  testing.assert_close(g, row([-1.35, 1.0, 0.65]), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- LUSPO


def test_luspo_is_gspo_times_length_by_hand():
  """Rows of 3 and 1 tokens and an all-padding row: loss = mean over rows
  with tokens of n_i L_i (TRL's (L_i * n_i).mean()), gradient -A s_i / rows
  for unclipped rows, 0 for clipped ones."""
  x = np.array([[1e-3, -2e-3, 4e-3], [0.3, 0.0, 0.0], [0.0, 0.0, 0.0]])
  mask = np.array([[1, 1, 1], [1, 0, 0], [0, 0, 0]], float)
  adv = np.array([1.0, 1.0, -1.0])
  old = np.full((3, 3), -1.5)
  n = mask.sum(-1)
  s = np.exp((x * mask).sum(-1) / np.maximum(n, 1))
  lo, hi = 2e-3, 2.5e-3
  terms = -np.minimum(s * adv, np.clip(s, 1 - lo, 1 + hi) * adv)
  want = (n * terms)[:2].mean()
  clipped = (adv > 0) & (s > 1 + hi)
  want_grad = np.where(clipped, 0.0, -adv * s)[:, None] * mask / 2
  args = (jnp.asarray(old + x, jnp.float32), jnp.asarray(old, jnp.float32),
          jnp.asarray(adv, jnp.float32), jnp.asarray(mask, jnp.float32))
  loss, g = value_and_grad(objectives.luspo, *args)
  testing.assert_close(loss, want, rtol=1e-5)
  testing.assert_close(g, jnp.asarray(want_grad, jnp.float32), rtol=1e-4,
                       atol=1e-7)
  assert clipped.tolist() == [False, True, False]


def test_luspo_equals_length_times_gspo_for_equal_lengths():
  logp, old, _, adv, _ = off_policy(t=5)
  mask = jnp.ones_like(logp)
  band = dict(clip_low=0.2, clip_high=0.2)
  testing.assert_close(objectives.luspo(logp, old, adv, mask, **band)[0],
                       5.0 * objectives.gspo(logp, old, adv, mask, **band)[0],
                       rtol=1e-5)


# ---------------------------------------------------------------- VESPO


def np_phi(w, a, k_pos=2.0, lam_pos=3.0, k_neg=3.0, lam_neg=2.0):
  k, lam = (k_pos, lam_pos) if a >= 0 else (k_neg, lam_neg)
  return w ** k * np.exp(lam * (1.0 - w))


def test_vespo_weight_of_the_product_ratio_by_hand():
  """Rows x = [.1, .2] (A = 1) and [-.3, 0, .05] (A = -2): W is the product
  of the token ratios; token mean over 5 tokens."""
  x = np.array([[0.1, 0.2, 0.0], [-0.3, 0.0, 0.05]])
  mask = np.array([[1, 1, 0], [1, 1, 1]], float)
  adv = np.array([1.0, -2.0])
  old = np.array([[-1.0, -0.5, -2.0], [-0.7, -1.2, -0.1]])
  w = np.exp((x * mask).sum(-1))
  phi = np.array([np_phi(w[i], adv[i]) for i in range(2)])
  lp = old + x
  want = (-phi[:, None] * adv[:, None] * lp * mask).sum() / mask.sum()
  want_grad = -phi[:, None] * adv[:, None] * mask / mask.sum()
  args = (jnp.asarray(lp, jnp.float32), jnp.asarray(old, jnp.float32),
          jnp.asarray(adv, jnp.float32), jnp.asarray(mask, jnp.float32))
  loss, g = value_and_grad(objectives.vespo, *args)
  testing.assert_close(loss, want, rtol=1e-5)
  testing.assert_close(g, jnp.asarray(want_grad, jnp.float32), rtol=1e-5)
  _, aux = objectives.vespo(*args)
  # Each row's W once per real token.
  testing.assert_close(aux.ratio.mean, (w * mask.sum(-1)).sum() / 5,
                       rtol=1e-5)
  # phi(e^.3) = 0.638 for A > 0 and phi(e^-.25) = 0.716 for A < 0: no
  # token's gradient is halved.
  testing.assert_close(aux.clip_fraction, 0.0)
  # The mean ratio would give another weight: W is the product.
  assert abs(np_phi(np.exp(0.15), 1.0) - phi[0]) > 0.1


def test_vespo_folds_the_truncated_sampler_correction_into_w():
  """log W += sum_t min(old - sampler, log 3): exp(old - sampler) = 5 is
  truncated at 3, 0.5 is kept."""
  old = row([-1.0, -2.0])
  logp = old + row([0.1, -0.05])
  sampler = old - row([math.log(5.0), math.log(0.5)])
  w = math.exp(0.1 - 0.05) * 3.0 * 0.5
  for cap, want_w in ((3.0, w), (None, math.exp(0.05) * 5.0 * 0.5)):
    _, g = value_and_grad(objectives.vespo, logp, old, jnp.ones((1,)),
                          jnp.ones((1, 2)), sampler_logp=sampler, is_cap=cap)
    testing.assert_close(g, row([-np_phi(want_w, 1.0) / 2] * 2), rtol=1e-5)


def test_vespo_far_off_policy_is_finite_and_silenced():
  """W clamps to [1e-8, e^20]: phi is 0, never NaN, at both ends."""
  old = row([-1.0] * 4)
  for shift in (30.0, -30.0):
    loss, g = value_and_grad(objectives.vespo, old + shift / 4, old,
                             jnp.ones((1,)), jnp.ones((1, 4)))
    testing.assert_finite((loss, g))
    testing.assert_close(g, jnp.zeros((1, 4)), atol=1e-6)


# ------------------------------------------------------ ppo_clip delta


def test_ppo_clip_delta_caps_the_unclipped_ratio():
  """INTELLECT-2: A < 0 at r = 3 with delta = 2 gives loss 2|A| and no
  gradient (3|A| and gradient 3|A| without); A > 0 is unchanged."""
  old = row([-1.0, -1.0])
  logp = old + jnp.log(row([3.0, 3.0]))
  adv = row([-1.0, 1.0])
  loss, g = per_token(objectives.ppo_clip, logp, old, adv, jnp.ones((1, 2)),
                      delta=2.0)
  testing.assert_close(loss, 2.0 - 1.2, rtol=1e-6)
  testing.assert_close(g, jnp.zeros((1, 2)))
  loss, g = per_token(objectives.ppo_clip, logp, old, adv, jnp.ones((1, 2)))
  testing.assert_close(loss, 3.0 - 1.2, rtol=1e-6)
  testing.assert_close(g, row([3.0, 0.0]), rtol=1e-6)
  _, aux = objectives.ppo_clip(logp, old, adv, jnp.ones((1, 2)), delta=2.0)
  testing.assert_close(aux.clip_fraction, 1.0)


def test_ppo_clip_delta_with_a_dual_clip_keeps_the_smaller_cap():
  """A < 0 at r = 3: delta 2 under dual clip 2.5 gives loss 2|A|, delta
  2.5 over dual clip 2 gives 2|A| too; off policy delta moves the
  gradient away from the plain clip's."""
  old = row([-1.0])
  logp = old + jnp.log(row([3.0]))
  adv, mask = row([-1.0]), jnp.ones((1, 1))
  for delta, dual in ((2.0, 2.5), (2.5, 2.0)):
    loss, _ = per_token(objectives.ppo_clip, logp, old, adv, mask,
                        delta=delta, dual_clip=dual)
    testing.assert_close(loss, 2.0, rtol=1e-6)
  logp, old, _, adv, mask = off_policy(spread=1.0)
  plain = value_and_grad(objectives.ppo_clip, logp, old, adv, mask)
  capped = value_and_grad(objectives.ppo_clip, logp, old, adv, mask,
                          delta=1.5)
  assert float(jnp.abs(capped[1] - plain[1]).max()) > 1e-3


def test_ppo_clip_delta_below_the_band_is_an_error():
  with pytest.raises(ValueError, match="delta"):
    objectives.make("ppo_clip", delta=1.1)
  with pytest.raises(ValueError, match="delta"):
    objectives.make("ppo_clip", delta=0.9)


# ----------------------------------------------------------------- LLDS


def llds(logp, mask, **kwargs):
  """The pure function (token_mean unless given)."""
  kwargs.setdefault("aggregation", "token_mean")
  return regularisers.llds(logp, mask, **kwargs)


def test_llds_vector_r_gate():
  """VARIANTS 2.5: gates [1, 0, 0]; L = 0.2 * 0.25 / 9."""
  d = jnp.array([[.2, -.1, .05], [-.3, .1, 0.], [.4, .4, .4]])
  logp = jnp.full((3, 3), -1.0)
  for gate in ("response", "action"):  # single-chunk rows: the same
    sc, rec = llds(logp, jnp.ones((3, 3)),
                   advantages=jnp.array([1.0, 0.5, -1.0]), old_logp=logp + d,
                   gate=gate)
    testing.assert_close(sc.total / sc.count, 0.005556, atol=1e-6)
    testing.assert_close(rec["llds_gated"].value(), 3 / 9)
    grad = jax.grad(lambda lp: llds(
        lp, jnp.ones((3, 3)), advantages=jnp.array([1.0, 0.5, -1.0]),
        old_logp=logp + d, gate=gate)[0].total)(logp)
    want = np.zeros((3, 3))
    want[0, [0, 2]] = -0.2  # d > 0 in the gated row: push logp back up
    testing.assert_close(grad, jnp.asarray(want, jnp.float32))


def test_llds_a_gate_acts_per_chunk():
  """d = [.3, -.1, (masked), -.4, .1]: chunk sums .2 (active) and -.3; the
  A-gate penalises token 0 by .3, the R-gate (sum -.1) nothing."""
  d = jnp.array([[.3, -.1, 9.0, -.4, .1]])
  mask = jnp.array([[1, 1, 0, 1, 1.]])
  logp = jnp.full((1, 5), -1.0)
  kw = dict(advantages=jnp.array([1.0]), old_logp=logp + d,
            aggregation="seq_mean_token_sum")
  testing.assert_close(llds(logp, mask, **kw)[0].total, 0.2 * 0.3, rtol=1e-5)
  testing.assert_close(llds(logp, mask, gate="response", **kw)[0].total, 0.0)


def test_llds_chunk_sums_match_a_loop():
  rng = np.random.default_rng(0)
  values = rng.normal(size=(5, 11))
  mask = (rng.random((5, 11)) > 0.35).astype(float)
  want = np.zeros_like(values)
  for i in range(5):
    t = 0
    while t < 11:
      if mask[i, t] == 0:
        t += 1
        continue
      end = t
      while end < 11 and mask[i, end] > 0:
        end += 1
      want[i, t:end] = values[i, t:end].sum()
      t = end
  got = regularisers._segmented_sums(  # pylint: disable=protected-access
      jnp.asarray(values, jnp.float32), jnp.asarray(mask, jnp.float32) > 0)
  testing.assert_close(got, jnp.asarray(want, jnp.float32), rtol=1e-5,
                       atol=1e-6)


def test_llds_is_zero_on_policy_and_spares_negative_advantages():
  logp, old, _, adv, mask = off_policy()
  for old_logp in (None, logp):
    sc, _ = llds(logp, mask, advantages=adv, old_logp=old_logp)
    testing.assert_close(sc.total, 0.0)
    testing.assert_close(jax.grad(lambda lp, o=old_logp: llds(
        lp, mask, advantages=adv, old_logp=o)[0].total)(logp),
                         jnp.zeros_like(logp))
  # Off policy it acts, on A >= 0 rows only (A = 0 included).
  adv = jnp.array([1.0, 0.0, -1.0, -0.5])
  dropped = logp - 0.2  # every token's likelihood fell since the rollout
  g = jax.grad(lambda lp: llds(lp, mask, advantages=adv,
                               old_logp=lp + 0.2)[0].total)(dropped)
  per_row = np.abs(np.asarray(g)).sum(-1)
  assert per_row[0] > 0 and per_row[1] > 0
  assert per_row[2] == 0 and per_row[3] == 0


def test_llds_through_make_and_bad_gate():
  reg = regularisers.make("llds", aggregation="seq_mean_token_mean")
  assert reg.reads == ("old_logp", "advantages")
  logp, old, _, adv, mask = off_policy()
  sc, records = reg.loss((), logp, mask, old_logp=old,
                         advantages=jnp.abs(adv))
  testing.assert_close(sc.count, reg.count(mask))
  assert float(sc.total) > 0 and set(records) == {"llds", "llds_gated"}
  # A bad option value fails at make, before any trace.
  with pytest.raises(ValueError, match="gate"):
    regularisers.make("llds", gate="token", aggregation="token_mean")
  with pytest.raises(ValueError, match="lam"):
    regularisers.make("llds", lam=-0.1, aggregation="token_mean")


@pytest.mark.parametrize("gate,want", [("action", 0.2 * 0.5),
                                       ("response", 0.0)])
def test_llds_is_built_from_the_config(gate, want):
  """configs/llds.py: lambda 0.2, a token mean over all response tokens
  (the authors', whatever the objective's aggregation). One row of two
  chunks, d = old - logp = [.5, -.2 | .1, -.5], A = 1: the A-gate opens the
  first chunk (sum .3 > 0), whose penalty is [.5, 0]: a sum of 0.2 * .5
  over 4 tokens; the R-gate sees the row's sum -.1 and stays shut."""
  config = importlib.import_module("configs.llds").get_config("tiny")
  config.llds.gate = gate
  reg = train.make_components(config)["llds"]
  mask = row([1, 1, 0, 1, 1])
  old = jnp.full((1, 5), -1.0)
  logp = old - row([0.5, -0.2, 0.0, 0.1, -0.5])
  sc, _ = reg.loss((), logp, mask, old_logp=old, advantages=jnp.ones(1))
  testing.assert_close((sc.total, sc.count), (want, 4.0), rtol=1e-6,
                       atol=1e-8)


def test_llds_config_fields_default_off_and_are_checked():
  base = config_lib.get_base_config()
  assert "llds" not in train.make_components(config_lib.use_tiny(base))
  del base["llds"]  # a checkpoint's config from before the field
  assert config_lib.with_defaults(base).llds.coef == 0.0
  on_policy = importlib.import_module("configs.llds").get_config("tiny")
  on_policy.train.num_minibatches = 1
  with pytest.raises(ValueError, match=(
      r"config\.llds\.coef: 0\.2 is set but each batch feeds one optimiser "
      r"step.*num_minibatches=4")):
    train.validate(on_policy)


def test_the_llds_config_acts_in_a_real_off_policy_step():
  """configs/llds.py:tiny, one rollout in its 4 minibatches. The tiny model
  earns no reward (every A = 0: nothing would move), so every advantage is
  set to +1 (every token preserving). The first minibatch is on the
  rollout's params, so its penalty is float noise; after it the
  likelihood of some unseen completions has fallen and llds acts."""
  config = importlib.import_module("configs.llds").get_config("tiny")
  config.kl.beta = 0.0
  config.rewards.workers = 0
  run = train.build(config)
  state = run.state
  batch, _, _ = testing.rollout_step(run, 0)
  batch = batch._replace(advantages=jnp.ones_like(batch.advantages))
  found = []
  for part in update_lib.minibatches(batch, config.train.num_minibatches):
    state, records = run.update_fn(state, part)
    found.append({k: float(v) for k, v in measures.values(records).items()
                  if k.startswith("llds")})
  assert found[0]["llds"] < 1e-5, found
  assert max(f["llds"] for f in found[1:]) > 1e-3, found
  assert max(f["llds_gated"] for f in found[1:]) > 0.0, found


# ------------------------------- token weights on the sequence-ratio family

# Three rows of 3, 1 and 2 tokens and an all-padding row; log-ratios inside
# a 0.2 band except row 1's (e^0.3 = 1.35).
SEQ_X = np.array([[0.1, -0.2, 0.05], [0.3, 0.0, 0.0], [-0.45, 0.2, 0.0],
                  [0.0, 0.0, 0.0]])
SEQ_MASK = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0], [0, 0, 0]], float)
SEQ_ADV = np.array([1.0, -1.0, 0.5, 1.0])
SEQ_OLD = np.full((4, 3), -1.2)
# A sequence correction's weights: one per row, on each of its tokens.
SEQ_ROW_W = np.array([0.5, 2.0, 0.0, 3.0])
# A token correction's weights.
SEQ_TOKEN_W = np.array([[0.5, 1.0, 2.0], [0.0, 0, 0], [1.5, 0.0, 0],
                        [0, 0, 0]])


def seq_args():
  return tuple(jnp.asarray(a, jnp.float32) for a in (
      SEQ_OLD + SEQ_X, SEQ_OLD, SEQ_ADV, SEQ_MASK))


def np_sequence_ratio():
  n = SEQ_MASK.sum(-1)
  return np.exp((SEQ_X * SEQ_MASK).sum(-1) / np.maximum(n, 1)), n


def np_ppo_term(ratio, adv, band=0.2):
  return -np.minimum(ratio * adv, np.clip(ratio, 1 - band, 1 + band) * adv)


def test_gspo_takes_one_weight_per_row():
  """loss = sum_i w_i L_i / 3 rows with tokens (the count unchanged);
  gradient w_i * (-A s_i / n_i) / 3 on unclipped rows, 0 on row 2 (w 0)."""
  s, n = np_sequence_ratio()
  terms = np_ppo_term(s, SEQ_ADV)
  want = (SEQ_ROW_W * terms)[:3].sum() / 3
  unclipped = s * SEQ_ADV <= np.clip(s, 0.8, 1.2) * SEQ_ADV
  want_grad = (SEQ_ROW_W * np.where(unclipped, -SEQ_ADV * s, 0.0)
               / np.maximum(n, 1))[:, None] * SEQ_MASK / 3
  weights = jnp.asarray(SEQ_ROW_W[:, None] * SEQ_MASK, jnp.float32)
  band = dict(clip_low=0.2, clip_high=0.2)
  (loss, aux), g = jax.value_and_grad(
      lambda lp: objectives.gspo(lp, *seq_args()[1:], token_weights=weights,
                                 **band), has_aux=True)(seq_args()[0])
  testing.assert_close(loss, want, rtol=1e-5)
  testing.assert_close(aux.loss_count, 3.0)
  testing.assert_close(g, jnp.asarray(want_grad, jnp.float32), rtol=1e-5,
                       atol=1e-7)
  assert objectives.make("gspo").weighting == "row"


def test_gmpo_takes_one_weight_per_row():
  """GMPO's L_i = -A_i exp(mean_t x'), x' the one-sided clip at 0.4 (row
  2's -0.45 stays, A >= 0 clips only from above), weighted per row."""
  n = SEQ_MASK.sum(-1)
  x = np.where((SEQ_ADV >= 0)[:, None], np.minimum(SEQ_X, 0.4),
               np.maximum(SEQ_X, -0.4))
  terms = -SEQ_ADV * np.exp((x * SEQ_MASK).sum(-1) / np.maximum(n, 1))
  want = (SEQ_ROW_W * terms)[:3].sum() / 3
  weights = jnp.asarray(SEQ_ROW_W[:, None] * SEQ_MASK, jnp.float32)
  loss, aux = objectives.gmpo(*seq_args(), token_weights=weights)
  testing.assert_close(loss, want, rtol=1e-5)
  testing.assert_close(aux.loss_count, 3.0)
  assert objectives.make("gmpo").weighting == "row"


@pytest.mark.parametrize("name,aggregation", [
    ("gspo_token", "seq_mean_token_mean"), ("luspo", "seq_mean_token_sum")])
def test_gspo_token_and_luspo_weigh_each_token(name, aggregation):
  """Each token's term (the sequence ratio's value) times its own weight:
  sum_i sum_t w_t L_i / n_i / 3 rows (GSPO-token), sum_i sum_t w_t L_i / 3
  (LUSPO); the ratio statistics stay the sequence ratio's, over rows."""
  s, n = np_sequence_ratio()
  terms = np_ppo_term(s, SEQ_ADV)[:, None] * SEQ_TOKEN_W * SEQ_MASK
  per_row = terms.sum(-1)
  if aggregation == "seq_mean_token_mean":
    per_row = per_row / np.maximum(n, 1)
  band = dict(clip_low=0.2, clip_high=0.2)
  loss, aux = objectives.get(name)(
      *seq_args(), token_weights=jnp.asarray(SEQ_TOKEN_W, jnp.float32),
      **band)
  testing.assert_close(loss, per_row[:3].sum() / 3, rtol=1e-5)
  testing.assert_close(aux.ratio_mean, s[:3].mean(), rtol=1e-5)
  assert objectives.make(name).weighting == "token"


def test_vespo_weighs_each_token():
  """-w_t phi(W_i) A_i logp_t over the 6 real tokens (token mean), W_i the
  product ratio exp(sum_t x_t), no sampler."""
  w_seq = np.exp((SEQ_X * SEQ_MASK).sum(-1))
  phi = np.array([np_phi(w, a) for w, a in zip(w_seq, SEQ_ADV)])
  logp = (SEQ_OLD + SEQ_X) * SEQ_MASK
  want = (-SEQ_TOKEN_W * (phi * SEQ_ADV)[:, None] * logp).sum() / 6
  loss, aux = objectives.vespo(
      *seq_args(), token_weights=jnp.asarray(SEQ_TOKEN_W, jnp.float32))
  testing.assert_close(loss, want, rtol=1e-5)
  testing.assert_close(aux.loss_count, 6.0)


def test_which_objectives_take_weights_and_at_what_level():
  """From the signature (a token_weights keyword) and the level: every
  objective but r2vpo; gspo and gmpo one weight per row."""
  for name in objectives.names():
    want = {"r2vpo": None, "gspo": "row", "gmpo": "row"}.get(name, "token")
    assert objectives.make(name).weighting == want, name
  for name in ("gspo", "gmpo"):
    for ok in ("tis_sequence", "mis_sequence", "opsm"):
      corrections.check_compatible(objectives.make(name),
                                   [corrections.make(ok)])
    with pytest.raises(ValueError, match=f"objective '{name}' is sequence"):
      corrections.check_compatible(objectives.make(name),
                                   [corrections.make("tis")])
  for name in ("gspo_token", "luspo"):
    corrections.check_compatible(
        objectives.make(name), [corrections.make(c) for c in (
            "tis", "tis_sequence", "top_entropy", "opsm")])


def test_a_token_weight_of_another_shape_names_it():
  logp, old, adv, mask = seq_args()
  for name in ("gspo", "gspo_token", "ppo_clip"):
    with pytest.raises(ValueError, match=r"token_weights must be \[N, T\]"):
      objectives.get(name)(logp, old, adv, mask,
                           token_weights=jnp.ones((4, 2)))


# ----------------------------------------- off policy: the variant shows


@pytest.mark.parametrize("name", WAVE2)
def test_off_policy_gradient_differs_from_reinforce_and_ppo_clip(name):
  """With logp != old_logp (and a sampler off pi_old) each variant's
  gradient is its own: not REINFORCE's and not ppo_clip's."""
  logp, old, sampler, adv, mask = off_policy(spread=0.6)
  kw = {"sampler_logp": sampler} if name in READS_SAMPLER else {}
  aggregation = objectives.make(name).aggregation
  mine = grads(name, logp, old, adv, mask, **kw)
  for other in ("reinforce", "ppo_clip"):
    theirs = grads(other, logp, old, adv, mask, aggregation=aggregation)
    assert float(jnp.abs(mine - theirs).max()) > 1e-3, other


@pytest.mark.parametrize("name", READS_SAMPLER)
def test_the_sampler_log_probs_change_the_gradient(name):
  logp, old, sampler, adv, mask = off_policy()
  with_sampler = grads(name, logp, old, adv, mask, sampler_logp=sampler)
  without = grads(name, logp, old, adv, mask)
  assert float(jnp.abs(with_sampler - without).max()) > 1e-3
  testing.assert_close(grads(name, logp, old, adv, mask, sampler_logp=old),
                       without, rtol=1e-6, atol=1e-7)


# ------------------------------------------- edge cases with the sampler


@pytest.mark.parametrize("name", READS_SAMPLER)
def test_sampler_padding_is_ignored_and_rows_split_exactly(name):
  """NaN / -inf under padding in every array (sampler_logp included) change
  nothing; an all-padding row has no gradient; two row halves, each
  loss_sum divided by the whole batch's count, give the one-shot loss."""
  logp, old, sampler, adv, mask = off_policy(n=6)
  mask = mask.at[2].set(0.0)
  fn = objectives.get(name)
  n = logp.shape[0]
  pad = lambda x, v: jnp.concatenate([x, jnp.full((n, 2), v)], axis=1)
  loss, aux = fn(logp, old, adv, mask, sampler_logp=sampler)
  padded = fn(pad(logp, jnp.nan), pad(old, -jnp.inf), adv, pad(mask, 0.0),
              sampler_logp=pad(sampler, -jnp.inf))
  testing.assert_close(padded, (loss, aux))
  g = jax.grad(lambda lp: fn(lp, pad(old, -jnp.inf), adv, pad(mask, 0.0),
                             sampler_logp=pad(sampler, -jnp.inf))[0])(
                                 pad(logp, jnp.nan))
  testing.assert_finite(g)
  testing.assert_close(g[:, -2:], jnp.zeros((n, 2)))
  testing.assert_close(g[2], jnp.zeros(g.shape[1]))
  objective = objectives.make(name)
  count = objective.count(mask)
  whole = {}  # the whole batch's pre-pass statistics (F-TIS's kept count)
  if objective.prepass is not None:
    whole = objectives.OBJECTIVES.entry(name).meta.prepass.loss_kwargs(
        objective.prepass(logp, old, adv, mask, sampler_logp=sampler))
  halves = [fn(logp[s], old[s], adv[s], mask[s], sampler_logp=sampler[s],
               **whole)[1] for s in (slice(0, 3), slice(3, 6))]
  testing.assert_close(sum(h.loss_sum for h in halves) / count, loss,
                       rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", WAVE2)
def test_zero_advantages_and_empty_batch(name):
  logp, old, sampler, adv, mask = off_policy()
  kw = {"sampler_logp": sampler} if name in READS_SAMPLER else {}
  fn = objectives.get(name)
  zero = jnp.zeros_like(adv)
  testing.assert_close(fn(logp, old, zero, mask, **kw)[0], 0.0)
  testing.assert_close(grads(name, logp, old, zero, mask, **kw),
                       jnp.zeros_like(logp))
  loss, aux = fn(logp, old, adv, jnp.zeros_like(mask), **kw)
  testing.assert_close((loss, aux.clip_fraction), (0.0, 0.0))


def test_bad_sampler_shape_names_it():
  logp, old, sampler, adv, mask = off_policy()
  for name in READS_SAMPLER:
    with pytest.raises(ValueError, match="sampler_logp"):
      objectives.get(name)(logp, old, adv, mask, sampler_logp=sampler[:, :-1])


def test_the_reading_objectives_declare_sampler_logp():
  for name in WAVE2:
    reads = objectives.make(name).reads
    assert reads == (("sampler_logp",) if name in READS_SAMPLER else ())


def test_an_option_naming_an_array_the_trainer_passes_is_refused():
  """`sampler_logp` (a read array) and `token_weights` come from the
  trainer at every step: a config setting either is an error naming it."""
  with pytest.raises(ValueError, match=(
      r"config\.objective\.kwargs\.sampler_logp: objective 'decoupled_ppo' "
      r"receives the array 'sampler_logp' from the trainer at every step "
      r"\(the batch\), so it is not an option; remove it")):
    objectives.check_options("decoupled_ppo", {"sampler_logp": 0.0},
                             field="config.objective.kwargs")
  with pytest.raises(ValueError, match=r"'token_weights'.*config\.corrections"):
    objectives.make("ppo_clip", token_weights=1.0)
  with pytest.raises(ValueError, match="'sampler_logp' from the trainer"):
    objectives.make("dppo", anchor="old", sampler_logp=None)
  # Neither is offered as an option either.
  with pytest.raises(ValueError, match="takes no option 'eps'") as error:
    objectives.make("f_tis", eps=0.1)
  assert "sampler_logp" not in str(error.value)
  assert "token_weights" not in str(error.value)


# --------------------------------------------------------------- configs

CONFIGS = {"ce_gppo": "ce_gppo", "dppo": "dppo",
           "decoupled_ppo": "decoupled_ppo", "f_tis": "f_tis",
           "spo_simple": "spo_simple", "luspo": "luspo", "vespo": "vespo"}


@pytest.mark.parametrize("config_name,objective", sorted(CONFIGS.items()))
def test_configs_train_off_policy_with_their_objective(config_name,
                                                       objective):
  for arg in (None, "tiny"):
    c = importlib.import_module(f"configs.{config_name}").get_config(arg)
    assert c.objective.name == objective
    assert c.train.num_iterations * c.train.num_minibatches > 1
    objectives.make(c.objective.name, **c.objective.kwargs)
