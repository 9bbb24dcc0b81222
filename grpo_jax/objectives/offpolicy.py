"""Objectives that weigh tokens by a behaviour policy: decoupled PPO, F-TIS
and VESPO, and the behaviour log-probs they (and DPPO) read.

Three policies can meet in one loss:

* the **behaviour** policy mu that drew the tokens: the batch's
  ``sampler_logp`` (the sampler's own tempered log-probs; for replayed or
  peer-generated rows, the policy that generated them);
* the **proximal** policy pi_old: ``old_logp``, the trainer's own forward
  pass before the batch's first optimiser step;
* the **current** policy pi_theta: ``logp``.

An objective here declares ``reads=("sampler_logp",)``, so the trainer passes
the batch's sampler log-probs as a keyword. Without them (a batch built
without the sampler's log-probs, or a direct call) the behaviour policy is
the proximal one: ``sampler_logp=None`` means mu = pi_old. Each also declares
``behaviour_weight=True``: its terms already carry the behaviour policy's
importance weight, so a sampler-mismatch correction (`corrections.tis`, ...)
would apply it twice and is refused.
"""

import math
import numbers

import jax
import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax import measures
from grpo_jax.objectives import _kit
from grpo_jax.objectives._kit import OBJECTIVES
from grpo_jax.objectives.soft import SAPO_GATE_THRESHOLD

# The batch arrays these objectives read beside (logp, old_logp, adv, mask).
READS = ("sampler_logp",)

# F-TIS's row filters: the statistic of the log-ratio log(pi / mu) that must
# lie in [log band_low, log band_high].
FTIS_FILTERS = ("sequence_mean", "sequence_sum", "token")

# VESPO clamps its log sequence ratio from below here (TRL: log 1e-8).
VESPO_LOG_W_MIN = math.log(1e-8)


def behaviour_logp(sampler_logp, old_logp, mask) -> jnp.ndarray:
  """[N, T] float32 behaviour log-probs, 0 under padding.

  Args:
    sampler_logp: [N, T] the behaviour policy's log-probs, or None (then
      the behaviour policy is the proximal one, `old_logp`).
    old_logp: [N, T] the proximal policy's log-probs.
    mask: [N, T] loss tokens.

  Raises:
    ValueError naming ``sampler_logp`` when its shape is not logp's.
  """
  source = old_logp if sampler_logp is None else sampler_logp
  source, mask = jnp.asarray(source), jnp.asarray(mask)
  if source.shape != mask.shape:
    raise ValueError(
        f"sampler_logp must be [N, T] = {tuple(mask.shape)} like logp; got "
        f"shape {tuple(source.shape)}.")
  # Padding may hold -inf or NaN: select, never multiply.
  return jnp.where(mask > 0, source.astype(jnp.float32), 0.0)


def _capped(log_weight, cap):
  """sg(min(exp(log_weight), cap)) and where the cap bound; cap None: no cap."""
  weight = jnp.exp(log_weight)
  if cap is None:
    return jax.lax.stop_gradient(weight), jnp.zeros(weight.shape, bool)
  return (jax.lax.stop_gradient(jnp.minimum(weight, cap)), weight > cap)


def weight_measures(weight, truncated, mask) -> dict:
  """An importance weight's records for `ObjectiveAux.extra`: ``is_weight``
  (`Moments` of the weight as applied, over real tokens) and
  ``is_truncated`` (`Mean` share of real tokens whose weight the cap
  replaced)."""
  return {"is_weight": measures.Moments.of(weight, mask),
          "is_truncated": measures.Mean.of(truncated, mask)}


@OBJECTIVES.register(
    level="token", mechanism="clip", paper="2110.00641", reads=READS,
    behaviour_weight=True,
    examples=({}, {"is_cap": 2.0, "aggregation": "token_mean"},
              {"dual_clip": 3.0, "clip_high": 0.28}))
def decoupled_ppo(logp, old_logp, advantages, mask, *, clip_low=0.2,
                  clip_high=0.2, is_cap=None, dual_clip=None,
                  sampler_logp=None, aggregation="seq_mean_token_mean",
                  horizon=None, token_weights=None):
  """Decoupled PPO: a proximal policy for the clip, a behaviour policy for
  the importance weight.

    w   = sg(min(exp(old_logp - behav_logp), is_cap))     (is_cap None: no cap)
    r   = exp(logp - old_logp)
    L_t = -w * min(r*A, clip(r, 1 - clip_low, 1 + clip_high) * A)

  with PPO's dual clip for A < 0 (``min(L_ppo, -c*A)``, before the weight)
  when `dual_clip` = c is set. The trust region is centred on the proximal
  policy pi_old, so stale or mismatched behaviour data (a sampler whose
  log-probs differ from the trainer's, replayed rows) is corrected by w
  without widening the clip. With behav_logp = old_logp (or no
  `sampler_logp`) w = 1 and this is `ppo_clip` exactly, default aggregation
  included.

  Hilton, Cobbe and Schulman, "Batch size-invariance for policy
  optimization", arXiv 2110.00641; verl's rollout-correction notes
  (``docs/algo/rollout_corr_math.md``, decoupled mode). Exact.

  ratio: statistics of r (the proximal ratio the clip trusts).
  clip_fraction: as `ppo_clip` (the clip's and the dual clip's cuts).
  is_weight, is_truncated (`weight_measures`): w over real tokens, and the
  share of them whose weight the cap replaced.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    clip_low, clip_high: the band [1 - clip_low, 1 + clip_high] on r.
    is_cap: the truncation C_is of the behaviour weight (> 0), or None.
    dual_clip: None (off) or c > 1.
    sampler_logp: [N, T] the behaviour policy's log-probs (read from the
      batch), or None (behaviour = proximal).
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _kit.check_band(clip_low, clip_high)
  if is_cap is not None:
    _kit.check_hparam("is_cap", is_cap, low=0.0, strict=True)
  _kit.check_dual_clip(dual_clip)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  old = batch.old_logp
  mu = behaviour_logp(sampler_logp, old, batch.mask)
  weight, truncated = _capped(_kit.clipped_log_ratio(old, mu), is_cap)
  a, ratio = batch.advantages, batch.ratio
  term, cut = _kit.dual_clipped_ppo_term(ratio, a, clip_low, clip_high,
                                         dual_clip)
  return _kit.token_objective(
      weight * term, batch, aggregation=aggregation, horizon=horizon,
      clipped=cut, ratio=ratio, token_weights=token_weights,
      extra=weight_measures(weight, truncated, batch.mask))


def _check_f_tis_filter(band_low, band_high, filter):  # pylint: disable=redefined-builtin
  _kit.check_choice("filter", filter, FTIS_FILTERS)
  _kit.check_hparam("band_low", band_low, low=0.0, strict=True)
  _kit.check_hparam("band_high", band_high, low=1.0)
  if isinstance(band_low, numbers.Real) and band_low > 1.0:
    raise ValueError(f"band_low must be <= 1; got {band_low}.")


def _f_tis_keep(batch: _kit.Batch, sampler_logp, *, band_low, band_high,
                filter):  # pylint: disable=redefined-builtin
  """(x = clip(logp - behav_logp) on real tokens, keep [N, T] bool): the
  filter's statistic of x in [log band_low, log band_high], on real
  tokens (`f_tis`)."""
  mu = behaviour_logp(sampler_logp, batch.old_logp, batch.mask)
  x = _kit.clipped_log_ratio(batch.logp, mu) * batch.mask
  row_sum = x.sum(axis=-1, keepdims=True)
  statistic = {
      "sequence_mean": row_sum / jnp.maximum(batch.lengths, 1.0)[:, None],
      "sequence_sum": row_sum,
      "token": x}[filter]
  statistic = jax.lax.stop_gradient(statistic)
  keep = ((statistic >= jnp.log(band_low))
          & (statistic <= jnp.log(band_high)))
  return x, jnp.broadcast_to(keep, batch.mask.shape) & (batch.mask > 0)


def _f_tis_counts(logp, old_logp, advantages, mask, *, band_low, band_high,
                  filter, aggregation, horizon, sampler_logp=None):  # pylint: disable=redefined-builtin
  """The pre-pass: the aggregation's count over every real token and over
  the kept ones (`Sum` records, added over microbatches)."""
  _check_f_tis_filter(band_low, band_high, filter)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  _, keep = _f_tis_keep(jax.lax.stop_gradient(batch), sampler_logp,
                        band_low=band_low, band_high=band_high, filter=filter)
  return {"count": measures.Sum(agg.count(batch.mask, aggregation,
                                          horizon=horizon)),
          "kept_count": measures.Sum(agg.count(
              keep.astype(jnp.float32), aggregation, horizon=horizon))}


def _count_scale(count, kept_count):
  """count / kept_count (0 when nothing is kept): the factor that turns a
  sum over kept tokens, divided by the mask's count, into one divided by
  the kept count."""
  return measures.safe_divide(count, kept_count)


@OBJECTIVES.register(
    level="token", mechanism="weight", paper="F-TIS (seed 000 para. 52; "
    "reconstruction)", reads=READS, behaviour_weight=True,
    examples=({}, {"filter": "token", "is_cap": 1.5},
              {"filter": "sequence_sum", "band_low": 0.25, "band_high": 4.0,
               "aggregation": "seq_mean_token_mean"},
              {"band_low": 0.8, "band_high": 1.25}),
    # The kept rows' count spans the minibatch: a pre-pass sums it.
    prepass=_kit.PrePass(
        when=lambda **_: True, stats=_f_tis_counts,
        loss_kwargs=lambda stats: {"count_scale": _count_scale(
            stats["count"].sum, stats["kept_count"].sum)},
        provides=("count_scale",)))
def f_tis(logp, old_logp, advantages, mask, *, is_cap=2.0, band_low=0.5,
          band_high=2.0, filter="sequence_mean",  # pylint: disable=redefined-builtin
          sampler_logp=None, count_scale=None, aggregation="token_mean",
          horizon=None, token_weights=None):
  """Filtered Truncated Importance Sampling (reconstruction).

    x_t    = logp_t - behav_logp_t
    w_t    = sg(min(exp(x_t), is_cap))
    keep   = sg(log band_low <= s <= log band_high), with s by `filter`:
               "sequence_mean": s_i = sum_t x_t m_t / n_i  (the geometric-mean
                                ratio of the row; the default)
               "sequence_sum":  s_i = sum_t x_t m_t      (the product ratio)
               "token":         s_it = x_t               (each token alone)
    L_t    = -w_t * A * logp_t,  aggregated over the kept tokens only

  F-TIS (seed 000 para. 52) trains on rows generated by heterogeneous peer
  models: behav_logp is the log-prob of the model that generated the row.
  No code was found; this is a **reconstruction** (VARIANTS.md 2.4), every
  constant a keyword: is_cap C = 2, band [0.5, 2]. For local rows
  (behav = pi_old) it is CISPO-like REINFORCE with a truncated IS weight.

  Denominator (VARIANTS.md 2.4: "a row removed by the filter leaves the
  denominator too, a mask, not zeros"): the aggregation runs over the
  kept tokens as its mask (``token_mean``: their number; the row modes:
  the rows with a kept token, each row's mean over its kept tokens). The
  filter reads the current logp, so the kept count is the minibatch's,
  from a pre-pass (it reads ``sampler_logp`` too), and the loss reports
  sum * count_scale over the mask's count, count_scale = (the mask's
  count) / (the kept count): the value is the kept-token mean, exact under
  microbatching. Corrections' zero weights, as everywhere, keep the
  count.

  ratio: statistics of exp(x) over real tokens. clip_fraction: real tokens
  whose weight the cap truncated or that the filter dropped. is_weight,
  is_truncated (`weight_measures`): w over real tokens (filtered or not),
  and the share of them whose weight the cap replaced.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    is_cap: the truncation C of the weight (> 0).
    band_low, band_high: the filter band (0 < band_low <= 1 <= band_high).
    filter: one of FTIS_FILTERS.
    sampler_logp: [N, T] the generating model's log-probs (read from the
      batch), or None (the proximal policy's, `old_logp`).
    count_scale: the minibatch's mask count over its kept count, from the
      pre-pass, or None (these rows').
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _check_f_tis_filter(band_low, band_high, filter)
  _kit.check_hparam("is_cap", is_cap, low=0.0, strict=True)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  x, keep = _f_tis_keep(batch, sampler_logp, band_low=band_low,
                        band_high=band_high, filter=filter)
  weight, truncated = _capped(x, is_cap)
  term = _kit.weigh(-weight * batch.advantages * batch.logp, token_weights)
  kept = agg.sum_and_count(term, keep.astype(jnp.float32), aggregation,
                           horizon=horizon)
  count = agg.count(batch.mask, aggregation, horizon=horizon)
  if count_scale is None:
    count_scale = _count_scale(count, kept.count)
  return _kit.finish(
      agg.SumCount(kept.total * count_scale, count), batch,
      ratio=measures.Moments.of(jnp.exp(x), batch.mask),
      clipped=truncated | ((batch.mask > 0) & ~keep),
      extra=weight_measures(weight, truncated, batch.mask))


def vespo_log_weight(batch: _kit.Batch, old, mu, is_cap):
  """[N] log W_i = clip(sum_t x_t m_t + sum_t log c_t m_t, log 1e-8, 20), with
  the sampler correction log c_t = min(clip(old - mu, log 1e-8, 20), log
  is_cap) (0 without sampler log-probs)."""
  log_w = (batch.log_ratio * batch.mask).sum(axis=-1)
  log_c = jnp.clip(old - mu, VESPO_LOG_W_MIN, _kit.LOG_RATIO_BOUND)
  if is_cap is not None:
    log_c = jnp.minimum(log_c, jnp.log(is_cap))
  log_w = log_w + (log_c * batch.mask).sum(axis=-1)
  return jnp.clip(log_w, VESPO_LOG_W_MIN, _kit.LOG_RATIO_BOUND)


@OBJECTIVES.register(
    level="token", mechanism="weight", paper="2602.10693", reads=READS,
    behaviour_weight=True,
    examples=({}, {"k_pos": 1.0, "lambda_pos": 1.0, "k_neg": 1.0,
                   "lambda_neg": 1.0, "aggregation": "seq_mean_token_mean"},
              {"is_cap": None}))
def vespo(logp, old_logp, advantages, mask, *, k_pos=2.0, lambda_pos=3.0,
          k_neg=3.0, lambda_neg=2.0, is_cap=3.0, sampler_logp=None,
          aggregation="token_mean", horizon=None, token_weights=None):
  """VESPO: a Gamma-shaped soft weight on the sequence ratio.

    W_i   = prod_t pi(y_t) / mu(y_t)   (the PRODUCT over the row's tokens,
                                        clamped to [1e-8, e^20])
    phi   = exp(lam + k log W - lam W) = W^k e^{lam (1 - W)}    (phi(1) = 1)
    L_t   = -sg(phi(W_i)) * A_t * logp_t
    (k, lam) = (k_pos, lambda_pos) if A_t >= 0 else (k_neg, lambda_neg)

  phi rises from 0 at W = 0 to its peak at W = k / lam and decays
  exponentially for large W, so stale or mismatched rows fade smoothly
  instead of being clipped; on policy W = 1, phi = 1 and the gradient is
  REINFORCE's. The behaviour policy mu is pi_old times the sampler
  correction: log W_i = sum_t (logp - old_logp) + sum_t min(old_logp -
  sampler_logp, log is_cap), the token-truncated IS ratio folded into W as
  TRL does (``vllm_importance_sampling_mode="token_truncate"``, C_max 3);
  without `sampler_logp` mu = pi_old.

  VESPO, arXiv 2602.10693, as implemented in TRL (``loss_type="vespo"``,
  ``GRPOTrainer.get_gamma_weights``): defaults k_pos=2, lambda_pos=3,
  k_neg=3, lambda_neg=2, token mean. W is the product ratio on purpose (the
  paper's sequence-level ratio; a mean would not be VESPO).

  ratio: statistics of W_i over real tokens (each row's W once per token).
  clip_fraction: real tokens whose gradient the weight at least halved
  (phi < SAPO_GATE_THRESHOLD).

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    k_pos, lambda_pos, k_neg, lambda_neg: the Gamma shape and rate (> 0)
      for A >= 0 and A < 0.
    is_cap: the truncation of the sampler correction exp(old - sampler)
      (> 0), or None.
    sampler_logp: [N, T] the sampler's log-probs (read from the batch), or
      None.
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  for name, value in (("k_pos", k_pos), ("lambda_pos", lambda_pos),
                      ("k_neg", k_neg), ("lambda_neg", lambda_neg)):
    _kit.check_hparam(name, value, low=0.0, strict=True)
  if is_cap is not None:
    _kit.check_hparam("is_cap", is_cap, low=0.0, strict=True)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  old = batch.old_logp
  mu = behaviour_logp(sampler_logp, old, batch.mask)
  log_w = vespo_log_weight(batch, old, mu, is_cap)[:, None]
  a = batch.advantages
  k = jnp.where(a >= 0, k_pos, k_neg)
  lam = jnp.where(a >= 0, lambda_pos, lambda_neg)
  phi = jax.lax.stop_gradient(jnp.exp(lam + k * log_w - lam * jnp.exp(log_w)))
  term = -phi * a * batch.logp
  return _kit.token_objective(
      term, batch, aggregation=aggregation, horizon=horizon,
      clipped=phi < SAPO_GATE_THRESHOLD,
      ratio=jnp.broadcast_to(jnp.exp(log_w), batch.mask.shape),
      token_weights=token_weights)
