"""Objectives without a hard clip: CFPO's quadratic trust region (also
registered as SPO, ``spo_simple``), SAPO's sigmoid gate, and REINFORCE (no
trust region at all)."""

import jax
import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax.objectives import _kit
from grpo_jax.objectives._kit import OBJECTIVES

# SAPO has no hard clip; its clip_fraction counts tokens whose gradient the
# soft gate scales by less than this factor.
SAPO_GATE_THRESHOLD = 0.5


@OBJECTIVES.register(
    level="token", mechanism="penalty", paper="2601.22801",
    examples=({}, {"epsilon": 0.05, "aggregation": "token_mean"}))
def cfpo(logp, old_logp, advantages, mask, *, epsilon=0.2,
         aggregation="seq_mean_token_mean", horizon=None, token_weights=None):
  """Clipping-Free Policy Optimization: a quadratic trust region, no clip.

    L = -(r*A - |A| * (r - 1)^2 / (2 * epsilon))

  The objective is concave in r with maximiser 1 + epsilon*sign(A), the clip
  boundary, and its gradient never vanishes. Clipping-Free Policy
  Optimization, arXiv 2601.22801; the same form as Simple Policy Optimization,
  arXiv 2401.16025. Default aggregation ``seq_mean_token_mean``, that of the
  GRPO objective whose clipped term it replaces.

  clip_fraction: tokens past the maximiser (A > 0 and r > 1 + epsilon, or
  A < 0 and r < 1 - epsilon), whose gradient the penalty reverses.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    epsilon: the trust-region half-width (> 0).
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _kit.check_hparam("epsilon", epsilon, low=0.0, strict=True)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  a, ratio = batch.advantages, batch.ratio
  term = -(ratio * a - jnp.abs(a) * jnp.square(ratio - 1.0) / (2.0 * epsilon))
  past = (((a > 0) & (ratio > 1.0 + epsilon))
          | ((a < 0) & (ratio < 1.0 - epsilon)))
  return _kit.token_objective(term, batch, aggregation=aggregation,
                              horizon=horizon, clipped=past, ratio=ratio,
                              token_weights=token_weights)


# Simple Policy Optimization (arXiv 2401.16025) is the same objective: one
# function under a second name, not a copy (VARIANTS.md 2.6).
spo_simple = OBJECTIVES.register(
    "spo_simple", level="token", mechanism="penalty", paper="2401.16025",
    examples=({}, {"epsilon": 0.1, "aggregation": "token_mean"}))(cfpo)


@OBJECTIVES.register(
    level="token", mechanism="gate", paper="2511.20347",
    examples=({}, {"tau_pos": 4.0, "tau_neg": 8.0,
                   "aggregation": "seq_mean_token_mean"}))
def sapo(logp, old_logp, advantages, mask, *, tau_pos=1.0, tau_neg=1.05,
         aggregation="token_mean", horizon=None, token_weights=None):
  """Soft Adaptive Policy Optimization: a sigmoid gate instead of a clip.

    L = -f(r) * A,   f(r) = sigmoid(tau * (r - 1)) * 4 / tau,
    tau = tau_pos if A > 0 else tau_neg

  f'(1) = 1, so on policy the gradient is REINFORCE's; off policy the token
  gradient is scaled by w = 4 s (1 - s), s = sigmoid(tau * (r - 1)). Soft
  Adaptive Policy Optimization, arXiv 2511.20347. Default aggregation
  ``token_mean`` (as in Trinity-RFT's SAPO loss); pass
  ``seq_mean_token_mean`` for the per-sequence normalisation of GSPO.

  clip_fraction: tokens whose gate weight w is below SAPO_GATE_THRESHOLD
  (0.5), i.e. whose gradient the gate at least halved.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    tau_pos, tau_neg: gate temperatures (> 0) for A > 0 and A <= 0.
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _kit.check_hparam("tau_pos", tau_pos, low=0.0, strict=True)
  _kit.check_hparam("tau_neg", tau_neg, low=0.0, strict=True)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  a, ratio = batch.advantages, batch.ratio
  tau = jnp.where(a > 0, tau_pos, tau_neg)
  gate = jax.nn.sigmoid(tau * (ratio - 1.0))
  term = -gate * (4.0 / tau) * a
  weight = 4.0 * gate * (1.0 - gate)
  return _kit.token_objective(term, batch, aggregation=aggregation,
                              horizon=horizon,
                              clipped=weight < SAPO_GATE_THRESHOLD,
                              ratio=ratio, token_weights=token_weights)


@OBJECTIVES.register(
    level="token", mechanism=None, paper="RGRA",
    examples=({}, {"aggregation": "token_mean"}))
def reinforce(logp, old_logp, advantages, mask, *,
              aggregation="seq_mean_token_mean", horizon=None,
              token_weights=None):
  """REINFORCE with group-relative advantages (RGRA).

    L = -A * logp

  No ratio and no clip: on policy with one update per batch its gradient
  equals GRPO's, hence the same default aggregation
  (``seq_mean_token_mean``). `old_logp` only feeds the diagnostics.
  It has no trust-region mechanism (metadata ``mechanism=None``).
  clip_fraction: 0.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  return _kit.token_objective(-batch.advantages * batch.logp, batch,
                              aggregation=aggregation, horizon=horizon,
                              clipped=jnp.zeros_like(batch.mask, bool),
                              token_weights=token_weights)


@OBJECTIVES.register(
    level="token", mechanism=None, paper="arXiv 2504.02546",
    examples=({}, {"aggregation": "seq_mean_token_mean"}))
def gpg(logp, old_logp, advantages, mask, *, aggregation="token_mean",
        horizon=None, token_weights=None):
  """GPG's policy gradient: L = -A * logp, aggregated over tokens.

  Group Policy Gradient (arXiv 2504.02546; verl's ``gpg`` loss): plain
  REINFORCE with no ratio, no clip and no KL, its advantages from the
  ``gpg`` estimator, which carries the rescaling. `reinforce` with verl's
  default ``token_mean`` aggregation. `old_logp` only feeds the
  diagnostics. clip_fraction: 0.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  return reinforce(logp, old_logp, advantages, mask, aggregation=aggregation,
                   horizon=horizon, token_weights=token_weights)
