"""A trust region on an estimate of the policy divergence instead of the
ratio: DPPO's binary TV and binary KL masks."""

import jax
import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax.objectives import _kit
from grpo_jax.objectives import offpolicy
from grpo_jax.objectives._kit import OBJECTIVES

# The divergence thresholds of verl's DPPO example script, by divergence.
DPPO_DELTA = {"tv": 0.15, "kl": 0.05}
# What the policy's distribution is compared with.
DPPO_ANCHORS = ("behav", "old")
# Keeps 1 - p away from 0 in the binary KL (the sources' constant).
_BINARY_EPS = 1e-8


def binary_kl(p, mu, log_p, log_mu):
  """KL(Bernoulli(mu) || Bernoulli(p)) of the sampled token's probability:
  mu log(mu / p) + (1 - mu) log((1 - mu + 1e-8) / (1 - p + 1e-8))."""
  return (mu * (log_mu - log_p)
          + (1.0 - mu) * jnp.log((1.0 - mu + _BINARY_EPS)
                                 / (1.0 - p + _BINARY_EPS)))


def _tv_valid(p, mu, log_p, log_mu, advantages, delta_low, delta_high):
  del log_p, log_mu
  return jnp.where(advantages > 0, p - mu <= delta_high,
                   p - mu >= -delta_low)


def _kl_valid(p, mu, log_p, log_mu, advantages, delta_low, delta_high):
  d = binary_kl(p, mu, log_p, log_mu)
  # Only a move in the advantage's direction past the threshold is blocked.
  return jnp.where(advantages > 0, (d <= delta_high) | (p <= mu),
                   (d <= delta_low) | (p >= mu))


_VALID = {"tv": _tv_valid, "kl": _kl_valid}


@OBJECTIVES.register(
    level="token", mechanism="gate", paper="2602.04879",
    reads=offpolicy.READS,
    # Anchored on the sampler, its weight is the behaviour policy's.
    behaviour_weight=lambda anchor, **_: anchor == "behav",
    examples=({}, {"divergence": "kl"},
              {"anchor": "old", "is_cap": 10.0, "delta_low": 0.1,
               "aggregation": "seq_mean_token_mean"}))
def dppo(logp, old_logp, advantages, mask, *, divergence="tv",
         delta_low=None, delta_high=None, is_cap=20.0, anchor="behav",
         sampler_logp=None, aggregation="token_mean", horizon=None,
         token_weights=None):
  """Divergence PPO (binary forms): mask a token once the policy has moved
  its sampled token's probability too far, in the advantage's direction.

  With p = exp(logp) and mu = exp(anchor log-prob) (the behaviour policy's,
  anchor="behav", or pi_old's, anchor="old"):
    binary TV:  valid = (p - mu <= delta_high)           if A > 0
                        (p - mu >= -delta_low)           otherwise
    binary KL:  D = mu log(mu/p) + (1-mu) log((1-mu+1e-8) / (1-p+1e-8))
                valid = (D <= delta_high) or (p <= mu)   if A > 0
                        (D <= delta_low)  or (p >= mu)   otherwise
    L_t = -A * sg(min(exp(logp - anchor), is_cap)) * logp * sg(valid)

  A rare token (mu = 0.01) may move to a ratio of 5 and still learn, where
  the ratio clip would stop it; a confident one (mu = 0.9) is stopped by the
  KL form after a small move. Tokens with A = 0 contribute 0.

  DPPO, arXiv 2602.04879: verl's ``compute_policy_loss_dppo_tv`` / ``_kl``
  (anchor pi_old; ``clip_ratio_c`` 20) and the official sail-sg/Stable-RL
  ``_compute_token_mask_for_policy_loss`` (anchor: the rollout policy).
  Defaults: delta 0.15 (TV) or 0.05 (KL) on both sides, from verl's example
  script, is_cap 20 (verl; Stable-RL 10), ``token_mean``. Exact for the
  binary forms. The Top-K forms (TV and KL over the behaviour policy's top-K
  tokens plus the rest mass) need the sampler to record each position's
  top-K log-probs and token ids and the trainer the current policy's at
  those ids; neither exists yet, so they are left out.

  ratio: statistics of exp(logp - anchor) over real tokens. clip_fraction:
  the share of real tokens with A != 0 that the mask drops.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    divergence: "tv" or "kl".
    delta_low, delta_high: the thresholds (>= 0) for A <= 0 and A > 0;
      None: DPPO_DELTA[divergence].
    is_cap: the truncation C of the importance weight (> 0).
    anchor: "behav" (the batch's `sampler_logp`; pi_old without it) or
      "old" (pi_old, verl's choice).
    sampler_logp: [N, T] the behaviour log-probs (read from the batch), or
      None.
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  if divergence not in _VALID:
    raise ValueError(f"divergence={divergence!r} is unknown; choose one of "
                     f"{tuple(_VALID)}.")
  if anchor not in DPPO_ANCHORS:
    raise ValueError(
        f"anchor={anchor!r} is unknown; choose one of {DPPO_ANCHORS}.")
  delta_low = DPPO_DELTA[divergence] if delta_low is None else delta_low
  delta_high = DPPO_DELTA[divergence] if delta_high is None else delta_high
  _kit.check_hparam("delta_low", delta_low, low=0.0)
  _kit.check_hparam("delta_high", delta_high, low=0.0)
  _kit.check_hparam("is_cap", is_cap, low=0.0, strict=True)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  old = batch.old_logp
  ref = offpolicy.behaviour_logp(sampler_logp if anchor == "behav" else None,
                                 old, batch.mask)
  x = _kit.clipped_log_ratio(batch.logp, ref)
  weight = jax.lax.stop_gradient(jnp.minimum(jnp.exp(x), is_cap))
  # Probabilities of the sampled token, kept in (0, 1].
  log_p = jax.lax.stop_gradient(jnp.minimum(batch.logp, 0.0))
  log_mu = jnp.minimum(ref, 0.0)
  valid = jax.lax.stop_gradient(_VALID[divergence](
      jnp.exp(log_p), jnp.exp(log_mu), log_p, log_mu, batch.advantages,
      delta_low, delta_high))
  term = -batch.advantages * weight * batch.logp * valid
  return _kit.token_objective(term, batch, aggregation=aggregation,
                              horizon=horizon,
                              # A = 0 tokens carry no gradient to cut.
                              clipped=~valid & (batch.advantages != 0),
                              ratio=jnp.exp(x), token_weights=token_weights)
