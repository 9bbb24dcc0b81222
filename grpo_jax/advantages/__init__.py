"""Advantage estimators: group data -> advantages [P, G] (or token-level [N, T]).

| name      | input | advantage                                        | paper            |
|-----------|-------|--------------------------------------------------|------------------|
| ``grpo``    | PG  | (R - mean_g R) / (std R + eps)                   | arXiv 2402.03300 |
| ``dr_grpo`` | PG  | R - mean_g R                                     | arXiv 2503.20783 |
| ``rloo``    | PG  | R_j - mean_{k!=j} R_k = G/(G-1) (R_j - mean_g R) | arXiv 2402.14740 |
| ``gdpo``    | PGK | batch-normalised sum_k w_k grpo(R_k)             | arXiv 2601.05242 |

The pure functions (`grpo`, `dr_grpo`, `rloo`, `gdpo`, `multi_reward`,
`collapse_rate`) are the public API. A PG estimator sees R = sum_k w_k R_k
[P, G]; a PGK one the [P, G, K] rewards and the weights.

A step uses the record: ``est = make("grpo", scale="batch")`` binds the
options once (an unknown one is a ValueError) and

  state = est.init()                                   # () when stateless
  advantages, state = est.estimate(state, groups)      # groups: GroupData

where filler groups (``groups.valid`` False) get 0 and enter no batch
statistic. A new estimator is one function in a family file under
``@_kit.register(input=..., output=..., paper=..., examples=...)``; the
contract suite (tests/contracts/test_estimators.py) then runs it.
"""

import functools
from typing import Any, Callable, Mapping, NamedTuple, Tuple

import jax.numpy as jnp

from grpo_jax import groups as groups_lib
from grpo_jax.advantages import _kit
from grpo_jax.advantages._kit import ESTIMATORS
from grpo_jax.advantages.group import SCALES, dr_grpo, grpo, rloo
from grpo_jax.advantages.multi_reward import (MULTI_REWARD_MODES, gdpo,
                                              multi_reward)
from grpo_jax.groups import GroupData, collapse_rate

__all__ = [
    "ESTIMATORS", "Estimator", "GroupData", "MULTI_REWARD_MODES", "SCALES",
    "check_options", "collapse_rate", "dr_grpo", "gdpo", "get", "grpo",
    "make", "meta", "multi_reward", "names", "rloo"]

names = ESTIMATORS.names
get = ESTIMATORS.get


class Estimator(NamedTuple):
  """An advantage estimator with its options bound (optax style).

  Attributes:
    name: the registered name.
    input: ``PG`` or ``PGK`` (which rewards it reads; see the module doc).
    output: ``group`` ([P, G] advantages) or ``token`` ([N, T]).
    init: ``() -> state``; ``()`` for a stateless estimator.
    estimate: ``(state, groups: GroupData) -> (advantages float32, state)``.
  """
  name: str
  input: str
  output: str
  init: Callable[[], Any]
  estimate: Callable[[Any, GroupData], Tuple[jnp.ndarray, Any]]


# The rewards an estimator is called with, by its metadata's ``input``.
_INPUTS = {
    "PG": lambda groups: groups_lib.weighted_sum(groups.rewards,
                                                 groups.weights),
    "PGK": lambda groups: groups.rewards,
}


def _zero_token_fillers(advantages, valid):
  rows = jnp.repeat(valid, advantages.shape[0] // valid.shape[0])
  return jnp.where(rows[:, None], advantages, 0.0)


# Filler groups (valid False) get 0, by the metadata's ``output``.
_ZERO_FILLERS = {
    "group": _kit.zero_fillers,
    "token": _zero_token_fillers,
}


def check_options(name: str, options: Mapping[str, Any], *,
                  field: str = "") -> None:
  """ValueError naming the first key of `options` that `name` does not take
  (the group data it reads, such as ``valid``, is not an option)."""
  ESTIMATORS.check_options(name, options, field=field,
                           exclude=ESTIMATORS.entry(name).meta["reads"])


def meta(name: str, **options) -> dict:
  """`name`'s metadata, option-dependent entries resolved for `options`
  (``independent_groups`` of ``grpo`` is False for ``scale="batch"``)."""
  return {key: value(**options) if callable(value) else value
          for key, value in ESTIMATORS.entry(name).meta.items()}


def make(name: str, **options) -> Estimator:
  """The `Estimator` record of `name` with `options` bound.

  Args:
    name: a registered estimator (`names()`).
    **options: its keyword options; an unknown key is a ValueError naming
      it and the allowed ones.

  Returns:
    An `Estimator`; ``estimate`` is pure and jittable.
  """
  entry = ESTIMATORS.entry(name)
  check_options(name, options)
  fn = functools.partial(entry.fn, **options)
  inputs = _INPUTS[entry.meta["input"]]
  zero_fillers = _ZERO_FILLERS[entry.meta["output"]]
  reads = entry.meta["reads"]

  def estimate(state, groups: GroupData):
    advantages = fn(inputs(groups),
                    **{field: getattr(groups, field) for field in reads})
    return zero_fillers(advantages, groups.valid), state

  return Estimator(name=name, input=entry.meta["input"],
                   output=entry.meta["output"], init=lambda: (),
                   estimate=estimate)
