"""NGRPO's and RiskPO's configs score with the papers' binary reward.

Both estimators assume it. NGRPO's virtual member sits at r_max, and a
constant group's z-score against it does not depend on the gap, so with
the quickstart's 0.1 format bonus (r_max 1.1) an all-correct group without
the format got -0.447, like an all-wrong one. RiskPO divides a numerator in
reward units (against tracked quantiles) by two batch stds, so |A| scales
as 1 / (the smallest reward step): 0.1 gave |A| ~ 186. Expected values are
hand-derived below.
"""

import importlib

import jax.numpy as jnp
import numpy as np

from grpo_jax import advantages
from grpo_jax import rewards
from grpo_jax.advantages import trackers


def _config(name):
  return importlib.import_module(f"configs.{name}").get_config()


def _reward(config, **values):
  """The weighted reward of one completion whose columns take `values`
  (0 for the others)."""
  return sum(w * values.get(f, 0.0) for f, w in
             zip(config.rewards.functions, config.rewards.weights))


def _smallest_step(config):
  """The smallest nonzero reward difference one column can make."""
  ranges = rewards.column_ranges(config.rewards.functions)
  return min(w * (hi - lo) for w, (lo, hi) in
             zip(config.rewards.weights, ranges) if w > 0)


def test_ngrpo_config_gives_an_all_correct_group_zero():
  """R' = [1, 1, 1, 1, r_max = 1]: sigma' = 0, so A = 0; all wrong,
  R' = [0, 0, 0, 0, 1]: mu' = 0.2, sigma'^2 = (4 * 0.04 + 0.64) / 4 = 0.2,
  A = -0.2 / sqrt(0.2) = -0.447214."""
  config = _config("ngrpo")
  right = _reward(config, accuracy=1.0)  # no other column reached
  assert config.advantage.name == "ngrpo"
  out = np.asarray(advantages.ngrpo(jnp.asarray([[right] * 4, [0.0] * 4]),
                                    **config.advantage.kwargs))
  np.testing.assert_allclose(out[0], 0.0, atol=1e-6)
  np.testing.assert_allclose(out[1], -0.447214, atol=1e-5)


def test_riskpo_config_advantages_stay_of_order_one():
  """Tracked quantiles (0.02, 1.0); one bundle of 2 questions, rewards
  [[s, s, 0, 0], [0, 0, 0, 0]], s the config's smallest reward step (1 for
  the binary reward). Papers S = [s, s, 0, 0], std_bundle = s / sqrt(3).
  For s = 1: S = 1 >= q_0.9 gives a_R = a_C = 0; S = 0: a_R = (0.02 - 1) /
  0.7 = -1.4, a_C = -0.02 / 0.2 = -0.1, a = (1.5 * -0.1 - 1.4) / 2.5 =
  -0.62, / 0.57735 = -1.07387; question 1 (std 0.57735): -1.86000,
  question 2 (std 0 -> 1): -1.07387. (With s = 0.1 the first question's
  wrong answers got ~ -186.)"""
  config = _config("riskpo")
  s = _smallest_step(config)
  state = trackers.RiskPOState(quantiles=jnp.asarray([0.02, 1.0]),
                               started=jnp.asarray(1.0))
  options = dict(config.advantage.kwargs)
  r = jnp.asarray([[s, s, 0.0, 0.0], [0.0] * 4])
  out, _ = trackers.riskpo(r, state, valid=jnp.ones(2, bool), **options)
  expected = np.array([[0.0, 0.0, -1.86000, -1.86000],
                       [0.0, 0.0, -1.07387, -1.07387]])
  np.testing.assert_allclose(np.asarray(out), expected, atol=1e-4)
