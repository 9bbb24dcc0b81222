"""`make(name, **options)`: an objective as a record of pure functions with
its options bound once, as optax builds a GradientTransformation."""

import functools
import inspect
from typing import Any, Callable, NamedTuple, Optional, Tuple

import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax.objectives._kit import OBJECTIVES

# Sequence-level objectives average one term per row with tokens: their
# denominator (and a KL term beside them) is that of this mode.
SEQUENCE_AGGREGATION = "seq_mean_token_mean"


class Objective(NamedTuple):
  """A bound objective, what the trainer calls.

  Attributes:
    name: its registry name.
    level: ``token`` or ``sequence``.
    aggregation, horizon: the mode its loss divides by (sequence-level:
      `SEQUENCE_AGGREGATION`); a KL term beside it uses the same.
    reads: extra batch arrays the loss takes as keywords
      (``sampler_logp``).
    init: ``init(key=None) -> state`` (``()`` for stateless objectives);
      `key` is the run's PRNG key for the state's own randomness (the
      trainer folds it from ``config.seed``: `train.init_state`), passed to
      a `StateSpec.init` that takes ``key=`` (Clip-Cov's draw).
    loss: ``loss(state, logp, old_logp, advantages, mask, *, batch_stats,
      token_weights=None, **extra) -> (loss, ObjectiveAux)``; with
      `token_weights` [N, T] (detached, `objectives.corrections`) each
      token's loss term is multiplied by its weight, and each row's for a
      sequence-level objective (its row weight), the count unchanged; a
      ValueError when `weighting` is None.
    count: ``count(mask) -> the loss denominator``, known before any
      microbatch, so accumulated microbatches divide once by it.
    update: ``update(state, measures, applied=True) -> state``, once per
      optimiser step, with the step's merged measurement records; with
      ``applied=False`` (a skipped step) the state's own `StateSpec.skip`
      (default: unchanged).
    prepass: None, or ``prepass(logp, old_logp, advantages, mask) ->
      measures``: statistics over the whole minibatch (merged over its
      microbatches, then passed to `loss` as `batch_stats`; with
      ``batch_stats=None`` the loss uses its own rows' statistics).
    weighting: how the loss takes token weights, from the function's
      signature and level: ``"token"`` (a ``token_weights`` keyword on a
      token-level objective), ``"row"`` (on a sequence-level one: one
      weight per row), or None (no such keyword: r2vpo's penalty).
    behaviour_weight: whether the loss, with these options, already weighs
      its terms by the behaviour policy (it reads ``sampler_logp``: decoupled
      PPO's pi_old / mu, DPPO anchored on the sampler), so a sampler-mismatch
      correction would weigh them twice (`corrections.check_compatible`).
  """
  name: str
  level: str
  aggregation: str
  horizon: Optional[int]
  reads: Tuple[str, ...]
  init: Callable[[], Any]
  loss: Callable
  count: Callable
  update: Callable
  prepass: Optional[Callable]
  weighting: Optional[str] = None
  behaviour_weight: bool = False


# The keyword through which an objective takes corrections' weights.
TOKEN_WEIGHTS = "token_weights"
# The keyword through which a state's init takes the run's key (never an
# option: `Objective.init`).
STATE_KEY = "key"
# How a loss takes them, by the objective's level.
_WEIGHTING = {"token": "token", "sequence": "row"}


def weighting(name: str) -> Optional[str]:
  """`Objective.weighting` of `name`: from its signature and level."""
  entry = OBJECTIVES.entry(name)
  if TOKEN_WEIGHTS not in inspect.signature(entry.fn).parameters:
    return None
  return _WEIGHTING[entry.meta.level]


def _accepted(fn: Callable, options: dict) -> dict:
  names = inspect.signature(fn).parameters
  return {k: v for k, v in options.items() if k in names}


def state_options(name: str) -> Tuple[str, ...]:
  """Options of `name`'s state (init and update), beside its loss's."""
  spec = OBJECTIVES.entry(name).meta.state
  if spec is None:
    return ()
  loss_options = OBJECTIVES.options(name)
  found = []
  for fn in (spec.init, spec.update):
    for key, p in inspect.signature(fn).parameters.items():
      if (p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
          and p.default is not p.empty and key not in loss_options
          and key != STATE_KEY and key not in found):
        found.append(key)
  return tuple(found)


def injected(name: str) -> Tuple[str, ...]:
  """Loss keywords the trainer supplies from state or the pre-pass."""
  meta = OBJECTIVES.entry(name).meta
  specs = (meta.state, meta.prepass)
  return tuple(k for spec in specs if spec is not None for k in spec.provides)


def supplied(name: str) -> Tuple[str, ...]:
  """The arrays the trainer passes `name`'s loss at every step: the batch's
  (its ``reads``) and the corrections' weights."""
  reads = tuple(OBJECTIVES.entry(name).meta.reads)
  return reads + (TOKEN_WEIGHTS,)


def check_options(name: str, options: dict, *, field: str = "") -> None:
  """ValueError naming an option `name` does not take (or the trainer sets)."""
  arrays = supplied(name)
  for key in options:
    if key in arrays:
      where = f"{field}.{key}: " if field else ""
      source = ("config.corrections" if key == TOKEN_WEIGHTS
                else "the batch")
      raise ValueError(
          f"{where}objective {name!r} receives the array {key!r} from the "
          f"trainer at every step ({source}), so it is not an option; "
          "remove it.")
  OBJECTIVES.check_options(name, options, field=field,
                           extra=state_options(name),
                           exclude=injected(name) + arrays)


def make(name: str, **options) -> Objective:
  """The `Objective` record of `name` with `options` bound.

  Options are the pure function's keywords (``clip_high``, ``aggregation``,
  ``horizon``, ...) and, for a stateful objective, those of its state
  (R2VPO's ``lam0``, ``eta``): one dict, one place. An option the objective
  does not take is a ValueError naming it.
  """
  check_options(name, options)
  entry = OBJECTIVES.entry(name)
  meta = entry.meta
  state_keys = state_options(name)
  loss_options = {k: v for k, v in options.items() if k not in state_keys}
  fn = functools.partial(entry.fn, **loss_options)
  level = meta.level
  defaults = inspect.signature(entry.fn).parameters
  if level == "sequence":
    aggregation, horizon = SEQUENCE_AGGREGATION, None
  else:
    if "aggregation" not in defaults or "horizon" not in defaults:
      raise ValueError(
          f"objective {name!r} is level='token' but takes no aggregation= and "
          "horizon=; add them (or register it with level='sequence').")
    aggregation = options.get("aggregation", defaults["aggregation"].default)
    horizon = options.get("horizon", defaults["horizon"].default)
  agg.check_mode(aggregation, horizon)  # before any compute
  spec = meta.state
  prepass_spec = meta.prepass
  # The pre-pass sees every option resolved (defaults from the signature).
  resolved = {k: p.default for k, p in defaults.items()
              if p.default is not p.empty}
  resolved.update(loss_options)
  if prepass_spec is not None and not prepass_spec.when(**resolved):
    prepass_spec = None
  weighs = meta.behaviour_weight
  weighs = weighs(**resolved) if callable(weighs) else weighs
  takes = weighting(name)

  def init(key=None):
    if spec is None:
      return ()
    kwargs = _accepted(spec.init, options)
    if key is not None and STATE_KEY in inspect.signature(
        spec.init).parameters:
      kwargs[STATE_KEY] = key
    return spec.init(**kwargs)

  def loss(state, logp, old_logp, advantages, mask, *, batch_stats=None,
           token_weights=None, **extra):
    kwargs = dict(extra)
    if spec is not None:
      kwargs.update(spec.loss_kwargs(state))
    if prepass_spec is not None and batch_stats is not None:
      kwargs.update(prepass_spec.loss_kwargs(batch_stats))
    if token_weights is not None:
      if takes is None:
        raise ValueError(
            f"objective {name!r} takes no {TOKEN_WEIGHTS}= (its loss is not "
            "a sum of per-token or per-row terms), so it cannot take "
            "corrections.")
      kwargs[TOKEN_WEIGHTS] = token_weights
    return fn(logp, old_logp, advantages, mask, **kwargs)

  def update(state, step_measures, applied=True):
    if spec is None:
      return state
    if not applied:  # a skipped step: the measures may be non-finite
      return state if spec.skip is None else spec.skip(state)
    return spec.update(state, step_measures,
                       **_accepted(spec.update, options))

  objective = Objective(
      name=name, level=level, aggregation=aggregation, horizon=horizon,
      reads=tuple(meta.reads), init=init, loss=loss,
      count=functools.partial(agg.count, mode=aggregation, horizon=horizon),
      update=update,
      prepass=None if prepass_spec is None else _bound_prepass(
          prepass_spec.stats, resolved),
      weighting=takes, behaviour_weight=bool(weighs))
  _check_values(objective)
  return objective


def example_reads(name: str, logp, old_logp) -> dict:
  """Arrays for `name`'s reads that cannot be left None (the top-K
  log-probs of `divergence.dppo_topk`), built from [N, T] log-probs by the
  entry's ``example_reads`` metadata; {} for most objectives. For checks
  and the contract laws, never for training."""
  build = OBJECTIVES.entry(name).meta.example_reads
  return {} if build is None else dict(build(logp, old_logp))


def _bound_prepass(stats: Callable, resolved: dict) -> Callable:
  """``prepass(logp, old_logp, advantages, mask, **reads)``: `stats` with
  its options bound; of the batch arrays the trainer passes (the
  objective's reads) it takes those its signature names (F-TIS's filter
  reads ``sampler_logp``), the others are dropped."""
  bound = functools.partial(stats, **_accepted(stats, resolved))

  def prepass(logp, old_logp, advantages, mask, **reads):
    return bound(logp, old_logp, advantages, mask, **_accepted(stats, reads))
  return prepass


def _check_values(objective: Objective) -> None:
  """Runs the objective once on one token, so that a bad option value
  (a negative clip, an unknown centre) fails at `make`, before any compute."""
  ones = jnp.ones((1, 1), jnp.float32)
  args = (-ones, -ones, jnp.ones((1,), jnp.float32), ones)
  stats = None if objective.prepass is None else objective.prepass(*args)
  objective.loss(objective.init(), *args, batch_stats=stats,
                 **example_reads(objective.name, -ones, -ones))
