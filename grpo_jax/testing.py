"""Helpers shared by the tests: chex asserts and small fixtures.

Tests import chex through this module so that tolerances and conventions live
in one place.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np

# float32 tolerances used across the suite unless a test says otherwise.
RTOL = 1e-5
ATOL = 1e-6


def assert_close(actual, expected, *, rtol=RTOL, atol=ATOL):
  """Trees of arrays are equal within tolerance (chex)."""
  chex.assert_trees_all_close(actual, expected, rtol=rtol, atol=atol)


def assert_finite(tree):
  """Every leaf of `tree` is free of NaN and inf."""
  chex.assert_tree_all_finite(tree)


def assert_shape(x, shape):
  chex.assert_shape(x, shape)


def random_logps(key, shape, *, scale=1.0):
  """Plausible log-probs (negative) of the given shape."""
  return -jnp.abs(jax.random.normal(key, shape)) * scale


def random_mask(key, shape, *, min_length=1):
  """A right-padded [N, T] mask with lengths in [min_length, T]."""
  n, t = shape
  lengths = jax.random.randint(key, (n,), min_length, t + 1)
  return (jnp.arange(t)[None, :] < lengths[:, None]).astype(jnp.float32)


def numpy(x):
  return np.asarray(jax.device_get(x))
