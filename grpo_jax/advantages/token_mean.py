"""HAPO's token-level group average: the group's reward statistics weighted
by each member's length in tokens.

Pure and jittable, float32; a group of equal rewards gets exactly 0, filler
groups (``valid`` False) get 0 (the `advantages.make` record sets them).
"""

import jax.numpy as jnp

from grpo_jax.advantages import _kit
from grpo_jax.advantages.group import grpo


def _check_hapo(*, eps, fallback_threshold, ddof, **_) -> None:
  _kit.check_std_options(eps=eps, ddof=ddof)
  # |A| at or above it falls back to GRPO: 0 would always fall back.
  _kit.check_real("fallback_threshold", fallback_threshold, low=0.0,
                  low_open=True)


@_kit.register(input="PG", output="group",
               paper="HAPO (starriver030515/HAPO; seed 002 para. 109)",
               reads=("lengths", "valid"), check=_check_hapo,
               examples=({}, {"fallback_threshold": 2.0}, {"eps": 1e-3}))
def hapo_token_mean(rewards, *, eps: float = 1e-6,
                    fallback_threshold: float = 5.0, ddof: int = 1,
                    lengths=None, valid=None) -> jnp.ndarray:
  """HAPO's token-mean advantage, with GRPO where it would explode.

    mu_g    = sum_j n_j R_j / sum_j n_j            (every token one vote)
    sigma_g = sqrt(sum_j n_j (R_j - mu_g)^2 / sum_j n_j)
    A_j     = (R_j - mu_g) / (sigma_g + eps)

  n_j the completion lengths in tokens. A group with any |A_j| >=
  `fallback_threshold` takes GRPO's advantage instead (`grpo`, std with
  `ddof`, the same eps): a long completion alone in its reward class owns
  the mean, and its rare short opposites would get huge advantages.

  HAPO (Heterogeneous Adaptive Policy Optimization), the authors' verl code
  ``core_algos.compute_hapo_outcome_advantage`` (the mean and the biased
  std of the score broadcast over each group's response tokens; the
  fallback at |A| >= 5 to verl's GRPO, unbiased std). A group whose lengths
  sum to 0 weighs its members equally.

  Example (VARIANTS.md 3.6): R = [1, 0, 0], n = [10, 30, 60] gives mu = 0.1,
  sigma = 0.3, A = [3, -1/3, -1/3] (GRPO: [1.1547, -0.5774, -0.5774]).

  Args:
    rewards: [P, G] rewards.
    eps: added to either std.
    fallback_threshold: |A| at or above which a group falls back to GRPO.
    ddof: the GRPO fallback's std ddof (1, verl's torch.std).
    lengths: [P, G] completion lengths in tokens.
    valid: [P] bool, False for filler groups.

  Returns:
    [P, G] float32 advantages; exactly 0 for groups of equal rewards.
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  _check_hapo(eps=eps, fallback_threshold=fallback_threshold, ddof=ddof)
  lengths = _kit.check_lengths(lengths, rewards.shape)
  total = lengths.sum(axis=-1, keepdims=True)
  weights = jnp.where(total > 0, lengths, 1.0)
  weights = weights / weights.sum(axis=-1, keepdims=True)
  mean = (weights * rewards).sum(axis=-1, keepdims=True)
  centred = _kit.zero_where_constant(rewards, rewards - mean)
  var = (weights * centred ** 2).sum(axis=-1, keepdims=True)
  sd = jnp.sqrt(jnp.where(var > 0, var, 0.0))
  token_mean = _kit.divide_by_std(centred, sd, eps)
  explodes = (jnp.abs(token_mean) >= fallback_threshold).any(axis=-1,
                                                             keepdims=True)
  fallback = grpo(rewards, eps=eps, ddof=ddof, valid=valid)
  return _kit.zero_fillers(jnp.where(explodes, fallback, token_mean),
                           _kit.check_valid(valid, rewards.shape[0]))
