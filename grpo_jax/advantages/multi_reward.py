"""Estimators over K reward columns, rewards [P, G, K] and weights [K]: GDPO
and DVAO.

`multi_reward` is the pair of ways to combine K rewards under one name
(``sum_then_normalize``: GRPO on the weighted sum; ``normalize_then_sum``:
GDPO); the registered estimators are `gdpo` and `dvao` (GRPO over the
weighted sum is ``grpo``, which gets the sum from the group data).
"""

import jax.numpy as jnp

from grpo_jax import groups as groups_lib
from grpo_jax.advantages import _kit
from grpo_jax.advantages import group


@_kit.register(
    input="PGK", output="group", paper="arXiv 2601.05242",
    independent_groups=False,  # the batch renormalisation couples groups
    reads=("weights", "valid"), check=_kit.check_std_options,
    examples=({}, {"ddof": 0}, {"eps": 1e-4}))
def gdpo(rewards, weights, *, eps: float = 1e-6, ddof: int = 1, valid=None
         ) -> jnp.ndarray:
  """GDPO: normalise each reward within its group, sum, renormalise the batch.

  B = sum_k w_k (R_k - mean_g R_k) / (std_g R_k + eps), then
  A = (B - mean B) / (std B + eps), mean and std over every entry of the
  valid groups (arXiv 2601.05242). The same `eps` and `ddof` serve both
  normalisations (the authors' code uses one eps, 1e-4, and the unbiased std
  for both). A group whose B is constant (every group where all weighted
  rewards are) gives exactly 0.

  Args:
    rewards: [P, G, K] rewards of K reward functions.
    weights: [K] weight of each reward function.
    eps: added to every std.
    ddof: delta degrees of freedom of every std.
    valid: [P] bool, False for filler groups: they get 0 and enter neither
      batch statistic. Default: all valid.

  Returns:
    [P, G] float32 advantages.
  """
  rewards = _kit.check_rewards(rewards, 3, "P, G, K")
  weights = _kit.check_weights(weights, rewards.shape[-1])
  valid = _kit.check_valid(valid, rewards.shape[0])
  per_reward = _kit.standardize_groups(jnp.swapaxes(rewards, 1, 2), eps=eps,
                                       ddof=ddof)  # [P, K, G]
  combined = groups_lib.weighted_sum(jnp.swapaxes(per_reward, 1, 2), weights)
  _kit.check_ddof(ddof, combined.size)
  mean, sd = _kit.batch_moments(combined, valid, ddof)
  # Each group of `combined` has mean 0, so the batch mean is 0 up to rounding;
  # keep groups without signal at exactly 0 rather than at -mean/std.
  no_signal = combined.max(axis=-1, keepdims=True) == combined.min(
      axis=-1, keepdims=True)
  advantages = jnp.where(no_signal, 0.0,
                         _kit.divide_by_std(combined - mean, sd, eps))
  return _kit.zero_fillers(advantages, valid)


def _check_dvao(*, eps, ddof, weight_power, floor, **_) -> None:
  _kit.check_std_options(eps=eps, ddof=ddof)
  _kit.check_real("weight_power", weight_power)
  _kit.check_real("floor", floor, low=0.0, high=1.0)


@_kit.register(
    input="PGK", output="group", paper="arXiv 2605.25604",
    reads=("weights",), min_reward_columns=2, check=_check_dvao,
    examples=({}, {"weight_power": 0.5}, {"weight_power": -1.0},
              {"floor": 0.2}, {"ddof": 0}))
def dvao(rewards, weights, *, eps: float = 1e-6, ddof: int = 1,
         weight_power: float = 1.0, floor: float = 0.0) -> jnp.ndarray:
  """DVAO: per-group z-scores of each reward, weighted by their variances.

  For group p and weighted column X_k = w_k R_k (a reconstruction: no
  public code; VARIANTS.md 1.1):
    z_pk = (X_pk - mean_g X_pk) / (std_g X_pk + eps),
    c_pk = var_g(X_pk)^weight_power / sum_j var_g(X_pj)^weight_power,
    A_p = sum_k c_pk z_pk,
  so a column that varies more in the group counts more, one that does not
  vary counts 0, and |A| <= max_k |z_k| (the weights are convex: the
  "bounded advantage magnitudes" of arXiv 2605.25604). With `floor`, every
  c_pk is raised to at least `floor` and the weights renormalised. With
  unit weights w this is the spec; a weight w_k scales its column's
  variance by w_k^2, and a weight of 0 removes the column.

  Args:
    rewards: [P, G, K] rewards of K reward functions.
    weights: [K] weight of each reward function.
    eps: added to every std.
    ddof: delta degrees of freedom of the variances and stds.
    weight_power: c is proportional to var^weight_power; 1 is the spec, -1
      inverse-variance weights (the other reading of "suppressing noisy
      ones").
    floor: the least weight of a column before renormalising, in [0, 1].

  Returns:
    [P, G] float32 advantages; exactly 0 for a group where no weighted
    column varies.
  """
  rewards = _kit.check_rewards(rewards, 3, "P, G, K")
  weights = _kit.check_weights(weights, rewards.shape[-1])
  _check_dvao(eps=eps, ddof=ddof, weight_power=weight_power, floor=floor)
  _kit.check_ddof(ddof, rewards.shape[1])
  columns = jnp.swapaxes(rewards * weights[None, None, :], 1, 2)  # [P, K, G]
  sd = _kit.std(columns, -1, ddof)  # [P, K, 1]
  z = _kit.divide_by_std(_kit.centered(columns, -1), sd, eps)
  # A column without spread gets weight 0 whatever the power's sign.
  spread = sd > 0
  raw = jnp.where(spread, jnp.where(spread, sd, 1.0)**(2 * weight_power), 0.0)
  combination = _normalized(raw)
  if floor > 0:
    combination = _normalized(jnp.maximum(combination, floor))
  return (combination * z).sum(axis=1)


def _normalized(raw) -> jnp.ndarray:
  """raw [P, K, 1] / its sum over K; 0 where the sum is 0."""
  total = raw.sum(axis=1, keepdims=True)
  return jnp.where(total > 0, raw / jnp.where(total > 0, total, 1.0), 0.0)


def _sum_then_normalize(rewards, weights, *, eps, ddof, valid):
  return group.grpo(groups_lib.weighted_sum(rewards, weights), eps=eps,
                    ddof=ddof, valid=valid)


_MODES = {"sum_then_normalize": _sum_then_normalize,
          "normalize_then_sum": gdpo}
MULTI_REWARD_MODES = tuple(_MODES)


def multi_reward(rewards, weights, *, mode: str = "sum_then_normalize",
                 eps: float = 1e-6, ddof: int = 1, valid=None) -> jnp.ndarray:
  """Advantages from K reward functions, combined two ways.

  ``sum_then_normalize``: A = grpo(sum_k w_k R_k).
  ``normalize_then_sum``: A = gdpo(R, w) (GDPO, arXiv 2601.05242).

  Args:
    rewards: [P, G, K] rewards of K reward functions.
    weights: [K] weight of each reward function.
    mode: ``sum_then_normalize`` or ``normalize_then_sum``.
    eps: added to every std.
    ddof: delta degrees of freedom of every std.
    valid: [P] bool, False for filler groups (advantage 0, in no batch
      statistic). Default: all valid.

  Returns:
    [P, G] float32 advantages.
  """
  rewards = _kit.check_rewards(rewards, 3, "P, G, K")
  _kit.check_choice("mode", mode, MULTI_REWARD_MODES)
  return _MODES[mode](rewards, weights, eps=eps, ddof=ddof, valid=valid)
