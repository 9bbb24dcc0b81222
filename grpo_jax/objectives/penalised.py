"""Objectives with a penalty driven by state: R2VPO's ratio-variance budget."""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax import measures
from grpo_jax.objectives import _kit
from grpo_jax.objectives._kit import OBJECTIVES

# R2VPO defaults (no public code; see `r2vpo`). A ratio spread uniformly over
# PPO's band [0.8, 1.2] has variance 0.4^2 / 12 ~ 0.013.
R2VPO_DELTA = 0.01
R2VPO_ETA = 0.1
# The centre of the penalised variance: 1 (the behaviour policy) or the mean.
R2VPO_CENTERS = ("one", "mean")


class R2VPOState(NamedTuple):
  """The dual variable of `r2vpo` (a float32 scalar, >= 0)."""
  lam: jnp.ndarray


def r2vpo_init(lam0=0.0) -> R2VPOState:
  """The initial dual variable."""
  _kit.check_hparam("lam0", lam0, low=0.0)
  return R2VPOState(lam=jnp.asarray(lam0, jnp.float32))


def r2vpo_update(state: R2VPOState, ratio_var, *, delta, eta) -> R2VPOState:
  """Dual ascent on lam, once per optimiser step.

    lam <- max(0, lam + eta * (sg(ratio_var) - delta))

  Args:
    state: the current `R2VPOState`.
    ratio_var: the penalised variance of the step's ratios (about the
      objective's centre), a scalar.
    delta: the variance budget.
    eta: the dual step size.
  """
  ratio_var = jax.lax.stop_gradient(jnp.asarray(ratio_var, jnp.float32))
  lam = state.lam + eta * (ratio_var - delta)
  return R2VPOState(lam=jnp.maximum(lam, 0.0).astype(jnp.float32))


def penalised_variance(ratio: measures.Moments, center: str) -> jnp.ndarray:
  """The variance of the ratio about `center` from its exact moments:
  about the mean m2/n, about 1 m2/n + (mean - 1)^2."""
  offset = {"one": ratio.mean - 1.0, "mean": 0.0}[center]
  return ratio.variance() + jnp.where(ratio.count > 0, jnp.square(offset), 0.)


def _dual_update(state, step_measures, *, delta=R2VPO_DELTA, eta=R2VPO_ETA,
                 center="one"):
  return r2vpo_update(
      state, penalised_variance(step_measures["ratio"], center),
      delta=delta, eta=eta)


def _minibatch_stats(logp, old_logp, advantages, mask, *, aggregation,
                     horizon):
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  return {"ratio": measures.Moments.of(batch.ratio, batch.mask),
          "loss_count": measures.Sum(
              agg.count(batch.mask, aggregation, horizon=horizon)),
          "tokens": measures.Sum(jnp.sum(batch.mask))}


def _from_minibatch(stats):
  return {"ratio_center": stats["ratio"].mean,
          "count_per_token": agg.divide(agg.SumCount(
              stats["loss_count"].sum, stats["tokens"].sum))}


@OBJECTIVES.register(
    level="token", mechanism="penalty", paper="R2VPO (reconstruction)",
    examples=({"lam0": 0.7}, {"lam0": 2.0, "center": "mean"},
              {"lam0": 0.5, "aggregation": "seq_mean_token_mean"}),
    state=_kit.StateSpec(init=r2vpo_init, update=_dual_update,
                         loss_kwargs=lambda state: {"lam": state.lam},
                         provides=("lam",)),
    # Exact under microbatching: the minibatch's mean ratio (the centre)
    # and its count per token (the penalty's weight) come from a pre-pass.
    prepass=_kit.PrePass(
        when=lambda center, aggregation, **_: (
            center == "mean" or aggregation != "token_mean"),
        stats=_minibatch_stats, loss_kwargs=_from_minibatch,
        provides=("ratio_center", "count_per_token")))
def r2vpo(logp, old_logp, advantages, mask, *, lam=0.0, delta=R2VPO_DELTA,
          center="one", ratio_center: Optional[jnp.ndarray] = None,
          count_per_token: Optional[jnp.ndarray] = None,
          aggregation="token_mean", horizon=None):
  """Ratio-Variance Regularized Policy Optimization (reconstruction).

    loss = aggregate(-r * A) + sg(lam) * (Var_mask(r) - delta)
    Var_mask(r) = sum_it m * (r - c)^2 / sum_it m
    c = 1 (center="one") or the mean ratio (center="mean")

  No public code exists: this is a reconstruction from the abstract of
  Ratio-Variance Regularized Policy Optimization. The dual variable `lam` is
  state (`R2VPOState`), updated once per optimiser step by `r2vpo_update`
  from the step's exact ratio moments. Default aggregation ``token_mean``:
  the surrogate is a mean over the batch's tokens, like the variance.

  In (sum, count) form the penalty adds lam * (sum m (r-c)^2 - delta * M)
  * C / M to loss_sum (M real tokens, C the aggregation's count), so that
  loss == loss_sum / loss_count. Summed over microbatches this is the whole
  minibatch's penalty exactly when c and C / M are the minibatch's: c = 1 or
  `ratio_center`, and `count_per_token` (1 for ``token_mean``), which the
  trainer's pre-pass supplies where they are needed.

  clip_fraction: 0 (nothing is clipped).

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    lam: the dual variable (>= 0); no gradient flows into it.
    delta: the variance budget.
    center: "one" or "mean".
    ratio_center: with center="mean", the centre to use instead of this
      batch's own mean ratio (the whole minibatch's, from the pre-pass).
    count_per_token: C / M to use instead of this batch's own.
    aggregation, horizon: see `aggregation.sum_and_count`.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _kit.check_choice("center", center, R2VPO_CENTERS)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  ratio = batch.ratio
  surrogate = agg.sum_and_count(-ratio * batch.advantages, batch.mask,
                                aggregation, horizon=horizon)
  moments = measures.Moments.of(ratio, batch.mask)
  if center == "one":
    c = 1.0
  else:
    c = jax.lax.stop_gradient(
        moments.mean if ratio_center is None else ratio_center)
  tokens = jnp.sum(batch.mask)
  squares = jnp.sum(jnp.where(batch.mask > 0, jnp.square(ratio - c), 0.0))
  if count_per_token is None:
    count_per_token = agg.divide(agg.SumCount(surrogate.count, tokens))
  penalty = (jax.lax.stop_gradient(jnp.asarray(lam, jnp.float32))
             * (squares - delta * tokens) * count_per_token)
  sc = agg.SumCount(surrogate.total + penalty, surrogate.count)
  return _kit.finish(sc, batch, ratio=moments,
                     clipped=jnp.zeros_like(batch.mask, bool))
