"""Tests of grpo_jax.aggregation: hand cases, padding, accumulation, checks."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import test_util as jtu

from grpo_jax import aggregation
from grpo_jax import testing

MODES = aggregation.MODES
HORIZON = 5

# Row 0 has 4 tokens (sum 10), row 1 has 2 (sum 30); 99 sits under padding.
VALUES = np.array([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 99.0, 99.0]], np.float32)
MASK = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], np.float32)
HAND = {
    "token_mean": 40.0 / 6,
    "seq_mean_token_mean": (10.0 / 4 + 30.0 / 2) / 2,
    "seq_mean_token_sum": (10.0 + 30.0) / 2,
    "seq_mean_token_sum_norm": 40.0 / (2 * HORIZON),
}


def _aggregate(values, mask, mode):
  return aggregation.aggregate(values, mask, mode, horizon=HORIZON)


def _random_batch(seed, shape=(5, 6)):
  k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
  values = jax.random.normal(k1, shape)
  mask = testing.random_mask(k2, shape, min_length=0)
  return values, mask


@pytest.mark.parametrize("mode", MODES)
def test_hand_case_with_unequal_lengths(mode):
  testing.assert_close(_aggregate(VALUES, MASK, mode), np.float32(HAND[mode]))


@pytest.mark.parametrize("mode", MODES)
def test_jit_matches_eager(mode):
  jitted = jax.jit(functools.partial(_aggregate, mode=mode))
  testing.assert_close(jitted(VALUES, MASK), _aggregate(VALUES, MASK, mode))


@pytest.mark.parametrize("mode", MODES)
def test_all_padding_row_contributes_nothing(mode):
  values = np.concatenate([VALUES, np.full((1, 4), 1e3, np.float32)])
  mask = np.concatenate([MASK, np.zeros((1, 4), np.float32)])
  # Dr. GRPO's denominator counts every row of the batch, padding or not.
  expected = 40.0 / (3 * HORIZON) if mode == "seq_mean_token_sum_norm" else (
      HAND[mode])
  testing.assert_close(_aggregate(values, mask, mode), np.float32(expected))
  grad = jax.grad(_aggregate)(jnp.asarray(values), mask, mode)
  testing.assert_finite(grad)
  np.testing.assert_array_equal(testing.numpy(grad)[2], np.zeros(4))


@pytest.mark.parametrize("mode", MODES)
def test_empty_batch_gives_zero(mode):
  for values, mask in ((np.zeros((0, 4)), np.zeros((0, 4))),
                       (np.ones((3, 4)), np.zeros((3, 4))),
                       (np.ones((3, 0)), np.ones((3, 0)))):
    out = _aggregate(values, mask, mode)
    np.testing.assert_array_equal(testing.numpy(out), 0.0)
    grad = jax.grad(_aggregate)(jnp.asarray(values, jnp.float32), mask, mode)
    testing.assert_finite(grad)


@pytest.mark.parametrize("mode", MODES)
def test_masked_equals_dropped_tokens(mode):
  # Trailing columns that are padding in every row change nothing.
  values, mask = _random_batch(0)
  padded_values = jnp.concatenate([values, jnp.full((5, 3), 7.0)], axis=1)
  padded_mask = jnp.concatenate([mask, jnp.zeros((5, 3))], axis=1)
  testing.assert_close(_aggregate(padded_values, padded_mask, mode),
                       _aggregate(values, mask, mode))


# A constant normaliser counts every row, empty or not.
PER_ROW = [m for m in MODES
           if not aggregation.AGGREGATIONS.entry(m).meta.needs_horizon]


@pytest.mark.parametrize("mode", PER_ROW)
def test_masked_equals_dropped_rows(mode):
  values, mask = _random_batch(1)
  mask = mask.at[1].set(0.0).at[3].set(0.0)
  kept = np.array([0, 2, 4])
  testing.assert_close(_aggregate(values, mask, mode),
                       _aggregate(values[kept], mask[kept], mode))


def test_equal_lengths_token_mean_equals_seq_mean_token_mean():
  values, _ = _random_batch(2)
  mask = jnp.ones((5, 6)).at[:, 4:].set(0.0)
  testing.assert_close(_aggregate(values, mask, "token_mean"),
                       _aggregate(values, mask, "seq_mean_token_mean"))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("splits", [(2,), (1, 3)])
def test_accumulated_sum_count_equals_one_shot(mode, splits):
  values, mask = _random_batch(3)
  mask = mask.at[2].set(0.0)  # an all-padding row inside a microbatch
  parts = [aggregation.sum_and_count(v, m, mode, horizon=HORIZON)
           for v, m in zip(jnp.split(values, splits), jnp.split(mask, splits))]
  total = aggregation.SumCount(sum(p.total for p in parts),
                               sum(p.count for p in parts))
  testing.assert_close(aggregation.divide(total),
                       _aggregate(values, mask, mode), atol=1e-5)


def test_token_mean_of_means_differs_from_one_shot():
  # The bug accumulation avoids: averaging microbatch means weights the
  # short microbatch (row 1, 2 tokens) as much as the long one (4 tokens).
  means = [_aggregate(VALUES[i:i + 1], MASK[i:i + 1], "token_mean")
           for i in range(2)]
  assert abs(float(sum(means) / 2) - HAND["token_mean"]) > 1.0


@pytest.mark.parametrize("horizon", [None, 0])
def test_sum_norm_needs_horizon(horizon):
  with pytest.raises(ValueError, match="horizon"):
    aggregation.aggregate(VALUES, MASK, "seq_mean_token_sum_norm",
                          horizon=horizon)


def test_unknown_mode_names_aggregation():
  with pytest.raises(ValueError, match="aggregation"):
    aggregation.aggregate(VALUES, MASK, "sum")


def test_shape_checks_name_the_argument():
  with pytest.raises(ValueError, match="values"):
    aggregation.aggregate(VALUES[0], MASK[0], "token_mean")
  with pytest.raises(ValueError, match="mask"):
    aggregation.aggregate(VALUES, MASK[None], "token_mean")
  with pytest.raises(ValueError, match="mask"):
    aggregation.aggregate(VALUES, MASK[:, :3], "token_mean")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_under_padding_does_not_leak(mode, bad):
  values = VALUES.copy()
  values[1, 2:] = bad
  testing.assert_close(_aggregate(values, MASK, mode), np.float32(HAND[mode]))
  grad = jax.grad(_aggregate)(jnp.asarray(values), MASK, mode)
  testing.assert_finite(grad)
  np.testing.assert_array_equal(testing.numpy(grad)[1, 2:], np.zeros(2))


def test_sequence_sum_and_count():
  values = jnp.array([1.0, jnp.nan, 3.0])
  sc = aggregation.sequence_sum_and_count(values, jnp.array([1.0, 0.0, 1.0]))
  testing.assert_close(sc.total, np.float32(4.0))
  testing.assert_close(sc.count, np.float32(2.0))
  testing.assert_close(aggregation.divide(sc), np.float32(2.0))


@pytest.mark.parametrize("mode", MODES)
def test_check_grads(mode):
  values, mask = _random_batch(4, shape=(3, 4))
  jtu.check_grads(lambda v: _aggregate(v, mask, mode), (values,), order=1,
                  modes=("fwd", "rev"), atol=1e-2, rtol=1e-2)


def test_sequence_sum_and_count_checks_shapes():
  with pytest.raises(ValueError, match="row_mask"):
    aggregation.sequence_sum_and_count(jnp.ones(3), jnp.ones(2))
  with pytest.raises(ValueError, match="values"):
    aggregation.sequence_sum_and_count(jnp.ones((3, 1)), jnp.ones((3, 1)))


def test_accepts_lists_and_numpy():
  out = aggregation.aggregate(VALUES.tolist(), MASK.tolist(), "token_mean")
  testing.assert_close(out, np.float32(HAND["token_mean"]))
