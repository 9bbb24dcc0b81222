"""The rollout buffer (grpo_jax/strategies/buffer.py): add, evict, sample."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import registry
from grpo_jax.strategies import buffer as buffer_lib


def _rows(n, *, advantages, step, prompt_len=3, completion_len=4, first=0):
  """n rows whose tokens carry their ordinal (first, first + 1, ...), so a
  slot's content says which row landed there."""
  ids = np.arange(first, first + n)
  return buffer_lib.RolloutBuffer(
      prompt_tokens=np.tile(ids[:, None], (1, prompt_len)).astype(np.int32),
      prompt_mask=np.ones((n, prompt_len), np.float32),
      tokens=np.tile(ids[:, None], (1, completion_len)).astype(np.int32),
      mask=np.ones((n, completion_len), np.float32),
      behaviour_logp=-np.ones((n, completion_len), np.float32),
      advantages=np.asarray(advantages, np.float32),
      rewards=np.zeros((n,), np.float32),
      prompt_index=ids.astype(np.int32),
      step=np.full((n,), step, np.int32),
      valid=np.zeros((n,), bool))


def _filled(advantages, steps):
  """A buffer of len(steps) slots, slot i holding row i drawn at steps[i]."""
  buf = buffer_lib.init(len(steps), 3, 4)
  for i, (a, s) in enumerate(zip(advantages, steps)):
    keep = np.zeros(len(steps), bool)
    keep[i] = True
    # One row at a time into the free slots, which fill in slot order.
    rows = _rows(len(steps), advantages=[a] * len(steps), step=s, first=0)
    rows = rows._replace(tokens=np.full_like(rows.tokens, i))
    buf = buffer_lib.add(buf, rows, keep)
  return buf


def test_the_spec_vector_evicts_the_old_slot_and_weighs_by_abs_advantage():
  """VARIANTS 4.6: |A| = [.5, 0, 1.5, 1], drawn at steps [10, 9, 5, 8]; at
  step 12 with max age 4 slot 2 (age 7) leaves, and the first draw's
  chances are |A| over the rest with A != 0: .5 / 1.5 and 1 / 1.5."""
  buf = _filled([0.5, 0.0, -1.5, 1.0], [10, 9, 5, 8])
  buf = buffer_lib.evict(buf, 12, 4)
  np.testing.assert_array_equal(np.asarray(buf.valid),
                                [True, True, False, True])
  np.testing.assert_allclose(np.asarray(buffer_lib.probabilities(buf)),
                             [1 / 3, 0, 0, 2 / 3], rtol=1e-6)


def test_add_fills_free_slots_first_then_the_oldest():
  buf = buffer_lib.init(3, 3, 4)
  buf = buffer_lib.add(buf, _rows(2, advantages=[1, 2], step=5),
                       np.array([True, True]))
  # Slots 0 and 1 hold rows 0 and 1; slot 2 is free.
  np.testing.assert_array_equal(np.asarray(buf.valid), [True, True, False])
  np.testing.assert_array_equal(np.asarray(buf.tokens[:2, 0]), [0, 1])
  # Three new rows at step 7, the middle one not kept: the free slot 2
  # takes the first kept row (10), the oldest slot (0, step 5, lower slot
  # of the tie) the second (12).
  buf = buffer_lib.add(buf, _rows(3, advantages=[3, 4, 5], step=7, first=10),
                       np.array([True, False, True]))
  np.testing.assert_array_equal(np.asarray(buf.tokens[:, 0]), [12, 1, 10])
  np.testing.assert_array_equal(np.asarray(buf.step), [7, 5, 7])
  np.testing.assert_array_equal(np.asarray(buf.advantages), [5, 2, 3])
  np.testing.assert_array_equal(np.asarray(buf.prompt_index), [12, 1, 10])


def test_add_beyond_capacity_keeps_the_first_rows():
  buf = buffer_lib.add(buffer_lib.init(2, 3, 4),
                       _rows(4, advantages=[1, 1, 1, 1], step=0),
                       np.ones(4, bool))
  np.testing.assert_array_equal(np.asarray(buf.tokens[:, 0]), [0, 1])


def test_add_left_pads_shorter_prompts_and_refuses_longer_ones():
  buf = buffer_lib.init(2, 5, 4)
  buf = buffer_lib.add(buf, _rows(1, advantages=[1], step=0, prompt_len=3),
                       np.array([True]))
  np.testing.assert_array_equal(np.asarray(buf.prompt_mask[0]),
                                [0, 0, 1, 1, 1])
  with pytest.raises(ValueError, match="prompt_len"):
    buffer_lib.add(buf, _rows(1, advantages=[1], step=0, prompt_len=6),
                   np.array([True]))


def test_sample_draws_only_valid_nonzero_slots_and_flags_the_shortfall():
  buf = _filled([0.5, 0.0, 2.0, 1.0], [3, 3, 3, 3])
  buf = buf._replace(valid=jnp.array([True, True, True, False]))
  slots, drawn = buffer_lib.sample(buf, jax.random.PRNGKey(0), 3)
  # Two slots are eligible (0 and 2): both drawn, the third draw is empty.
  assert sorted(np.asarray(slots)[np.asarray(drawn)].tolist()) == [0, 2]
  np.testing.assert_array_equal(np.asarray(drawn), [True, True, False])


def test_the_first_draw_follows_the_probabilities():
  """Over 4000 keys the first slot drawn lands on slot i about p_i of the
  time (p = |A| / sum |A| = [.1, .2, .3, .4]; 3 standard errors)."""
  buf = _filled([0.1, -0.2, 0.3, 0.4], [0, 0, 0, 0])
  keys = jax.random.split(jax.random.PRNGKey(1), 4000)
  first = jax.jit(jax.vmap(lambda k: buffer_lib.sample(buf, k, 2)[0][0]))(keys)
  freq = np.bincount(np.asarray(first), minlength=4) / 4000
  p = np.array([0.1, 0.2, 0.3, 0.4])
  np.testing.assert_array_less(np.abs(freq - p), 3 * np.sqrt(p * (1 - p) / 4000))


def test_power_sharpens_the_priority():
  buf = _filled([1.0, 2.0], [0, 0])
  np.testing.assert_allclose(
      np.asarray(buffer_lib.probabilities(buf, power=2.0)), [0.2, 0.8],
      rtol=1e-6)


def test_operations_keep_shapes_under_jit():
  buf = _filled([1.0, 2.0, 3.0], [0, 1, 2])
  step = jax.jit(lambda b, now: buffer_lib.evict(b, now, 1))
  evicted = step(buf, 2)
  chex.assert_trees_all_equal_shapes_and_dtypes(evicted, buf)
  np.testing.assert_array_equal(np.asarray(evicted.valid), [False, True, True])
  taken = buffer_lib.take(buf, jnp.array([2, 0]))
  np.testing.assert_array_equal(np.asarray(taken.tokens[:, 0]), [2, 0])


def test_init_rejects_an_empty_buffer_and_sample_an_overdraw():
  # The capacity is a strategy's option: an OptionError naming it.
  with pytest.raises(registry.OptionError,
                     match=r"capacity must be an integer >= 1"):
    buffer_lib.init(0, 3, 4)
  with pytest.raises(ValueError, match="larger buffer"):
    buffer_lib.sample(buffer_lib.init(2, 3, 4), jax.random.PRNGKey(0), 3)
