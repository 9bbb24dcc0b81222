"""Regularisers: terms added to any objective's loss (KL to the reference
today; LLDS and an entropy bonus are the same kind).

A regulariser is ``fn(logp, mask, *, <arrays it reads>, <options>) ->
(SumCount, measures)``: its weighted (sum, count) pair, divided by the whole
minibatch's count like the objective's, and its measurement records.
`make` binds it, with the objective's aggregation, into a `Regulariser`.
"""

import functools
from typing import Callable, NamedTuple, Optional, Tuple


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
