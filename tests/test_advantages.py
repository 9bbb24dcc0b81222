"""Tests of grpo_jax.advantages against hand-computed values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import advantages
from grpo_jax import testing

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


def test_registry():
  assert advantages.names() == ("dr_grpo", "grpo", "rloo")
  assert advantages.get("rloo") is advantages.rloo
  with pytest.raises(ValueError, match="dr_grpo, grpo, rloo"):
    advantages.get("ppo")


@pytest.mark.parametrize("name", advantages.names())
def test_estimator_contract(name):
  estimator = advantages.get(name)
  batch = jax.random.bernoulli(jax.random.PRNGKey(0), 0.5, (3, 2, 4)).astype(
      jnp.float32)
  out = testing.assert_jit_and_vmap_match_eager(estimator, batch)
  testing.assert_shape(out, (2, 4))
  assert out.dtype == jnp.float32
  constant = jax.jit(estimator)(jnp.ones((2, 4)))
  testing.assert_finite(constant)
  np.testing.assert_array_equal(testing.numpy(constant), np.zeros((2, 4)))
