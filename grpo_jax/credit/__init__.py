"""Token-level credit: advantages [N] or [N, T] -> per-token advantages.

A credit rule runs after the estimator and before the update, at rollout
time on the whole step's batch: it may discount, reweight or reassign each
token's share of its row's advantage (entropy discounts, prefix matching,
conflict tokens; issue "objectives and token credit"). ``uniform`` is the
GRPO default: every token gets its row's advantage, passed through
unchanged.

| rule        | A[i, t]                                         | module  |
|-------------|-------------------------------------------------|---------|
| uniform     | A_i                                             | here    |
| ah_grpo     | exp(-alpha sum_{k<t} ent_k) A_i                 | entropy |
| sa_ah_grpo  | the same on A < 0 only                          | entropy |
| egspo       | (1 if ent_t >= tau else beta_low) A_i           | entropy |
| t_spmo      | mean_{S+} R - mean_S R over prefix matches      | group   |
| gtpo        | delta (conflicts) times entropy-filtered A_i    | group   |

A rule is ``fn(advantages, mask, *, <arrays it reads>, <options>) ->
Credited`` under ``@CREDIT.register(reads=..., check=..., ...)`` (`_kit`
says what each read holds); `make` binds it into a `Credit` record, jitted.
Metadata (`_kit.CreditMeta`): ``reads``; ``check(**options)`` raising
`OptionError` for a bad value; ``linear`` (the output scales with the
advantages); ``neutral`` (options at which the rule is `uniform`);
``row_advantages`` (it needs [N] advantages, e.g. their signs);
``identity``; ``paper``.
"""

import functools
from typing import Any, Callable, Mapping, NamedTuple, Tuple

import jax

from grpo_jax.credit._kit import (CREDIT, READS, STATIC_READS, CreditMeta,
                                  Credited)
from grpo_jax.credit.entropy import ah_grpo, egspo, sa_ah_grpo
from grpo_jax.credit.group import gtpo, t_spmo


@CREDIT.register(examples=({},), linear=True, neutral={}, identity=True)
def uniform(advantages, mask):
  """Every token its row's advantage: [N] (or [N, T]) unchanged."""
  del mask
  return Credited(advantages)


class Credit(NamedTuple):
  """A bound credit rule: ``apply(state, advantages, mask, **reads) ->
  (Credited, state)``; `reads` names the arrays it takes (`READS`)."""
  name: str
  reads: Tuple[str, ...]
  init: Callable[[], Any]
  apply: Callable


def meta(name: str) -> CreditMeta:
  """`name`'s `CreditMeta`, its defaults filled in (no field depends on
  the options)."""
  return CREDIT.entry(name).meta


def check_options(name: str, options: Mapping[str, Any], *,
                  field: str = "") -> None:
  """ValueError naming the first option `name` does not take or whose value
  is out of range, as ``<field>.<option>: ...``."""
  reads = meta(name).reads
  for key in options:
    if key in reads:
      where = f"{field}.{key}: " if field else ""
      raise ValueError(
          f"{where}credit rule {name!r} receives {key!r} from the rollout at "
          "every step, so it is not an option; remove it.")
  CREDIT.check_options(name, options, field=field, exclude=reads)
  CREDIT.check_values(name, options, field=field)


def make(name: str, **options) -> Credit:
  """The `Credit` record of `name` with `options` bound; a bad option is a
  ValueError naming it."""
  check_options(name, options)
  entry = CREDIT.entry(name)
  reads = tuple(meta(name).reads)
  static = tuple(r for r in reads if r in STATIC_READS)
  fn = jax.jit(functools.partial(entry.fn, **options), static_argnames=static)

  def apply(state, advantages, mask, **arrays):
    missing = [r for r in reads if arrays.get(r) is None]
    if missing:
      raise ValueError(
          f"credit rule {name!r} reads {missing[0]!r}, which the caller did "
          f"not pass (the rollout supplies {', '.join(READS)}).")
    return fn(advantages, mask, **{r: arrays[r] for r in reads}), state

  return Credit(name, reads, lambda: (), apply)


def measurements(name: str, credited: Credited) -> dict:
  """``credit/<name>/<measure>`` floats of a rule's output."""
  return {f"credit/{name}/{key}": float(value)
          for key, value in credited.measures.items()}


names = CREDIT.names
get = CREDIT.get

# The public API: what the imports above re-export.
__all__ = [
    "ah_grpo", "check_options", "CREDIT", "Credit", "Credited", "CreditMeta",
    "egspo", "get", "gtpo", "make", "measurements", "meta", "names",
    "READS", "sa_ah_grpo", "STATIC_READS", "t_spmo", "uniform",
]
