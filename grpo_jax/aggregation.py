"""How per-token loss terms become one scalar.

Every mode is written as a ``(sum, count)`` pair and divided once, so that
gradient accumulation over microbatches and reduction over devices give exactly
the one-shot value: add the sums, add the counts, divide at the end.

| mode                      | value                                       |
|---------------------------|---------------------------------------------|
| ``token_mean``            | sum_it L*m / sum_it m                       |
| ``seq_mean_token_mean``   | mean over rows with n_i > 0 of sum_t L*m/n_i |
| ``seq_mean_token_sum``    | mean over rows with n_i > 0 of sum_t L*m    |
| ``seq_mean_token_sum_norm`` | sum_it L*m / (N * horizon)  (Dr. GRPO)    |

A batch without a single token gives 0 in every mode, never NaN.
"""

from typing import NamedTuple, Optional

import jax.numpy as jnp

from grpo_jax import registry


class AggregationMeta(NamedTuple):
  """What an aggregation declares when it registers (`AGGREGATIONS`)."""
  needs_horizon: bool = False  # its count takes horizon= (a positive int)


AGGREGATIONS = registry.Registry("aggregation",
                                 positional=("masked", "lengths"),
                                 meta=AggregationMeta)


class SumCount(NamedTuple):
  """A reduction not yet divided: ``value = total / count`` (0 if count is 0)."""
  total: jnp.ndarray
  count: jnp.ndarray


@AGGREGATIONS.register()
def token_mean(masked, lengths, *, horizon=None) -> SumCount:
  """sum_it L*m / sum_it m (DAPO)."""
  del horizon
  return SumCount(masked.sum(), lengths.sum())


@AGGREGATIONS.register()
def seq_mean_token_mean(masked, lengths, *, horizon=None) -> SumCount:
  """The mean over rows with tokens of each row's token mean (GRPO)."""
  del horizon
  per_row = masked.sum(axis=-1) / jnp.maximum(lengths, 1.0)
  return SumCount(per_row.sum(), (lengths > 0).astype(jnp.float32).sum())


@AGGREGATIONS.register()
def seq_mean_token_sum(masked, lengths, *, horizon=None) -> SumCount:
  """The mean over rows with tokens of each row's token sum."""
  del horizon
  return SumCount(masked.sum(), (lengths > 0).astype(jnp.float32).sum())


@AGGREGATIONS.register(needs_horizon=True)
def seq_mean_token_sum_norm(masked, lengths, *, horizon=None) -> SumCount:
  """sum_it L*m / (N * horizon): a constant denominator (Dr. GRPO)."""
  return SumCount(masked.sum(),
                  jnp.asarray(lengths.shape[0] * horizon, jnp.float32))


MODES = AGGREGATIONS.names()


def check_mode(mode: str, horizon: Optional[int] = None) -> None:
  """Raises a ValueError naming `aggregation` or `horizon` if they are unusable."""
  if mode not in AGGREGATIONS:
    raise ValueError(
        f"aggregation={mode!r} is unknown; choose one of {', '.join(MODES)}.")
  if (AGGREGATIONS.entry(mode).meta.needs_horizon
      and (horizon is None or horizon <= 0)):
    raise ValueError(
        f"aggregation={mode!r} needs horizon= (a positive constant, usually "
        f"the max completion length); got horizon={horizon!r}.")


def check_token_arrays(**arrays) -> None:
  """Checks that every named array is [N, T] and that all shapes agree."""
  shape = None
  for name, x in arrays.items():
    x_shape = jnp.shape(x)  # also for lists and numpy arrays
    if len(x_shape) != 2:
      raise ValueError(f"{name} must be [N, T] (rank 2); got shape {x_shape}.")
    if shape is not None and x_shape != shape:
      first = next(iter(arrays))
      raise ValueError(
          f"{name} has shape {x_shape} but {first} has shape {shape}; they "
          "must match.")
    shape = x_shape


def sum_and_count(values, mask, mode: str, *, horizon: Optional[int] = None
                  ) -> SumCount:
  """The (sum, count) form of `aggregate`.

  Args:
    values: [N, T] per-token terms.
    mask: [N, T] 1 for real completion tokens, 0 for padding.
    mode: one of `MODES`.
    horizon: the constant normaliser of ``seq_mean_token_sum_norm``.

  Returns:
    SumCount(total, count), float32 scalars.
  """
  check_mode(mode, horizon)
  check_token_arrays(values=values, mask=mask)
  # jnp, not .astype: numpy inputs would otherwise compute inf*0 in numpy.
  values = jnp.asarray(values, jnp.float32)
  mask = jnp.asarray(mask, jnp.float32)
  # where(), not multiplication: a NaN or inf under padding must not leak in.
  masked = jnp.where(mask > 0, values * mask, 0.0)
  return AGGREGATIONS.get(mode)(masked, mask.sum(axis=-1), horizon=horizon)


def count(mask, mode: str, *, horizon: Optional[int] = None) -> jnp.ndarray:
  """The denominator `mode` divides by for this [N, T] mask."""
  return sum_and_count(jnp.zeros(jnp.shape(mask), jnp.float32), mask, mode,
                       horizon=horizon).count


def sequence_sum_and_count(values, row_mask) -> SumCount:
  """(sum, count) of a per-sequence term [N] over rows with ``row_mask > 0``."""
  if jnp.ndim(values) != 1 or jnp.shape(values) != jnp.shape(row_mask):
    raise ValueError(
        f"values and row_mask must both be [N]; got shapes {jnp.shape(values)} "
        f"and {jnp.shape(row_mask)}.")
  row_mask = jnp.asarray(row_mask, jnp.float32)
  total = jnp.where(row_mask > 0,
                    jnp.asarray(values, jnp.float32) * row_mask, 0.0)
  return SumCount(total.sum(), row_mask.sum())


def divide(sc: SumCount) -> jnp.ndarray:
  """total / count, and 0 where count is 0."""
  return jnp.where(sc.count > 0, sc.total / jnp.maximum(sc.count, 1e-12), 0.0)


def aggregate(values, mask, mode: str, *, horizon: Optional[int] = None
              ) -> jnp.ndarray:
  """Reduces per-token terms [N, T] to a scalar with the named aggregation.

  Args:
    values: [N, T] per-token terms.
    mask: [N, T] 1 for real completion tokens, 0 for padding.
    mode: ``token_mean``, ``seq_mean_token_mean``, ``seq_mean_token_sum`` or
      ``seq_mean_token_sum_norm``.
    horizon: required by ``seq_mean_token_sum_norm``: the constant max
      completion length (Dr. GRPO), never the padded length of this batch.

  Returns:
    A float32 scalar; 0 for a batch without tokens.
  """
  return divide(sum_and_count(values, mask, mode, horizon=horizon))
