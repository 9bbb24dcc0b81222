"""What every objective shares: the registry, the aux record, input checks,
the PPO term and the (sum, count) finish.

Numerics: the log-ratio ``x = logp - old_logp`` is set to 0 under padding and
clamped to [-20, 20] before any ``exp``, so log-ratios of +-50 (or -inf under
padding) give a finite loss and finite gradients. `old_logp` is used as given:
nothing here replaces it with ``sg(logp)``.

Token weights (`objectives.corrections`: sampler-mismatch TIS / MIS / ICEPOP,
OPSM, the top-entropy mask) are an explicit keyword: an objective that can
take them has ``token_weights=None`` ([N, T], detached) in its signature and
hands it to `token_objective`, which multiplies each token's loss term by its
weight, or to `sequence_objective`, which multiplies each row's term by its
row's weight, before the aggregation; the aggregation's count stays the
mask's (TRL and verl multiply the per-token loss the same way). An objective
without the keyword (r2vpo's penalty) cannot take corrections.
"""

import math
import numbers
from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax import measures
from grpo_jax import registry

# exp(20) ~ 4.9e8: far beyond any trust region, small enough that r, r^2 and
# their gradients stay finite in float32.
LOG_RATIO_BOUND = 20.0


class ObjectiveAux(NamedTuple):
  """What every objective reports besides its loss, undivided.

  ``loss == aggregation.divide(SumCount(loss_sum, loss_count))``; under
  gradient accumulation the trainer sums `loss_sum` over microbatches and
  divides once by the whole minibatch's count. The diagnostics are
  `measures` records, so they merge exactly across microbatches.

  Attributes:
    loss_sum: the undivided loss; carries the gradient.
    loss_count: its divisor (tokens, rows, or N*horizon by aggregation).
    ratio: `Moments` of the importance ratio over real tokens (over rows with
      tokens for `gspo`/`gspo_token`, which clip the sequence ratio).
    clip: `Mean` share of real tokens whose gradient the clip or gate cut or
      scaled; defined per objective in its docstring.
    kl: `Mean` over real tokens of k3 = exp(d) - d - 1, d = old_logp - logp.
    extra: the objective's own records by measurement name (decoupled
      PPO's ``is_weight``), reported beside the three above; most have none.
  """
  loss_sum: jnp.ndarray
  loss_count: jnp.ndarray
  ratio: measures.Moments
  clip: measures.Mean
  kl: measures.Mean
  extra: Mapping[str, object] = {}  # shared, never mutated

  @property
  def ratio_mean(self):
    return self.ratio.value()["mean"]

  @property
  def ratio_var(self):
    return self.ratio.variance()

  @property
  def ratio_max(self):
    return self.ratio.value()["max"]

  @property
  def ratio_min(self):
    return self.ratio.value()["min"]

  @property
  def clip_fraction(self):
    return self.clip.value()

  @property
  def approx_kl(self):
    return self.kl.value()

  def measures(self) -> dict:
    """The diagnostics by measurement name, for the trainer."""
    return {"ratio": self.ratio, "clip_fraction": self.clip,
            "approx_kl": self.kl, **self.extra}


class StateSpec(NamedTuple):
  """How the trainer drives an objective that carries state (metadata).

  Attributes:
    init: ``init(**options) -> state``.
    update: ``update(state, measures, **options) -> state``, once per
      optimiser step, with the step's merged `measures` records; it receives
      the options of its signature from the objective's bound options.
    loss_kwargs: ``loss_kwargs(state) -> dict`` for the pure function.
    provides: the keys of that dict (options the config may not set).
    skip: ``skip(state) -> state`` after an optimiser step that was
      skipped (non-finite or empty); None keeps the state (its update reads
      the step's measures). A state that must move every step (Clip-Cov's
      draw key) sets it.
  """
  init: Callable
  update: Callable
  loss_kwargs: Callable
  provides: Tuple[str, ...]
  skip: Optional[Callable] = None


class PrePass(NamedTuple):
  """Statistics over the whole minibatch, fixed for all its microbatches.

  Attributes:
    when: ``when(**options) -> bool``: whether these options (every one
      resolved, defaults included) need it.
    stats: ``stats(logp, old_logp, advantages, mask, **options) -> measures
      dict`` (the options of its signature bound), computed per microbatch
      (no gradient) and merged.
    loss_kwargs: ``loss_kwargs(merged) -> dict`` for the pure function.
    provides: the keys of that dict.
  """
  when: Callable
  stats: Callable
  loss_kwargs: Callable
  provides: Tuple[str, ...]


class ObjectiveMeta(NamedTuple):
  """What an objective declares when it registers (`OBJECTIVES`)."""
  level: str  # "token" (takes aggregation=, horizon=) or "sequence"
  # Its trust-region mechanism ("clip", "gate", "penalty", "weight"); None
  # for none, which exempts it from the off-policy law.
  mechanism: Optional[str]
  paper: str = ""  # arXiv id (or a short reference)
  reads: Tuple[str, ...] = ()  # batch arrays its loss takes (sampler_logp)
  state: Optional[StateSpec] = None  # a stateful objective's state
  prepass: Optional[PrePass] = None  # statistics over the whole minibatch
  # Sampler records the run must keep for it (HAPO's token_temperatures).
  requires: Tuple[str, ...] = ()
  # Its loss already weighs by the behaviour policy (reads sampler_logp);
  # a bool or a predicate of the options.
  behaviour_weight: Any = False
  # It needs the minibatch's rows whole (Clip-Cov's random draw); a bool or
  # a predicate of the options.
  whole_minibatch: Any = False
  # It drops some tokens on policy too (a mask that needs no ratio:
  # Clip-Cov's); the on-policy law compares the tokens it keeps.
  on_policy_mask: bool = False
  # ``fn(logp, old_logp) -> dict``: arrays for reads that cannot be None
  # (DPPO's top-K log-probs), for checks and the laws.
  example_reads: Optional[Callable] = None


OBJECTIVES = registry.Registry(
    "objective", positional=("logp", "old_logp", "advantages", "mask"),
    meta=ObjectiveMeta)


class Batch(NamedTuple):
  """Validated float32 inputs; every entry is 0 under padding."""
  log_ratio: jnp.ndarray  # [N, T], clamped to +-LOG_RATIO_BOUND
  logp: jnp.ndarray  # [N, T]
  old_logp: jnp.ndarray  # [N, T]
  advantages: jnp.ndarray  # [N, T]
  mask: jnp.ndarray  # [N, T], 1.0 or 0.0

  @property
  def ratio(self):
    return jnp.exp(self.log_ratio)

  @property
  def lengths(self):
    return self.mask.sum(axis=-1)

  @property
  def row_mask(self):
    """[N] 1.0 for rows with at least one real token."""
    return (self.lengths > 0).astype(jnp.float32)


def prepare(logp, old_logp, advantages, mask) -> Batch:
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
  log_ratio = clipped_log_ratio(logp, old_logp)
  return Batch(
      log_ratio=log_ratio,
      logp=logp,
      old_logp=old_logp,
      advantages=jnp.where(real, advantages.astype(jnp.float32), 0.0),
      mask=real.astype(jnp.float32))


def check_hparam(name: str, value, *, low: float, strict: bool = False):
  """ValueError if a concrete hyperparameter is not a finite number at or
  above `low` (arrays and traced values: skipped). NaN compares False with
  everything, so it is named first: it would otherwise pass and silently
  mask every token, or skip every update; an infinite one turns 0 * inf
  into NaN."""
  bound = ">" if strict else ">="
  if isinstance(value, (str, bytes, bool)):
    raise ValueError(f"{name} must be {bound} {low} and a finite number; "
                     f"got {value!r}.")
  if isinstance(value, numbers.Real) and (
      not math.isfinite(value) or value < low or (strict and value == low)):
    raise ValueError(f"{name} must be {bound} {low} and finite; got "
                     f"{value}.")


def clipped_log_ratio(logp, reference):
  """clip(logp - reference, -20, 20): every log-ratio before an exp."""
  return jnp.clip(logp - reference, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)


def dual_clip(term, cut, advantages, c):
  """The dual clip of arXiv 1912.09729 on per-token loss terms: for A < 0
  the loss is capped at -c * A (c > 1), so a ratio far above the band
  cannot grow the loss without bound. Returns (term, cut) with the capped
  tokens added to `cut`; `c` None leaves both as they are."""
  if c is None:
    return term, cut
  cap = -c * advantages
  cut = cut | ((advantages < 0) & (term > cap))
  return jnp.where(advantages < 0, jnp.minimum(term, cap), term), cut


def check_choice(name: str, value, choices):
  """ValueError naming `name` and the choices unless `value` is one."""
  if value not in choices:
    raise ValueError(f"{name}={value!r} is unknown; choose one of "
                     f"{', '.join(choices)}.")


def check_band(clip_low, clip_high):
  check_hparam("clip_low", clip_low, low=0.0)
  check_hparam("clip_high", clip_high, low=0.0)


def check_dual_clip(c):
  """The dual clip's c: None (off) or a finite number > 1."""
  if c is not None:
    check_hparam("dual_clip", c, low=1.0, strict=True)


def ppo_term(ratio, advantages, clip_low, clip_high):
  """-min(r*A, clip(r, 1-lo, 1+hi)*A) and where its gradient is cut."""
  clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
  term = -jnp.minimum(ratio * advantages, clipped * advantages)
  cut = (((advantages > 0) & (ratio > 1.0 + clip_high))
         | ((advantages < 0) & (ratio < 1.0 - clip_low)))
  return term, cut


def dual_clipped_ppo_term(ratio, advantages, clip_low, clip_high, c):
  """`ppo_term`, then `dual_clip` at c (None: off): (term, cut)."""
  return dual_clip(*ppo_term(ratio, advantages, clip_low, clip_high),
                   advantages, c)


def row_advantages(batch: Batch):
  """[N] advantages: the mean over each row's real tokens.

  Exact for advantages given as [N] (constant along the row).
  """
  return batch.advantages.sum(axis=-1) / jnp.maximum(batch.lengths, 1.0)


def sequence_log_ratio(batch: Batch):
  """log s_i = sum_t x*m / n_i (the log of the geometric-mean ratio), [N]."""
  return batch.log_ratio.sum(axis=-1) / jnp.maximum(batch.lengths, 1.0)


# The measurement names every `ObjectiveAux` reports; extra records take others.
MEASURES = ("ratio", "clip_fraction", "approx_kl")


def finish(sc: agg.SumCount, batch: Batch, *, ratio: measures.Moments,
           clipped, extra: Optional[Mapping] = None) -> tuple:
  """(loss, ObjectiveAux) from the (sum, count) pair and the diagnostics.

  Args:
    sc: the undivided loss.
    batch: the prepared inputs (for the k3 drift).
    ratio: `Moments` of the ratio the objective trusts.
    clipped: [N, T] bool, tokens whose gradient the mechanism cut or scaled.
    extra: the objective's own `measures` records by name (none of
      `MEASURES`), or None.
  """
  extra = dict(extra or {})
  taken = sorted(set(extra) & set(MEASURES))
  if taken:
    raise ValueError(f"extra measure {taken[0]!r} would replace the one "
                     "every objective reports; name it otherwise.")
  d = -batch.log_ratio
  diagnostics = measures.stop_gradient({
      "ratio": ratio,
      "clip": measures.Mean.of(clipped, batch.mask),
      "kl": measures.Mean.of(jnp.expm1(d) - d, batch.mask),
      "extra": extra})
  aux = ObjectiveAux(jnp.asarray(sc.total, jnp.float32),
                     jnp.asarray(sc.count, jnp.float32), **diagnostics)
  return agg.divide(agg.SumCount(aux.loss_sum, aux.loss_count)), aux


def check_token_weights(token_weights, shape) -> jnp.ndarray:
  """float32 [N, T] weights, detached; a ValueError unless of `shape`."""
  token_weights = jnp.asarray(token_weights, jnp.float32)
  if token_weights.shape != tuple(shape):
    raise ValueError(
        f"token_weights must be [N, T] = {tuple(shape)} like the loss terms; "
        f"got shape {token_weights.shape}.")
  return jax.lax.stop_gradient(token_weights)


def weigh(per_token, token_weights):
  """[N, T] loss terms times their detached `token_weights` (None: as
  they are)."""
  if token_weights is None:
    return per_token
  weights = check_token_weights(token_weights, jnp.shape(per_token))
  # where, not a product alone: a masked token's term never leaks in.
  return jnp.where(weights > 0, per_token * weights, 0.0)


def token_objective(per_token, batch: Batch, *, aggregation: str,
                    horizon: Optional[int], clipped, ratio=None,
                    ratio_moments: Optional[measures.Moments] = None,
                    token_weights=None, extra: Optional[Mapping] = None):
  """Aggregates per-token loss terms; ratio statistics over real tokens
  (of `ratio`, default the token ratio), or `ratio_moments` as given (a
  sequence ratio's over rows, say).

  With `token_weights` [N, T] each term is multiplied by its token's weight
  first; the count (the denominator) is the mask's either way. `extra`: see
  `finish`.
  """
  per_token = weigh(per_token, token_weights)
  sc = agg.sum_and_count(per_token, batch.mask, aggregation, horizon=horizon)
  if ratio_moments is None:
    ratio_moments = measures.Moments.of(
        batch.ratio if ratio is None else ratio, batch.mask)
  return finish(sc, batch, ratio=ratio_moments, clipped=clipped, extra=extra)


def sequence_objective(per_row, batch: Batch, *, ratio: measures.Moments,
                       clipped, token_weights=None):
  """(loss, ObjectiveAux) of a sequence-level objective: the mean of one
  term per row over rows with tokens (`aggregation.sequence_sum_and_count`).

  With `token_weights` [N, T] each row's term is multiplied by its row
  weight, the mean of its tokens' weights (sequence-level corrections give
  every token of a row the same weight); the count stays the rows with
  tokens.

  Args:
    per_row: [N] the rows' loss terms.
    batch: the prepared inputs.
    ratio: `Moments` of the ratio the objective trusts.
    clipped: [N, T] bool, tokens whose gradient the mechanism cut or scaled.
    token_weights: [N, T] detached weights, or None.
  """
  if token_weights is not None:
    weights = check_token_weights(token_weights, batch.mask.shape)
    row_weight = ((weights * batch.mask).sum(axis=-1)
                  / jnp.maximum(batch.lengths, 1.0))
    per_row = jnp.where(row_weight > 0, per_row * row_weight, 0.0)
  sc = agg.sequence_sum_and_count(per_row, batch.row_mask)
  return finish(sc, batch, ratio=ratio, clipped=clipped)
