"""Token-level credit: advantages [N] or [N, T] -> per-token advantages.

A credit rule runs after the estimator and before the update: it may
discount, reweight or reassign each token's share of its row's advantage
(entropy discounts, prefix matching, conflict tokens; issue "objectives and
token credit"). ``uniform`` is the GRPO default: every token gets its row's
advantage, passed through unchanged.

A rule is ``fn(advantages, mask, *, <arrays it reads>, <options>)`` under
``@CREDIT.register(...)``; `make` binds it into a `Credit` record.
"""

import functools
from typing import Any, Callable, NamedTuple, Tuple

from grpo_jax import registry

CREDIT = registry.Registry("credit rule", positional=("advantages", "mask"))


@CREDIT.register(examples=({},))
def uniform(advantages, mask):
  """Every token its row's advantage: [N] (or [N, T]) unchanged."""
  del mask
  return advantages


class Credit(NamedTuple):
  """A bound credit rule: ``apply(state, advantages, mask, **reads) ->
  (advantages, state)``."""
  name: str
  reads: Tuple[str, ...]
  init: Callable[[], Any]
  apply: Callable


def make(name: str, **options) -> Credit:
  """The `Credit` record of `name` with `options` bound."""
  entry = CREDIT.entry(name)
  reads = tuple(entry.meta.get("reads", ()))
  CREDIT.check_options(name, options, exclude=reads)
  fn = functools.partial(entry.fn, **options)
  return Credit(name, reads, lambda: (),
                lambda state, advantages, mask, **arrays: (
                    fn(advantages, mask, **arrays), state))


names = CREDIT.names
get = CREDIT.get
