"""The credit registry, the record a rule returns, and shared helpers.

A rule is ``fn(advantages, mask, *, <reads>, <options>) -> Credited``:

* `advantages`: the estimator's [N] row advantages (or its [N, T] token
  ones); `mask`: the [N, T] loss mask (right-padded rows; the rows of filler
  groups are all 0).
* `<reads>`: arrays the rollout supplies by name (`READS`).
* it returns `Credited`: [N, T] float32 token advantages, 0 under padding;
  optionally a narrower loss mask; and scalar measurements.

A weight w_t >= 0 that a paper multiplies into the per-token policy-gradient
term is applied here as A_t = w_t * A. For an objective linear in A this is
the same thing: ppo_clip's min(r w A, clip(r) w A) = w min(r A, clip(r) A)
for w >= 0, and REINFORCE's -w A logp likewise.
"""

from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp

from grpo_jax import measures
from grpo_jax import registry

# The arrays the rollout can give a rule, by the name the rule reads:
#   token_entropies  [N, T] float32, the sampler's (behaviour policy's)
#                    entropy of the full tempered next-token distribution at
#                    each token, 0 under padding. At the first optimiser step
#                    of a batch it is the current policy's: the papers'
#                    sg(ent).
#   tokens           [N, T] int32, the sampled completion tokens.
#   rewards          [N] float32, each row's weighted total reward (what a
#                    "PG" estimator reads).
#   num_generations  int G: rows are prompt major, group p is rows
#                    p*G .. p*G + G - 1 (a static argument).
READS = ("token_entropies", "tokens", "rewards", "num_generations")
STATIC_READS = ("num_generations",)


class CreditMeta(NamedTuple):
  """What a credit rule declares when it registers (`CREDIT`)."""
  reads: Tuple[str, ...] = ()  # the arrays it takes by name (`READS`)
  # check(**options): an `OptionError` naming a bad option value.
  check: Optional[Callable] = None
  linear: bool = False  # its output scales with the advantages
  # Options at which it is `uniform` (the contract suite checks it); None:
  # no such setting.
  neutral: Optional[Mapping[str, Any]] = None
  identity: bool = False  # the advantages pass through unchanged
  row_advantages: bool = False  # it needs [N] advantages (their signs)
  paper: str = ""  # arXiv id (or a short reference)


CREDIT = registry.Registry("credit rule", positional=("advantages", "mask"),
                           meta=CreditMeta)


class Credited(NamedTuple):
  """What a rule returns.

  Attributes:
    advantages: [N, T] float32 token advantages, 0 under padding (`uniform`
      passes [N] through).
    mask: a narrower [N, T] loss mask (a subset of the tokens), or None to
      keep the rollout's.
    measures: name -> scalar float32, reported as ``credit/<rule>/<name>``.
  """
  advantages: Any
  mask: Optional[Any] = None
  measures: Mapping[str, Any] = {}


# A bad option value, naming the option: shared with the other registries.
OptionError = registry.OptionError


# The range checks a rule's ``check`` is made of: shared with the others.
check_real = registry.check_real


def check_choice(key: str, value, choices) -> None:
  if value not in choices:
    raise OptionError(key, f"{key}={value!r} is unknown; choose one of "
                      f"{', '.join(map(repr, choices))}.")


def real(mask) -> jnp.ndarray:
  """[N, T] bool: the loss tokens."""
  return jnp.asarray(mask) > 0


def as_tokens(advantages, mask) -> jnp.ndarray:
  """[N] or [N, T] advantages as [N, T] float32, 0 under padding."""
  advantages = jnp.asarray(advantages, jnp.float32)
  mask = jnp.asarray(mask)
  if advantages.ndim == 1:
    advantages = advantages[:, None]
  advantages = jnp.broadcast_to(advantages, mask.shape)
  return jnp.where(real(mask), advantages, 0.0)


def row_advantages(advantages, name: str) -> jnp.ndarray:
  """[N] advantages; a rule that reads a row's sign needs them per row."""
  advantages = jnp.asarray(advantages, jnp.float32)
  if advantages.ndim != 1:
    raise ValueError(
        f"credit rule {name!r} needs one advantage per row ([N]); got shape "
        f"{advantages.shape} (a token-level estimator): pick a group-level "
        "estimator.")
  return advantages


def masked_entropies(entropies, mask) -> jnp.ndarray:
  """sg(entropies) [N, T] float32, 0 under padding (NaN there too)."""
  entropies = jax.lax.stop_gradient(jnp.asarray(entropies, jnp.float32))
  return jnp.where(real(mask), entropies, 0.0)


def grouped(x, num_generations: int):
  """[N, ...] as [P, G, ...]."""
  x = jnp.asarray(x)
  return x.reshape((x.shape[0] // num_generations, num_generations)
                   + x.shape[1:])


def fraction(selected, where) -> jnp.ndarray:
  """The share of `where`'s entries that are `selected` (0 if none)."""
  return measures.Mean.of(jnp.asarray(selected, jnp.float32), where).value()


def mean(values, where) -> jnp.ndarray:
  """The mean of `values` over `where` (0 if empty)."""
  return measures.Mean.of(values, where).value()
