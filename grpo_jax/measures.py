"""Measurements that say once how they reduce.

A measurement is carried undivided, as one of the records below, through
microbatches (inside the jitted update), minibatches and optimiser steps (on
the host), and turned into numbers once, at the end of a step, by `values`:

| record    | carries                   | merge                  | value        |
|-----------|---------------------------|------------------------|--------------|
| `Mean`    | total, weight             | add both               | total/weight |
| `Moments` | count, mean, m2, max, min | Chan et al.'s pooling  | mean, var (population), max, min |
| `Max`     | value                     | maximum                | value        |
| `Sum`     | value                     | add                    | value        |

So a statistic never depends on how the batch was split: the variance of the
ratio over a minibatch is the same one-shot or in eight microbatches.
Empty records (weight or count 0) give 0.
"""

from typing import Dict, Mapping, NamedTuple

import jax
import jax.numpy as jnp


def safe_divide(total, count):
  """total / count, and 0 where count is 0 (no NaN, no gradient blow-up)."""
  return jnp.where(count > 0, total / jnp.maximum(count, 1e-12), 0.0)


class Mean(NamedTuple):
  """A weighted mean not yet divided: value = total / weight."""
  total: jnp.ndarray
  weight: jnp.ndarray

  @classmethod
  def of(cls, values, mask):
    """The masked mean of `values` (any shape) over entries with mask > 0."""
    mask = jnp.asarray(mask, jnp.float32)
    total = jnp.sum(jnp.where(mask > 0, jnp.asarray(values, jnp.float32)
                              * mask, 0.0))
    return cls(total, jnp.sum(mask))

  @classmethod
  def scalar(cls, value):
    """One observation of weight 1 (e.g. a loss per optimiser step)."""
    return cls(jnp.asarray(value, jnp.float32), jnp.ones((), jnp.float32))

  def merge(self, other):
    return Mean(self.total + other.total, self.weight + other.weight)

  def value(self):
    return safe_divide(self.total, self.weight)


class Moments(NamedTuple):
  """Count, mean, sum of squared deviations (m2), max and min of values."""
  count: jnp.ndarray
  mean: jnp.ndarray
  m2: jnp.ndarray
  max: jnp.ndarray
  min: jnp.ndarray

  @classmethod
  def of(cls, values, mask):
    """Moments of `values` over the entries with mask > 0."""
    values = jnp.asarray(values, jnp.float32)
    real = jnp.asarray(mask) > 0
    count = jnp.sum(real.astype(jnp.float32))
    mean = safe_divide(jnp.sum(jnp.where(real, values, 0.0)), count)
    m2 = jnp.sum(jnp.where(real, jnp.square(values - mean), 0.0))
    return cls(count, mean, m2,
               jnp.max(jnp.where(real, values, -jnp.inf)),
               jnp.min(jnp.where(real, values, jnp.inf)))

  def merge(self, other):
    # Chan, Golub and LeVeque's pairwise update: exact, and stable in float32
    # where E[x^2] - E[x]^2 would cancel (ratios within 1e-3 of 1).
    count = self.count + other.count
    delta = other.mean - self.mean
    share = safe_divide(other.count, count)
    return Moments(
        count,
        self.mean + delta * share,
        self.m2 + other.m2 + jnp.square(delta) * self.count * share,
        jnp.maximum(self.max, other.max),
        jnp.minimum(self.min, other.min))

  def variance(self):
    """The population variance about the mean."""
    return safe_divide(self.m2, self.count)

  def value(self):
    some = self.count > 0
    return {"mean": self.mean, "var": self.variance(),
            "max": jnp.where(some, self.max, 0.0),
            "min": jnp.where(some, self.min, 0.0)}


class Max(NamedTuple):
  """A maximum (0 for an empty record: start from -inf)."""
  max: jnp.ndarray

  @classmethod
  def of(cls, values, mask):
    return cls(jnp.max(jnp.where(jnp.asarray(mask) > 0, values, -jnp.inf)))

  def merge(self, other):
    return Max(jnp.maximum(self.max, other.max))

  def value(self):
    return jnp.where(jnp.isfinite(self.max), self.max, 0.0)


class Sum(NamedTuple):
  """A total (counts: skipped updates, loss tokens)."""
  sum: jnp.ndarray

  def merge(self, other):
    return Sum(self.sum + other.sum)

  def value(self):
    return self.sum


def merge(a: Mapping, b: Mapping) -> Dict:
  """Merges two dicts of records with the same keys, record by record."""
  if set(a) != set(b):
    raise ValueError(f"records to merge differ in {sorted(set(a) ^ set(b))}.")
  return {name: a[name].merge(b[name]) for name in a}


def merge_all(records) -> Dict:
  """Merges a non-empty sequence of record dicts."""
  out = records[0]
  for r in records[1:]:
    out = merge(out, r)
  return out


def values(records: Mapping) -> Dict[str, jnp.ndarray]:
  """Numbers from records: ``name`` for scalars, ``name_<stat>`` for
  `Moments` (ratio -> ratio_mean, ratio_var, ratio_max, ratio_min)."""
  out = {}
  for name, record in records.items():
    value = record.value()
    if isinstance(value, dict):
      out.update({f"{name}_{k}": v for k, v in value.items()})
    else:
      out[name] = value
  return out


def stop_gradient(records: Mapping) -> Dict:
  """The records with no gradient flowing through them."""
  return jax.tree.map(jax.lax.stop_gradient, dict(records))


def merge_stacked(stacked: Mapping) -> Dict:
  """Merges records stacked along a leading axis (``lax.scan``/``lax.map``
  outputs, one entry per microbatch)."""
  size = jax.tree.leaves(stacked)[0].shape[0]
  return merge_all([jax.tree.map(lambda x, i=i: x[i], dict(stacked))
                    for i in range(size)])
