"""Hand-derived tests of the stateless estimators DVAO, BNPO, REINFORCE++
(and -baseline), OPO and pass@k, of the checks that hold a config's
rewards to an estimator's needs, and the one-step run of every estimator's
config.

Expected values are derived here in float64 numpy, independently of the
implementation: by hand for the small cases (VARIANTS.md's vectors among
them), and by a direct transcription of each formula (per group, per
column, with Python loops where that reads plainer) for the random ones.
"""

import importlib
import importlib.util
import math

import jax
from jax.experimental.compilation_cache import compilation_cache as xla_cache
import numpy as np
import pytest

from configs import quickstart
from grpo_jax import advantages
from grpo_jax import groups
from grpo_jax.runtime import metrics
from grpo_jax import rewards
from grpo_jax import testing
from grpo_jax import train

EPS = 1e-6
# The estimators tested here; each has a config file of its name.
NAMES = ("bnpo", "dvao", "opo", "pass_at_k", "reinforce_plus_plus",
         "reinforce_plus_plus_baseline")


def estimate(name, rewards_pgk, weights=None, *, valid=None, lengths=None,
             **options):
  """The registered record's advantages on `GroupData` (fillers zeroed)."""
  estimator = advantages.make(name, **options)
  data = groups.from_rewards(rewards_pgk, weights, valid=valid,
                             lengths=lengths)
  out, _ = estimator.estimate(estimator.init(), data)
  return testing.numpy(out)


def zscores(x, ddof=1):
  """(x - mean) / (std + eps) over the last axis, 0 where x is constant."""
  centred = x - x.mean(-1, keepdims=True)
  sd = x.std(-1, ddof=ddof, keepdims=True) if x.shape[-1] > 1 else 0 * x
  return np.where(sd > 0, centred / (sd + EPS), 0.0)


# ---------------------------------------------------------------------- DVAO


def dvao_reference(r, w, *, ddof=1, power=1.0, floor=0.0):
  """DVAO from its definition, one group at a time, in float64."""
  r = np.asarray(r, np.float64) * np.asarray(w, np.float64)
  out = np.zeros(r.shape[:2])
  for p in range(r.shape[0]):
    cols = r[p].T  # [K, G]
    var = cols.var(-1, ddof=ddof) if cols.shape[-1] > 1 else 0 * cols[:, 0]
    raw = np.array([v**power if v > 0 else 0.0 for v in var])
    c = raw / raw.sum() if raw.sum() > 0 else raw
    if floor:
      c = np.maximum(c, floor)
      c = c / c.sum()
    out[p] = (c[:, None] * zscores(cols, ddof)).sum(0)
  return out


def test_dvao_variants_vector():
  # var = [1/3, 1/15]: weights [5/6, 1/6]; z_0 = +-0.5/(1/sqrt(3)),
  # z_1 = [-3, -1, 1, 3] * 0.1 / sqrt(1/15).
  r = np.array([[[1, .2], [0, .4], [1, .6], [0, .8]]], np.float32)
  z0 = np.array([1, -1, 1, -1]) * 0.5 / (1 / math.sqrt(3) + EPS)
  z1 = np.array([-3, -1, 1, 3]) * 0.1 / (math.sqrt(1 / 15) + EPS)
  expected = 5 / 6 * z0 + 1 / 6 * z1
  testing.assert_close(expected, np.array([0.528038, -0.786236, 0.786236,
                                          -0.528038]),
                       atol=1e-6)
  testing.assert_close(advantages.dvao(r, np.ones(2))[0], expected,
                       atol=1e-5)


@pytest.mark.parametrize("options", [
    {}, {"weight_power": 0.5}, {"weight_power": -1.0}, {"floor": 0.3},
    {"ddof": 0}])
def test_dvao_matches_its_definition(options):
  r = np.random.default_rng(0).integers(0, 3, (5, 4, 3)).astype(np.float32)
  w = np.array([1.0, 0.5, 2.0])
  ref_options = {"ddof": options.get("ddof", 1),
                 "power": options.get("weight_power", 1.0),
                 "floor": options.get("floor", 0.0)}
  testing.assert_close(advantages.dvao(r, w, **options),
                       dvao_reference(r, w, **ref_options), atol=1e-5)


def test_dvao_stays_within_the_largest_z_score():
  r = np.random.default_rng(1).normal(size=(6, 5, 3)).astype(np.float32)
  out = testing.numpy(advantages.dvao(r, np.ones(3)))
  largest = np.abs(zscores(np.swapaxes(r, 1, 2).astype(np.float64))).max(1)
  assert np.all(np.abs(out) <= largest + 1e-5)
  assert np.abs(out).max() > 0.5  # not vacuous


def test_dvao_channel_without_spread_gets_weight_zero():
  """A constant column leaves the other's z-score alone: that is GRPO of
  the varying column; with K = 1 DVAO is GRPO."""
  acc = np.array([[1, 0, 0, 1], [0, 1, 1, 1]], np.float32)
  r = np.stack([acc, np.full_like(acc, 0.4)], -1)
  testing.assert_close(advantages.dvao(r, np.ones(2)), advantages.grpo(acc),
                       atol=1e-6)
  testing.assert_close(advantages.dvao(acc[..., None], np.ones(1)),
                       advantages.grpo(acc), atol=1e-6)


def test_dvao_weights_scale_the_columns():
  """A weight of 0 removes its column; a weight of 3 weighs its column's
  variance 9 times."""
  r = np.array([[[1, 0], [0, 1], [0, 0], [1, 0]]], np.float32)
  testing.assert_close(advantages.dvao(r, np.array([1.0, 0.0])),
                       advantages.grpo(r[..., 0]), atol=1e-6)
  # Unweighted the columns have variances 1/3 and 1/4; weighted, 1/3, 9/4.
  z0, z1 = zscores(r[0, :, 0]), zscores(r[0, :, 1])
  c0 = (1 / 3) / (1 / 3 + 9 / 4)
  testing.assert_close(advantages.dvao(r, np.array([1.0, 3.0]))[0],
                       c0 * z0 + (1 - c0) * z1, atol=1e-5)


def test_dvao_edge_cases_give_zero():
  r = np.random.default_rng(2).normal(size=(3, 1, 2)).astype(np.float32)
  np.testing.assert_array_equal(testing.numpy(advantages.dvao(r, None)),
                                np.zeros((3, 1)))  # G = 1
  flat = np.full((2, 4, 2), 0.3, np.float32)
  np.testing.assert_array_equal(testing.numpy(advantages.dvao(flat, None)),
                                np.zeros((2, 4)))
  testing.assert_finite(advantages.dvao(flat, None, weight_power=-1.0,
                                        floor=0.5))


def test_dvao_filler_groups_get_zero_and_change_nothing():
  r = np.random.default_rng(3).integers(0, 2, (3, 4, 2)).astype(np.float32)
  valid = np.array([True, False, True])
  out = estimate("dvao", r, valid=valid)
  np.testing.assert_array_equal(out[1], np.zeros(4))
  testing.assert_close(out[[0, 2]], dvao_reference(r[[0, 2]], np.ones(2)),
                       atol=1e-5)


def test_dvao_checks_its_options():
  with pytest.raises(ValueError, match="floor"):
    advantages.dvao(np.zeros((1, 2, 2)), None, floor=1.5)
  with pytest.raises(ValueError, match="rewards"):
    advantages.dvao(np.zeros((1, 2)), None)


# ---------------------------------------------------------------------- BNPO


def beta_pdf(p, a, b):
  log_beta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
  if (p == 0 and a > 1) or (p == 1 and b > 1):
    return 0.0
  return math.exp((a - 1) * math.log(p) if a != 1 else 0.0) * math.exp(
      (b - 1) * math.log1p(-p) if b != 1 else 0.0) / math.exp(log_beta)


def bnpo_column_reference(r, *, valid=None, cap=1e6):
  """BNPO of one [P, G] reward column in [0, 1], from the spec."""
  r = np.asarray(r, np.float64)
  valid = np.ones(len(r), bool) if valid is None else valid
  p = r.mean(1)
  kept = p[valid]
  m, v = (kept.mean(), kept.var(ddof=1)) if len(kept) > 1 else (0.0, 1.0)
  if v <= 1e-12:
    a = b = 1.0
  else:
    s = m * (1 - m) / v - 1
    a, b = max(1.0, 1 + s * m / 3), max(1.0, 1 + s * (1 - m) / 3)
  out = np.zeros_like(r)
  for q in range(len(r)):
    pdf = beta_pdf(p[q], a, b)
    weight = cap if pdf == 0 else min(1 / pdf, cap)
    out[q] = weight * (r[q] - p[q]) if valid[q] else 0.0
  return out


BINARY = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]], np.float32)


def test_bnpo_variants_vector():
  # p = [.25, .5, .75]: m = .5, v = .0625, alpha = beta = 1.5; the pdf at
  # .5 is .5 / B(1.5, 1.5) = .5 / (pi / 8), so w = pi / 4 there.
  w_half = math.pi / 4
  w_quarter = 1 / (math.sqrt(.25 * .75) / (math.pi / 8))
  testing.assert_close(w_quarter, 0.906900, atol=1e-6)
  expected = np.array([
      [0.680175, -0.226725, -0.226725, -0.226725],
      [w_half / 2, w_half / 2, -w_half / 2, -w_half / 2],
      [0.226725, 0.226725, 0.226725, -0.680175]])
  testing.assert_close(expected[0], w_quarter * (BINARY[0] - .25), atol=1e-6)
  out = advantages.bnpo(BINARY[..., None], None)
  testing.assert_close(out, expected, atol=1e-5)
  testing.assert_close(out, bnpo_column_reference(BINARY), atol=1e-5)


def test_bnpo_matches_its_definition_on_random_batches():
  rng = np.random.default_rng(4)
  for _ in range(5):
    r = (rng.integers(0, 5, (6, 4)) / 4).astype(np.float32)
    testing.assert_close(advantages.bnpo(r[..., None], None),
                         bnpo_column_reference(r), atol=1e-4, rtol=1e-5)


def test_bnpo_one_prompt_or_equal_rates_is_dr_grpo():
  """P = 1 (the code's m = 0, v = 1) and v = 0 (equal success rates, where
  the code divides by zero) both fit the uniform Beta: w = 1."""
  one = BINARY[1:2]
  testing.assert_close(advantages.bnpo(one[..., None], None),
                       one - one.mean(), atol=1e-6)
  equal = np.array([[1, 0, 0, 1], [0, 1, 1, 0]], np.float32)
  testing.assert_close(advantages.bnpo(equal[..., None], None),
                       equal - 0.5, atol=1e-6)


def test_bnpo_zero_pdf_is_capped_before_the_product():
  """p = 0 with alpha > 1 has pdf 0: w is the cap, not inf, and the group's
  R - p = 0 keeps it at 0 (no inf * 0 = NaN)."""
  r = np.array([[0, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1]],
               np.float32)  # p = [0, .5, .5, .5]: alpha = 1.34, beta = 1.57
  out = testing.numpy(advantages.bnpo(r[..., None], None))
  testing.assert_finite(out)
  np.testing.assert_array_equal(out[0], np.zeros(4))
  testing.assert_close(out, bnpo_column_reference(r), atol=1e-5)
  capped = advantages.bnpo(r[..., None], None, max_weight=0.5)
  testing.assert_close(capped, bnpo_column_reference(r, cap=0.5), atol=1e-6)


def test_bnpo_rescales_from_r_min_r_max():
  """Rewards in {-1, 3} with r_min=-1, r_max=3 are the binary case."""
  wide = 4 * BINARY - 1
  testing.assert_close(
      advantages.bnpo(wide[..., None], None, r_min=-1.0, r_max=3.0),
      advantages.bnpo(BINARY[..., None], None), atol=1e-6)
  with pytest.raises(ValueError, match="r_max"):
    advantages.bnpo(BINARY[..., None], None, r_min=1.0, r_max=1.0)


def test_bnpo_is_not_shift_invariant():
  """The Beta is fitted to absolute success rates (metadata says so)."""
  shifted = advantages.bnpo(BINARY[..., None] * 0.5 + 0.25, None)
  plain = advantages.bnpo(BINARY[..., None] * 0.5, None)
  assert not np.allclose(testing.numpy(shifted), testing.numpy(plain),
                         atol=1e-3)
  assert not advantages.meta("bnpo").shift_invariant


def test_bnpo_decomposition_averages_weighted_columns():
  rng = np.random.default_rng(5)
  r = rng.integers(0, 2, (5, 4, 2)).astype(np.float32)
  w = np.array([1.0, 0.5])
  expected = (w[0] * bnpo_column_reference(r[..., 0])
              + w[1] * bnpo_column_reference(r[..., 1])) / 2
  testing.assert_close(advantages.bnpo(r, w), expected, atol=1e-5)
  # Without decomposition: one Beta of the weighted sum, here in [0, 1.5].
  summed = (r * w).sum(-1)
  testing.assert_close(
      advantages.bnpo(r, w, decompose=False, r_max=1.5),
      bnpo_column_reference(summed / 1.5), atol=1e-5)


def test_bnpo_filler_groups_enter_no_fit():
  """Fillers with out-of-range rewards get 0 and leave the valid groups'
  advantages as they are without them; one valid group is uniform."""
  r = np.concatenate([BINARY, np.full((2, 4), 50.0, np.float32)])
  valid = np.array([True, True, True, False, False])
  out = estimate("bnpo", r[..., None], valid=valid)
  np.testing.assert_array_equal(out[3:], np.zeros((2, 4)))
  testing.assert_close(out[:3], bnpo_column_reference(BINARY), atol=1e-5)
  only = np.array([False, True, False, False, False])
  testing.assert_close(estimate("bnpo", r[..., None], valid=only)[1],
                       BINARY[1] - 0.5, atol=1e-6)


def test_bnpo_groups_of_one_and_constant_groups_give_zero():
  np.testing.assert_array_equal(
      testing.numpy(advantages.bnpo(BINARY[:, :1, None], None)),
      np.zeros((3, 1)))
  r = np.concatenate([BINARY, np.ones((1, 4), np.float32)])
  np.testing.assert_array_equal(
      testing.numpy(advantages.bnpo(r[..., None], None))[3], np.zeros(4))


# --------------------------------------------------------------- REINFORCE++


def token_whiten(x, lengths, valid=None, eps=1e-8):
  """Whitening over tokens, done on the tokens: each completion's value
  repeated once per token, verl's masked_whiten."""
  x, lengths = np.asarray(x, np.float64), np.asarray(lengths)
  valid = np.ones(len(x), bool) if valid is None else valid
  tokens = np.repeat(x[valid].ravel(), lengths[valid].ravel())
  out = (x - tokens.mean()) / np.sqrt(tokens.var(ddof=1) + eps)
  return np.where(valid[:, None], out, 0.0)


def test_reinforce_plus_plus_hand_case():
  # 8 tokens: 2 of reward 1, 6 of 0: mean 1/4, sum of squared deviations
  # 2 * 9/16 + 6 * 1/16 = 3/2, unbiased variance 3/14.
  r = np.array([[1.0, 0.0], [0.0, 0.0]], np.float32)
  lengths = np.array([[2, 1], [1, 4]])
  expected = (r - 0.25) / math.sqrt(3 / 14 + 1e-8)
  testing.assert_close(token_whiten(r, lengths), expected, atol=1e-9)
  out = advantages.reinforce_plus_plus(r, lengths=lengths)
  testing.assert_close(out, expected, atol=1e-5)
  # A constant group gets its offset from the batch mean: no baseline.
  assert np.all(testing.numpy(out)[1] < 0)


def test_reinforce_plus_plus_matches_token_whitening():
  rng = np.random.default_rng(6)
  r = rng.integers(0, 3, (4, 3)).astype(np.float32)
  lengths = rng.integers(1, 9, (4, 3))
  testing.assert_close(estimate("reinforce_plus_plus", r, lengths=lengths),
                       token_whiten(r, lengths), atol=1e-5)
  # Without lengths every completion counts once.
  testing.assert_close(advantages.reinforce_plus_plus(r),
                       token_whiten(r, np.ones((4, 3), int)), atol=1e-5)


def test_reinforce_plus_plus_baseline_centres_then_whitens():
  rng = np.random.default_rng(7)
  r = rng.integers(0, 2, (4, 4)).astype(np.float32)
  r[0] = 1.0  # a constant group
  lengths = rng.integers(1, 9, (4, 4))
  centred = r - r.mean(1, keepdims=True)
  expected = token_whiten(centred, lengths)
  out = testing.numpy(estimate("reinforce_plus_plus_baseline", r,
                               lengths=lengths))
  testing.assert_close(out, expected, atol=1e-5)
  # The constant group gets -(token-weighted mean) / std: one value.
  testing.assert_close(out[0], np.full(4, expected[0, 0]), atol=1e-6)


def test_reinforce_plus_plus_fillers_and_constant_batches():
  r = np.array([[1, 0, 0], [9, -9, 40], [0, 1, 1]], np.float32)
  lengths = np.array([[3, 1, 2], [5, 5, 5], [2, 2, 7]])
  valid = np.array([True, False, True])
  for name in ("reinforce_plus_plus", "reinforce_plus_plus_baseline"):
    out = estimate(name, r, valid=valid, lengths=lengths)
    np.testing.assert_array_equal(out[1], np.zeros(3))
    kept = estimate(name, r[[0, 2]], lengths=lengths[[0, 2]])
    testing.assert_close(out[[0, 2]], kept, atol=1e-6)
    # No reward varies in the batch, or no group's: exactly 0.
    np.testing.assert_array_equal(
        estimate(name, np.full((2, 3), 0.7, np.float32), lengths=lengths[:2]),
        np.zeros((2, 3)))
    # Whitening removes a shift and a positive scale of the rewards.
    testing.assert_close(estimate(name, 5 * r + 2, valid=valid,
                                  lengths=lengths), out, atol=1e-5)
  one = estimate("reinforce_plus_plus_baseline", r[:, :1],
                 lengths=lengths[:, :1])
  np.testing.assert_array_equal(one, np.zeros((3, 1)))  # G = 1


# ----------------------------------------------------------------------- OPO


def test_opo_hand_case():
  # Baseline (10 * 1 + 2 * 0 + 8 * 0) / 20 = 0.5.
  out = advantages.opo(np.array([[1.0, 0.0, 0.0]]), lengths=[[10, 2, 8]])
  testing.assert_close(out, np.array([[0.5, -0.5, -0.5]]), atol=1e-6)


def test_opo_length_weighted_baseline_through_the_record():
  rng = np.random.default_rng(8)
  r = rng.normal(size=(3, 5)).astype(np.float32)
  lengths = rng.integers(1, 30, (3, 5))
  baseline = (lengths * r).sum(1, keepdims=True) / lengths.sum(1,
                                                                keepdims=True)
  testing.assert_close(estimate("opo", r, lengths=lengths), r - baseline,
                       atol=1e-5)


def test_opo_equal_or_unknown_lengths_is_dr_grpo():
  r = np.array([[3.0, 1.0, 2.0], [0.0, 1.0, 1.0]], np.float32)
  for lengths in (np.full((2, 3), 7), np.zeros((2, 3), int)):
    testing.assert_close(advantages.opo(r, lengths=lengths),
                         advantages.dr_grpo(r), atol=1e-6)
  # One group without lengths, one with: each by its own rule.
  mixed = advantages.opo(r, lengths=[[0, 0, 0], [1, 1, 2]])
  testing.assert_close(mixed, np.array([[1, -1, 0], [-0.75, 0.25, 0.25]]),
                       atol=1e-6)


def test_opo_constant_groups_and_groups_of_one_give_exact_zero():
  out = advantages.opo(np.full((1, 3), 0.7, np.float32), lengths=[[3, 7, 11]])
  np.testing.assert_array_equal(testing.numpy(out), np.zeros((1, 3)))
  one = advantages.opo(np.array([[0.3], [2.0]]), lengths=[[5], [9]])
  np.testing.assert_array_equal(testing.numpy(one), np.zeros((2, 1)))
  with pytest.raises(ValueError, match="lengths"):
    advantages.opo(np.zeros((2, 3)), lengths=np.zeros((3, 2)))


# -------------------------------------------------------------------- pass@k


def test_pass_at_k_credits_only_the_best():
  r = np.array([[0.2, 0.9, 0.5, 0.1]], np.float32)
  sd = np.std(r[0].astype(np.float64), ddof=1)
  expected = np.array([[0.0, (0.9 - 0.5) / (sd + EPS), 0.0, 0.0]])
  testing.assert_close(advantages.pass_at_k(r), expected, atol=1e-5)
  testing.assert_close(advantages.pass_at_k(r, scale="none"),
                       np.array([[0.0, 0.4, 0.0, 0.0]]), atol=1e-6)


def test_pass_at_k_binary_groups():
  """One right: it gets 1 / std (std of [1, 0, 0, 0] is 1/2); two right or
  none: the top is tied, and nobody is credited."""
  r = np.array([[0, 0, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], np.float32)
  expected = np.zeros((3, 4))
  expected[0, 2] = 1 / (0.5 + EPS)
  testing.assert_close(estimate("pass_at_k", r), expected, atol=1e-5)
  testing.assert_close(advantages.pass_at_k(r, ddof=0)[0, 2],
                       1 / (math.sqrt(3 / 16) + EPS), atol=1e-5)


def test_pass_at_k_small_groups():
  np.testing.assert_array_equal(
      testing.numpy(advantages.pass_at_k(np.array([[3.0], [1.0]]))),
      np.zeros((2, 1)))  # G = 1
  testing.assert_close(advantages.pass_at_k(np.array([[0.0, 1.0]])),
                       np.array([[0.0, 1 / (math.sqrt(0.5) + EPS)]]),
                       atol=1e-5)
  with pytest.raises(ValueError, match="scale"):
    advantages.pass_at_k(np.zeros((1, 2)), scale="batch")


def test_pass_at_k_is_nonnegative_and_nonzero_at_most_once():
  r = np.random.default_rng(9).integers(0, 4, (20, 5)).astype(np.float32)
  out = testing.numpy(advantages.pass_at_k(r))
  assert np.all(out >= 0) and np.all((out > 0).sum(1) <= 1)
  unique_top = np.sort(r, 1)[:, -1] > np.sort(r, 1)[:, -2]
  np.testing.assert_array_equal((out > 0).any(1), unique_top)
  np.testing.assert_array_equal(out.argmax(1)[unique_top],
                                r.argmax(1)[unique_top])


# ------------------------------------------- the rewards an estimator takes


def config_with(name, **kwargs):
  c = quickstart.get_config()
  c.advantage.name = name
  c.advantage.kwargs = kwargs
  return c


def test_bnpo_on_the_weighted_sum_needs_its_range_covered():
  """The default rewards, accuracy + 0.1 format, reach 1.1: BNPO of the sum
  fails at validation, naming the estimator, both ranges and the fix."""
  with pytest.raises(ValueError) as error:
    train.validate(config_with("bnpo", decompose=False))
  message = str(error.value)
  for part in ("config.advantage", "'bnpo'", "[0, 1]",
               "1*accuracy + 0.1*format reaches [0, 1.1]",
               "advantage.kwargs.r_min=0 and r_max=1.1", "rewards.weights"):
    assert part in message, (part, message)
  train.validate(config_with("bnpo", decompose=False, r_max=1.1))
  train.validate(config_with("bnpo"))  # each column is in [0, 1]


def test_bnpo_columns_must_each_fit():
  c = config_with("bnpo")
  c.rewards.shapers.overlong = dict(weight=1.0, max_length=40,
                                    cache_length=10)
  with pytest.raises(ValueError, match=r"'overlong' reaches \[-1, 0\]; set "
                     r"--config\.advantage\.kwargs\.r_min=-1 and r_max=1"):
    train.validate(c)
  c.advantage.kwargs = dict(r_min=-1.0, r_max=1.0)
  train.validate(c)
  c.rewards.shapers.overlong.weight = 0.0  # a column of weight 0 is unused
  c.advantage.kwargs = {}
  train.validate(c)


def test_a_reward_without_a_declared_range_is_named():
  with rewards.VERIFIERS.scoped():
    rewards.VERIFIERS.register("judge")(lambda p, c, a: [0.0] * len(c))
    c = config_with("bnpo")
    c.rewards.functions, c.rewards.weights = ("accuracy", "judge"), (1.0, 1.0)
    with pytest.raises(ValueError, match="'judge' declares no range"):
      train.validate(c)
    c.advantage.name, c.advantage.kwargs = "grpo", {}  # no domain
    train.validate(c)


def test_dvao_needs_two_reward_columns():
  c = config_with("dvao")
  c.rewards.functions, c.rewards.weights = ("accuracy",), (1.0,)
  with pytest.raises(ValueError, match=r"'dvao' needs at least 2 reward "
                     r"columns of nonzero weight.*gives 1 \(accuracy\)"):
    train.validate(c)
  c.rewards.functions, c.rewards.weights = ("accuracy", "format"), (1.0, 0.0)
  with pytest.raises(ValueError, match="dvao"):
    train.validate(c)
  c.rewards.weights = (1.0, 0.1)
  train.validate(c)


def test_weighted_sum_range_with_a_negative_weight():
  """[0, 1] - 0.5 [-1, 0] spans [0, 1.5]: each term's ends in order."""
  with pytest.raises(ValueError, match=r"1\*a \+ -0.5\*b reaches \[0, 1.5\]"):
    advantages.check_reward_columns(
        "bnpo", {"decompose": False}, columns=("a", "b"),
        weights=(1.0, -0.5), ranges=((0.0, 1.0), (-1.0, 0.0)))
  advantages.check_reward_columns(
      "bnpo", {"decompose": False, "r_max": 1.5}, columns=("a", "b"),
      weights=(1.0, -0.5), ranges=((0.0, 1.0), (-1.0, 0.0)))
  advantages.check_reward_columns(  # no domain: anything goes
      "grpo", {}, columns=("a",), weights=(3.0,), ranges=(None,))


def test_declared_reward_ranges_hold():
  assert rewards.column_ranges(("accuracy", "format"), ("overlong",)) == (
      (0.0, 1.0), (0.0, 1.0), (-1.0, 0.0))
  completions = ["The sum is \\boxed{7}", "7", "\\boxed{8} and more", ""]
  for name in ("accuracy", "format"):
    lo, hi = rewards.VERIFIERS.entry(name).meta.range
    values = np.asarray(rewards.get(name)(["q"] * 4, completions, ["7"] * 4))
    assert np.all((lo <= values) & (values <= hi)), (name, values)
    assert len(set(values)) == 2  # both ends reached here


def test_every_estimator_declares_its_needs():
  for name in advantages.names():
    info = advantages.meta(name)
    assert info.min_reward_columns >= 1
    assert info.reward_range_of in ("sum", "columns")
    domain = info.reward_range
    assert domain is None or domain[0] < domain[1]
  assert advantages.meta("bnpo", r_min=-2.0, r_max=3.0).reward_range == (
      -2.0, 3.0)
  assert advantages.meta("bnpo", decompose=False).reward_range_of == "sum"


@pytest.mark.parametrize("name", NAMES)
def test_the_estimator_traces_once_into_a_jitted_function(name):
  """It runs inside one jitted function of the group data (no host round
  trip), and new rewards of the same shapes do not trace it again."""
  data = groups.from_rewards(
      np.random.default_rng(10).integers(0, 2, (3, 4, 2)).astype(np.float32),
      [1.0, 0.5], lengths=np.arange(12).reshape(3, 4))
  estimator, traces = advantages.make(name), []

  def estimate(state, data):
    traces.append(name)
    return estimator.estimate(state, data)

  jitted = jax.jit(estimate)
  out, _ = jitted((), data)
  jitted((), data._replace(rewards=data.rewards + 1.0))
  assert out.shape == (3, 4) and len(traces) == 1


# ------------------------------------------------------------------ configs

CACHE_FLAGS = ("jax_compilation_cache_dir",
               "jax_persistent_cache_min_compile_time_secs",
               "jax_persistent_cache_min_entry_size_bytes")


@pytest.fixture(scope="module")
def compilation_cache(tmp_path_factory):
  """A persistent compilation cache for this module's configs, which share
  the tiny sampler and, by aggregation, the update (compiled once instead
  of once per config); jax's settings as they were afterwards."""
  before = {flag: getattr(jax.config, flag) for flag in CACHE_FLAGS}
  yield str(tmp_path_factory.mktemp("xla"))
  for flag, value in before.items():
    jax.config.update(flag, value)
  xla_cache.reset_cache()


# Every estimator's config, by the estimator's name: those of a registered
# estimator other than the objective variants' own (their configs are at the
# papers' scale). Each trains one step here, and only here.
ESTIMATOR_CONFIGS = tuple(
    name for name in advantages.names() if name not in ("grpo", "dr_grpo")
    and importlib.util.find_spec(f"configs.{name}") is not None)
# The quickstart's scale (prompts, completions, steps), but SPO's one sample.
SCALE = {"spo": (8, 1, 40)}


def check_ebpo(config, state, record):
  """Every row of the batch entered the running moments."""
  rows = config.rollout.num_prompts * config.rollout.num_generations
  assert float(state.states["advantage"].rewards.count) == rows


def check_avspo(config, state, record):
  """The collapse-rate EMA took one step (momentum 0.9) from 0."""
  del config
  assert float(state.states["advantage"].acr_ema) == pytest.approx(
      0.1 * record["advantage/collapse_rate"])


def check_spo(config, state, record):
  """The offline pass set every training problem's tracker to N_init =
  1 / (1 - rho_min) counts; then two prompts x 2 samples were counted at
  their slots, a first visit forgetting by rho_max (D = 0 under the
  KL-adaptive rho)."""
  options = config.advantage.kwargs
  assert options.rho == "kl_adaptive" and options.offline_init > 0
  tracker = state.states["advantage"]
  total = np.asarray(tracker.alpha + tracker.beta, np.float64)
  assert total.shape == (options.capacity,)
  n_init = 1.0 / (1.0 - options.rho_min)
  profiled = np.isclose(total, n_init, atol=1e-5)
  touched = ~profiled & (total != 1.0)  # 1.0: a slot no problem reached
  assert 1 <= touched.sum() <= 2
  assert profiled.sum() + touched.sum() == record["advantage/offline_problems"]
  testing.assert_close(total[touched].sum(),
                       (options.rho_max * n_init) * touched.sum() + 4.0,
                       atol=1e-4)


def check_riskpo(config, state, record):
  """The tracked quantiles have started."""
  del config, record
  assert float(state.states["advantage"].started) == 1.0


def check_mdp_grpo(config, state, record):
  """Each row scored at its member's temperature, on policy; the anchor
  gives every group a signal: no advantage is 0 unless a reward sits
  exactly at the anchor."""
  del config, state
  assert record["logprob/sampler_trainer_max_abs_diff"] < 1e-3
  assert np.isfinite(record["kl"])
  assert record["advantage/abs_mean"] > 0


def check_remax(config, state, record):
  """The greedy row was scored."""
  del config, state
  assert np.isfinite(record["reward/greedy_total"])


def check_sd_grpo(config, state, record):
  """SD-GRPO trains on the multi-part task, which gives segment rewards."""
  del state, record
  assert config.data.task == "segments"


# What a config's one step leaves, beyond a finite loss: (config, state,
# the step's record).
CHECKS = {"ebpo": check_ebpo, "avspo": check_avspo, "spo": check_spo,
          "riskpo": check_riskpo, "mdp_grpo": check_mdp_grpo,
          "remax": check_remax, "sd_grpo": check_sd_grpo}


@pytest.mark.parametrize("name", ESTIMATOR_CONFIGS)
def test_config_trains_one_step(name, compilation_cache, tmp_path):
  """The config `configs/<name>.py` is at the quickstart's scale and its
  `tiny` variant trains a step: finite measurements, a checkpoint."""
  config_module = importlib.import_module(f"configs.{name}")
  full = config_module.get_config()
  assert full.model.name == "smollm2-135m-instruct"
  assert full.advantage.name == name
  assert (full.rollout.num_prompts, full.rollout.num_generations,
          full.train.num_steps) == SCALE.get(name, (2, 4, 40))
  config = config_module.get_config("tiny")
  config.rewards.workers = 0  # scoring in this process: no worker start-up
  config.train.compilation_cache_dir = compilation_cache
  config.train.num_steps = 1
  config.eval.every = 0  # evaluation is tested in tests/test_train.py
  config.metrics.tensorboard = False
  config.metrics.plot = False
  state = train.train(config, str(tmp_path))
  [record] = metrics.read(str(tmp_path / metrics.METRICS_FILE))
  assert int(state.step) == 1 and record["skipped_updates"] == 0.0
  for field in ("loss", "advantage/abs_mean", "reward/total", "grad_norm"):
    assert np.isfinite(record[field]), (field, record)
  assert (tmp_path / "checkpoints" / "1").is_dir()
  CHECKS.get(name, lambda *_: None)(config, state, record)


def test_every_extra_check_has_its_config():
  """No per-config check goes unused."""
  assert set(CHECKS) <= set(ESTIMATOR_CONFIGS)
