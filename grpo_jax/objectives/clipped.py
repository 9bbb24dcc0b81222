"""Ratio-clipping objectives: PPO's clip (GRPO, DAPO), GSPO, LUSPO, GMPO,
CISPO."""

import numbers

import jax
import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax import measures
from grpo_jax.objectives import _kit
from grpo_jax.objectives._kit import OBJECTIVES


@OBJECTIVES.register(
    level="token", mechanism="clip", paper="2402.03300",
    examples=({}, {"clip_high": 0.28, "aggregation": "token_mean"},
              {"dual_clip": 3.0},
              {"aggregation": "seq_mean_token_sum_norm", "horizon": 7},
              {"delta": 1.5}))
def ppo_clip(logp, old_logp, advantages, mask, *, clip_low=0.2, clip_high=0.2,
             dual_clip=None, delta=None, aggregation="seq_mean_token_mean",
             horizon=None, token_weights=None):
  """PPO's clipped surrogate as used by GRPO (and DAPO).

  Per token, with r = exp(logp - old_logp):
    L = -min(r*A, clip(r, 1 - clip_low, 1 + clip_high) * A)
  for every sign of A. With `dual_clip` = c (> 1) and A < 0 the objective is
  max(min(r*A, clip(r)*A), c*A), so the loss is min(L, -c*A): a token with a
  huge ratio and a negative advantage no longer gives an unbounded loss.

  GRPO: DeepSeekMath, arXiv 2402.03300 (default: symmetric 0.2 band,
  ``seq_mean_token_mean``). DAPO, arXiv 2503.14476: ``clip_high=0.28`` and
  ``aggregation="token_mean"``. Dual clip: Ye et al., arXiv 1912.09729.

  With `delta` (INTELLECT-2's two-sided clip, arXiv 2505.07291, TRL's
  ``delta``) the unclipped ratio is capped too:
    L = -min(min(r, delta) * A, clip(r, 1 - clip_low, 1 + clip_high) * A)
  which bounds the loss (and cuts the gradient) of a token with A < 0 whose
  ratio exceeds delta; delta >= 1 + clip_high leaves A > 0 tokens as they
  were. Value and gradient equal those of ``dual_clip=delta`` (both give
  min(r, delta) * |A| for A < 0 above the band); INTELLECT-2 uses delta = 4.

  clip_fraction: tokens with A > 0 and r > 1 + clip_high, or A < 0 and
  r < 1 - clip_low (gradient cut by the clip), plus, with dual clip or
  delta, tokens with A < 0 whose loss the cap replaced.

  Args:
    logp: [N, T] log-probs of the sampled tokens under the trained policy.
    old_logp: [N, T] log-probs under the behaviour policy.
    advantages: [N] or [N, T].
    mask: [N, T] 1 for real completion tokens, 0 for padding.
    clip_low, clip_high: the band [1 - clip_low, 1 + clip_high].
    dual_clip: None (off) or c > 1.
    delta: None (off) or the cap (>= 1 + clip_high) of the unclipped ratio.
    aggregation: an `aggregation.MODES` entry.
    horizon: the constant of ``seq_mean_token_sum_norm``.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _kit.check_band(clip_low, clip_high)
  _kit.check_dual_clip(dual_clip)
  if delta is not None:
    _kit.check_hparam("delta", delta, low=1.0, strict=True)
    if (isinstance(delta, numbers.Real) and isinstance(clip_high, numbers.Real)
        and delta < 1.0 + clip_high):
      raise ValueError(
          f"delta must be >= 1 + clip_high = {1.0 + clip_high}; got {delta}.")
  if delta is not None:
    # Capping the unclipped ratio at delta is the dual clip at delta.
    dual_clip = delta if dual_clip is None else min(dual_clip, delta)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  a, ratio = batch.advantages, batch.ratio
  term, cut = _kit.dual_clipped_ppo_term(ratio, a, clip_low, clip_high,
                                         dual_clip)
  return _kit.token_objective(term, batch, aggregation=aggregation,
                              horizon=horizon, clipped=cut, ratio=ratio,
                              token_weights=token_weights)


@OBJECTIVES.register(
    level="sequence", mechanism="clip", paper="2507.18071",
    examples=({}, {"clip_low": 0.2, "clip_high": 0.2}))
def gspo(logp, old_logp, advantages, mask, *, clip_low=3e-4, clip_high=4e-4,
         token_weights=None):
  """Group Sequence Policy Optimization (sequence-level ratio and clip).

    s_i = exp(sum_t x_it * m_it / n_i)     (geometric mean, never exp(sum))
    L_i = -min(s_i * A_i, clip(s_i, 1 - clip_low, 1 + clip_high) * A_i)
    loss = mean of L_i over rows with n_i > 0

  GSPO, arXiv 2507.18071. Token-level advantages [N, T] are averaged over each
  row's real tokens (exact for advantages constant along the row); use
  `gspo_token` for per-token credit.

  ratio: statistics of s_i over rows with tokens. clip_fraction: tokens of
  the sequences whose gradient the clip cut (A > 0 and s > 1 + clip_high, or
  A < 0 and s < 1 - clip_low), over all real tokens.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    clip_low, clip_high: the band on the sequence ratio.
    token_weights: [N, T] detached weights (`objectives.corrections`); each
      row's term takes its row's mean weight. Or None.

  Returns:
    (loss, ObjectiveAux).
  """
  _kit.check_band(clip_low, clip_high)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  seq_ratio = jnp.exp(_kit.sequence_log_ratio(batch))
  term, cut = _kit.ppo_term(seq_ratio, _kit.row_advantages(batch), clip_low,
                            clip_high)
  return _kit.sequence_objective(
      term, batch, ratio=measures.Moments.of(seq_ratio, batch.row_mask),
      clipped=jnp.broadcast_to(cut[:, None], batch.mask.shape),
      token_weights=token_weights)


@OBJECTIVES.register(
    level="token", mechanism="clip", paper="2507.18071",
    examples=({}, {"clip_low": 0.2, "clip_high": 0.2,
                   "aggregation": "token_mean"}))
def gspo_token(logp, old_logp, advantages, mask, *, clip_low=3e-4,
               clip_high=4e-4, aggregation="seq_mean_token_mean",
               horizon=None, token_weights=None):
  """GSPO-token: the sequence ratio's value with per-token gradients.

    log s_it = sg(log s_i) + logp_it - sg(logp_it)
    L_it = -min(s_it * A_it, clip(s_it, 1 - clip_low, 1 + clip_high) * A_it)

  s_it equals s_i in value, so the clip decision is per sequence, while the
  gradient of token t flows through its own log-prob only. With A_it = A_i
  it has the gradient of `gspo`. GSPO, arXiv 2507.18071 (default aggregation
  ``seq_mean_token_mean``, the paper's 1/|y_i| sum_t).

  ratio: statistics of s_i over rows with tokens. clip_fraction: tokens with
  A_it > 0 and s_i > 1 + clip_high, or A_it < 0 and s_i < 1 - clip_low.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    clip_low, clip_high: the band on the sequence ratio.
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _kit.check_band(clip_low, clip_high)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  log_s = _kit.sequence_log_ratio(batch)
  sg = jax.lax.stop_gradient
  log_s_token = sg(log_s)[:, None] + batch.logp - sg(batch.logp)
  term, cut = _kit.ppo_term(jnp.exp(log_s_token), batch.advantages, clip_low,
                            clip_high)
  return _kit.token_objective(
      term, batch, aggregation=aggregation, horizon=horizon, clipped=cut,
      ratio_moments=measures.Moments.of(jnp.exp(log_s), batch.row_mask),
      token_weights=token_weights)


@OBJECTIVES.register(
    level="token", mechanism="clip", paper="2602.05261",
    examples=({}, {"clip_low": 0.2, "clip_high": 0.2}))
def luspo(logp, old_logp, advantages, mask, *, clip_low=2e-3,
          clip_high=2.5e-3, aggregation="seq_mean_token_sum", horizon=None,
          token_weights=None):
  """Length-Unbiased Sequence Policy Optimization: GSPO x length.

    s_i  = exp(sum_t x_it * m_it / n_i)
    L_i  = -min(s_i * A_i, clip(s_i, 1 - clip_low, 1 + clip_high) * A_i)
    loss = mean over rows with tokens of n_i * L_i

  GSPO averages L_i over sequences, so each token of a long completion gets
  a gradient 1/n_i as large as a short one's: a bias against length. LUSPO
  scales each sequence's term by its length n_i. Written per token it is
  `gspo_token`'s term (value s_i, the gradient of token t through its own
  log-prob) under ``seq_mean_token_sum`` aggregation: sum_t L_it / rows =
  n_i L_i / rows for advantages constant along the row, with per-token
  credit for [N, T] advantages.

  LUSPO, arXiv 2602.05261, as TRL implements it (``loss_type="luspo"`` with
  ``importance_sampling_level="sequence"``: ``(L_i * n_i).mean()``; TRL
  averages over every row of the batch, here over rows with tokens, which
  differs only for all-padding rows). Defaults: the band 2e-3 / 2.5e-3 of
  the paper's section 5.1 (TRL's paper index). Another `aggregation` gives
  GSPO-token with that normalisation, not LUSPO.

  ratio: statistics of s_i over rows with tokens. clip_fraction: as
  `gspo_token`.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    clip_low, clip_high: the band on the sequence ratio.
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  return gspo_token(logp, old_logp, advantages, mask, clip_low=clip_low,
                    clip_high=clip_high, aggregation=aggregation,
                    horizon=horizon, token_weights=token_weights)


@OBJECTIVES.register(
    level="sequence", mechanism="clip", paper="2507.20673",
    examples=({}, {"clip_low": 0.05, "clip_high": 0.05}))
def gmpo(logp, old_logp, advantages, mask, *, clip_low=0.4, clip_high=0.4,
         token_weights=None):
  """Geometric-Mean Policy Optimization: one-sided log-space token clipping.

    x'_it = min(x, clip(x, -clip_low, clip_high))  if A_i >= 0
            max(x, clip(x, -clip_low, clip_high))  if A_i <  0
    L_i = -A_i * exp(sum_t x'_it * m_it / n_i)
    loss = mean of L_i over rows with n_i > 0

  Defaults keep token ratios in (e^-0.4, e^0.4). Geometric-Mean Policy
  Optimization, arXiv 2507.20673. Token-level advantages [N, T] are averaged
  over each row's real tokens.

  ratio: statistics of the (unclipped) token ratios over real tokens, since
  the clip acts per token. clip_fraction: real tokens whose log-ratio the
  clip replaced (A >= 0 and x > clip_high, or A < 0 and x < -clip_low): their
  gradient is cut while the rest of the sequence still learns.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    clip_low, clip_high: the log-space band.
    token_weights: [N, T] detached weights (`objectives.corrections`); each
      row's term takes its row's mean weight. Or None.

  Returns:
    (loss, ObjectiveAux).
  """
  _kit.check_band(clip_low, clip_high)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  adv = _kit.row_advantages(batch)
  x = batch.log_ratio
  banded = jnp.clip(x, -clip_low, clip_high)
  positive = (adv >= 0)[:, None]
  x_clipped = jnp.where(positive, jnp.minimum(x, banded),
                        jnp.maximum(x, banded))
  cut = jnp.where(positive, x > clip_high, x < -clip_low)
  log_seq = ((x_clipped * batch.mask).sum(axis=-1)
             / jnp.maximum(batch.lengths, 1.0))
  return _kit.sequence_objective(
      -adv * jnp.exp(log_seq), batch,
      ratio=measures.Moments.of(batch.ratio, batch.mask), clipped=cut,
      token_weights=token_weights)


@OBJECTIVES.register(
    level="token", mechanism="weight", paper="2506.13585",
    examples=({}, {"clip_low": 0.2, "clip_high": 0.28}))
def cispo(logp, old_logp, advantages, mask, *, clip_low=1.0, clip_high=4.0,
          aggregation="token_mean", horizon=None, token_weights=None):
  """Clipped IS-weight Policy Optimization (MiniMax-M1).

    L = -sg(clip(r, 1 - clip_low, 1 + clip_high)) * A * logp

  Every token keeps a gradient; the clip only bounds its importance weight.
  MiniMax-M1, arXiv 2506.13585, which sets no lower bound and tunes the upper
  one, and normalises by the batch's tokens (``token_mean``).

  Public implementations disagree on the bounds: TRL clamps only from above,
  r <= epsilon_high, recommending 5.0 (ScaleRL, arXiv 2510.13786); Trinity-RFT
  uses the band [0, 1.28]. Defaults here: clip_low=1.0 (the weight is only
  floored at 0, i.e. no lower bound) and clip_high=4.0 (weight <= 5).

  clip_fraction: tokens with r outside [1 - clip_low, 1 + clip_high] (their
  weight was clipped, whatever the sign of A).

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    clip_low, clip_high: the band on the importance weight.
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _kit.check_band(clip_low, clip_high)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  ratio = batch.ratio
  weight = jax.lax.stop_gradient(
      jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high))
  term = -weight * batch.advantages * batch.logp
  outside = (ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)
  return _kit.token_objective(term, batch, aggregation=aggregation,
                              horizon=horizon, clipped=outside, ratio=ratio,
                              token_weights=token_weights)
