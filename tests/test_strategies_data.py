"""The pure parts of the data strategies (VARIANTS.md section 4): budgets,
filters, replay (POPO, RePO), GHPO hints, AERO's rule and ragged groups.

Expected values are hand-derived (worked in the docstrings) or come from a
separate brute-force derivation in this file, never from the code tested.
"""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import advantages
from grpo_jax.strategies import budgets
from grpo_jax.strategies import buffer as buffer_lib
from grpo_jax.strategies import filters
from grpo_jax.strategies import hints
from grpo_jax.strategies import ragged
from grpo_jax.strategies import replay
from grpo_jax.strategies import repo

# ------------------------------------------------------------- Knapsack-RL


def test_knapsack_value_tables_match_the_spec():
  """value(n, p) = (1 - p^n - (1-p)^n) p (1-p)^2; at p = .5, n = 2:
  (1 - .25 - .25) * .5 * .25 = .0625."""
  n = np.arange(2, 9)
  np.testing.assert_allclose(
      budgets.knapsack_value(n, 0.5),
      [.0625, .09375, .109375, .117188, .121094, .123047, .124023], atol=1e-6)
  np.testing.assert_allclose(
      budgets.knapsack_value(n, 0.1),
      [.01458, .02187, .027848, .03317, .037953, .042258, .046132], atol=1e-6)
  np.testing.assert_array_equal(budgets.knapsack_value(n, 0.0), 0.0)
  np.testing.assert_array_equal(budgets.knapsack_value(n, 1.0), 0.0)


def test_knapsack_allocation_matches_the_spec_vector():
  """p = [.5, .1, .9, 0], budget 16, n in [2, 8] -> [5, 7, 2, 2], value
  .117188 + .042258 + .00162 + 0 = .161065 (.00162 = .18 * .9 * .01)."""
  n = budgets.knapsack_allocate([.5, .1, .9, 0.0], 16, n_min=2, n_max=8)
  np.testing.assert_array_equal(n, [5, 7, 2, 2])
  total = budgets.knapsack_value(n, np.array([.5, .1, .9, 0.0])).sum()
  np.testing.assert_allclose(total, 0.161065, atol=1e-6)


def _brute_force(p, budget, n_min, n_max):
  """Every allocation: the best value, then the smallest total, then the
  lexicographically smallest n (the documented tie rule)."""
  best = None
  for n in itertools.product(range(n_min, n_max + 1), repeat=len(p)):
    if sum(n) > budget:
      continue
    value = sum((1 - q**k - (1 - q)**k) * q * (1 - q)**2 for k, q in zip(n, p))
    key = (-round(value, 12), sum(n), n)
    if best is None or key < best:
      best = key
  return list(best[2])


@pytest.mark.parametrize("seed", range(6))
def test_knapsack_dp_is_exact_against_enumeration(seed):
  rng = np.random.default_rng(seed)
  p = np.round(rng.uniform(0.05, 0.95, size=4), 2)
  budget = int(rng.integers(8, 20))
  np.testing.assert_array_equal(
      budgets.knapsack_allocate(p, budget, n_min=2, n_max=6),
      _brute_force(p, budget, 2, 6))


def test_knapsack_ties_give_the_smaller_n_to_the_lower_index():
  # Two equal prompts, one spare completion: [2, 3] and [3, 2] tie.
  np.testing.assert_array_equal(
      budgets.knapsack_allocate([.5, .5], 5, n_min=2, n_max=3), [2, 3])


def test_knapsack_extremes_get_n_min_or_extreme_p_and_budget_may_go_unspent():
  # p in {0, 1} is worth nothing: n_min, and the rest fills to n_max only.
  np.testing.assert_array_equal(
      budgets.knapsack_allocate([0.0, .5, 1.0], 100, n_min=2, n_max=8),
      [2, 8, 2])
  # extreme_p = 4 reserves 4 each first; .5 gets the remaining 4.
  np.testing.assert_array_equal(
      budgets.knapsack_allocate([0.0, 1.0, .5], 12, n_min=2, n_max=8,
                                extreme_p=4), [4, 4, 4])


@pytest.mark.parametrize("kwargs, field", [
    (dict(success=[.5, .5], budget=3, n_min=2, n_max=4), "budget"),
    (dict(success=[.5], budget=8, n_min=4, n_max=2), "n_max"),
    (dict(success=[1.5], budget=8, n_min=2, n_max=4), "success"),
    (dict(success=[.5], budget=8, n_min=0, n_max=4), "n_min"),
    (dict(success=[0.0], budget=8, n_min=2, n_max=4, extreme_p=5),
     "extreme_p"),
])
def test_knapsack_bad_options_name_the_field(kwargs, field):
  success = kwargs.pop("success")
  budget = kwargs.pop("budget")
  with pytest.raises(ValueError, match=field):
    budgets.knapsack_allocate(success, budget, **kwargs)


def test_uniform_allocation_spreads_the_remainder_to_low_indices():
  np.testing.assert_array_equal(budgets.uniform_allocation(3, 10), [4, 3, 3])
  with pytest.raises(ValueError, match="budget"):
    budgets.uniform_allocation(3, 2)


# ------------------------------------------------------------ Pilot-Commit


def test_pilot_commit_matches_the_spec_vector():
  """s = [0, sqrt(3)/4, .5, 0]; 16 left split 7.42 / 8.58 -> 7 + 8, the
  remainder to prompt 2 (fraction .58) -> 9 > cap 8, its spare 1 to
  prompt 1 -> extra [0, 8, 8, 0], groups of 12."""
  out = budgets.pilot_commit_allocation(
      [[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]], 32, g_max=12)
  np.testing.assert_allclose(out.std, [0, math.sqrt(3) / 4, .5, 0], atol=1e-9)
  np.testing.assert_array_equal(out.skip, [True, False, False, True])
  np.testing.assert_array_equal(out.extra, [0, 8, 8, 0])


def test_pilot_commit_remainder_ties_go_to_the_lower_index():
  # Equal std, 3 left: shares 1.5 and 1.5 -> 1 + 1, the last to prompt 0.
  out = budgets.pilot_commit_allocation([[1, 0], [0, 1]], 7, g_max=10)
  np.testing.assert_array_equal(out.extra, [2, 1])


def test_pilot_commit_leaves_budget_unspent_when_every_prompt_is_capped():
  out = budgets.pilot_commit_allocation([[1, 0], [0, 0]], 100, g_max=5)
  np.testing.assert_array_equal(out.extra, [3, 0])
  with pytest.raises(ValueError, match="budget"):
    budgets.pilot_commit_allocation([[1, 0], [0, 0]], 3, g_max=5)
  with pytest.raises(ValueError, match="g_max"):
    budgets.pilot_commit_allocation([[1, 0], [0, 0]], 8, g_max=1)


# -------------------------------------------------------------------- sGPO


def test_sgpo_matches_the_spec_vector():
  """p = [1, .5, .1, 0, .3, .02], G in [2, 16], the zero kept:
  G = [-, 2, 10, 16, 4, 16] (ceil(1/.3) = 4, 1/.02 = 50 -> 16), order by
  descending p: [1, 4, 2, 5, 3]."""
  p = [1.0, .5, .1, 0.0, .3, .02]
  keep = budgets.sgpo_keep(p, seed=0, zero_keep_frac=1.0)
  np.testing.assert_array_equal(keep, [False, True, True, True, True, True])
  np.testing.assert_array_equal(
      budgets.sgpo_group_sizes(p, g_min=2, g_max=16)[1:], [2, 10, 16, 4, 16])
  np.testing.assert_array_equal(budgets.sgpo_order(p, keep), [1, 4, 2, 5, 3])


def test_sgpo_float32_tenth_gives_ten_and_zero_keep_is_keyed():
  assert budgets.sgpo_group_sizes([np.float32(0.1)], g_max=64)[0] == 10
  p = np.zeros(200)
  a = budgets.sgpo_keep(p, seed=(3, 1), zero_keep_frac=0.3)
  np.testing.assert_array_equal(a, budgets.sgpo_keep(p, seed=(3, 1),
                                                     zero_keep_frac=0.3))
  assert 30 < a.sum() < 90
  assert not budgets.sgpo_keep(p, seed=0, zero_keep_frac=0.0).any()


# -------------------------------------------------------------------- AERO


def test_aero_posterior_rule_hand_values():
  """All 4 correct, Beta(1, 1): a = 5, b = 1, P(k more all correct) =
  prod_{j<k} (5 + j) / (6 + j) = 5 / (5 + k) <= .5 first at k = 5; all 4
  wrong is the mirror image; a mixed group needs none."""
  np.testing.assert_array_equal(
      budgets.aero_extra_draws([4, 0, 2], [4, 4, 4], max_group=16), [5, 5, 0])
  # target .9: 5 / (5 + k) <= .1 needs k = 45, capped at 16 - 4 = 12.
  np.testing.assert_array_equal(
      budgets.aero_extra_draws([4], [4], max_group=16, target=0.9), [12])
  # One success in one draw: a = 2, b = 1, 2 / (2 + k) <= .5 at k = 2.
  np.testing.assert_array_equal(
      budgets.aero_extra_draws([1], [1], max_group=16), [2])


def test_aero_fixed_rule_and_bad_options():
  np.testing.assert_array_equal(
      budgets.aero_extra_draws([0, 14, 1], [2, 14, 2], max_group=16,
                               rule="fixed", chunk=4), [4, 2, 0])
  with pytest.raises(ValueError, match="rule"):
    budgets.aero_extra_draws([0], [2], max_group=4, rule="more")
  with pytest.raises(ValueError, match="target"):
    budgets.aero_extra_draws([0], [2], max_group=4, target=1.0)


# ----------------------------------------------------------------- ragged


def test_ragged_rows_lay_groups_out_prompt_major_with_padding():
  rows = ragged.ragged_rows(np.array([2, 0, 3]), 6)
  np.testing.assert_array_equal(rows.group, [0, 0, 2, 2, 2, -1])
  np.testing.assert_array_equal(rows.member, [0, 1, 0, 1, 2, -1])
  np.testing.assert_array_equal(rows.valid, [1, 1, 1, 1, 1, 0])
  with pytest.raises(ValueError, match="num_rows"):
    ragged.ragged_rows(np.array([4, 3]), 6)


def test_ragged_grpo_hand_values_and_padding_ignored():
  """Group 0 = [1, 0]: mean .5, std (ddof 1) sqrt(.5) -> +-.707107;
  group 2 = [1, 1, 0]: mean 2/3, std sqrt(1/3) -> .57735, .57735, -1.1547;
  the padding row's reward (5) enters nothing."""
  rows = ragged.ragged_rows(np.array([2, 0, 3]), 6)
  adv = jax.jit(ragged.ragged_grpo, static_argnums=3)(
      jnp.array([1, 0, 1, 1, 0, 5.0]), rows.group, rows.valid, 3)
  np.testing.assert_allclose(
      adv, [.707107, -.707107, .57735, .57735, -1.154701, 0], atol=1e-5)


# -------------------------------------------------------------------- GFPO

R6 = jnp.array([[1, 1, 0, 1, 0, 1.0]])
L6 = jnp.array([[100, 50, 80, 300, 40, 60]])


def test_gfpo_by_length_matches_the_spec_vector():
  """The 3 shortest are 4 (40), 1 (50), 5 (60) with R = [0, 1, 1]: mean 2/3,
  std (ddof 1) sqrt(1/3) -> A = [0, .577349, 0, 0, -1.154699, .577349]."""
  keep = filters.gfpo_keep(R6, L6, 3)
  np.testing.assert_array_equal(keep, [[0, 1, 0, 0, 1, 1]])
  np.testing.assert_allclose(
      filters.gfpo_advantages(R6, keep),
      [[0, .577349, 0, 0, -1.154699, .577349]], atol=1e-6)


def test_gfpo_by_reward_per_token_can_make_a_zero_variance_subset():
  """R / L = [.01, .02, 0, .0033, 0, .0167]: keep 1, 5, 0, all correct."""
  keep = filters.gfpo_keep(R6, L6, 3, score="reward_per_token")
  np.testing.assert_array_equal(keep, [[1, 1, 0, 0, 0, 1]])
  np.testing.assert_array_equal(filters.gfpo_advantages(R6, keep), 0.0)


def test_gfpo_differs_from_grpo_over_the_whole_group():
  keep = filters.gfpo_keep(R6, L6, 3)
  full = advantages.grpo(R6)
  kept = filters.gfpo_advantages(R6, keep)
  # GRPO gives member 1 (R = 1, mean 2/3 of six) (1/3) / sqrt(4/15).
  np.testing.assert_allclose(full[0, 1], (1 / 3) / math.sqrt(4 / 15),
                             atol=1e-5)
  assert abs(float(kept[0, 1] - full[0, 1])) > 0.05


def test_gfpo_keeps_per_prompt_k_and_breaks_length_ties_by_index():
  r = jnp.array([[1, 0, 1, 0], [0, 1, 1, 0.0]])
  n = jnp.array([[5, 5, 5, 5], [9, 3, 7, 1]])
  keep = jax.jit(filters.gfpo_keep)(r, n, jnp.array([2, 3]))
  np.testing.assert_array_equal(keep, [[1, 1, 0, 0], [0, 1, 1, 1]])


@pytest.mark.parametrize("k", [1, 6])
def test_gfpo_k_out_of_range_names_k(k):
  with pytest.raises(ValueError, match="k="):
    filters.gfpo_keep(R6, L6, k)
  with pytest.raises(ValueError, match="score"):
    filters.gfpo_keep(R6, L6, 3, score="shortest")


def test_difficulty_history_is_a_ring_and_gives_linear_quantiles():
  hist = filters.difficulty_history_init(4)
  hist = filters.difficulty_history_update(hist, jnp.array([.1, .2, .3]))
  hist = filters.difficulty_history_update(
      hist, jnp.array([.4, .9, .5]), valid=jnp.array([True, False, True]))
  # Slots 0..3 took .1 .2 .3 .4; .5 overwrote slot 0 (the oldest).
  np.testing.assert_allclose(hist.values, [.5, .2, .3, .4], atol=1e-7)
  assert int(hist.count) == 5
  # Sorted [.2, .3, .4, .5]; quantile q at position 3q: .275, .35, .425.
  np.testing.assert_allclose(filters.difficulty_thresholds(hist),
                             [.275, .35, .425], atol=1e-6)


def test_gfpo_adaptive_k_buckets_difficulty():
  d = filters.gfpo_difficulty(jnp.array([[1, 1, 1, 1], [1, 1, 1, 0],
                                         [1, 0, 0, 0], [0, 0, 0, 0.0]]))
  np.testing.assert_allclose(d, [0, .25, .75, 1])
  # Edges [.25, .5, .75]; side right: .25 -> bucket 1, .75 -> 3.
  k = filters.gfpo_adaptive_k(d, jnp.array([.25, .5, .75]), (2, 3, 4, 5))
  np.testing.assert_array_equal(k, [2, 3, 5, 5])
  with pytest.raises(ValueError, match="k_table"):
    filters.gfpo_adaptive_k(d, jnp.array([.25, .5, .75]), (2, 3, 4, 8),
                            group_size=8)


# -------------------------------------------------------------------- BPPO


def test_bppo_matches_the_spec_vector():
  """R = [1, 0, 1, 0, 0], len = [30, 12, 20, 25, 12]: shortest correct 2,
  shortest incorrect 1 (the tie with 4 to the lower index); GRPO over the
  group: mean .4, std sqrt(1.2 / 4) -> 1.095443 and -.730297."""
  r = jnp.array([[1, 0, 1, 0, 0.0]])
  keep = filters.bppo_keep(r > 0, jnp.array([[30, 12, 20, 25, 12]]))
  np.testing.assert_array_equal(keep, [[0, 1, 1, 0, 0]])
  np.testing.assert_allclose(advantages.grpo(r)[0, jnp.array([2, 1])],
                             [1.095443, -.730297], atol=1e-5)


def test_bppo_groups_without_both_classes_or_invalid_keep_nothing():
  correct = jnp.array([[1, 1, 1], [0, 0, 0], [1, 0, 0]], bool)
  n = jnp.array([[3, 2, 1], [3, 2, 1], [3, 2, 1]])
  np.testing.assert_array_equal(filters.bppo_keep(correct, n), [
      [0, 0, 0], [0, 0, 0], [1, 0, 1]])
  np.testing.assert_array_equal(
      filters.bppo_keep(correct, n, valid=jnp.array([1, 1, 0], bool)), 0)


def test_bppo_loss_mask_trains_the_prefix_of_the_two_kept_rows():
  lengths = np.array([30, 12, 20, 25, 12])
  mask = (np.arange(32)[None, :] < lengths[:, None]).astype(np.float32)
  out = np.asarray(filters.bppo_loss_mask(
      mask, np.array([1, 0, 1, 0, 0], bool), lengths, group_size=5,
      prefix_len=8))
  np.testing.assert_array_equal(out.sum(axis=1), [0, 8, 8, 0, 0])
  np.testing.assert_array_equal(out[1, :8], 1.0)
  # prefix_frac .5: ceil(.5 * 12) = 6 and ceil(.5 * 20) = 10 tokens.
  out = np.asarray(filters.bppo_loss_mask(
      mask, np.array([1, 0, 1, 0, 0], bool), lengths, group_size=5,
      prefix_len=None, prefix_frac=0.5))
  np.testing.assert_array_equal(out.sum(axis=1), [0, 6, 10, 0, 0])


def test_prefix_mask_counts_sampled_tokens_and_checks_its_options():
  mask = jnp.array([[0, 1, 1, 0, 1, 1.0]])
  np.testing.assert_array_equal(filters.prefix_mask(mask, prefix_len=3),
                                [[0, 1, 1, 0, 1, 0]])
  with pytest.raises(ValueError, match="prefix_len and prefix_frac"):
    filters.prefix_mask(mask, prefix_len=3, prefix_frac=0.5)
  with pytest.raises(ValueError, match="prefix_frac"):
    filters.prefix_mask(mask, prefix_len=None, prefix_frac=1.5)


# -------------------------------------------------------------------- POPO


def test_popo_weights_match_the_spec_vector():
  """exp(-1/2) .5 = .303265, exp(-3/2) .5 = .111565, exp(-1) .3 = .110364;
  normalised by their sum .525194."""
  np.testing.assert_allclose(
      replay.recency_quality_weights(jnp.array([1, 3, 2.0]),
                                     jnp.array([.5, .5, .3])),
      [0.577435, 0.212426, 0.210139], atol=1e-6)


def _groups(means, steps, g=10, t=3):
  """Rows for a group buffer: group i has round(means[i] * g) ones."""
  p = len(means)
  rewards = np.array([[1.0 if j < round(m * g) else 0.0 for j in range(g)]
                      for m in means], np.float32)
  return buffer_lib.RolloutBuffer(
      prompt_tokens=np.tile(np.arange(p)[:, None], (1, 2)).astype(np.int32),
      prompt_mask=np.ones((p, 2), np.float32),
      tokens=np.tile(np.arange(p)[:, None, None], (1, g, t)).astype(np.int32),
      mask=np.ones((p, g, t), np.float32),
      behaviour_logp=-np.ones((p, g, t), np.float32),
      advantages=np.zeros((p, g), np.float32), rewards=rewards,
      prompt_index=np.arange(p, dtype=np.int32),
      step=np.asarray(steps, np.int32), valid=np.zeros(p, bool))


def test_popo_group_buffer_reuses_the_rollout_buffer_and_weighs_by_mean():
  buf = replay.group_buffer_init(4, 10, 2, 3)
  assert buf.tokens.shape == (4, 10, 3) and buf.rewards.shape == (4, 10)
  buf = buffer_lib.add(buf, _groups([.5, .5, .3], [11, 9, 10]),
                       np.ones(3, bool))
  # At step 12 the ages are [1, 3, 2]: the spec vector, slot 3 free.
  np.testing.assert_allclose(
      replay.popo_probabilities(buf, 12, quality="mean"),
      [0.577435, 0.212426, 0.210139, 0], atol=1e-6)
  # Evicting ages above 2 drops slot 1.
  buf = buffer_lib.evict(buf, 12, 2)
  w = np.array([np.exp(-.5) * .5, 0, np.exp(-1.0) * .3, 0])
  np.testing.assert_allclose(
      replay.popo_probabilities(buf, 12, quality="mean"), w / w.sum(),
      atol=1e-6)


def test_popo_quality_std_is_unbiased_by_default():
  """[1, 0, 1, 0]: mean .5, sum of squares 1, / 3 -> sqrt(1/3)."""
  np.testing.assert_allclose(
      replay.popo_quality(jnp.array([[1, 0, 1, 0.0], [1, 1, 1, 1]])),
      [math.sqrt(1 / 3), 0], atol=1e-6)
  with pytest.raises(ValueError, match="quality"):
    replay.popo_quality(jnp.ones((1, 2)), quality="max")


def test_popo_refill_draws_distinct_groups_for_zero_variance_ones_in_order():
  buf = buffer_lib.add(replay.group_buffer_init(4, 10, 2, 3),
                       _groups([.5, .3], [11, 10]), np.ones(2, bool))
  zero = jnp.array([False, True, True, True])
  refill = jax.jit(replay.popo_refill)
  slots, replaced = refill(buf, jax.random.key(0), zero, 12)
  np.testing.assert_array_equal(replaced, [False, True, True, False])
  assert sorted(np.asarray(slots)[1:3].tolist()) == [0, 1]
  assert int(slots[0]) == -1 and int(slots[3]) == -1
  again = refill(buf, jax.random.key(0), zero, 12)
  np.testing.assert_array_equal(again[0], slots)


def test_popo_first_draw_frequencies_follow_the_probabilities():
  buf = buffer_lib.add(replay.group_buffer_init(3, 10, 2, 3),
                       _groups([.5, .5, .3], [11, 9, 10]), np.ones(3, bool))
  keys = jax.random.split(jax.random.key(1), 4000)
  first = jax.vmap(lambda k: replay.popo_refill(
      buf, k, jnp.array([True]), 12, quality="mean")[0][0])(keys)
  freq = np.bincount(np.asarray(first), minlength=3) / 4000
  np.testing.assert_allclose(freq, [0.577435, 0.212426, 0.210139], atol=0.03)


# -------------------------------------------------------------------- RePO


def _push(cache, slot_rewards, step=0, valid=None):
  """Push groups of rewards; a completion's token is its reward * 10 + step
  so the cache's content says where it came from."""
  r = jnp.asarray([rw for _, rw in slot_rewards], jnp.float32)
  p, g = r.shape
  tokens = jnp.broadcast_to((r * 10 + step).astype(jnp.int32)[..., None],
                            (p, g, 2))
  return repo.repo_push(cache, jnp.array([s for s, _ in slot_rewards]),
                        tokens, jnp.ones((p, g, 2)), -jnp.ones((p, g, 2)), r,
                        step, valid)


def test_repo_push_is_a_per_prompt_fifo():
  cache = repo.repo_init(3, 2, max_cache_size=4)
  cache = _push(cache, [(0, [1, 2, 3]), (2, [7, 8, 9])], step=0)
  # Slot 0 holds 1 2 3 right-aligned (position 0 empty).
  np.testing.assert_array_equal(cache.size, [3, 0, 3])
  np.testing.assert_array_equal(cache.rewards[0, 1:], [1, 2, 3])
  # The same prompt twice in one batch appends twice, in batch order; the
  # oldest fall out: 1 2 3 + 4 5 6 + 7 8 9 -> 6 7 8 9.
  cache = _push(cache, [(0, [4, 5, 6]), (0, [7, 8, 9])], step=1)
  np.testing.assert_array_equal(cache.rewards[0], [6, 7, 8, 9])
  np.testing.assert_array_equal(cache.step[0], [1, 1, 1, 1])
  np.testing.assert_array_equal(cache.size, [4, 0, 3])
  # A filler group is not stored.
  cache = _push(cache, [(1, [5, 5, 5])], step=2, valid=jnp.array([False]))
  assert int(cache.size[1]) == 0


def test_repo_highest_k_matches_the_spec_vector_and_the_rest_hand_values():
  cache = repo.repo_init(1, 2, max_cache_size=8)
  cache = _push(cache, [(0, [1, 0, 0, 1, 1, 0, 1, 1])])
  get = lambda s, k=3: repo.repo_retrieve(
      cache, jnp.array([0]), jax.random.key(0), strategy=s, num_replays=k,
      min_cache_to_replay=8)
  pos, ok = get("highest_k")
  np.testing.assert_array_equal(pos, [[0, 3, 4]])
  assert bool(ok.all())
  np.testing.assert_array_equal(get("recent_k")[0], [[5, 6, 7]])
  np.testing.assert_array_equal(get("all")[0], [list(range(8))])
  # The first 3-subset (lexicographic) of largest variance (2/9) and then
  # largest sum (2): {0, 1, 3} = rewards 1, 0, 1.
  np.testing.assert_array_equal(get("max_variance_k")[0], [[0, 1, 3]])


def _authors_max_variance(scores, k):
  """The authors' loop: strict > over itertools.combinations, variance
  unbiased=False in float32, then the sum."""
  best_var, best_sum, best = -np.inf, -np.inf, None
  for subset in itertools.combinations(range(len(scores)), k):
    vals = np.asarray([scores[j] for j in subset], np.float32)
    var, ssum = float(vals.var()), float(vals.sum())
    if var > best_var or (var == best_var and ssum > best_sum):
      best_var, best_sum, best = var, ssum, subset
  return list(best)


@pytest.mark.parametrize("seed", range(4))
def test_repo_max_variance_k_equals_the_authors_loop(seed):
  rng = np.random.default_rng(seed)
  scores = rng.integers(0, 3, size=8).astype(np.float32) / 2
  cache = _push(repo.repo_init(1, 2, max_cache_size=8), [(0, scores)])
  pos, _ = repo.repo_retrieve(cache, jnp.array([0]), None,
                              strategy="max_variance_k", num_replays=4,
                              min_cache_to_replay=8)
  np.testing.assert_array_equal(pos[0], _authors_max_variance(scores, 4))


def test_repo_partial_caches_and_the_replay_threshold():
  cache = _push(repo.repo_init(2, 2, max_cache_size=8), [(0, [2, 5, 1, 4, 3])])
  cache = _push(cache, [(1, [1, 2])])
  # Slot 0 holds 5 entries at positions 3..7; slot 1 two at 6, 7.
  get = lambda s, m=2: repo.repo_retrieve(
      cache, jnp.array([0, 1]), jax.random.key(0), strategy=s,
      num_replays=3, min_cache_to_replay=m)
  pos, ok = get("highest_k")
  np.testing.assert_array_equal(pos[0], [4, 6, 7])  # rewards 5, 4, 3
  # Slot 1 has 2 < k = 3 entries: both, then an invalid one.
  np.testing.assert_array_equal(pos[1, :2], [7, 6])
  np.testing.assert_array_equal(ok, [[1, 1, 1], [1, 1, 0]])
  pos, ok = get("max_variance_k")
  np.testing.assert_array_equal(ok, [[1, 1, 1], [0, 1, 1]])
  np.testing.assert_array_equal(pos[1, 1:], [6, 7])
  # Below min_cache_to_replay nothing replays.
  _, ok = get("recent_k", m=4)
  np.testing.assert_array_equal(ok, [[1, 1, 1], [0, 0, 0]])
  with pytest.raises(ValueError, match="min_cache_to_replay"):
    get("recent_k", m=9)
  with pytest.raises(ValueError, match="strategy"):
    get("best_k")


def test_repo_random_k_draws_distinct_filled_entries_given_the_key():
  cache = _push(repo.repo_init(1, 2, max_cache_size=8),
                [(0, [1, 2, 3, 4, 5])])
  draw = jax.jit(lambda key: repo.repo_retrieve(
      cache, jnp.array([0]), key, strategy="random_k", num_replays=4,
      min_cache_to_replay=4))
  pos, ok = draw(jax.random.key(3))
  assert bool(ok.all()) and len(set(np.asarray(pos[0]).tolist())) == 4
  assert np.all(np.asarray(pos) >= 3)
  np.testing.assert_array_equal(draw(jax.random.key(3))[0], pos)
  toks, _, old, rewards = repo.repo_take(cache, jnp.array([0]), pos)
  np.testing.assert_array_equal(toks[..., 0], rewards * 10)
  np.testing.assert_array_equal(old, -1.0)


def test_repo_advantages_match_the_spec_vectors():
  """on [1, 0, 0, 0]: mean .25, std sqrt(.75 / 3) = .5 -> 1.5, -.5; off
  [1, 1, 1] constant -> 0. Mixed: mean 4/7, std sqrt((12/7) / 6) ->
  (3/7) / .534522 = .801784 and (-4/7) / .534522 = -1.069045."""
  on, off, ok = (jnp.array([[1, 0, 0, 0.0]]), jnp.array([[1, 1, 1.0]]),
                 jnp.ones((1, 3), bool))
  a_on, a_off = repo.repo_advantages(on, off, ok)
  np.testing.assert_allclose(a_on, [[1.499997, -.499999, -.499999, -.499999]],
                             atol=1e-6)
  np.testing.assert_array_equal(a_off, 0.0)
  a_on, a_off = repo.repo_advantages(on, off, ok, mode="mixed")
  np.testing.assert_allclose(a_on, [[.801782, -1.069043, -1.069043,
                                     -1.069043]], atol=1e-5)
  np.testing.assert_allclose(a_off, [[.801782] * 3], atol=1e-5)


def test_repo_advantages_skip_invalid_replays_and_take_eps():
  """off [1, 0, x] with x invalid: mean .5, std sqrt(.5) -> +-.707107."""
  _, a_off = repo.repo_advantages(jnp.array([[1, 0.0]]),
                                  jnp.array([[1, 0, 9.0]]),
                                  jnp.array([[True, True, False]]))
  np.testing.assert_allclose(a_off, [[.707106, -.707106, 0]], atol=1e-5)
  a_on, _ = repo.repo_advantages(jnp.array([[1, 0, 0, 0.0]]),
                                 jnp.zeros((1, 1)), jnp.zeros((1, 1), bool),
                                 eps=1e-4)
  np.testing.assert_allclose(a_on[0, 0], .75 / (.5 + 1e-4), rtol=1e-6)
  with pytest.raises(ValueError, match="mode"):
    repo.repo_advantages(jnp.ones((1, 2)), jnp.ones((1, 1)),
                         jnp.ones((1, 1), bool), mode="joint")


# -------------------------------------------------------------------- GHPO


def test_ghpo_hints_cut_solution_tokens_with_half_to_even_rounding():
  decode = "".join
  cut = lambda sol, w: hints.hint_question("", list(sol), w, decode=decode,
                                           hint_text="|")
  assert [cut("abcdefgh", w) for w in hints.OMEGAS] == ["|ab", "|abcd",
                                                        "|abcdef"]
  # 10 tokens: round(2.5) = 2, round(5.0) = 5, round(7.5) = 8.
  assert [cut("abcdefghij", w) for w in hints.OMEGAS] == [
      "|ab", "|abcde", "|abcdefgh"]
  assert hints.hint_question("Q", [1], 0.0, decode=decode) == "Q"
  assert hints.hint_question("Q?", list("xy"), 0.5, decode=decode) == (
      "Q?" + hints.HINT_TEXT + "x")


def test_ghpo_needs_a_reference_solution():
  with pytest.raises(ValueError, match="reference solution"):
    hints.hint_question("Q", None, 0.25, decode="".join)


def test_ghpo_escalation_resamples_all_wrong_groups_up_to_the_last_level():
  acc = np.array([[0, 0], [1, 0], [0, -1], [0, 0]])
  levels, again = hints.ghpo_escalate(np.array([0, 0, 3, 1]), acc, step=5,
                                      start_hint_step=5)
  np.testing.assert_array_equal(levels, [1, 0, 3, 2])
  np.testing.assert_array_equal(again, [True, False, False, True])
  np.testing.assert_allclose(hints.ghpo_omega(levels), [.25, 0, .75, .5])
  _, again = hints.ghpo_escalate(np.zeros(4, int), acc, step=4,
                                 start_hint_step=5)
  assert not again.any()
  _, again = hints.ghpo_escalate(np.zeros(4, int), acc, step=5,
                                 valid=np.array([0, 1, 1, 1], bool))
  np.testing.assert_array_equal(again, [False, False, True, True])
  with pytest.raises(ValueError, match="omegas"):
    hints.ghpo_omega([0], omegas=(0.5, 0.25))
