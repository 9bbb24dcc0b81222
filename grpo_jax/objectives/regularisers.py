"""Regularisers: terms added to any objective's loss (KL to the reference,
MDP-GRPO's asymmetric KL, LLDS's likelihood preservation; an entropy bonus
is the same kind).

A regulariser is ``fn(logp, mask, *, <arrays it reads>, <options>) ->
(SumCount, measures)``: its weighted (sum, count) pair, divided by the whole
minibatch's count like the objective's, and its measurement records.
`make` binds it, with the objective's aggregation, into a `Regulariser`.
"""

import functools
import numbers
from typing import Callable, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax import kl as kl_lib
from grpo_jax import measures
from grpo_jax import registry
from grpo_jax.objectives._kit import check_choice
from grpo_jax.objectives._kit import check_hparam


class RegulariserMeta(NamedTuple):
  """What a regulariser declares when it registers (`REGULARISERS`)."""
  reads: Tuple[str, ...] = ()  # batch arrays it takes (ref_logp, ...)
  paper: str = ""  # arXiv id (or a short reference)


REGULARISERS = registry.Registry("regulariser", positional=("logp", "mask"),
                                 meta=RegulariserMeta)


@REGULARISERS.register(
    reads=("ref_logp",), paper="2402.03300",
    examples=({"beta": 0.04}, {"beta": 0.1, "estimator": "k2"}))
def kl(logp, mask, *, ref_logp, beta=0.04, estimator="k3",
       aggregation="seq_mean_token_mean", horizon=None):
  """beta * aggregate(KL estimate to the reference), DeepSeekMath's term.

  Args:
    logp: [N, T] policy log-probs (with gradient).
    mask: [N, T] loss tokens.
    ref_logp: [N, T] reference log-probs.
    beta: the coefficient (>= 0).
    estimator: a `kl.names()` entry (k1, k2, k3).
    aggregation, horizon: the objective's aggregation.

  Returns:
    (SumCount of beta * the KL terms, {"kl": Mean of the unweighted KL}).
  """
  check_coefficient("beta", beta)
  sc = agg.sum_and_count(kl_lib.get(estimator)(logp, ref_logp), mask,
                         aggregation, horizon=horizon)
  return (agg.SumCount(beta * sc.total, sc.count),
          {"kl": measures.Mean(sc.total, sc.count)})


def check_coefficient(name: str, value) -> None:
  """ValueError unless a regulariser's coefficient is a real number >= 0
  (not NaN, None, a bool or a string); a 0-d array passes to
  `_kit.check_hparam`, which skips traced ones."""
  if isinstance(value, bool) or not (
      isinstance(value, numbers.Real)
      or (hasattr(value, "dtype") and getattr(value, "ndim", None) == 0)):
    raise ValueError(
        f"{name} must be a real number >= 0; got {value!r} "
        f"({type(value).__name__}): set {name} to a number.")
  check_hparam(name, value, low=0.0)


def _row_advantages(advantages, shape) -> jnp.ndarray:
  """[N] or [N, T] advantages as [N, T] (a row's one value on every token)."""
  advantages = jnp.asarray(advantages, jnp.float32)
  if advantages.ndim == 1:
    advantages = advantages[:, None]
  return jnp.broadcast_to(advantages, shape)


@REGULARISERS.register(
    reads=("ref_logp", "advantages"),
    paper="MDP-GRPO (seed 000 para. 17; reconstruction)",
    examples=({}, {"beta_pos": 0.0, "beta_neg": 0.1, "estimator": "k2"}))
def asymmetric_kl(logp, mask, *, ref_logp, advantages, beta_pos=0.01,
                  beta_neg=0.04, estimator="k3",
                  aggregation="seq_mean_token_mean", horizon=None):
  """MDP-GRPO's asymmetric KL: a stronger pull to the reference on tokens
  of completions the advantage pushes down.

    L_KL = aggregate(beta_t * k3_t),  beta_t = beta_pos if A >= 0 else beta_neg

  MDP-GRPO (seed 000 para. 17) names "asymmetric KL regularization" and no
  more: this is a reconstruction (VARIANTS.md 1.10), defaults beta_pos =
  0.01, beta_neg = 0.04.

  Args:
    logp: [N, T] policy log-probs (with gradient).
    mask: [N, T] loss tokens.
    ref_logp: [N, T] reference log-probs.
    advantages: [N] or [N, T] the batch's advantages (only their sign).
    beta_pos, beta_neg: the coefficients (>= 0) for A >= 0 and A < 0.
    estimator: a `kl.names()` entry (k1, k2, k3).
    aggregation, horizon: the objective's aggregation.

  Returns:
    (SumCount of beta_t * the KL terms, {"kl": Mean of the unweighted KL}).
  """
  check_coefficient("beta_pos", beta_pos)
  check_coefficient("beta_neg", beta_neg)
  terms = kl_lib.get(estimator)(logp, ref_logp)
  beta = jnp.where(_row_advantages(advantages, terms.shape) >= 0, beta_pos,
                   beta_neg)
  weighted = agg.sum_and_count(beta * terms, mask, aggregation,
                               horizon=horizon)
  sc = agg.sum_and_count(terms, mask, aggregation, horizon=horizon)
  return (weighted, {"kl": measures.Mean(sc.total, sc.count)})


# LLDS's gates: per chunk of the mask ("action", the A-gate, default) or
# per row ("response", the R-gate).
LLDS_GATES = ("action", "response")


def _segmented_sums(values, mask):
  """[N, T] sum of `values` over each token's chunk: the maximal run of
  mask > 0 it lies in (0 off the mask). Two segmented scans, so no chunk's
  sum mixes in another's values."""
  real = mask > 0
  values = jnp.where(real, values, 0.0)
  pad = jnp.zeros_like(real[:, :1])
  joins_previous = real & jnp.concatenate([pad, real[:, :-1]], axis=1)
  joins_next = real & jnp.concatenate([real[:, 1:], pad], axis=1)

  def add(left, right):
    (a, _), (b, reset) = left, right
    return b + jnp.where(reset, 0.0, a), left[1] | reset

  forward, _ = jax.lax.associative_scan(add, (values, ~joins_previous),
                                        axis=1)
  backward, _ = jax.lax.associative_scan(add, (values, ~joins_next), axis=1,
                                         reverse=True)
  return jnp.where(real, forward + backward - values, 0.0)


def _row_sums(values, real):
  """[N, T] each row's sum of `values` over its real tokens, on every token."""
  del real  # values are 0 off the mask already
  return jnp.broadcast_to(values.sum(axis=-1, keepdims=True), values.shape)


# The sum a gate tests, by gate: over the token's chunk or its whole row.
_LLDS_SPANS = {"action": _segmented_sums, "response": _row_sums}


@REGULARISERS.register(
    reads=("old_logp", "advantages"), paper="2512.04220",
    examples=({}, {"gate": "response"}, {"lam": 1.0}))
def llds(logp, mask, *, advantages, old_logp=None, lam=0.2, gate="action",
         aggregation="seq_mean_token_mean", horizon=None):
  """LLDS: a likelihood-preserving penalty on the tokens of non-negative
  advantage whose likelihood fell.

    d_t   = sg(old_logp_t) - logp_t,   pen_t = max(0, d_t)
    g     = 1[sum of d over the gate's span > 0]
              gate="action" (A-gate): the span is the token's chunk, a
                maximal run of mask = 1 (tool observations, masked out,
                separate the actions); gate="response" (R-gate): the row
    L     = lam * aggregate(g * 1[A >= 0] * pen_t)

  It acts only where a span's likelihood decreased since the rollout, and
  only on the tokens whose log-prob dropped, so it is 0 on policy
  (logp = old_logp, or `old_logp` None) and needs several optimiser steps
  per batch. For single-turn rows the A-gate equals the R-gate. With [N, T]
  advantages the preserving set is the tokens with A_t >= 0.

  "On GRPO Collapse in Agent Search: The Lazy Likelihood-Displacement",
  arXiv 2512.04220; the authors' ``dp_actor.py`` (the "no_reduce" block) and
  ``train_grpo_nqhot.sh``: lam = 0.2 (``NO_REDUCE_LAMBDA``), the A-gate
  ("best in our experiments"). Their optional answer-span weight
  (``MASK_WEIGHT``, off by default) is not built. Their normalisation is the
  token mean over all response tokens; here the term follows the
  objective's aggregation (`make` binds it, like the KL's), which is theirs
  with a ``token_mean`` objective.

  Args:
    logp: [N, T] policy log-probs (with gradient).
    mask: [N, T] loss tokens.
    advantages: [N] or [N, T] the batch's advantages (only their sign).
    old_logp: [N, T] the rollout policy's log-probs, or None (on policy).
    lam: the coefficient (>= 0).
    gate: one of LLDS_GATES.
    aggregation, horizon: the objective's aggregation.

  Returns:
    (SumCount of lam * the penalties, {"llds": Mean of the unweighted
    penalty, "llds_gated": Mean share of real tokens in an active gate of
    the preserving set}).
  """
  check_choice("gate", gate, LLDS_GATES)
  check_coefficient("lam", lam)
  real = jnp.asarray(mask) > 0
  logp = jnp.where(real, jnp.asarray(logp, jnp.float32), 0.0)
  old = (logp if old_logp is None
         else jnp.where(real, jnp.asarray(old_logp, jnp.float32), 0.0))
  d = jnp.where(real, jax.lax.stop_gradient(old) - logp, 0.0)
  drop = jax.lax.stop_gradient(d)
  span = _LLDS_SPANS[gate](drop, real)
  adv = jnp.where(real, _row_advantages(advantages, d.shape), 0.0)
  gated = real & (span > 0) & (adv >= 0)
  penalty = jnp.where(gated, jnp.maximum(d, 0.0), 0.0)
  sc = agg.sum_and_count(penalty, mask, aggregation, horizon=horizon)
  return (agg.SumCount(lam * sc.total, sc.count),
          {"llds": measures.Mean(sc.total, sc.count),
           "llds_gated": measures.Mean.of(gated, mask)})


class Regulariser(NamedTuple):
  """A bound regulariser.

  Attributes:
    name: its registry name.
    reads: batch arrays it takes as keywords (e.g. ``ref_logp``).
    init: ``init() -> state`` (``()``: none of today's keep state).
    loss: ``loss(state, logp, mask, **arrays) -> (SumCount, measures)``.
    count: ``count(mask)``, its denominator over the whole minibatch.
  """
  name: str
  reads: Tuple[str, ...]
  init: Callable
  loss: Callable
  count: Callable


def make(name: str, *, aggregation: str, horizon: Optional[int] = None,
         **options) -> Regulariser:
  """The `Regulariser` `name` with `options` and the objective's
  aggregation bound; an unknown option or a bad value is a ValueError
  naming it."""
  REGULARISERS.check_options(name, options,
                             exclude=("aggregation", "horizon") + tuple(
                                 REGULARISERS.entry(name).meta.reads))
  agg.check_mode(aggregation, horizon)
  entry = REGULARISERS.entry(name)
  fn = functools.partial(entry.fn, aggregation=aggregation, horizon=horizon,
                         **options)
  regulariser = Regulariser(
      name=name, reads=tuple(entry.meta.reads), init=lambda: (),
      loss=lambda state, logp, mask, **arrays: fn(logp, mask, **arrays),
      count=functools.partial(agg.count, mode=aggregation, horizon=horizon))
  _check_values(regulariser)
  return regulariser


def _check_values(regulariser: Regulariser) -> None:
  """Runs the regulariser once on one token, so that a bad option value (a
  negative coefficient, an unknown gate or estimator) fails at `make`,
  before any compute, as the objectives' and corrections' do."""
  ones = jnp.ones((1, 1), jnp.float32)
  arrays = {k: (jnp.ones((1,), jnp.float32) if k == "advantages" else -ones)
            for k in regulariser.reads}
  regulariser.loss(regulariser.init(), -ones, ones, **arrays)
