"""Tests of grpo_jax.kl: hand values, gradients, extremes, contract."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import test_util as jtu

from grpo_jax import kl
from grpo_jax import testing

# d = ref_logp - logp = [[0.5, -1.0, 0.0], [2.0, -0.25, 50.0 -> clamped]].
LOGP = np.array([[-1.0, -0.5, -2.0], [-3.0, -1.0, -60.0]], np.float32)
REF_LOGP = np.array([[-0.5, -1.5, -2.0], [-1.0, -1.25, -10.0]], np.float32)
D = REF_LOGP - LOGP


def test_k1_hand_values():
  expected = np.array([[-0.5, 1.0, 0.0], [-2.0, 0.25, -50.0]])
  testing.assert_close(kl.k1(LOGP, REF_LOGP), expected)


def test_k2_hand_values():
  expected = np.array([[0.125, 0.5, 0.0], [2.0, 0.03125, 1250.0]])
  testing.assert_close(kl.k2(LOGP, REF_LOGP), expected)


def test_k3_hand_values():
  d = np.array([[0.5, -1.0, 0.0], [2.0, -0.25, 20.0]])  # 50 clamps to 20
  expected = np.exp(d) - d - 1
  testing.assert_close(kl.k3(LOGP, REF_LOGP), expected)


@pytest.mark.parametrize("name", ["k1", "k2", "k3"])
def test_zero_when_policy_equals_reference(name):
  out = kl.get(name)(LOGP, LOGP)
  np.testing.assert_array_equal(testing.numpy(out), np.zeros_like(LOGP))


def naive_k3(logp, ref_logp):
  d = ref_logp - logp
  return jnp.exp(d) - d - 1.0


def test_k3_is_nonnegative_near_zero():
  # k3 = d^2/2 + O(d^3) >= 0, but in float32 exp(d) for d ~ 1e-4 is rounded
  # to a 2^-23 grid step around 1, an error larger than d^2/2, so the naive
  # exp(d) - d - 1 can round to -2^-24. At logp = -1 every d is a multiple of
  # 2^-24 and the rounding happens to stay >= 0; at logp = -0.1 the d are
  # finer than the grid and some go negative.
  logp = jnp.full((1, 20001), -0.1, jnp.float32)
  ref_logp = (-0.1 + np.linspace(-1e-3, 1e-3, 20001)).astype(np.float32)[None]
  # The inputs must be able to catch the naive formula.
  assert (testing.numpy(naive_k3(logp, ref_logp)) < 0).any()
  assert (testing.numpy(kl.k3(logp, ref_logp)) >= 0).all()
  assert (testing.numpy(jax.jit(kl.k3)(logp, ref_logp)) >= 0).all()


@pytest.mark.parametrize("d", [50.0, -50.0, 1e4, -1e4])
def test_k3_finite_values_and_gradients_at_extremes(d):
  logp = jnp.full((1, 2), -1.0)
  ref_logp = logp + d
  testing.assert_finite(kl.k3(logp, ref_logp))
  grads = jax.grad(lambda a, b: kl.k3(a, b).sum(), argnums=(0, 1))(
      logp, ref_logp)
  testing.assert_finite(grads)


def test_k3_gradient_hand_values():
  # d/dlogp [exp(d) - d - 1] = 1 - exp(d); zero beyond the clamp (d=50).
  grad = jax.grad(lambda x: kl.k3(x, REF_LOGP).sum())(jnp.asarray(LOGP))
  expected = 1 - np.exp(D)
  expected[1, 2] = 0.0
  testing.assert_close(grad, expected, rtol=1e-5)


def test_k2_gradient_is_the_log_ratio():
  # On policy, grad KL = E[grad(logp) * (logp - ref_logp)]: k2's gradient with
  # respect to logp is exactly k1 = -d.
  grad = jax.grad(lambda x: kl.k2(x, REF_LOGP).sum())(jnp.asarray(LOGP))
  testing.assert_close(grad, -D)
  testing.assert_close(grad, kl.k1(LOGP, REF_LOGP))


def test_bfloat16_inputs_give_float32():
  out = kl.k3(LOGP.astype(jnp.bfloat16), REF_LOGP.astype(jnp.bfloat16))
  assert out.dtype == jnp.float32


def test_shape_checks_name_the_argument():
  with pytest.raises(ValueError, match="logp"):
    kl.k3(jnp.zeros(3), jnp.zeros(3))
  with pytest.raises(ValueError, match="ref_logp"):
    kl.k1(jnp.zeros((2, 3)), jnp.zeros((2, 4)))


def test_registry():
  assert kl.names() == ("k1", "k2", "k3")
  assert kl.get("k3") is kl.k3
  with pytest.raises(ValueError, match="k1, k2, k3"):
    kl.get("k4")


@pytest.mark.parametrize("name", kl.names())
def test_kl_contract(name):
  estimator = kl.get(name)
  logp = testing.random_logps(jax.random.PRNGKey(2), (3, 2, 5))
  ref_logp = testing.random_logps(jax.random.PRNGKey(3), (3, 2, 5))
  out = testing.assert_jit_and_vmap_match_eager(estimator, logp, ref_logp)
  testing.assert_shape(out, (2, 5))
  assert out.dtype == jnp.float32
  # Points well inside the clamp, so finite differences see a smooth function.
  jtu.check_grads(estimator, (logp[0], ref_logp[0]), order=1,
                  modes=("fwd", "rev"), atol=1e-2, rtol=1e-2)
