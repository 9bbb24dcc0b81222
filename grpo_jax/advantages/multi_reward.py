"""Estimators over K reward columns, rewards [P, G, K] and weights [K]: GDPO.

`multi_reward` is the pair of ways to combine K rewards under one name
(``sum_then_normalize``: GRPO on the weighted sum; ``normalize_then_sum``:
GDPO); the registered estimator is `gdpo` (GRPO over the weighted sum is
``grpo``, which gets the sum from the group data).
"""

import jax.numpy as jnp

from grpo_jax import groups as groups_lib
from grpo_jax.advantages import _kit
from grpo_jax.advantages import group


@_kit.register(
    input="PGK", output="group", paper="arXiv 2601.05242",
    independent_groups=False,  # the batch renormalisation couples groups
    reads=("weights", "valid"),
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
