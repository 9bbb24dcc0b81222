"""Policy objectives of the GRPO family: (logp, old_logp, adv, mask) -> (loss, aux).

Every objective has the signature

  loss, aux = fn(logp, old_logp, advantages, mask, *, <hyperparameters>,
                 aggregation=<its paper's mode>, horizon=None)

with `logp`, `old_logp`, `mask` of shape [N, T] and `advantages` of shape [N]
(broadcast over tokens) or [N, T] (token-level). `loss` is a float32 scalar to
*minimise*. The sequence-level objectives `gspo` and `gmpo` take no
`aggregation`: they average one term per sequence over the rows with at least
one token.

`aux` is an `ObjectiveAux`, the same NamedTuple for every objective, with
``loss == aggregation.divide(SumCount(aux.loss_sum, aux.loss_count))``. Under
gradient accumulation the trainer sums `loss_sum` and `loss_count` over
microbatches and divides once (or differentiates ``loss_sum / total_count``).

Numerics: the log-ratio ``x = logp - old_logp`` is set to 0 under padding and
clamped to [-20, 20] before any ``exp``, so log-ratios of +-50 (or -inf under
padding) give a finite loss and finite gradients. `old_logp` is used as given:
nothing here replaces it with ``sg(logp)``, so ratios differ from 1 as soon as
the policy moves.

The math and its sources are in OBJECTIVES.md; each function's docstring gives
its formula, paper and default aggregation.
"""

import numbers
from typing import Callable, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp

from grpo_jax import aggregation as agg

# exp(20) ~ 4.9e8: far beyond any trust region, small enough that r, r^2 and
# their gradients stay finite in float32.
LOG_RATIO_BOUND = 20.0

# SAPO has no hard clip; its clip_fraction counts tokens whose gradient the
# soft gate scales by less than this factor.
SAPO_GATE_THRESHOLD = 0.5

# R2VPO defaults (no public code; see `r2vpo`). A ratio spread uniformly over
# PPO's band [0.8, 1.2] has variance 0.4^2 / 12 ~ 0.013.
R2VPO_DELTA = 0.01
R2VPO_ETA = 0.1
R2VPO_CENTERS = ("one", "mean")


class ObjectiveAux(NamedTuple):
  """What every objective reports besides its loss. All float32 scalars.

  Attributes:
    loss_sum: the undivided loss; carries the gradient.
    loss_count: its divisor (tokens, rows, or N*horizon by aggregation).
    ratio_mean, ratio_max, ratio_min, ratio_var: statistics of the importance
      ratio over real tokens (over rows with tokens for `gspo`/`gspo_token`,
      which clip the sequence ratio); 0 when there are none. `ratio_var` is
      the population variance about the mean, except for `r2vpo`, where it is
      the penalised variance (about the chosen centre).
    clip_fraction: share of real tokens whose gradient the clip or gate cut or
      scaled; defined per objective in its docstring.
    approx_kl: masked token mean of k3 = exp(d) - d - 1, d = old_logp - logp.
  """
  loss_sum: jnp.ndarray
  loss_count: jnp.ndarray
  ratio_mean: jnp.ndarray
  ratio_max: jnp.ndarray
  ratio_min: jnp.ndarray
  ratio_var: jnp.ndarray
  clip_fraction: jnp.ndarray
  approx_kl: jnp.ndarray


class _Batch(NamedTuple):
  """Validated float32 inputs; every entry is 0 under padding."""
  log_ratio: jnp.ndarray  # [N, T], clamped to +-LOG_RATIO_BOUND
  logp: jnp.ndarray  # [N, T]
  advantages: jnp.ndarray  # [N, T]
  mask: jnp.ndarray  # [N, T], 1.0 or 0.0


# ----------------------------------------------------------------- helpers


def _prepare(logp, old_logp, advantages, mask) -> _Batch:
  """Checks shapes and returns float32 inputs with padding neutralised."""
  logp, old_logp, advantages, mask = (
      jnp.asarray(a) for a in (logp, old_logp, advantages, mask))
  agg.check_token_arrays(logp=logp, old_logp=old_logp, mask=mask)
  n, t = logp.shape
  if advantages.ndim == 1 and advantages.shape == (n,):
    advantages = jnp.broadcast_to(advantages[:, None], (n, t))
  elif advantages.ndim != 2 or advantages.shape != (n, t):
    raise ValueError(
        f"advantages must be [N] = ({n},) or [N, T] = ({n}, {t}) to match "
        f"logp; got shape {advantages.shape}.")
  real = mask > 0
  # Double where: padding may hold -inf or NaN, and a NaN that enters an
  # unselected branch still poisons the gradient.
  logp = jnp.where(real, logp.astype(jnp.float32), 0.0)
  old_logp = jnp.where(real, old_logp.astype(jnp.float32), 0.0)
  log_ratio = jnp.clip(logp - old_logp, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
  return _Batch(
      log_ratio=log_ratio,
      logp=logp,
      advantages=jnp.where(real, advantages.astype(jnp.float32), 0.0),
      mask=real.astype(jnp.float32))


def _check_hparam(name: str, value, *, low: float, strict: bool = False):
  """ValueError if a concrete hyperparameter is below `low` (traced: skipped)."""
  if isinstance(value, numbers.Real) and (
      value < low or (strict and value == low)):
    bound = ">" if strict else ">="
    raise ValueError(f"{name} must be {bound} {low}; got {value}.")


def _check_band(clip_low, clip_high):
  _check_hparam("clip_low", clip_low, low=0.0)
  _check_hparam("clip_high", clip_high, low=0.0)


def _share(flags, mask):
  """Share of the entries with mask > 0 where `flags` holds; 0 if none."""
  return agg.divide(agg.SumCount(
      jnp.sum(jnp.where(mask > 0, flags.astype(jnp.float32), 0.0)),
      jnp.sum(mask)))


def _masked_stats(values, mask, *, center=None):
  """(mean, max, min, var) of `values` where mask > 0; zeros if none.

  `var` is about the masked mean, or about `center` when one is given.
  """
  real = mask > 0
  count = jnp.sum(mask)
  mean = agg.divide(
      agg.SumCount(jnp.sum(jnp.where(real, values, 0.0)), count))
  centre = mean if center is None else center
  var = agg.divide(agg.SumCount(
      jnp.sum(jnp.where(real, jnp.square(values - centre), 0.0)), count))
  some = count > 0
  vmax = jnp.where(some, jnp.max(jnp.where(real, values, -jnp.inf)), 0.0)
  vmin = jnp.where(some, jnp.min(jnp.where(real, values, jnp.inf)), 0.0)
  return mean, vmax, vmin, var


def _approx_kl(batch: _Batch):
  """Masked token mean of k3 with d = old_logp - logp (already clamped)."""
  d = -batch.log_ratio
  return agg.divide(agg.sum_and_count(
      jnp.expm1(d) - d, batch.mask, "token_mean"))


def _finish(sc: agg.SumCount, *, stats, clip_fraction, approx_kl
            ) -> Tuple[jnp.ndarray, ObjectiveAux]:
  """Loss and aux from the (sum, count) pair and the diagnostics."""
  diagnostics = jax.lax.stop_gradient(
      tuple(stats) + (clip_fraction, approx_kl))
  aux = ObjectiveAux(
      jnp.asarray(sc.total, jnp.float32),
      jnp.asarray(sc.count, jnp.float32),
      *(jnp.asarray(d, jnp.float32) for d in diagnostics))
  return agg.divide(agg.SumCount(aux.loss_sum, aux.loss_count)), aux


def _token_objective(per_token, batch, *, aggregation, horizon, clip_flags,
                     ratio=None, center=None):
  """Aggregates per-token loss terms and collects token-level diagnostics."""
  sc = agg.sum_and_count(per_token, batch.mask, aggregation, horizon=horizon)
  ratio = jnp.exp(batch.log_ratio) if ratio is None else ratio
  return _finish(
      sc,
      stats=_masked_stats(ratio, batch.mask, center=center),
      clip_fraction=_share(clip_flags, batch.mask),
      approx_kl=_approx_kl(batch))


def _ppo_term(ratio, advantages, clip_low, clip_high):
  """-min(r*A, clip(r, 1-lo, 1+hi)*A) and where its gradient is cut."""
  clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
  term = -jnp.minimum(ratio * advantages, clipped * advantages)
  cut = (((advantages > 0) & (ratio > 1.0 + clip_high))
         | ((advantages < 0) & (ratio < 1.0 - clip_low)))
  return term, cut


def _row_advantages(batch: _Batch):
  """[N] advantages: the mean over each row's real tokens.

  Exact for advantages given as [N] (constant along the row).
  """
  lengths = batch.mask.sum(axis=-1)
  return batch.advantages.sum(axis=-1) / jnp.maximum(lengths, 1.0), lengths


# -------------------------------------------------------------- objectives


def ppo_clip(logp, old_logp, advantages, mask, *, clip_low=0.2, clip_high=0.2,
             dual_clip=None, aggregation="seq_mean_token_mean", horizon=None):
  """PPO's clipped surrogate as used by GRPO (and DAPO).

  Per token, with r = exp(logp - old_logp):
    L = -min(r*A, clip(r, 1 - clip_low, 1 + clip_high) * A)
  for every sign of A. With `dual_clip` = c (> 1) and A < 0 the objective is
  max(min(r*A, clip(r)*A), c*A), so the loss is min(L, -c*A): a token with a
  huge ratio and a negative advantage no longer gives an unbounded loss.

  GRPO: DeepSeekMath, arXiv 2402.03300 (default: symmetric 0.2 band,
  ``seq_mean_token_mean``). DAPO, arXiv 2503.14476: ``clip_high=0.28`` and
  ``aggregation="token_mean"``. Dual clip: Ye et al., arXiv 1912.09729.

  clip_fraction: tokens with A > 0 and r > 1 + clip_high, or A < 0 and
  r < 1 - clip_low (gradient cut by the clip), plus, with dual clip, tokens
  with A < 0 whose loss the cap -c*A replaced.

  Args:
    logp: [N, T] log-probs of the sampled tokens under the trained policy.
    old_logp: [N, T] log-probs under the behaviour policy.
    advantages: [N] or [N, T].
    mask: [N, T] 1 for real completion tokens, 0 for padding.
    clip_low, clip_high: the band [1 - clip_low, 1 + clip_high].
    dual_clip: None (off) or c > 1.
    aggregation: an `aggregation.MODES` entry.
    horizon: the constant of ``seq_mean_token_sum_norm``.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _check_band(clip_low, clip_high)
  if dual_clip is not None:
    _check_hparam("dual_clip", dual_clip, low=1.0, strict=True)
  batch = _prepare(logp, old_logp, advantages, mask)
  a = batch.advantages
  ratio = jnp.exp(batch.log_ratio)
  term, cut = _ppo_term(ratio, a, clip_low, clip_high)
  if dual_clip is not None:
    cap = -dual_clip * a
    capped = (a < 0) & (term > cap)
    term = jnp.where(a < 0, jnp.minimum(term, cap), term)
    cut = cut | capped
  return _token_objective(term, batch, aggregation=aggregation,
                          horizon=horizon, clip_flags=cut, ratio=ratio)


def _sequence_log_ratio(batch: _Batch):
  """log s_i = sum_t x*m / n_i (the log of the geometric-mean ratio), [N]."""
  lengths = batch.mask.sum(axis=-1)
  return batch.log_ratio.sum(axis=-1) / jnp.maximum(lengths, 1.0), lengths


def _sequence_stats(seq_ratio, lengths):
  return _masked_stats(seq_ratio, (lengths > 0).astype(jnp.float32))


def gspo(logp, old_logp, advantages, mask, *, clip_low=3e-4, clip_high=4e-4):
  """Group Sequence Policy Optimization (sequence-level ratio and clip).

    s_i = exp(sum_t x_it * m_it / n_i)     (geometric mean, never exp(sum))
    L_i = -min(s_i * A_i, clip(s_i, 1 - clip_low, 1 + clip_high) * A_i)
    loss = mean of L_i over rows with n_i > 0

  GSPO, arXiv 2507.18071. Token-level advantages [N, T] are averaged over each
  row's real tokens (exact for advantages constant along the row); use
  `gspo_token` for per-token credit.

  ratio_*: statistics of s_i over rows with tokens. clip_fraction: tokens of
  the sequences whose gradient the clip cut (A > 0 and s > 1 + clip_high, or
  A < 0 and s < 1 - clip_low), over all real tokens.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    clip_low, clip_high: the band on the sequence ratio.

  Returns:
    (loss, ObjectiveAux).
  """
  _check_band(clip_low, clip_high)
  batch = _prepare(logp, old_logp, advantages, mask)
  log_s, lengths = _sequence_log_ratio(batch)
  seq_ratio = jnp.exp(log_s)
  adv, _ = _row_advantages(batch)
  term, cut = _ppo_term(seq_ratio, adv, clip_low, clip_high)
  sc = agg.sequence_sum_and_count(term, (lengths > 0).astype(jnp.float32))
  return _finish(
      sc,
      stats=_sequence_stats(seq_ratio, lengths),
      clip_fraction=_share(jnp.broadcast_to(cut[:, None], batch.mask.shape),
                           batch.mask),
      approx_kl=_approx_kl(batch))


def gspo_token(logp, old_logp, advantages, mask, *, clip_low=3e-4,
               clip_high=4e-4, aggregation="seq_mean_token_mean",
               horizon=None):
  """GSPO-token: the sequence ratio's value with per-token gradients.

    log s_it = sg(log s_i) + logp_it - sg(logp_it)
    L_it = -min(s_it * A_it, clip(s_it, 1 - clip_low, 1 + clip_high) * A_it)

  s_it equals s_i in value, so the clip decision is per sequence, while the
  gradient of token t flows through its own log-prob only. With A_it = A_i
  it has the gradient of `gspo`. GSPO, arXiv 2507.18071 (default aggregation
  ``seq_mean_token_mean``, the paper's 1/|y_i| sum_t).

  ratio_*: statistics of s_i over rows with tokens. clip_fraction: tokens with
  A_it > 0 and s_i > 1 + clip_high, or A_it < 0 and s_i < 1 - clip_low.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    clip_low, clip_high: the band on the sequence ratio.
    aggregation, horizon: see `aggregation.sum_and_count`.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _check_band(clip_low, clip_high)
  batch = _prepare(logp, old_logp, advantages, mask)
  log_s, lengths = _sequence_log_ratio(batch)
  log_s_token = (jax.lax.stop_gradient(log_s)[:, None]
                 + batch.logp - jax.lax.stop_gradient(batch.logp))
  term, cut = _ppo_term(jnp.exp(log_s_token), batch.advantages, clip_low,
                        clip_high)
  sc = agg.sum_and_count(term, batch.mask, aggregation, horizon=horizon)
  return _finish(
      sc,
      stats=_sequence_stats(jnp.exp(log_s), lengths),
      clip_fraction=_share(cut, batch.mask),
      approx_kl=_approx_kl(batch))


def gmpo(logp, old_logp, advantages, mask, *, clip_low=0.4, clip_high=0.4):
  """Geometric-Mean Policy Optimization: one-sided log-space token clipping.

    x'_it = min(x, clip(x, -clip_low, clip_high))  if A_i >= 0
            max(x, clip(x, -clip_low, clip_high))  if A_i <  0
    L_i = -A_i * exp(sum_t x'_it * m_it / n_i)
    loss = mean of L_i over rows with n_i > 0

  Defaults keep token ratios in (e^-0.4, e^0.4). Geometric-Mean Policy
  Optimization, arXiv 2507.20673. Token-level advantages [N, T] are averaged
  over each row's real tokens.

  ratio_*: statistics of the (unclipped) token ratios over real tokens, since
  the clip acts per token. clip_fraction: real tokens whose log-ratio the
  clip replaced (A >= 0 and x > clip_high, or A < 0 and x < -clip_low): their
  gradient is cut while the rest of the sequence still learns. This counts
  clipped tokens, not all tokens of sequences with a clipped token.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    clip_low, clip_high: the log-space band.

  Returns:
    (loss, ObjectiveAux).
  """
  _check_band(clip_low, clip_high)
  batch = _prepare(logp, old_logp, advantages, mask)
  adv, lengths = _row_advantages(batch)
  x = batch.log_ratio
  banded = jnp.clip(x, -clip_low, clip_high)
  positive = (adv >= 0)[:, None]
  x_clipped = jnp.where(positive, jnp.minimum(x, banded),
                        jnp.maximum(x, banded))
  cut = jnp.where(positive, x > clip_high, x < -clip_low)
  log_seq = (x_clipped * batch.mask).sum(axis=-1) / jnp.maximum(lengths, 1.0)
  term = -adv * jnp.exp(log_seq)
  sc = agg.sequence_sum_and_count(term, (lengths > 0).astype(jnp.float32))
  return _finish(
      sc,
      stats=_masked_stats(jnp.exp(x), batch.mask),
      clip_fraction=_share(cut, batch.mask),
      approx_kl=_approx_kl(batch))


def cfpo(logp, old_logp, advantages, mask, *, epsilon=0.2,
         aggregation="seq_mean_token_mean", horizon=None):
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

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _check_hparam("epsilon", epsilon, low=0.0, strict=True)
  batch = _prepare(logp, old_logp, advantages, mask)
  a = batch.advantages
  ratio = jnp.exp(batch.log_ratio)
  term = -(ratio * a - jnp.abs(a) * jnp.square(ratio - 1.0) / (2.0 * epsilon))
  past = (((a > 0) & (ratio > 1.0 + epsilon))
          | ((a < 0) & (ratio < 1.0 - epsilon)))
  return _token_objective(term, batch, aggregation=aggregation,
                          horizon=horizon, clip_flags=past, ratio=ratio)


class R2VPOState(NamedTuple):
  """The dual variable of `r2vpo` (a float32 scalar, >= 0)."""
  lam: jnp.ndarray


def r2vpo_init(lam0=0.0) -> R2VPOState:
  """The initial dual variable."""
  _check_hparam("lam0", lam0, low=0.0)
  return R2VPOState(lam=jnp.asarray(lam0, jnp.float32))


def r2vpo_update(state: R2VPOState, ratio_var, *, delta, eta) -> R2VPOState:
  """Dual ascent on lam, once per optimiser step.

    lam <- max(0, lam + eta * (sg(ratio_var) - delta))

  Args:
    state: the current `R2VPOState`.
    ratio_var: the measured ratio variance (`ObjectiveAux.ratio_var` of
      `r2vpo`), a scalar.
    delta: the variance budget.
    eta: the dual step size.
  """
  ratio_var = jax.lax.stop_gradient(jnp.asarray(ratio_var, jnp.float32))
  lam = state.lam + eta * (ratio_var - delta)
  return R2VPOState(lam=jnp.maximum(lam, 0.0).astype(jnp.float32))


def r2vpo(logp, old_logp, advantages, mask, *, lam=0.0, delta=R2VPO_DELTA,
          center="one", aggregation="token_mean", horizon=None):
  """Ratio-Variance Regularized Policy Optimization (reconstruction).

    loss = aggregate(-r * A) + sg(lam) * (Var_mask(r) - delta)
    Var_mask(r) = sum_it m * (r - c)^2 / sum_it m
    c = 1 (center="one") or the masked mean of r (center="mean")

  No public code exists: this is a reconstruction from the abstract of
  Ratio-Variance Regularized Policy Optimization. The dual variable `lam` is
  state, updated by `r2vpo_update` (see `stateful("r2vpo")`). Default
  aggregation ``token_mean``: the surrogate is a mean over the batch's tokens,
  like the variance.

  loss_sum carries the penalty as ``penalty * loss_count``, so that
  loss == loss_sum / loss_count. Under microbatching (sum the sums, sum the
  counts, divide once) the penalty therefore becomes the loss_count-weighted
  mean of the microbatch penalties, i.e. of the microbatch variances, not the
  variance of the whole batch. An empty batch gives 0.

  ratio_var: the penalised variance (about `center`), the quantity the dual
  update needs. clip_fraction: 0 (nothing is clipped).

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    lam: the dual variable (>= 0); no gradient flows into it.
    delta: the variance budget.
    center: "one" or "mean".
    aggregation, horizon: see `aggregation.sum_and_count`.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  if center not in R2VPO_CENTERS:
    raise ValueError(
        f"center={center!r} is unknown; choose one of {R2VPO_CENTERS}.")
  batch = _prepare(logp, old_logp, advantages, mask)
  ratio = jnp.exp(batch.log_ratio)
  surrogate = agg.sum_and_count(-ratio * batch.advantages, batch.mask,
                                aggregation, horizon=horizon)
  mean, vmax, vmin, var = _masked_stats(
      ratio, batch.mask, center=1.0 if center == "one" else None)
  penalty = jax.lax.stop_gradient(jnp.asarray(lam, jnp.float32)) * (
      var - delta)
  sc = agg.SumCount(surrogate.total + penalty * surrogate.count,
                    surrogate.count)
  return _finish(
      sc,
      stats=(mean, vmax, vmin, var),
      clip_fraction=jnp.zeros((), jnp.float32),
      approx_kl=_approx_kl(batch))


def sapo(logp, old_logp, advantages, mask, *, tau_pos=1.0, tau_neg=1.05,
         aggregation="token_mean", horizon=None):
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

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _check_hparam("tau_pos", tau_pos, low=0.0, strict=True)
  _check_hparam("tau_neg", tau_neg, low=0.0, strict=True)
  batch = _prepare(logp, old_logp, advantages, mask)
  a = batch.advantages
  ratio = jnp.exp(batch.log_ratio)
  tau = jnp.where(a > 0, tau_pos, tau_neg)
  gate = jax.nn.sigmoid(tau * (ratio - 1.0))
  term = -gate * (4.0 / tau) * a
  weight = 4.0 * gate * (1.0 - gate)
  return _token_objective(term, batch, aggregation=aggregation,
                          horizon=horizon,
                          clip_flags=weight < SAPO_GATE_THRESHOLD, ratio=ratio)


def cispo(logp, old_logp, advantages, mask, *, clip_low=1.0, clip_high=4.0,
          aggregation="token_mean", horizon=None):
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

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _check_band(clip_low, clip_high)
  batch = _prepare(logp, old_logp, advantages, mask)
  ratio = jnp.exp(batch.log_ratio)
  weight = jax.lax.stop_gradient(
      jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high))
  term = -weight * batch.advantages * batch.logp
  outside = (ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)
  return _token_objective(term, batch, aggregation=aggregation,
                          horizon=horizon, clip_flags=outside, ratio=ratio)


def reinforce(logp, old_logp, advantages, mask, *,
              aggregation="seq_mean_token_mean", horizon=None):
  """REINFORCE with group-relative advantages (RGRA).

    L = -A * logp

  No ratio and no clip: on policy with one update per batch its gradient
  equals GRPO's, hence the same default aggregation
  (``seq_mean_token_mean``). `old_logp` only feeds the diagnostics.
  clip_fraction: 0.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    aggregation, horizon: see `aggregation.sum_and_count`.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  batch = _prepare(logp, old_logp, advantages, mask)
  term = -batch.advantages * batch.logp
  return _token_objective(term, batch, aggregation=aggregation,
                          horizon=horizon,
                          clip_flags=jnp.zeros_like(batch.mask, bool))


# ---------------------------------------------------------------- registry

_OBJECTIVES = {
    "ppo_clip": ppo_clip,
    "gspo": gspo,
    "gspo_token": gspo_token,
    "gmpo": gmpo,
    "cfpo": cfpo,
    "r2vpo": r2vpo,
    "sapo": sapo,
    "cispo": cispo,
    "reinforce": reinforce,
}

_SEQUENCE_LEVEL = ("gspo", "gmpo")


class StatefulObjective(NamedTuple):
  """How the trainer drives an objective that carries state.

  Attributes:
    init: ``init() -> state``.
    update: ``update(state, aux, **hparams) -> state``, once per optimiser
      step, with the step's `ObjectiveAux`; keywords it does not use are
      ignored, so the trainer may pass the objective's whole hparam dict.
    state_kwargs: ``state_kwargs(state) -> dict`` of keyword arguments for
      the loss function.
  """
  init: Callable
  update: Callable
  state_kwargs: Callable


def _r2vpo_update_from_aux(state, aux, *, delta=R2VPO_DELTA, eta=R2VPO_ETA,
                           **unused):
  del unused  # the loss's other hyperparameters (center, aggregation, ...)
  return r2vpo_update(state, aux.ratio_var, delta=delta, eta=eta)


_STATEFUL = {
    "r2vpo": StatefulObjective(
        init=r2vpo_init,
        update=_r2vpo_update_from_aux,
        state_kwargs=lambda state: {"lam": state.lam}),
}


def names() -> Tuple[str, ...]:
  """The registered objective names, sorted."""
  return tuple(sorted(_OBJECTIVES))


def get(name: str) -> Callable:
  """The objective function registered under `name` (ValueError if none)."""
  if name not in _OBJECTIVES:
    raise ValueError(
        f"objective {name!r} is unknown; choose one of {', '.join(names())}.")
  return _OBJECTIVES[name]


def is_sequence_level(name: str) -> bool:
  """True for objectives with one term per sequence and no `aggregation`."""
  get(name)
  return name in _SEQUENCE_LEVEL


def stateful(name: str) -> Optional[StatefulObjective]:
  """The (init, update, state_kwargs) of a stateful objective, else None."""
  get(name)
  return _STATEFUL.get(name)
