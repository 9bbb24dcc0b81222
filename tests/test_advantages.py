"""Tests of grpo_jax.advantages against hand-computed values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import advantages
from grpo_jax import groups
from grpo_jax import testing
from grpo_jax.testing import estimator_laws as laws

# One group with signal, one without.
REWARDS = np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]], np.float32)
SQRT3 = np.sqrt(3.0)


def test_grpo_group_std_hand_case():
  # Group 1: mean 0.5, deviations +-0.5, unbiased std sqrt(4*0.25/3)=1/sqrt(3).
  expected = np.array([[1, -1, -1, 1], [0, 0, 0, 0]]) * 0.5 / (1 / SQRT3 + 1e-6)
  testing.assert_close(advantages.grpo(REWARDS), expected.astype(np.float32))


def test_grpo_ddof_zero_uses_population_std():
  # Population std of group 1 is 0.5.
  expected = np.array([[1, -1, -1, 1], [0, 0, 0, 0]]) * 0.5 / (0.5 + 1e-6)
  testing.assert_close(advantages.grpo(REWARDS, ddof=0), expected)


def test_grpo_eps_is_added_to_the_std():
  expected = np.array([[1, -1, -1, 1], [0, 0, 0, 0]]) * 0.5 / (1 / SQRT3 + 0.5)
  testing.assert_close(advantages.grpo(REWARDS, eps=0.5), expected)


def test_grpo_batch_scale_divides_by_the_batch_std():
  # All 8 rewards: mean 0.75, squared deviations 2*0.5625 + 6*0.0625 = 1.5,
  # unbiased variance 1.5/7. Centring stays per group.
  batch_std = np.sqrt(1.5 / 7)
  expected = np.array([[1, -1, -1, 1], [0, 0, 0, 0]]) * 0.5 / (batch_std + 1e-6)
  testing.assert_close(advantages.grpo(REWARDS, scale="batch"), expected)


def test_grpo_scale_none_is_the_centred_reward():
  expected = np.array([[0.5, -0.5, -0.5, 0.5], [0, 0, 0, 0]])
  testing.assert_close(advantages.grpo(REWARDS, scale="none"), expected)


def test_dr_grpo_hand_case():
  rewards = np.array([[3.0, 1.0, 2.0]], np.float32)  # mean 2
  testing.assert_close(advantages.dr_grpo(rewards), np.array([[1.0, -1.0, 0.0]]))


def test_rloo_hand_case():
  # R_j minus the mean of the two others: 3-1.5, 1-2.5, 2-2.
  rewards = np.array([[3.0, 1.0, 2.0]], np.float32)
  testing.assert_close(advantages.rloo(rewards), np.array([[1.5, -1.5, 0.0]]))


def test_rloo_equals_leave_one_out_loop_and_scaled_centring():
  rewards = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
  p, g = rewards.shape
  loop = np.array([[rewards[i, j] - np.delete(rewards[i], j).mean()
                    for j in range(g)] for i in range(p)])
  scaled = g / (g - 1) * (rewards - rewards.mean(axis=1, keepdims=True))
  testing.assert_close(advantages.rloo(rewards), loop, atol=1e-5)
  testing.assert_close(advantages.rloo(rewards), scaled, atol=1e-5)


@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, -7.3])
def test_zero_variance_group_gives_exact_zero(value):
  rewards = jnp.full((2, 3), value, jnp.float32)
  for out in (advantages.grpo(rewards), advantages.grpo(rewards, eps=0.0),
              advantages.grpo(rewards, scale="batch", eps=0.0),
              advantages.grpo(rewards, scale="none"),
              advantages.dr_grpo(rewards), advantages.rloo(rewards)):
    np.testing.assert_array_equal(testing.numpy(out), np.zeros((2, 3)))


def test_groups_of_one_give_zero_with_ddof_one():
  rewards = jnp.array([[2.0], [5.0]])
  for out in (advantages.grpo(rewards, ddof=1),
              advantages.grpo(rewards, scale="batch", ddof=1),
              advantages.dr_grpo(rewards), advantages.rloo(rewards)):
    np.testing.assert_array_equal(testing.numpy(out), np.zeros((2, 1)))


def test_two_completions_per_group():
  # 2-GRPO: deviations +-0.5, unbiased std sqrt(0.5); RLOO: R_j - R_other.
  rewards = np.array([[1.0, 0.0], [0.0, 2.0]], np.float32)
  grpo_expected = np.array([[0.5, -0.5], [-1.0, 1.0]]) / (
      np.array([[np.sqrt(0.5)], [np.sqrt(2.0)]]) + 1e-6)
  testing.assert_close(advantages.grpo(rewards), grpo_expected)
  testing.assert_close(advantages.rloo(rewards),
                       np.array([[1.0, -1.0], [-2.0, 2.0]]))


def test_bfloat16_rewards_are_computed_in_float32():
  rewards = jnp.array([[0.3, 0.7, 0.9]], jnp.bfloat16)
  exact = np.asarray(rewards, np.float32)  # the bf16 values, in float32
  centred = exact - exact.mean()
  expected = centred / (exact.std(ddof=1) + 1e-6)
  out = advantages.grpo(rewards)
  assert out.dtype == jnp.float32
  testing.assert_close(out, expected, atol=1e-5)
  assert advantages.rloo(rewards).dtype == jnp.float32
  assert advantages.dr_grpo(rewards).dtype == jnp.float32


def test_gradient_is_finite_at_constant_groups():
  grad = jax.grad(lambda r: (advantages.grpo(r) * jnp.arange(3.0)[None, :]).sum())(
      jnp.ones((2, 3)))
  testing.assert_finite(grad)


def test_multi_reward_sum_then_normalize_hand_case():
  # Weighted sum 1*R1 + 2*R2: group 1 [2, 1, 0, 3] (mean 1.5, squared
  # deviations 0.25+0.25+2.25+2.25=5, unbiased std sqrt(5/3)); group 2 [3]*4.
  rewards = np.array([[[0, 1], [1, 0], [0, 0], [1, 1]],
                      [[1, 1], [1, 1], [1, 1], [1, 1]]], np.float32)
  expected = np.array([[0.5, -0.5, -1.5, 1.5], [0, 0, 0, 0]]) / (
      np.sqrt(5 / 3) + 1e-6)
  out = advantages.multi_reward(rewards, np.array([1.0, 2.0]))
  testing.assert_close(out, expected)


def test_multi_reward_normalize_then_sum_hand_case():
  # Per reward, group 1: R1 [0,1,0,1] and R2 [1,0,0,1] both give
  # +-0.5/(1/sqrt(3)+eps) = +-a. Weighted sum 1*A1 + 2*A2 = [a, -a, -3a, 3a];
  # group 2 is collapsed: 0. Batch of 8: mean 0, squared deviations 20a^2,
  # unbiased std a*sqrt(20/7).
  rewards = np.array([[[0, 1], [1, 0], [0, 0], [1, 1]],
                      [[1, 1], [1, 1], [1, 1], [1, 1]]], np.float32)
  a = 0.5 / (1 / SQRT3 + 1e-6)
  combined = np.array([[a, -a, -3 * a, 3 * a], [0, 0, 0, 0]])
  expected = combined / (a * np.sqrt(20 / 7) + 1e-6)
  out = advantages.multi_reward(rewards, np.array([1.0, 2.0]),
                                mode="normalize_then_sum")
  testing.assert_close(out, expected, atol=1e-5)
  np.testing.assert_array_equal(testing.numpy(out)[1], np.zeros(4))


def test_multi_reward_modes_differ_when_rewards_have_different_scales():
  rewards = np.array([[[0, 0], [1, 10], [0, 20], [1, 0]]], np.float32)
  w = np.ones(2, np.float32)
  a = advantages.multi_reward(rewards, w, mode="sum_then_normalize")
  b = advantages.multi_reward(rewards, w, mode="normalize_then_sum")
  assert not np.allclose(testing.numpy(a), testing.numpy(b), atol=1e-3)


def test_multi_reward_checks_inputs():
  rewards = jnp.zeros((2, 3, 2))
  with pytest.raises(ValueError, match="weights"):
    advantages.multi_reward(rewards, jnp.ones(3))
  with pytest.raises(ValueError, match="rewards"):
    advantages.multi_reward(jnp.zeros((2, 3)), jnp.ones(3))
  with pytest.raises(ValueError, match="mode"):
    advantages.multi_reward(rewards, jnp.ones(2), mode="product")


def test_collapse_rate_two_dimensional():
  rewards = np.array([[1, 0, 1], [1, 1, 1], [0, 0, 0], [0.5, 0.5, 0.25]])
  testing.assert_close(advantages.collapse_rate(rewards), np.float32(0.5))


def test_collapse_rate_needs_every_reward_constant():
  # Group 1: R1 constant, R2 not; group 2: both constant.
  rewards = np.array([[[1, 0], [1, 1]], [[0, 2], [0, 2]]], np.float32)
  testing.assert_close(advantages.collapse_rate(rewards), np.float32(0.5))


# [P=3, G=2, K=2]: group 0 varies only in its second reward, group 1's rewards
# vary but their sum does not, group 2's sum varies.
SIGNAL_REWARDS = np.array([[[0, 1], [0, 0]], [[1, 0], [0, 1]],
                           [[1, 1], [0, 0]]], np.float32)


def test_collapse_rate_reads_the_weights():
  """A reward of weight 0 gives no signal: group 0 gets exactly zero
  advantages from every estimator, so it counts as collapsed."""
  weights = np.array([1.0, 0.0], np.float32)
  for per_reward in (False, True):
    testing.assert_close(
        advantages.collapse_rate(SIGNAL_REWARDS, weights,
                                 per_reward=per_reward), np.float32(1 / 3))
  assert float(advantages.collapse_rate(SIGNAL_REWARDS)) == 0.0  # unweighted


def test_collapse_rate_is_the_share_of_all_zero_groups():
  """collapse_rate(per_reward=input == "PGK") is exactly the share of groups
  whose advantages are all 0, for every estimator that gives a constant
  group 0 (not REINFORCE++, which has no group baseline) and these weights
  (equal weights would let GDPO's and DVAO's normalised opposite rewards in
  group 1 cancel; see `groups.has_signal`)."""
  zero_for_constant = [name for name in advantages.names()
                       if advantages.meta(name).constant_group_zero]
  for weights in ([1.0, 0.0], [1.0, 0.5], [0.5, 2.0]):
    # Nonempty completions (EDGE-GRPO gives an empty one 0), and every
    # field an estimator may read (entropies, answer ids, ...).
    data = groups.from_rewards(SIGNAL_REWARDS, weights,
                               lengths=np.full(SIGNAL_REWARDS.shape[:2], 4))
    data = data._replace(**laws.group_fields(
        jax.random.PRNGKey(0), data.rewards, data.lengths))
    for name in zero_for_constant:
      estimator = advantages.make(name)
      adv, _ = estimator.estimate(estimator.init(), data)
      zero = float((np.abs(testing.numpy(adv)).max(-1) == 0).mean())
      rate = advantages.collapse_rate(SIGNAL_REWARDS, weights,
                                      per_reward=estimator.input == "PGK")
      testing.assert_close(rate, np.float32(zero))


def test_has_signal_sum_and_per_reward():
  summed = groups.has_signal(SIGNAL_REWARDS, [1.0, 1.0], per_reward=False)
  np.testing.assert_array_equal(testing.numpy(summed), [True, False, True])
  each = groups.has_signal(SIGNAL_REWARDS, [1.0, 1.0], per_reward=True)
  np.testing.assert_array_equal(testing.numpy(each), [True, True, True])
  weighted = groups.has_signal(SIGNAL_REWARDS, [1.0, 0.0], per_reward=True)
  np.testing.assert_array_equal(testing.numpy(weighted), [False, True, True])


def test_collapse_rate_counts_valid_groups_only():
  rewards = np.array([[1, 0], [1, 1], [0, 0]], np.float32)
  testing.assert_close(advantages.collapse_rate(rewards), np.float32(2 / 3))
  testing.assert_close(advantages.collapse_rate(
      rewards, valid=np.array([True, False, True])), np.float32(0.5))
  testing.assert_close(advantages.collapse_rate(
      rewards, valid=np.zeros(3, bool)), np.float32(0.0))


# Two groups with signal and one filler whose rewards are far apart.
FILLED = np.array([[1.0, 0.0, 0.0, 1.0], [3.0, 1.0, 2.0, 2.0],
                   [0.0, 50.0, -50.0, 9.0]], np.float32)
VALID = np.array([True, True, False])


def test_batch_scale_std_ignores_filler_groups():
  """scale="batch": the std is over the valid groups' rewards only, and a
  filler group gets 0. Masked equals dropped."""
  out = testing.numpy(advantages.grpo(FILLED, scale="batch", valid=VALID))
  # The valid 8 rewards: mean 1.25, squared deviations 3 * 0.0625 +
  # 2 * 1.5625 + 3.0625 + 2 * 0.5625 = 7.5, unbiased variance 7.5 / 7.
  centred = FILLED[:2] - FILLED[:2].mean(-1, keepdims=True)
  testing.assert_close(out[:2], centred / (np.sqrt(7.5 / 7) + 1e-6))
  testing.assert_close(out[:2], advantages.grpo(FILLED[:2], scale="batch"))
  np.testing.assert_array_equal(out[2], np.zeros(4))


def test_gdpo_batch_renormalisation_ignores_filler_groups():
  rewards = np.stack([FILLED, FILLED[:, ::-1] * 0.5], axis=-1)  # K = 2
  weights = np.array([1.0, 2.0], np.float32)
  out = testing.numpy(advantages.gdpo(rewards, weights, valid=VALID))
  testing.assert_close(out[:2], advantages.gdpo(rewards[:2], weights),
                       atol=1e-5)
  np.testing.assert_array_equal(out[2], np.zeros(4))
  testing.assert_close(
      advantages.multi_reward(rewards, weights, mode="normalize_then_sum",
                              valid=VALID), out)


def test_valid_none_is_every_group_valid():
  testing.assert_close(advantages.grpo(FILLED, scale="batch"),
                       advantages.grpo(FILLED, scale="batch",
                                       valid=np.ones(3, bool)))
  with pytest.raises(ValueError, match="valid"):
    advantages.grpo(FILLED, valid=np.ones(2, bool))


def test_gdpo_is_multi_reward_normalize_then_sum():
  rewards = np.random.default_rng(1).integers(0, 3, (4, 5, 3)).astype(
      np.float32)
  weights = np.array([1.0, 0.5, -0.2], np.float32)
  for options in ({}, {"ddof": 0}, {"eps": 1e-4}):
    testing.assert_close(
        advantages.gdpo(rewards, weights, **options),
        advantages.multi_reward(rewards, weights, mode="normalize_then_sum",
                                **options))


def test_records_see_the_weighted_sum_or_the_columns():
  """A PG estimator gets sum_k w_k R_k, a PGK one the columns and weights."""
  rewards = np.random.default_rng(2).normal(size=(3, 4, 2)).astype(np.float32)
  weights = np.array([1.0, 0.25], np.float32)
  data = groups.from_rewards(rewards, weights)
  estimator = advantages.make("grpo", scale="batch", ddof=0)
  adv, state = estimator.estimate(estimator.init(), data)
  assert state == ()
  testing.assert_close(adv, advantages.grpo(
      (rewards * weights).sum(-1), scale="batch", ddof=0), atol=1e-5)
  estimator = advantages.make("gdpo", eps=1e-4)
  adv, _ = estimator.estimate((), data)
  testing.assert_close(adv, advantages.gdpo(rewards, weights, eps=1e-4))


def test_collapse_rate_groups_of_one_and_empty_batch():
  testing.assert_close(advantages.collapse_rate(np.ones((3, 1))), np.float32(1))
  testing.assert_close(advantages.collapse_rate(np.ones((0, 4))), np.float32(0))
  with pytest.raises(ValueError, match="rewards"):
    advantages.collapse_rate(np.ones(4))


def test_rank_and_option_checks_name_the_argument():
  with pytest.raises(ValueError, match="rewards"):
    advantages.grpo(jnp.ones(4))
  with pytest.raises(ValueError, match="rewards"):
    advantages.rloo(jnp.ones((2, 2, 2)))
  with pytest.raises(ValueError, match="scale"):
    advantages.grpo(jnp.ones((2, 2)), scale="global")
  with pytest.raises(ValueError, match="ddof"):
    advantages.grpo(jnp.ones((2, 2)), ddof=2)
