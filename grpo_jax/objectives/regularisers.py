"""Regularisers: terms added to any objective's loss (KL to the reference,
MDP-GRPO's asymmetric KL; LLDS and an entropy bonus are the same kind).

A regulariser is ``fn(logp, mask, *, <arrays it reads>, <options>) ->
(SumCount, measures)``: its weighted (sum, count) pair, divided by the whole
minibatch's count like the objective's, and its measurement records.
`make` binds it, with the objective's aggregation, into a `Regulariser`.
"""

import functools
from typing import Callable, NamedTuple, Optional, Tuple

import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax import kl as kl_lib
from grpo_jax import measures
from grpo_jax import registry

REGULARISERS = registry.Registry("regulariser", positional=("logp", "mask"))


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
    beta: the coefficient (> 0).
    estimator: a `kl.names()` entry (k1, k2, k3).
    aggregation, horizon: the objective's aggregation.

  Returns:
    (SumCount of beta * the KL terms, {"kl": Mean of the unweighted KL}).
  """
  sc = agg.sum_and_count(kl_lib.get(estimator)(logp, ref_logp), mask,
                         aggregation, horizon=horizon)
  return (agg.SumCount(beta * sc.total, sc.count),
          {"kl": measures.Mean(sc.total, sc.count)})


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
  for name, value in (("beta_pos", beta_pos), ("beta_neg", beta_neg)):
    if not value >= 0:
      raise ValueError(f"{name}={value!r} must be >= 0.")
  terms = kl_lib.get(estimator)(logp, ref_logp)
  beta = jnp.where(_row_advantages(advantages, terms.shape) >= 0, beta_pos,
                   beta_neg)
  weighted = agg.sum_and_count(beta * terms, mask, aggregation,
                               horizon=horizon)
  sc = agg.sum_and_count(terms, mask, aggregation, horizon=horizon)
  return (weighted, {"kl": measures.Mean(sc.total, sc.count)})


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
  aggregation bound."""
  REGULARISERS.check_options(name, options,
                             exclude=("aggregation", "horizon") + tuple(
                                 REGULARISERS.entry(name).meta["reads"]))
  agg.check_mode(aggregation, horizon)
  entry = REGULARISERS.entry(name)
  fn = functools.partial(entry.fn, aggregation=aggregation, horizon=horizon,
                         **options)
  return Regulariser(
      name=name, reads=tuple(entry.meta["reads"]), init=lambda: (),
      loss=lambda state, logp, mask, **arrays: fn(logp, mask, **arrays),
      count=functools.partial(agg.count, mode=aggregation, horizon=horizon))
