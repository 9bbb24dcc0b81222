"""Tests for grpo_jax.objectives: hand-computed values, identities, edge cases.

The laws every objective obeys (finite at extremes, masked equals dropped,
microbatched equals one shot, the on-policy identity, ...) run on every
registered entry in tests/contracts/test_objectives.py.

Expected values are written by hand or with the plain numpy formulas below,
never taken from the functions under test.
"""

import functools
import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import test_util

from grpo_jax import aggregation
from grpo_jax import objectives
from grpo_jax import testing

ALL = objectives.names()


def raw(name):
  """The registered function; one that draws tokens at random (Clip-Cov)
  gets a fixed key, as its objective state would supply one."""
  fn = objectives.get(name)
  if "key" in inspect.signature(fn).parameters:
    return functools.partial(fn, key=jax.random.PRNGKey(0))
  return fn
TOKEN_LEVEL = [n for n in ALL
               if objectives.OBJECTIVES.entry(n).meta.level == "token"]


# ------------------------------------------------------------ test helpers


def np_aggregate(values, mask, mode, horizon=None):
  """Plain numpy reference of the four aggregation modes."""
  values = np.where(mask > 0, values, 0.0)
  lengths = mask.sum(-1)
  rows = lengths > 0
  if mode == "token_mean":
    return values.sum() / mask.sum()
  if mode == "seq_mean_token_mean":
    return np.mean(values.sum(-1)[rows] / lengths[rows])
  if mode == "seq_mean_token_sum":
    return np.mean(values.sum(-1)[rows])
  return values.sum() / (values.shape[0] * horizon)


def one_token(name, ratio, advantage, **hparams):
  """Loss, d loss / d logp and aux for a single token at the given ratio."""
  fn = raw(name)
  old = jnp.array([[-1.0]])
  logp = old + math.log(ratio)
  mask = jnp.ones((1, 1))
  adv = jnp.array([advantage])
  loss, aux = fn(logp, old, adv, mask, **hparams)
  grad = jax.grad(lambda lp: fn(lp, old, adv, mask, **hparams)[0])(logp)
  return float(loss), float(grad[0, 0]), aux


def grad_logp(fn, logp, old, adv, mask, **hparams):
  return jax.grad(lambda lp: fn(lp, old, adv, mask, **hparams)[0])(logp)


def batch(seed=0, n=4, t=5, spread=0.3):
  """A small off-policy batch: logp, old_logp, advantages [N], mask."""
  k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(seed), 4)
  logp = testing.random_logps(k1, (n, t))
  old = logp + spread * jax.random.normal(k2, (n, t))
  adv = jax.random.normal(k3, (n,))
  mask = testing.random_mask(k4, (n, t))
  return logp, old, adv, mask


def copy(x):
  """A separate array with the same values (not the same object)."""
  return jnp.array(np.array(x))


# --------------------------------------------------------------- ppo_clip

# (ratio, A, expected loss, expected d loss/d logp, clipped?) with the band
# [0.8, 1.2]: loss = -min(r*A, clip(r)*A), gradient -A*r when unclipped.
PPO_CASES = [
    (0.5, 2.0, -1.0, -1.0, False),   # below band, A>0: r*A is the min
    (1.1, 2.0, -2.2, -2.2, False),   # inside
    (1.5, 2.0, -2.4, 0.0, True),     # above band, A>0: clipped
    (0.5, -2.0, 1.6, 0.0, True),     # below band, A<0: clipped
    (1.1, -2.0, 2.2, 2.2, False),    # inside
    (1.5, -2.0, 3.0, 3.0, False),    # above band, A<0: corrective gradient
]


@pytest.mark.parametrize("ratio,adv,want_loss,want_grad,clipped", PPO_CASES)
def test_ppo_clip_band_both_signs(ratio, adv, want_loss, want_grad, clipped):
  loss, grad, aux = one_token("ppo_clip", ratio, adv)
  testing.assert_close(loss, want_loss, rtol=1e-5)
  testing.assert_close(grad, want_grad, rtol=1e-5)
  assert (grad != 0.0) == (not clipped)
  assert float(aux.clip_fraction) == float(clipped)


@pytest.mark.parametrize("ratio,adv,want_loss,want_grad,capped", [
    (5.0, -2.0, 6.0, 0.0, True),     # -min(-10, -2.4) = 10, capped at -c*A=6
    (2.0, -2.0, 4.0, 4.0, False),    # 4 < 6: untouched, gradient -A*r
    (5.0, 2.0, -2.4, 0.0, True),     # A>0: dual clip does not apply
])
def test_ppo_clip_dual_clip(ratio, adv, want_loss, want_grad, capped):
  loss, grad, aux = one_token("ppo_clip", ratio, adv, dual_clip=3.0)
  testing.assert_close(loss, want_loss, rtol=1e-5)
  testing.assert_close(grad, want_grad, rtol=1e-5)
  assert float(aux.clip_fraction) == float(capped)


def test_ppo_clip_dual_clip_must_exceed_one():
  with pytest.raises(ValueError, match="dual_clip"):
    one_token("ppo_clip", 1.0, 1.0, dual_clip=1.0)


def test_dapo_asymmetric_band():
  # r = 1.25, A > 0: inside DAPO's [0.8, 1.28], clipped by the symmetric band.
  loss, grad, _ = one_token("ppo_clip", 1.25, 1.0, clip_high=0.28)
  testing.assert_close((loss, grad), (-1.25, -1.25), rtol=1e-5)
  loss, grad, _ = one_token("ppo_clip", 1.25, 1.0)
  testing.assert_close((loss, grad), (-1.2, 0.0), rtol=1e-5)
  # The lower side stays at 0.8: r = 0.75, A < 0 is clipped.
  loss, grad, _ = one_token("ppo_clip", 0.75, -1.0, clip_high=0.28)
  testing.assert_close((loss, grad), (0.8, 0.0), rtol=1e-5)


@pytest.mark.parametrize("mode", aggregation.MODES)
def test_ppo_clip_matches_numpy_every_aggregation(mode):
  logp, old, adv, mask = batch(spread=0.5)
  mask = mask.at[2].set(0.0)  # one all-padding row
  r = np.exp(np.asarray(logp) - np.asarray(old))
  a = np.asarray(adv)[:, None]
  want = np_aggregate(-np.minimum(r * a, np.clip(r, 0.8, 1.28) * a),
                      np.asarray(mask), mode, horizon=7)
  loss, aux = objectives.ppo_clip(logp, old, adv, mask, clip_high=0.28,
                                  aggregation=mode, horizon=7)
  testing.assert_close(loss, want, rtol=1e-5)
  assert aux.loss_sum.dtype == jnp.float32


def test_ppo_clip_token_level_advantages_match_numpy():
  logp, old, _, mask = batch(spread=0.5)
  adv = jax.random.normal(jax.random.PRNGKey(9), logp.shape)
  r = np.exp(np.asarray(logp) - np.asarray(old))
  a = np.asarray(adv)
  want = np_aggregate(-np.minimum(r * a, np.clip(r, 0.8, 1.2) * a),
                      np.asarray(mask), "token_mean")
  loss, _ = objectives.ppo_clip(logp, old, adv, mask, aggregation="token_mean")
  testing.assert_close(loss, want, rtol=1e-5)


def test_ppo_clip_diagnostics_match_numpy():
  logp, old, adv, mask = batch(spread=0.5)
  m = np.asarray(mask) > 0
  x = (np.asarray(logp) - np.asarray(old))[m]
  r = np.exp(x)
  a = np.broadcast_to(np.asarray(adv)[:, None], mask.shape)[m]
  cut = ((a > 0) & (r > 1.2)) | ((a < 0) & (r < 0.8))
  d = -x
  _, aux = objectives.ppo_clip(logp, old, adv, mask)
  testing.assert_close(
      (aux.ratio_mean, aux.ratio_max, aux.ratio_min, aux.ratio_var,
       aux.clip_fraction, aux.approx_kl),
      (r.mean(), r.max(), r.min(), r.var(), cut.mean(),
       np.mean(np.exp(d) - d - 1)), rtol=1e-4, atol=1e-6)


def test_approx_kl_is_nonnegative_near_policy():
  # k3 = exp(d) - d - 1 = d^2/2 + d^3/6 + O(d^4) >= 0 (d = old_logp - logp).
  # In float32 the naive exp(d) - d - 1 rounds to -2^-24 for some d ~ 1e-4
  # (exp(d) sits on a 2^-23 grid near 1, an error larger than d^2/2); keep
  # only those tokens, so a naive implementation gives a negative mean.
  logp = jnp.full((20001,), -0.1, jnp.float32)
  old = jnp.asarray((-0.1 + np.linspace(-1e-3, 1e-3, 20001)).astype(np.float32))
  d = old - logp
  naive_negative = np.asarray(jnp.exp(d) - d - 1.0) < 0
  assert naive_negative.sum() >= 10
  logp, old = logp[naive_negative][None], old[naive_negative][None]
  mask = jnp.ones_like(logp)
  _, aux = objectives.ppo_clip(logp, old, jnp.array([1.0]), mask)
  d = np.asarray(old, np.float64) - np.asarray(logp, np.float64)
  assert float(aux.approx_kl) >= 0.0
  testing.assert_close(aux.approx_kl, np.mean(d ** 2 / 2 + d ** 3 / 6),
                       rtol=1e-3, atol=1e-12)


def test_ratio_is_not_one_off_policy_and_after_a_step():
  """PITFALLS 'ratio always 1': old_logp is used as given."""
  logp, old, adv, mask = batch(spread=0.5)
  _, aux = objectives.ppo_clip(logp, old, adv, mask)
  assert float(aux.ratio_max) > 1.0 > float(aux.ratio_min)
  # A second iteration: start on policy, take a big step, score again.
  start = copy(old)
  _, aux0 = objectives.ppo_clip(start, old, adv, mask)
  testing.assert_close((aux0.ratio_min, aux0.ratio_max), (1.0, 1.0))
  g = grad_logp(objectives.ppo_clip, start, old, adv, mask)
  _, aux1 = objectives.ppo_clip(start - 20.0 * g, old, adv, mask)
  assert float(aux1.ratio_max) > 1.0 and float(aux1.ratio_min) < 1.0
  assert float(aux1.clip_fraction) > 0.0


def test_reinforce_gradient_by_hand():
  logp = jnp.array([[-1.0, -2.0], [-0.5, 0.0]])
  mask = jnp.array([[1.0, 1.0], [1.0, 0.0]])
  adv = jnp.array([2.0, -1.0])
  loss, _ = objectives.reinforce(logp, copy(logp), adv, mask)
  # Rows: -2*(-1-2)/2 = 3 and -(-1)*(-0.5)/1 = -0.5; mean 1.25.
  testing.assert_close(loss, 1.25)
  g = grad_logp(objectives.reinforce, logp, copy(logp), adv, mask)
  testing.assert_close(g, jnp.array([[-0.5, -0.5], [0.5, 0.0]]))


# -------------------------------------------------------------------- gspo


def test_gspo_uses_geometric_mean_not_product():
  # Two rows of different length, every token at log-ratio 0.1, A = 1.
  mask = jnp.array([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
  old = jnp.full((2, 4), -1.0)
  logp = old + 0.1
  adv = jnp.array([1.0, 1.0])
  wide = {"clip_low": 10.0, "clip_high": 10.0}
  loss, aux = objectives.gspo(logp, old, adv, mask, **wide)
  # exp(mean) = exp(0.1) for both rows; exp(sum) would give exp(0.4), exp(0.2).
  testing.assert_close(loss, -math.exp(0.1), rtol=1e-6)
  testing.assert_close((aux.ratio_min, aux.ratio_max),
                       (math.exp(0.1), math.exp(0.1)), rtol=1e-6)
  g = grad_logp(objectives.gspo, logp, old, adv, mask, **wide)
  s = math.exp(0.1)
  want = np.array([[s / 4] * 4, [s / 2, s / 2, 0, 0]]) * -0.5
  testing.assert_close(g, want, rtol=1e-5)


def test_gspo_default_band_clips_the_sequence():
  old = jnp.full((1, 3), -1.0)
  logp = old + jnp.array([[0.1, -0.05, 0.0]])  # s = exp(0.05/3) > 1 + 4e-4
  mask = jnp.ones((1, 3))
  loss, aux = objectives.gspo(logp, old, jnp.array([1.0]), mask)
  testing.assert_close(loss, -(1.0 + 4e-4), rtol=1e-6)
  g = grad_logp(objectives.gspo, logp, old, jnp.array([1.0]), mask)
  testing.assert_close(g, jnp.zeros((1, 3)))
  assert float(aux.clip_fraction) == 1.0  # every token of the clipped row
  # A < 0 with the same ratio is not clipped: gradient A * s / n per token.
  g = grad_logp(objectives.gspo, logp, old, jnp.array([-1.0]), mask)
  testing.assert_close(g, jnp.full((1, 3), math.exp(0.05 / 3) / 3), rtol=1e-5)


def test_gspo_token_value_and_per_token_gradient():
  old = jnp.full((1, 2), -1.0)
  logp = old + jnp.array([[0.2, 0.0]])
  mask = jnp.ones((1, 2))
  adv = jnp.array([[1.0, -2.0]])
  wide = {"clip_low": 10.0, "clip_high": 10.0}
  s = math.exp(0.1)
  loss, _ = objectives.gspo_token(logp, old, adv, mask, **wide)
  testing.assert_close(loss, -(s * 1.0 + s * -2.0) / 2, rtol=1e-6)
  g = grad_logp(objectives.gspo_token, logp, old, adv, mask, **wide)
  # Each token's gradient goes through its own logp only: -A_t * s / n.
  testing.assert_close(g, jnp.array([[-s / 2, s]]), rtol=1e-5)


def test_gspo_token_default_band_clips_whole_rows():
  # Default band [1 - 3e-4, 1 + 4e-4], A = 1 on both rows.
  # Row 0: log s = (0.1 - 0.05 + 0) / 3 = 0.05/3, s ~ 1.0168 > 1 + 4e-4:
  #   clipped, term -(1 + 4e-4) per token, gradient 0 on every token.
  # Row 1: log s = (1e-4 - 1e-4 + 3e-4) / 3 = 1e-4, s ~ 1.0001 in the band:
  #   term -s_t per token; seq_mean_token_mean gives d/dlogp = -s / (2 * 3).
  old = jnp.full((2, 3), -1.0)
  logp = old + jnp.array([[0.1, -0.05, 0.0], [1e-4, -1e-4, 3e-4]])
  mask = jnp.ones((2, 3))
  adv = jnp.array([1.0, 1.0])
  s = math.exp(1e-4)
  loss, aux = objectives.gspo_token(logp, old, adv, mask)
  testing.assert_close(loss, (-(1.0 + 4e-4) - s) / 2, rtol=1e-6)
  testing.assert_close(aux.clip_fraction, 0.5)  # the 3 tokens of row 0
  g = grad_logp(objectives.gspo_token, logp, old, adv, mask)
  testing.assert_close(g, np.array([[0.0] * 3, [-s / 6] * 3]), rtol=1e-5)


def test_gspo_lower_side_uses_clip_low():
  # log s = (-3e-4 - 4e-4) / 2 = -3.5e-4, s ~ 0.99965: below 1 - 3e-4 =
  # 0.9997 but above 1 - 4e-4. With A = -2: -min(s*A, 0.9997*A) =
  # -min(-1.9993, -1.9994) = 1.9994 = (1 - 3e-4) * (-A), gradient 0.
  # Swapped bounds would leave s inside the band: loss 2 s, nonzero gradient.
  old = jnp.full((1, 2), -1.0)
  logp = old + jnp.array([[-3e-4, -4e-4]])
  mask = jnp.ones((1, 2))
  adv = jnp.array([-2.0])
  loss, aux = objectives.gspo(logp, old, adv, mask)
  testing.assert_close(loss, (1.0 - 3e-4) * 2.0, rtol=1e-6)
  assert float(aux.clip_fraction) == 1.0
  g = grad_logp(objectives.gspo, logp, old, adv, mask)
  testing.assert_close(g, jnp.zeros((1, 2)))


# -------------------------------------------------------------------- gmpo


@pytest.mark.parametrize("adv,kept,want_mean", [
    (1.0, [0.0, 1.0, 1.0], (0.4 - 0.6 + 0.1) / 3),   # top clipped to 0.4
    (-1.0, [1.0, 0.0, 1.0], (0.6 - 0.4 + 0.1) / 3),  # bottom raised to -0.4
])
def test_gmpo_one_sided_clipping(adv, kept, want_mean):
  old = jnp.full((1, 3), -2.0)
  logp = old + jnp.array([[0.6, -0.6, 0.1]])
  mask = jnp.ones((1, 3))
  a = jnp.array([adv])
  loss, aux = objectives.gmpo(logp, old, a, mask)
  testing.assert_close(loss, -adv * math.exp(want_mean), rtol=1e-5)
  g = grad_logp(objectives.gmpo, logp, old, a, mask)
  want = -adv * math.exp(want_mean) / 3 * np.array([kept])
  testing.assert_close(g, want, rtol=1e-5)
  testing.assert_close(aux.clip_fraction, 1.0 / 3.0)


# -------------------------------------------------------------------- cfpo


def test_cfpo_value_and_gradient_outside_band():
  # -(r A - |A| (r-1)^2 / (2 eps)) at r = 1.5, A = 2, eps = 0.2.
  loss, grad, aux = one_token("cfpo", 1.5, 2.0)
  testing.assert_close(loss, -(3.0 - 2.0 * 0.25 / 0.4), rtol=1e-5)
  # d/dlogp = -(A - |A| (r-1)/eps) * r = -(2 - 5) * 1.5.
  testing.assert_close(grad, 4.5, rtol=1e-5)
  assert float(aux.clip_fraction) == 1.0


def test_cfpo_value_and_gradient_negative_advantage():
  # -(r A - |A| (r-1)^2 / (2 eps)) at r = 0.5, A = -2, eps = 0.2:
  # -(-1 - 2 * 0.25 / 0.4) = -(-1 - 1.25) = 2.25.
  loss, grad, aux = one_token("cfpo", 0.5, -2.0)
  testing.assert_close(loss, 2.25, rtol=1e-5)
  # d/dlogp = -(A - |A| (r-1)/eps) * r = -(-2 - 2 * (-0.5) / 0.2) * 0.5 = -1.5.
  testing.assert_close(grad, -1.5, rtol=1e-5)
  assert float(aux.clip_fraction) == 1.0  # r < 1 - eps with A < 0


@pytest.mark.parametrize("adv,maximiser", [(1.0, 1.2), (-3.0, 0.8)])
def test_cfpo_maximiser_is_the_clip_boundary(adv, maximiser):
  loss, grad, _ = one_token("cfpo", maximiser, adv)
  testing.assert_close(grad, 0.0, atol=1e-5)
  for step in (-0.01, 0.01):  # the loss is a parabola in r: higher both sides
    assert one_token("cfpo", maximiser + step, adv)[0] > loss


# -------------------------------------------------------------------- sapo


@pytest.mark.parametrize("ratio,adv,tau", [(1.5, 1.0, 1.0), (0.5, -1.0, 1.05),
                                            (1.0, 2.0, 1.0)])
def test_sapo_value_and_gate(ratio, adv, tau):
  sig = 1.0 / (1.0 + math.exp(-tau * (ratio - 1.0)))
  loss, grad, _ = one_token("sapo", ratio, adv)
  testing.assert_close(loss, -sig * 4.0 / tau * adv, rtol=1e-5)
  # d/dlogp = -A * 4 sig (1 - sig) * r: the gate scales REINFORCE's -A r.
  testing.assert_close(grad, -adv * 4.0 * sig * (1.0 - sig) * ratio, rtol=1e-5)


def test_sapo_gate_closes_far_off_policy():
  loss, grad, aux = one_token("sapo", math.exp(5.0), 1.0)
  testing.assert_close(loss, -4.0, rtol=1e-5)
  assert abs(grad) < 1e-30
  assert float(aux.clip_fraction) == 1.0


# ------------------------------------------------------------------- cispo


@pytest.mark.parametrize("ratio,weight,hparams", [
    (7.0, 5.0, {}),                                    # default cap at 5
    (0.1, 0.1, {}),                                    # no lower bound
    (0.5, 0.8, {"clip_low": 0.2, "clip_high": 0.28}),
    (1.5, 1.28, {"clip_low": 0.2, "clip_high": 0.28}),
    (1.1, 1.1, {"clip_low": 0.2, "clip_high": 0.28}),
])
@pytest.mark.parametrize("adv", [1.5, -2.0])
def test_cispo_gradient_is_clipped_weight_times_advantage(ratio, weight,
                                                          hparams, adv):
  loss, grad, aux = one_token("cispo", ratio, adv, **hparams)
  logp = -1.0 + math.log(ratio)
  testing.assert_close(loss, -weight * adv * logp, rtol=1e-5)
  testing.assert_close(grad, -weight * adv, rtol=1e-5)
  assert float(aux.clip_fraction) == float(weight != ratio)


# ------------------------------------------------------------------- r2vpo


@pytest.mark.parametrize("center", ["one", "mean"])
def test_r2vpo_value_with_lambda(center):
  logp, old, adv, mask = batch(spread=0.4)
  m = np.asarray(mask)
  r = np.exp(np.asarray(logp) - np.asarray(old))
  a = np.broadcast_to(np.asarray(adv)[:, None], r.shape)
  c = 1.0 if center == "one" else (r * m).sum() / m.sum()
  var = (((r - c) ** 2) * m).sum() / m.sum()
  want = np_aggregate(-r * a, m, "token_mean") + 2.0 * (var - 0.01)
  loss, aux = objectives.r2vpo(logp, old, adv, mask, lam=2.0, delta=0.01,
                               center=center)
  testing.assert_close(loss, want, rtol=1e-5)
  testing.assert_close(objectives.penalised.penalised_variance(aux.ratio, center),
                       var, rtol=1e-5)
  testing.assert_close(aux.loss_sum, want * m.sum(), rtol=1e-5)


def test_r2vpo_centers_differ_and_penalty_has_gradient():
  logp, old, adv, mask = batch(spread=0.4)
  one, _ = objectives.r2vpo(logp, old, adv, mask, lam=1.0, center="one")
  mean, _ = objectives.r2vpo(logp, old, adv, mask, lam=1.0, center="mean")
  assert float(one) > float(mean)  # E(r-1)^2 = Var + (E r - 1)^2
  g0 = grad_logp(objectives.r2vpo, logp, old, adv, mask, lam=0.0)
  g1 = grad_logp(objectives.r2vpo, logp, old, adv, mask, lam=1.0)
  assert float(jnp.abs(g1 - g0).max()) > 1e-3
  g_lam = jax.grad(lambda lam: objectives.r2vpo(logp, old, adv, mask,
                                                lam=lam)[0])(1.0)
  assert float(g_lam) == 0.0  # sg(lam)


def test_r2vpo_center_must_be_known():
  logp, old, adv, mask = batch()
  with pytest.raises(ValueError, match="center"):
    objectives.r2vpo(logp, old, adv, mask, center="median")


@pytest.mark.parametrize("lam,var,delta,eta,want", [
    (0.5, 0.03, 0.01, 10.0, 0.7),    # 0.5 + 10 * 0.02
    (0.5, 0.0, 0.01, 100.0, 0.0),    # 0.5 - 1.0 -> max(0, .) = 0
    (0.0, 0.01, 0.01, 1.0, 0.0),
])
def test_r2vpo_dual_update(lam, var, delta, eta, want):
  state = objectives.r2vpo_update(objectives.r2vpo_init(lam), var,
                                  delta=delta, eta=eta)
  testing.assert_close(state.lam, want, rtol=1e-6)
  assert state.lam.dtype == jnp.float32


def test_r2vpo_record_cycle():
  """make -> init -> loss -> update: lam ascends on the measured variance."""
  assert objectives.make("ppo_clip").init() == ()
  record = objectives.make("r2vpo", delta=0.001, eta=2.0)
  state = record.init()
  testing.assert_close(state.lam, 0.0)
  logp, old, adv, mask = batch(spread=0.4)
  _, aux = record.loss(state, logp, old, adv, mask)
  state = record.update(state, aux.measures())
  # Default center "one": Var = sum m (r - 1)^2 / sum m, in float64 from the
  # inputs; lam = max(0, 0 + eta * (Var - delta)).
  m = np.asarray(mask, np.float64)
  r = np.exp(np.asarray(logp, np.float64) - np.asarray(old, np.float64))
  var = (((r - 1.0) ** 2) * m).sum() / m.sum()
  assert var > 0.001  # so the max(0, .) does not hide the value
  testing.assert_close(state.lam, 2.0 * (var - 0.001), rtol=1e-5)
  # The next loss uses the new lam: its penalty moves the loss by lam*(var-d).
  loss1, _ = record.loss(state, logp, old, adv, mask)
  loss0, _ = record.loss(record.init(), logp, old, adv, mask)
  testing.assert_close(loss1 - loss0, float(state.lam) * (var - 0.001),
                       rtol=1e-4)


def test_r2vpo_state_options_and_injected_keywords():
  with pytest.raises(ValueError, match="lam"):
    objectives.make("r2vpo", lam=1.0)  # lam is state: set lam0
  assert objectives.make("r2vpo", lam0=0.5).init().lam == 0.5


# -------------------------------------------------------------- edge cases


def test_microbatches_sum_then_divide_equals_one_shot():
  logp, old, adv, mask = batch(spread=0.5)
  mask = mask.at[0, 1:].set(0.0)  # microbatches with unequal token counts
  loss, _ = objectives.ppo_clip(logp, old, adv, mask, aggregation="token_mean")
  parts = [objectives.ppo_clip(logp[s], old[s], adv[s], mask[s],
                               aggregation="token_mean")[1]
           for s in (slice(0, 2), slice(2, 4))]
  total = sum(p.loss_sum for p in parts) / sum(p.loss_count for p in parts)
  testing.assert_close(total, loss, rtol=1e-6)


@pytest.mark.parametrize("name", ALL)
def test_all_padding_row_no_nan_zero_gradient(name):
  logp, old, adv, mask = batch(spread=0.4)
  mask = mask.at[1].set(0.0)
  fn = raw(name)
  loss, aux = fn(logp, old, adv, mask)
  testing.assert_finite((loss, aux))
  g = grad_logp(fn, logp, old, adv, mask)
  testing.assert_finite(g)
  testing.assert_close(g[1], jnp.zeros(logp.shape[1]))


@pytest.mark.parametrize("name", ALL)
def test_zero_advantages_give_zero_loss_and_gradient(name):
  logp, old, _, mask = batch(spread=0.4)
  adv = jnp.zeros(logp.shape[0])
  fn = raw(name)
  loss, _ = fn(logp, old, adv, mask)
  testing.assert_close(loss, 0.0)
  testing.assert_close(grad_logp(fn, logp, old, adv, mask),
                       jnp.zeros(logp.shape))


@pytest.mark.parametrize("name", ALL)
def test_token_advantages_varying_along_a_row(name):
  """Token advantages with each row's mean equal to the [N] advantage:
  sequence-level objectives (one term per row) see only the row mean, so
  they agree with the [N] call; token-level ones credit tokens differently."""
  logp, old, adv, mask = batch(spread=0.4)
  wiggle = jax.random.normal(jax.random.PRNGKey(3), logp.shape) * mask
  wiggle -= mask * (wiggle.sum(-1, keepdims=True)
                    / jnp.maximum(mask.sum(-1, keepdims=True), 1.0))
  tokens = (adv[:, None] + wiggle) * mask
  fn = raw(name)
  g_rows = grad_logp(fn, logp, old, adv, mask)
  g_tokens = grad_logp(fn, logp, old, tokens, mask)
  if name in TOKEN_LEVEL:
    assert float(jnp.abs(g_rows - g_tokens).max()) > 1e-3
  else:
    testing.assert_close(fn(logp, old, adv, mask)[0],
                         fn(logp, old, tokens, mask)[0], rtol=1e-5)
    testing.assert_close(g_rows, g_tokens, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ALL)
def test_bf16_inputs(name):
  logp, old, adv, mask = batch(spread=0.4)
  fn = raw(name)
  args = [x.astype(jnp.bfloat16) for x in (logp, old, adv, mask)]
  loss, aux = fn(*args)
  assert loss.dtype == jnp.float32
  assert all(v.dtype == jnp.float32 for v in jax.tree.leaves(aux))
  testing.assert_finite((loss, aux, grad_logp(fn, *args)))
  testing.assert_close(loss, fn(*[a.astype(jnp.float32) for a in args])[0],
                       rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ALL)
def test_jit_and_vmap_agree_with_eager(name):
  stacked = [jnp.stack(pair) for pair in zip(batch(seed=1), batch(seed=2))]
  testing.assert_jit_and_vmap_match_eager(raw(name), *stacked)


@pytest.mark.parametrize("name,hparams", [
    ("ppo_clip", {}), ("gspo", {"clip_low": 1.0, "clip_high": 1.0}),
    ("gspo_token", {"clip_low": 1.0, "clip_high": 1.0}), ("gmpo", {}),
    ("cfpo", {}), ("r2vpo", {"lam": 0.7, "center": "mean"}), ("sapo", {}),
    ("reinforce", {}),
])  # not cispo: its gradient is a surrogate (sg weight), not d value
def test_check_grads_at_smooth_point(name, hparams):
  logp, old, adv, mask = batch(spread=0.05)  # inside every band
  fn = raw(name)
  test_util.check_grads(lambda lp: fn(lp, old, adv, mask, **hparams)[0],
                        (logp,), order=1, modes=["rev"], eps=1e-3,
                        atol=2e-3, rtol=2e-3)


# ---------------------------------------------------------- contract suite


@pytest.mark.parametrize("lookup", [objectives.get, objectives.make])
def test_unknown_name_lists_the_known_ones(lookup):
  with pytest.raises(ValueError, match="grpo_typo.*ppo_clip"):
    lookup("grpo_typo")


# --------------------------------------------------------------- bad input


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("bad,argument", [
    (lambda l, o, a, m: (l[None], o, a, m), "logp"),
    (lambda l, o, a, m: (l, o[:, :-1], a, m), "old_logp"),
    (lambda l, o, a, m: (l, o, a, m[:-1]), "mask"),
    (lambda l, o, a, m: (l, o, a[:-1], m), "advantages"),
    (lambda l, o, a, m: (l, o, jnp.ones(l.shape[:1] + (9,)), m), "advantages"),
    (lambda l, o, a, m: (l, o, a[:, None, None], m), "advantages"),
])
def test_bad_shapes_name_the_argument(name, bad, argument):
  with pytest.raises(ValueError, match=argument):
    raw(name)(*bad(*batch()))


@pytest.mark.parametrize("name", TOKEN_LEVEL)
def test_bad_aggregation_and_missing_horizon(name):
  fn = raw(name)
  with pytest.raises(ValueError, match="aggregation"):
    fn(*batch(), aggregation="mean")
  with pytest.raises(ValueError, match="horizon"):
    fn(*batch(), aggregation="seq_mean_token_sum_norm")
  loss, aux = fn(*batch(), aggregation="seq_mean_token_sum_norm", horizon=10)
  testing.assert_close(aux.loss_count, 4.0 * 10.0)
