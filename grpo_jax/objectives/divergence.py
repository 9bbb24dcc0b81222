"""A trust region on an estimate of the policy divergence instead of the
ratio: DPPO's binary TV and binary KL masks (`dppo`) and its top-K TV and
KL masks (`dppo_topk`), which read the sampler's top-K log-probs."""

import jax
import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax import measures
from grpo_jax.objectives import _kit
from grpo_jax.objectives import offpolicy
from grpo_jax.objectives._kit import OBJECTIVES

# The divergence thresholds of verl's DPPO example script, by divergence.
DPPO_DELTA = {"tv": 0.15, "kl": 0.05}
# What the policy's distribution is compared with.
DPPO_ANCHORS = ("behav", "old")
# Keeps 1 - p away from 0 in the binary KL (the sources' constant).
_BINARY_EPS = 1e-8
# The floor of the top-K set's and the rest's masses (Stable-RL's clamp).
TOPK_MASS_FLOOR = 1e-12
# What `dppo_topk` reads beside (logp, old_logp, adv, mask): the sampler's
# log-probs of its tokens and of its top-K ids, and the policy's at those
# ids (the trainer's chunked pass gathers them, `update.batch_arrays`).
TOPK_READS = ("sampler_logp", "sampler_topk_logp", "topk_logp")


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
  those ids: `dppo_topk`.

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
  _kit.check_choice("anchor", anchor, DPPO_ANCHORS)
  delta_low, delta_high = _thresholds(divergence, delta_low, delta_high,
                                      is_cap)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  old = batch.old_logp
  ref = offpolicy.behaviour_logp(sampler_logp if anchor == "behav" else None,
                                 old, batch.mask)
  x = _kit.clipped_log_ratio(batch.logp, ref)
  # Probabilities of the sampled token, kept in (0, 1].
  log_p = jax.lax.stop_gradient(jnp.minimum(batch.logp, 0.0))
  log_mu = jnp.minimum(ref, 0.0)
  valid = jax.lax.stop_gradient(_VALID[divergence](
      jnp.exp(log_p), jnp.exp(log_mu), log_p, log_mu, batch.advantages,
      delta_low, delta_high))
  return _gated(batch, x, valid, is_cap, aggregation=aggregation,
                horizon=horizon, token_weights=token_weights)


def _thresholds(divergence, delta_low, delta_high, is_cap):
  """DPPO's (delta_low, delta_high), None meaning the divergence's default,
  with the divergence and the three options checked."""
  _kit.check_choice("divergence", divergence, tuple(_VALID))
  delta_low = DPPO_DELTA[divergence] if delta_low is None else delta_low
  delta_high = DPPO_DELTA[divergence] if delta_high is None else delta_high
  _kit.check_hparam("delta_low", delta_low, low=0.0)
  _kit.check_hparam("delta_high", delta_high, low=0.0)
  _kit.check_hparam("is_cap", is_cap, low=0.0, strict=True)
  return delta_low, delta_high


def _gated(batch, x, valid, is_cap, *, aggregation, horizon, token_weights,
           extra=None):
  """-A sg(min(exp(x), is_cap)) logp sg(valid), its clip share over A != 0."""
  weight = jax.lax.stop_gradient(jnp.minimum(jnp.exp(x), is_cap))
  term = -batch.advantages * weight * batch.logp * valid
  return _kit.token_objective(term, batch, aggregation=aggregation,
                              horizon=horizon,
                              # A = 0 tokens carry no gradient to cut.
                              clipped=~valid & (batch.advantages != 0),
                              ratio=jnp.exp(x), token_weights=token_weights,
                              extra=extra)


def topk_divergence(topk_logp, sampler_topk_logp, divergence):
  """DPPO's top-K divergence of the behaviour policy mu from pi, [..., K] ->
  [...]: over mu's top-K ids plus one "rest" outcome,

    D_TV = 1/2 (sum_k |mu_k - pi_k| + |mu_rest - pi_rest|)
    D_KL = sum_k mu_k log(mu_k / pi_k) + mu_rest log(mu_rest / pi_rest)

  with mu_rest = 1 - sum_k mu_k, pi_rest = 1 - sum_k pi_k, both rest masses
  floored at `TOPK_MASS_FLOOR` (Stable-RL's ``compute_topk_kl``, which
  floors them before either sum). A term with mu_k = 0 is 0.

  Args:
    topk_logp: [..., K] log pi at mu's top-K ids.
    sampler_topk_logp: [..., K] log mu at those ids.
    divergence: "tv" or "kl".
  """
  pi_k, mu_k = jnp.exp(topk_logp), jnp.exp(sampler_topk_logp)
  pi_rest = jnp.maximum(1.0 - pi_k.sum(-1), TOPK_MASS_FLOOR)
  mu_rest = jnp.maximum(1.0 - mu_k.sum(-1), TOPK_MASS_FLOOR)
  if divergence == "tv":
    return 0.5 * (jnp.abs(mu_k - pi_k).sum(-1) + jnp.abs(mu_rest - pi_rest))
  terms = jnp.where(mu_k > 0, mu_k * (sampler_topk_logp - topk_logp), 0.0)
  return terms.sum(-1) + mu_rest * (jnp.log(mu_rest) - jnp.log(pi_rest))


def example_topk_reads(logp, old_logp, k=3):
  """Top-K reads for checks (`objectives.make`'s value check, the contract
  laws), built from a call's own [N, T] log-probs so that padding and row
  slices carry over: the sampled token is id 0 of the top-K, mu = exp(old),
  pi = exp(logp); two more ids hold halves and quarters of the remaining
  mass, for either policy. Returns {"sampler_topk_logp", "topk_logp"}."""
  def spread(lp):
    lp = jnp.minimum(lp, 0.0)
    rest = jnp.log(jnp.maximum(-jnp.expm1(lp), TOPK_MASS_FLOOR))
    shares = jnp.log(0.5) * jnp.arange(1, k)  # log 1/2, log 1/4, ...
    return jnp.concatenate(
        [lp[..., None], rest[..., None] + shares.reshape((1,) * lp.ndim
                                                         + (k - 1,))], -1)
  return {"sampler_topk_logp": spread(old_logp), "topk_logp": spread(logp)}


@OBJECTIVES.register(
    level="token", mechanism="gate", paper="2602.04879", reads=TOPK_READS,
    # Anchored on the sampler: its weight is the behaviour policy's.
    behaviour_weight=True, example_reads=example_topk_reads,
    examples=({}, {"divergence": "kl"},
              {"is_cap": 10.0, "delta_low": 0.1, "delta_high": 0.3,
               "aggregation": "seq_mean_token_mean"}))
def dppo_topk(logp, old_logp, advantages, mask, *, divergence="tv",
              delta_low=None, delta_high=None, is_cap=20.0,
              sampler_logp=None, sampler_topk_logp=None, topk_logp=None,
              aggregation="token_mean", horizon=None, token_weights=None):
  """Divergence PPO (top-K forms): mask a token once the policy's
  next-token distribution has moved too far from the sampler's, measured
  over the sampler's top-K ids plus the rest mass, in the direction its
  advantage pushes the sampled token.

  With p = exp(logp), mu = exp(sampler_logp) (the sampled token) and D the
  `topk_divergence` of the position (TV or KL over mu's top-K ids + rest):
    valid = not (D > delta_high and p > mu)   if A > 0
            not (D > delta_low  and p < mu)   otherwise
    L_t = -A * sg(min(exp(logp - sampler_logp), is_cap)) * logp * sg(valid)

  Unlike the binary forms, the divergence sees the whole distribution's
  head: a token whose own probability barely moved is still masked when
  the mass shifted among the other likely tokens. With K = V (and the rest
  empty) D is the full TV or KL. Tokens with A = 0 contribute 0.

  DPPO, arXiv 2602.04879: the official sail-sg/Stable-RL
  ``_compute_token_mask_for_policy_loss`` (``dppo_topk_tv`` /
  ``dppo_topk_kl``) with ``compute_topk_kl``; exact. The divergence is
  measured against the rollout (behaviour) policy, as Stable-RL's top-K
  modes (verl has no top-K form, so no pi_old anchor here: the sampler
  records mu's top-K, and pi_old's would need another gathered pass).
  Defaults as `dppo`: delta 0.15 (TV) or 0.05 (KL), is_cap 20,
  ``token_mean``.

  The sampler records mu's top-K ids and log-probs
  (``rollout.record_topk = K``; [N, T, K]) and the trainer gathers the
  policy's log-probs at those ids inside its chunked log-prob pass
  (`logprobs.token_logprobs(..., topk_ids=)`), so no [N, T, V] array is
  made. A run that does not record them fails at config validation. A
  direct call without them (both None) takes the sampled token alone as
  the set: the binary forms (`dppo`; KL with 1e-12 floors for its 1e-8).

  ratio: statistics of exp(logp - sampler_logp) over real tokens.
  clip_fraction: the share of real tokens with A != 0 that the mask drops.
  extra ``topk_divergence``: `Moments` of D over real tokens.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    divergence: "tv" or "kl".
    delta_low, delta_high: thresholds (>= 0) for A <= 0 and A > 0; None:
      DPPO_DELTA[divergence].
    is_cap: the truncation C of the importance weight (> 0).
    sampler_logp: [N, T] mu of the sampled tokens (the batch's), or None
      (mu = pi_old).
    sampler_topk_logp: [N, T, K] log mu at the sampler's top-K ids, or
      None (with `topk_logp`: the sampled token alone).
    topk_logp: [N, T, K] log pi at the same ids (the trainer's), or None.
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms, or None.

  Returns:
    (loss, ObjectiveAux).

  Raises:
    ValueError naming the arrays when one is missing or their shapes
    disagree.
  """
  agg.check_mode(aggregation, horizon)
  delta_low, delta_high = _thresholds(divergence, delta_low, delta_high,
                                      is_cap)
  if (sampler_topk_logp is None) != (topk_logp is None):
    raise ValueError(
        "dppo_topk takes the sampler's top-K log-probs (sampler_topk_logp) "
        "and the policy's at the same ids (topk_logp) together; got one "
        "of them. The trainer passes both with "
        "config.rollout.record_topk = K > 0.")
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  ref = offpolicy.behaviour_logp(sampler_logp, batch.old_logp, batch.mask)
  if topk_logp is None:
    # No top-K recorded (a direct call): the set is the sampled token
    # alone, which is DPPO's binary approximation.
    sampler_topk_logp, topk_logp = ref[..., None], batch.logp[..., None]
  sampler_topk_logp = jnp.asarray(sampler_topk_logp)
  topk_logp = jnp.asarray(topk_logp)
  for name, array in (("sampler_topk_logp", sampler_topk_logp),
                      ("topk_logp", topk_logp)):
    if array.ndim != 3 or array.shape[:2] != batch.mask.shape:
      raise ValueError(
          f"{name} must be [N, T, K] with [N, T] = {batch.mask.shape}; got "
          f"shape {array.shape}.")
  if topk_logp.shape != sampler_topk_logp.shape:
    raise ValueError(
        f"topk_logp {topk_logp.shape} and sampler_topk_logp "
        f"{sampler_topk_logp.shape} must have the same shape (the same K).")
  x = _kit.clipped_log_ratio(batch.logp, ref)
  # Padding may hold NaN: select, never multiply; the mask is detached.
  real = batch.mask[..., None] > 0
  clean = lambda a: jax.lax.stop_gradient(
      jnp.where(real, jnp.minimum(a.astype(jnp.float32), 0.0), 0.0))
  d = topk_divergence(clean(topk_logp), clean(sampler_topk_logp), divergence)
  # The sampled token's move decides which direction is blocked.
  p = jnp.exp(jax.lax.stop_gradient(jnp.minimum(batch.logp, 0.0)))
  mu = jnp.exp(jnp.minimum(ref, 0.0))
  valid = jnp.where(batch.advantages > 0, ~((d > delta_high) & (p > mu)),
                    ~((d > delta_low) & (p < mu)))
  return _gated(batch, x, valid, is_cap, aggregation=aggregation,
                horizon=horizon, token_weights=token_weights,
                extra={"topk_divergence": measures.Moments.of(d, batch.mask)})
