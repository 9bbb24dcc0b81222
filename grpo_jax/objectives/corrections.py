"""Token weights and masks that compose with any objective: sampler-mismatch
importance sampling (TIS, MIS, ICEPOP) and DeepSeek-V3.2's off-policy
sequence mask (OPSM). Other modules register more with `register`:
`entropy_mask` (the top-entropy token mask), `rejection` (verl's rejection
masks), `influence` (FIPO).

A correction is a pure function of arrays

  out = fn(mask, *, <arrays it reads>, <options>) -> TokenWeights

whose ``weights`` [N, T] (float32, detached, 0 under padding) multiply each
token's loss term: 1 leaves a token as it was, 0 masks it. The trainer
(`update.make_loss_functions`) computes every configured correction on each
microbatch, multiplies their weights and passes the product to the
objective's explicit keyword (``objective.loss(..., token_weights=w)``, then
the pure function's ``token_weights=``), which weighs each token's term
before its aggregation; the aggregation's denominator stays the mask's, as
in TRL (``per_token_loss * importance_sampling_ratio``) and verl
(``pg_losses * rollout_is_weights``). Regularisers (KL, the entropy bonus)
are not weighted, as in TRL.

Arrays a correction may read (``reads``), all detached:

* ``old_logp``: the proximal policy's log-probs (the old log-prob pass; on
  policy the update's own, detached);
* ``sampler_logp``: the sampler's own tempered log-probs of the same tokens,
  carried by the batch on and off policy (`batch.Batch`); with top-k / top-p
  they are still the plain tempered distribution's, as the trainer's are;
* ``logp``, ``entropy``: the current policy's, from the update's forward;
* ``advantages``: [N] or [N, T].

Levels. A ``token`` correction gives each token its own weight; a
``sequence`` one gives every token of a row the same weight. An objective
takes weights when its function has a ``token_weights`` keyword
(`Objective.weighting`). Token-level objectives take both levels. A
sequence-level objective (one term per row: gspo, gmpo) takes only
sequence-level corrections, as a row weight. An objective that weighs its
terms by the behaviour policy already (it reads ``sampler_logp``: decoupled
PPO, F-TIS, VESPO, DPPO anchored on the sampler) takes no sampler-mismatch
correction (tis, tis_sequence, mis, mis_sequence, icepop): the ratio would
count twice. Anything else is an error at `check_compatible` (the
trainer's and the config's), naming both.

Measurements, under ``correction/<name>/``: ``weight_mean`` (the mean
weight over real tokens), ``masked_fraction`` (real tokens of weight 0),
``truncated_fraction`` (real tokens whose weight a bound replaced) and the
moments of the statistic the rule thresholds (``ratio`` for the IS rules,
``log_ratio`` for OPSM, ``entropy`` for the top-entropy mask).
"""

import functools
import inspect
import numbers
from typing import Callable, NamedTuple, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax import measures
from grpo_jax import registry
from grpo_jax.objectives import _kit
from grpo_jax.objectives import record as objective_record
from grpo_jax.objectives._kit import OBJECTIVES
from grpo_jax.objectives._kit import check_hparam


class CorrectionMeta(NamedTuple):
  """What a correction declares when it registers (`CORRECTIONS`)."""
  level: str  # "token" or "sequence" (one weight per row)
  reads: Tuple[str, ...]  # the batch arrays it takes (sampler_logp, ...)
  statistic: str  # what it thresholds, the name of its measurement
  paper: str = ""  # arXiv id (or a short reference)
  # ``prepass(mask, **arrays) -> dict``: a statistic over the whole
  # minibatch (the top-entropy threshold); None for none.
  prepass: Optional[Callable] = None
  provides: Tuple[str, ...] = ()  # the keys of that dict (not options)
  # Its weight is the behaviour policy's ratio pi_old / mu.
  behaviour_weight: bool = False


CORRECTIONS = registry.Registry("correction", positional=("mask",),
                                meta=CorrectionMeta)

# How a sequence's IS ratio is formed from its tokens' log-ratios x_t:
# "product" exp(sum_t x_t) (TRL, verl), "geometric" exp(mean_t x_t)
# (OpenRLHF's seq-mask-tis, verl's seq_mean rejection).
SEQUENCE_RATIOS = ("product", "geometric")

LEVELS = ("token", "sequence")


def register(*, level: str, **meta):
  """`CORRECTIONS.register`, with `level` checked against LEVELS (a
  ValueError at import naming the correction otherwise)."""
  def decorate(fn):
    if level not in LEVELS:
      raise ValueError(
          f"correction {fn.__name__!r} declares level={level!r}; choose one "
          f"of {', '.join(LEVELS)}.")
    return CORRECTIONS.register(level=level, **meta)(fn)
  return decorate


class TokenWeights(NamedTuple):
  """A correction's output.

  Attributes:
    weights: [N, T] float32 weights of the loss terms, detached; 0 under
      padding.
    truncated: [N, T] bool, real tokens whose weight a bound replaced (a
      truncation; masking shows as weight 0 instead).
    statistic: [N, T] float32, the quantity the rule thresholds (the IS
      ratio, a row's value repeated on its tokens, the entropy), 0 under
      padding.
  """
  weights: jnp.ndarray
  truncated: jnp.ndarray
  statistic: jnp.ndarray


# ------------------------------------------------------------------ kit


def real_arrays(mask, **arrays):
  """(real [N, T] bool, the arrays as float32 [N, T], 0 under padding,
  detached); a ValueError naming an array of another shape."""
  agg.check_token_arrays(mask=mask, **arrays)
  real = jnp.asarray(mask) > 0
  # Select, never multiply: padding may hold -inf or NaN.
  out = {k: jax.lax.stop_gradient(
      jnp.where(real, jnp.asarray(v, jnp.float32), 0.0))
         for k, v in arrays.items()}
  return real, out


def token_advantages(advantages, real):
  """[N] or [N, T] advantages as detached [N, T], 0 off the `real` tokens
  (a ValueError for any other shape)."""
  advantages = jnp.asarray(advantages, jnp.float32)
  if advantages.ndim == 1:
    advantages = jnp.broadcast_to(advantages[:, None], real.shape)
  elif advantages.shape != real.shape:
    raise ValueError(
        f"advantages must be [N] or [N, T] = {real.shape}; got shape "
        f"{advantages.shape}.")
  return jax.lax.stop_gradient(jnp.where(real, advantages, 0.0))


def check_number(name: str, value, *, low: float, strict: bool = False):
  """ValueError unless `value` is a real number (a traced or 0-d array
  passes to `_kit.check_hparam`, which skips traced ones), not NaN and
  above `low`. None is no bound here: every bound takes a number."""
  if isinstance(value, bool) or not (
      isinstance(value, numbers.Real)
      or (hasattr(value, "dtype") and getattr(value, "ndim", None) == 0)):
    bound = ">" if strict else ">="
    raise ValueError(
        f"{name} must be a real number {bound} {low}; got {value!r} "
        f"({type(value).__name__}): set {name} to a number.")
  check_hparam(name, value, low=low, strict=strict)


def check_bounds(low_name, low, high_name, high):
  check_number(low_name, low, low=0.0)
  check_number(high_name, high, low=0.0, strict=True)
  if (isinstance(low, numbers.Real) and isinstance(high, numbers.Real)
      and not low < high):
    raise ValueError(
        f"{low_name}={low!r} must be below {high_name}={high!r}.")


def sampler_log_ratio(mask, old_logp, sampler_logp):
  """(real [N, T] bool, x = old_logp - sampler_logp on real tokens, 0 on
  padding, clipped to +-20 like every log-ratio before an exp: verl's
  SAFETY_BOUND)."""
  real, a = real_arrays(mask, old_logp=old_logp, sampler_logp=sampler_logp)
  x = _kit.clipped_log_ratio(a["old_logp"], a["sampler_logp"])
  return real, jnp.where(real, x, 0.0)


def _sampler_ratio(mask, old_logp, sampler_logp, ratio="token"):
  """(real [N, T] bool, rho = pi_old / mu on real tokens, 1 on padding):
  each token's own ratio, or with `ratio` one of SEQUENCE_RATIOS (checked:
  a sequence correction given None must fail, not turn token-level) its
  row's on every token of the row."""
  real, x = sampler_log_ratio(mask, old_logp, sampler_logp)
  if ratio != "token":
    x = _sequence_log_ratio(real, x, ratio)
  return real, jnp.exp(x)


def _sequence_log_ratio(real, x, how: str):
  """[N, T] the row's log IS ratio on each of its real tokens."""
  _kit.check_choice("ratio", how, SEQUENCE_RATIOS)
  total = x.sum(axis=-1, keepdims=True)
  lengths = jnp.maximum(real.sum(axis=-1, keepdims=True), 1)
  row = {"product": total, "geometric": total / lengths}[how]
  bound = _kit.LOG_RATIO_BOUND
  return jnp.where(real, jnp.clip(row, -bound, bound),
                   0.0)


def _truncate(real, ratio, c_min, c_max) -> TokenWeights:
  weights = jnp.where(real, jnp.clip(ratio, c_min, c_max), 0.0)
  truncated = real & ((ratio > c_max) | (ratio < c_min))
  return TokenWeights(weights, truncated, jnp.where(real, ratio, 0.0))


def _band_mask(real, ratio, low, high) -> TokenWeights:
  keep = real & (ratio >= low) & (ratio <= high)
  return TokenWeights(jnp.where(keep, ratio, 0.0), jnp.zeros_like(real),
                      jnp.where(real, ratio, 0.0))


# ------------------------------------------------- sampler mismatch (IS)

_SAMPLER = ("old_logp", "sampler_logp")
# These weigh each term by pi_old / mu, the behaviour policy's importance
# ratio (metadata ``behaviour_weight=True``): an objective that does so
# itself takes none of them.


@register(
    level="token", reads=_SAMPLER, statistic="ratio", behaviour_weight=True,
    paper="Yao et al. 2025, 'Your efficient RL framework secretly brings you "
    "off-policy RL training'; verl rollout_is='token'; TRL token_truncate",
    examples=({}, {"c_max": 3.0, "c_min": 0.5}))
def tis(mask, *, old_logp, sampler_logp, c_max=2.0, c_min=0.0):
  """Token-level truncated importance sampling against the sampler.

    rho_t = exp(old_logp_t - sampler_logp_t),  w_t = clip(rho_t, c_min, c_max)

  The proximal policy's probability of each token over the sampler's: the
  sampler (another program, another precision, stale params) drew the
  tokens, the trainer's ratio starts from pi_old. Defaults: verl
  ``rollout_is="token"`` with ``rollout_is_threshold=2.0`` (upper bound
  only), as Yao et al.'s TIS (C = 2). TRL ``token_truncate``: C_max = 3,
  C_min off; OpenRLHF ``tis``: [0.5, 5.0].

  Args:
    mask: [N, T] loss tokens.
    old_logp, sampler_logp: [N, T] proximal and sampler log-probs.
    c_max: the upper bound (> 0).
    c_min: the lower bound (>= 0; 0 = none).

  Returns:
    TokenWeights (truncated: rho outside [c_min, c_max]; statistic: rho).
  """
  check_bounds("c_min", c_min, "c_max", c_max)
  return _truncate(*_sampler_ratio(mask, old_logp, sampler_logp), c_min,
                   c_max)


@register(
    level="sequence", reads=_SAMPLER, statistic="ratio", behaviour_weight=True,
    paper="verl rollout_is='sequence'; TRL sequence_truncate",
    examples=({}, {"ratio": "geometric", "c_max": 1.5, "c_min": 0.5}))
def tis_sequence(mask, *, old_logp, sampler_logp, c_max=2.0, c_min=0.0,
                 ratio="product"):
  """Sequence-level truncated importance sampling against the sampler.

    x_t = old_logp_t - sampler_logp_t
    rho_i = exp(sum_t x_t)  (ratio="product")  or  exp(mean_t x_t) ("geometric")
    w_it = clip(rho_i, c_min, c_max)  on every real token of row i

  Defaults: verl ``rollout_is="sequence"`` (its default level) with
  ``rollout_is_threshold=2.0``, the product of the token ratios as in verl
  and TRL ``sequence_truncate`` (TRL: C_max = 3). The geometric mean is
  length-normalised (OpenRLHF's ``seq-mask-tis`` statistic). The log-ratio
  of a row is clipped to +-20 before the exp (verl's safety bound).

  Args:
    mask: [N, T] loss tokens.
    old_logp, sampler_logp: [N, T] proximal and sampler log-probs.
    c_max, c_min: the bounds (c_min 0 = none).
    ratio: one of SEQUENCE_RATIOS.

  Returns:
    TokenWeights (statistic: rho_i on the row's tokens).
  """
  check_bounds("c_min", c_min, "c_max", c_max)
  return _truncate(*_sampler_ratio(mask, old_logp, sampler_logp, ratio),
                   c_min, c_max)


@register(
    level="token", reads=_SAMPLER, statistic="ratio", behaviour_weight=True,
    paper="TRL vllm_importance_sampling_mode='token_mask'",
    examples=({}, {"c_min": 0.5, "c_max": 2.0}))
def mis(mask, *, old_logp, sampler_logp, c_min=0.0, c_max=3.0):
  """Token-level masked importance sampling against the sampler.

    rho_t = exp(old_logp_t - sampler_logp_t)
    w_t = rho_t if c_min <= rho_t <= c_max else 0

  A token whose ratio leaves the band is dropped from the loss (its term 0,
  the denominator unchanged); the others keep their IS weight. TRL
  ``token_mask`` (``masked_fill`` of the ratio outside [C_min, C_max]) with
  its defaults C_max = 3, C_min off. `icepop` is the same rule with
  OpenRLHF's band.

  Args:
    mask: [N, T] loss tokens.
    old_logp, sampler_logp: [N, T] proximal and sampler log-probs.
    c_min, c_max: the band (c_min 0 = no lower bound).

  Returns:
    TokenWeights (statistic: rho).
  """
  check_bounds("c_min", c_min, "c_max", c_max)
  return _band_mask(*_sampler_ratio(mask, old_logp, sampler_logp), c_min,
                    c_max)


@register(
    level="sequence", reads=_SAMPLER, statistic="ratio", behaviour_weight=True,
    paper="TRL vllm_importance_sampling_mode='sequence_mask' (its default)",
    examples=({}, {"ratio": "geometric", "c_min": 0.5, "c_max": 2.0}))
def mis_sequence(mask, *, old_logp, sampler_logp, c_min=0.0, c_max=3.0,
                 ratio="product"):
  """Sequence-level masked importance sampling against the sampler.

    rho_i = exp(sum_t (old_logp - sampler_logp))  (or the geometric mean)
    w_it = rho_i if c_min <= rho_i <= c_max else 0  on every token of row i

  TRL's default correction: ``sequence_mask`` with C_max = 3 (C_min off)
  and the product ratio. verl's ``seq_sum_k1`` / ``seq_mean_k1`` rejection
  modes drop the same rows (as a mask of the denominator too, unlike here).

  Args:
    mask: [N, T] loss tokens.
    old_logp, sampler_logp: [N, T] proximal and sampler log-probs.
    c_min, c_max: the band (c_min 0 = no lower bound).
    ratio: one of SEQUENCE_RATIOS.

  Returns:
    TokenWeights (statistic: rho_i on the row's tokens).
  """
  check_bounds("c_min", c_min, "c_max", c_max)
  return _band_mask(*_sampler_ratio(mask, old_logp, sampler_logp, ratio),
                    c_min, c_max)


@register(
    level="token", reads=_SAMPLER, statistic="ratio", behaviour_weight=True,
    paper="IcePop (Ring-1T, arXiv 2510.18855); OpenRLHF "
    "vllm_is_correction_type='icepop'",
    examples=({}, {"low": 0.8, "high": 1.25}))
def icepop(mask, *, old_logp, sampler_logp, low=0.5, high=5.0):
  """ICEPOP: token-level IS weights with tokens outside a band zeroed.

    rho_t = exp(old_logp_t - sampler_logp_t)
    w_t = rho_t if low <= rho_t <= high else 0

  OpenRLHF's ``icepop`` correction (``loss = vllm_is * mask * loss``) with
  its default thresholds [0.5, 5.0] (``--algo.advantage.is_correction_
  threshold``), IcePop's double-sided band. The rule is `mis`'s; the band
  is OpenRLHF's.

  Args:
    mask: [N, T] loss tokens.
    old_logp, sampler_logp: [N, T] proximal and sampler log-probs.
    low, high: the band.

  Returns:
    TokenWeights (statistic: rho).
  """
  check_bounds("low", low, "high", high)
  return _band_mask(*_sampler_ratio(mask, old_logp, sampler_logp), low, high)


# ------------------------------------------------------- policy drift


@register(
    level="sequence", reads=("logp", "sampler_logp", "advantages"),
    statistic="log_ratio",
    paper="DeepSeek-V3.2, arXiv 2512.02556, eq. 9; TRL "
    "off_policy_mask_threshold",
    examples=({}, {"delta": 0.0}))
def opsm(mask, *, logp, sampler_logp, advantages, delta=0.5):
  """DeepSeek-V3.2's off-policy sequence masking.

    d_i = mean over row i's real tokens of (sampler_logp - sg(logp))
    w_it = 0 if A_i < 0 and d_i > delta else 1

  A completion the policy has pushed down and moved far from (the mean
  log-ratio of the policy that sampled it over the current one) is dropped:
  its negative gradient is the least trustworthy. The behaviour policy is
  the sampler's, as TRL's ``get_off_policy_mask`` takes it when the sampler
  gives log-probs: it measures the drift of the updates and the sampler's
  mismatch together. The paper gives no delta; TRL's documentation suggests
  0.5 (``off_policy_mask_threshold``, off by default). [N, T] advantages
  count by their row mean.

  Args:
    mask: [N, T] loss tokens.
    logp: [N, T] the current policy's log-probs (detached here).
    sampler_logp: [N, T] the sampler's log-probs.
    advantages: [N] or [N, T].
    delta: the threshold (>= 0) on d_i.

  Returns:
    TokenWeights (statistic: d_i on the row's tokens).
  """
  check_number("delta", delta, low=0.0)
  real, a = real_arrays(mask, logp=logp, sampler_logp=sampler_logp)
  advantages = token_advantages(advantages, real)
  lengths = jnp.maximum(real.sum(axis=-1), 1)
  drift = (a["sampler_logp"] - a["logp"]).sum(axis=-1) / lengths
  row_adv = advantages.sum(axis=-1) / lengths
  drop = (row_adv < 0) & (drift > delta)
  weights = jnp.where(real & ~drop[:, None], 1.0, 0.0)
  return TokenWeights(weights, jnp.zeros_like(real),
                      jnp.where(real, drift[:, None], 0.0))


# ---------------------------------------------------------- the record


class Correction(NamedTuple):
  """A bound correction, what the trainer calls.

  Attributes:
    name: its registry name.
    level: ``token`` or ``sequence``.
    reads: the arrays it takes as keywords (see the module docstring).
    apply: ``apply(mask, *, batch_stats=None, **arrays) -> (weights [N, T],
      measures dict)``; `batch_stats` is `prepass`'s output for the whole
      minibatch, or None (then the statistic of these rows).
    prepass: None, or ``prepass(mask, **arrays) -> dict``: a statistic over
      the whole minibatch's rows (the top-entropy threshold).
    prepass_reads: the arrays `prepass` takes.
    behaviour_weight: whether its weight is the behaviour policy's
      importance ratio pi_old / mu (the sampler-mismatch rules).
  """
  name: str
  level: str
  reads: Tuple[str, ...]
  apply: Callable
  prepass: Optional[Callable]
  prepass_reads: Tuple[str, ...]
  behaviour_weight: bool = False


def _injected(name: str) -> Tuple[str, ...]:
  meta = CORRECTIONS.entry(name).meta
  return tuple(meta.reads) + tuple(meta.provides)


def check_options(name: str, options, *, field: str = "") -> None:
  """ValueError naming an option `name` does not take."""
  CORRECTIONS.check_options(name, options, field=field,
                            exclude=_injected(name))


def records(name: str, statistic: str, out: TokenWeights, mask) -> dict:
  """The measurement records of one correction's output (module docstring)."""
  real = jnp.asarray(mask) > 0
  prefix = f"correction/{name}/"
  return measures.stop_gradient({
      prefix + "weight_mean": measures.Mean.of(out.weights, real),
      prefix + "masked_fraction": measures.Mean.of(
          real & (out.weights == 0), real),
      prefix + "truncated_fraction": measures.Mean.of(out.truncated, real),
      prefix + statistic: measures.Moments.of(out.statistic, real)})


def make(name: str, **options) -> Correction:
  """The `Correction` record of `name` with `options` bound; an unknown
  option or a bad value is a ValueError naming it."""
  check_options(name, options)
  entry = CORRECTIONS.entry(name)
  meta = entry.meta
  fn = functools.partial(entry.fn, **options)
  prepass_fn = meta.prepass
  prepass = None
  if prepass_fn is not None:
    accepted = inspect.signature(prepass_fn).parameters
    defaults = {k: p.default
                for k, p in inspect.signature(entry.fn).parameters.items()
                if p.default is not p.empty and k in accepted}
    defaults.update({k: v for k, v in options.items() if k in accepted})
    prepass = functools.partial(prepass_fn, **defaults)
  reads = tuple(meta.reads)

  def apply(mask, *, batch_stats=None, **arrays):
    missing = [k for k in reads if arrays.get(k) is None]
    if missing:
      raise ValueError(
          f"correction {name!r} reads {missing[0]}, but the batch has none "
          "(the rollout carries sampler_logp; a hand-built batch needs "
          "batch.assemble_batch(..., sampler_logp=...)).")
    out = fn(mask, **{k: arrays[k] for k in reads}, **(batch_stats or {}))
    weights = jax.lax.stop_gradient(out.weights)
    return weights, records(name, meta.statistic, out, mask)

  correction = Correction(
      name=name, level=meta.level, reads=reads, apply=apply,
      prepass=prepass,
      prepass_reads=() if prepass_fn is None else tuple(
          k for k in reads if k in inspect.signature(prepass_fn).parameters),
      behaviour_weight=meta.behaviour_weight)
  _check_values(correction)
  return correction


def _check_values(correction: Correction) -> None:
  """Runs the correction once on one token, so that a bad option value
  fails at `make`, before any compute."""
  ones = jnp.ones((1, 1), jnp.float32)
  arrays = {k: (jnp.ones((1,), jnp.float32) if k == "advantages" else -ones)
            for k in correction.reads}
  stats = (None if correction.prepass is None else correction.prepass(
      ones, **{k: arrays[k] for k in correction.prepass_reads}))
  correction.apply(ones, batch_stats=stats, **arrays)


names = CORRECTIONS.names
get = CORRECTIONS.get


def check_compatible(objective, corrections: Sequence[Correction]) -> None:
  """ValueError naming the objective and the correction unless the
  objective's loss takes the correction's weights, and takes them once
  (module docstring)."""
  sequence = [n for n in names()
              if CORRECTIONS.entry(n).meta.level == "sequence"]
  for c in corrections:
    if objective.level == "sequence" and c.level == "token":
      raise ValueError(
          f"correction {c.name!r} weighs each token on its own, but "
          f"objective {objective.name!r} is sequence-level (one term per "
          f"row, which takes one weight per row): use a sequence-level "
          f"correction ({', '.join(sequence)}) or a token-level objective.")
    if objective.weighting is None:
      weighted = [n for n in OBJECTIVES.names()
                  if objective_record.weighting(n) is not None]
      raise ValueError(
          f"correction {c.name!r} cannot weight objective "
          f"{objective.name!r}: its function takes no token_weights= (its "
          "loss is not a sum of per-token or per-row terms); objectives "
          f"that do: {', '.join(weighted)}.")
    if objective.behaviour_weight and c.behaviour_weight:
      raise ValueError(
          f"correction {c.name!r} weighs each term by the sampler-mismatch "
          f"ratio pi_old / mu, but objective {objective.name!r} already "
          "weighs its terms by the behaviour policy (it reads "
          "sampler_logp), so the ratio would count twice: drop "
          f"{c.name!r} (the objective's is_cap truncates its own weight), "
          "or use an objective that does not weigh by the sampler "
          "(ppo_clip; dppo with anchor='old').")


def combine(corrections: Sequence[Correction], mask, arrays: dict,
            batch_stats: Optional[dict] = None):
  """(the product of the corrections' weights [N, T], or None without any;
  their measurement records). `arrays` holds what they read, by name;
  `batch_stats` each one's pre-pass output, by name."""
  weights, out = None, {}
  for c in corrections:
    w, r = c.apply(mask, batch_stats=(batch_stats or {}).get(c.name),
                   **{k: arrays.get(k) for k in c.reads})
    weights = w if weights is None else weights * w
    out.update(r)
  return weights, out
