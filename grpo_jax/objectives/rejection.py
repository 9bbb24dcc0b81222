"""verl's rollout rejection sampling, as corrections (`corrections.CORRECTIONS`):
0/1 masks of the tokens, or whole rows, whose sampler-vs-trainer divergence
leaves its bounds.

verl (``algorithm.rollout_correction.rollout_rs``, ``rollout_corr_helper.
compute_rollout_rejection_mask``; ``docs/algo/rollout_corr_math.md``) scores
each token by the log IS ratio x_t = log pi_old(y_t) - log mu(y_t) (mu the
sampler, x clipped to +-20) through one of three estimators,

  K1: -x_t            K2: x_t^2 / 2            K3: exp(x_t) - 1 - x_t,

either per token or aggregated over a row (sum, mean or max), and rejects
what leaves the bounds. Unlike `corrections.mis` / `mis_sequence` / `icepop`
(which keep the IS ratio as the weight of what they keep), a rejection is a
pure mask: kept tokens weigh 1, so it composes with any IS weight (`tis`,
decoupled PPO, F-TIS) without counting the ratio twice.
"""

import jax.numpy as jnp

from grpo_jax.objectives import _kit
from grpo_jax.objectives import corrections

STATISTICS = ("k1", "k2", "k3")
# Row aggregates of the token statistic: verl's seq_sum_*, seq_mean_*,
# seq_max_* (no seq_max_k1 there: a max of -x is not a ratio).
AGGREGATES = ("sum", "mean", "max")

_SAMPLER = ("old_logp", "sampler_logp")


def token_divergence(x, statistic: str):
  """The per-token estimator of `statistic` from log-ratios x."""
  return {"k1": -x, "k2": 0.5 * jnp.square(x),
          "k3": jnp.expm1(x) - x}[statistic]


def _bounds(statistic, low, high):
  """(low, high) resolved: for K1 ratio bounds (low None: 1 / high, verl's
  rule for a single threshold); for K2 / K3 an upper bound only. A
  ValueError naming the option otherwise."""
  _kit.check_choice("statistic", statistic, STATISTICS)
  corrections.check_number("high", high, low=0.0, strict=True)
  if statistic != "k1":
    if low is not None:
      raise ValueError(
          f"low={low!r} applies to statistic='k1' (ratio bounds) only; "
          f"statistic={statistic!r} takes an upper bound `high` alone: "
          "remove low.")
    return None, high
  if low is None:
    return 1.0 / high, high
  corrections.check_bounds("low", low, "high", high)
  return low, high


def _keep(value, statistic, low, high, log_ratio):
  """Where the statistic lies within bounds: K1 as a ratio, exp(log_ratio)
  in [low, high]; K2 / K3 as value <= high."""
  if statistic == "k1":
    return (log_ratio >= jnp.log(low)) & (log_ratio <= jnp.log(high))
  return value <= high


@corrections.register(
    level="token", reads=_SAMPLER, statistic="divergence",
    paper="verl rollout_rs token_k1 / token_k2 / token_k3 "
    "(docs/algo/rollout_corr_math.md)",
    examples=({}, {"statistic": "k3", "high": 0.02},
              {"statistic": "k2", "high": 0.05},
              {"statistic": "k1", "low": 0.8, "high": 1.5}))
def rejection(mask, *, old_logp, sampler_logp, statistic="k1", low=None,
              high=2.0):
  """Token-level rejection sampling against the sampler.

    x_t = clip(old_logp_t - sampler_logp_t, -20, 20)
    K1: keep low <= exp(x_t) <= high        (low None: 1 / high)
    K2: keep x_t^2 / 2 <= high
    K3: keep exp(x_t) - 1 - x_t <= high
    w_t = 1 if kept else 0

  verl ``rollout_rs="token_k1"`` (``"0.5_2.0"``-style ratio bounds, a single
  value giving the reciprocal lower bound), ``token_k2``, ``token_k3``
  (upper bounds). Defaults: K1 with [0.5, 2] (verl requires a threshold;
  its seq-IS+RS preset uses 0.5_2.0).

  Differences from verl, on purpose: verl compares -x against [log low, log
  high], which keeps exp(x) in [1 / high, 1 / low], the mirror of the
  ratio band for asymmetric bounds; here the bounds are on the ratio, as
  its documentation describes them (identical for reciprocal bounds). A
  rejected token's weight is 0 and the aggregation's denominator stays the
  mask's (every correction here); verl removes it from the response mask,
  so it leaves the denominator too.

  Args:
    mask: [N, T] loss tokens.
    old_logp, sampler_logp: [N, T] proximal and sampler log-probs.
    statistic: one of STATISTICS.
    low, high: the bounds (see above).

  Returns:
    TokenWeights (statistic: the token's K value; truncated: none).
  """
  low, high = _bounds(statistic, low, high)
  real, x = corrections.sampler_log_ratio(mask, old_logp, sampler_logp)
  value = token_divergence(x, statistic)
  keep = real & _keep(value, statistic, low, high, x)
  return corrections.TokenWeights(keep.astype(jnp.float32),
                                  jnp.zeros_like(real),
                                  jnp.where(real, value, 0.0))


def row_statistic(value, real, aggregate: str):
  """[N] the row's sum, mean or max of `value` over its real tokens (0 for
  a row without any)."""
  _kit.check_choice("aggregate", aggregate, AGGREGATES)
  total = jnp.where(real, value, 0.0).sum(axis=-1)
  if aggregate == "sum":
    return total
  if aggregate == "mean":
    return total / jnp.maximum(real.sum(axis=-1), 1)
  top = jnp.where(real, value, -jnp.inf).max(axis=-1)
  return jnp.where(real.any(axis=-1), top, 0.0)


@corrections.register(
    level="sequence", reads=_SAMPLER, statistic="divergence",
    paper="verl rollout_rs seq_{sum,mean}_k{1,2,3}, seq_max_k{2,3} "
    "(docs/algo/rollout_corr_math.md); Geo-RS = seq_mean_k1",
    examples=({}, {"aggregate": "sum", "low": 0.5, "high": 2.0},
              {"statistic": "k3", "aggregate": "mean", "high": 0.01},
              {"statistic": "k2", "aggregate": "max", "high": 0.5}))
def rejection_sequence(mask, *, old_logp, sampler_logp, statistic="k1",
                       aggregate="mean", low=None, high=1.001):
  """Sequence-level rejection sampling: whole rows masked.

    x_t = clip(old_logp_t - sampler_logp_t, -20, 20)
    s_i = sum, mean or max over row i's real tokens of K(x_t)
    K1: keep low <= exp(-s_i) <= high   (sum: the product ratio; mean: the
                                         geometric-mean ratio, Geo-RS)
    K2 / K3: keep s_i <= high
    w_it = 1 on every token of a kept row, else 0

  verl ``rollout_rs`` = ``seq_sum_k*``, ``seq_mean_k*``, ``seq_max_k2`` /
  ``seq_max_k3`` (max takes no K1, as in verl). Default: Geo-RS,
  ``seq_mean_k1`` with verl's preset bounds [0.999, 1.001]
  (``RolloutCorrectionConfig.decoupled_geo_rs``); verl's K3 preset is
  ``seq_mean_k3`` with 0.01 (``aggregate="mean", statistic="k3",
  high=0.01``). The geometric mean does not grow with length, so long
  rows are not rejected for being long (the "length trap" of the product).
  Bounds on the ratio and the unchanged denominator: as `rejection`.

  Args:
    mask: [N, T] loss tokens.
    old_logp, sampler_logp: [N, T] proximal and sampler log-probs.
    statistic: one of STATISTICS.
    aggregate: one of AGGREGATES (not "max" with "k1").
    low, high: the bounds (low None: 1 / high for K1).

  Returns:
    TokenWeights (statistic: s_i on the row's tokens).
  """
  if aggregate == "max" and statistic == "k1":
    raise ValueError(
        "aggregate='max' takes statistic='k2' or 'k3' (a max of -log r is no "
        "ratio; verl has no seq_max_k1): change statistic or aggregate.")
  low, high = _bounds(statistic, low, high)
  real, x = corrections.sampler_log_ratio(mask, old_logp, sampler_logp)
  value = row_statistic(token_divergence(x, statistic), real, aggregate)
  keep = _keep(value, statistic, low, high, -value)
  weights = jnp.where(real & keep[:, None], 1.0, 0.0)
  return corrections.TokenWeights(weights, jnp.zeros_like(real),
                                  jnp.where(real, value[:, None], 0.0))
