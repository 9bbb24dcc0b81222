"""HAPO's normalised token entropy and its entropy-adaptive sampling temperature.

HAPO (Heterogeneous Adaptive Policy Optimization, starriver030515/HAPO,
``core_algos.compute_entropy_h`` and the vLLM sampler hook) rescales each
token's entropy to ``h_hat`` in [-1, 1] against batch statistics:

    l     = log(max(H, 1e-8))                  H the token's entropy
    m     = quantile_q(l over the valid tokens), interpolation 'nearest'
    s     = sqrt(mean((l - m)^2))               RMS about the pivot (>= 1e-4)
    h     = (l - m) / s
    h_hat = h / max(h+)    where h > 0
            h / |min(h-)|  where h <= 0         (so h_hat in [-1, 1])

and (`adaptive_temperature`) samples token t at

    T_t = T * (1 + tau * clip(h_hat_t, -1, 1))

with (m, s, the two scales) of the previous training step's batch
(`EntropyStats`), so high-entropy positions explore a little more and
confident ones a little less. The first step has no statistics and samples
at T (``EntropyStats.ready`` = 0).

Sign: the public code multiplies h <= 0 by ``1 / min(h)``, a negative number,
so every h_hat >= 0 and no token is "low entropy" (VARIANTS.md 3.6). The
intended sign is the default; ``legacy_sign=True`` reproduces the code (the
sign lives in ``scale_neg``, so the sampler follows it too).

Everything here is pure and jittable; the rollout computes the statistics
and h_hat of its batch (`normalised_entropy`), carries the statistics to the
next step's sampler, and hands h_hat to the objective (`Batch.entropy_hat`).
"""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

# HAPO's floors: the log's argument, the variance and the scales' divisors.
EPS = 1e-8
# The pivot quantile of HAPO's trainer config (``actor.entropy_pivot``).
DEFAULT_PIVOT = 0.8
# ``rollout.temperature_tau`` of HAPO's runs.
DEFAULT_TAU = 0.05


class EntropyStats(NamedTuple):
  """The statistics h_hat is taken against, all float32 [] (fixed size, so a
  trainer carries them as state and checkpoints them).

  Attributes:
    pivot: m, the pivot quantile of the log-entropies.
    scale: s, the RMS of (l - m).
    scale_pos: 1 / max(h+) (multiplies h > 0).
    scale_neg: 1 / |min(h-)| (multiplies h <= 0); negative with
      ``legacy_sign``.
    ready: 1 once computed from a batch, 0 before (the sampler then keeps T).
  """
  pivot: jnp.ndarray
  scale: jnp.ndarray
  scale_pos: jnp.ndarray
  scale_neg: jnp.ndarray
  ready: jnp.ndarray


def init_stats() -> EntropyStats:
  """No batch seen yet: ``ready`` 0 (h_hat 0, the sampler keeps T)."""
  zero = jnp.zeros((), jnp.float32)
  one = jnp.ones((), jnp.float32)
  return EntropyStats(pivot=zero, scale=one, scale_pos=one, scale_neg=one,
                      ready=zero)


class TemperatureRule(NamedTuple):
  """The sampler's per-token temperature rule (`sampling.sample`'s
  ``temperature_rule``): ``tau`` float32 [] and the previous step's
  `EntropyStats`. Traced: new values never recompile."""
  tau: jnp.ndarray
  stats: EntropyStats


def check_pivot(pivot) -> None:
  if not 0.0 < pivot < 1.0:  # NaN fails too
    raise ValueError(f"pivot must be in (0, 1); got {pivot!r}.")


def log_entropy(entropy) -> jnp.ndarray:
  return jnp.log(jnp.maximum(jnp.asarray(entropy, jnp.float32), EPS))


def nearest_quantile(values, mask, q: float) -> jnp.ndarray:
  """The q-quantile of `values` over ``mask > 0`` with interpolation
  'nearest' (torch's: the sorted entry at round(q (n - 1)), halves to even);
  0 when no entry is valid. Shapes: any, flattened."""
  values = jnp.ravel(jnp.asarray(values, jnp.float32))
  valid = jnp.ravel(jnp.asarray(mask)) > 0
  n = valid.sum()
  ordered = jnp.sort(jnp.where(valid, values, jnp.inf))
  index = jnp.round(q * (n - 1).astype(jnp.float32)).astype(jnp.int32)
  index = jnp.clip(index, 0, jnp.maximum(n - 1, 0))
  return jnp.where(n > 0, ordered[index], 0.0)


def entropy_stats(entropy, mask, *, pivot: float = DEFAULT_PIVOT,
                  legacy_sign: bool = False) -> EntropyStats:
  """`EntropyStats` of the [N, T] entropies over the tokens of ``mask > 0``.

  Without a valid token ``ready`` is 0 (nothing to normalise against; the
  sampler keeps T), with pivot 0, scale 1e-4 and the floors' scales.
  """
  check_pivot(pivot)
  valid = jnp.asarray(mask) > 0
  ell = log_entropy(entropy)
  m = nearest_quantile(ell, valid, pivot)
  count = jnp.maximum(valid.sum(), 1).astype(jnp.float32)
  var = jnp.where(valid, (ell - m) ** 2, 0.0).sum() / count
  s = jnp.sqrt(jnp.maximum(var, EPS))
  h = (ell - m) / s
  pos_max = jnp.maximum(jnp.where(valid & (h > 0), h, 0.0).max(), EPS)
  neg_min = jnp.minimum(jnp.where(valid & (h < 0), h, 0.0).min(), -EPS)
  scale_neg = 1.0 / neg_min if legacy_sign else -1.0 / neg_min
  return EntropyStats(pivot=m, scale=s, scale_pos=1.0 / pos_max,
                      scale_neg=scale_neg,
                      ready=(valid.sum() > 0).astype(jnp.float32))


def normalise(entropy, stats: EntropyStats) -> jnp.ndarray:
  """h_hat of any entropies against `stats` (not clipped: a token outside
  the batch the statistics came from may leave [-1, 1]); 0 when
  ``stats.ready`` is 0."""
  h = (log_entropy(entropy) - stats.pivot) / stats.scale
  h_hat = jnp.where(h > 0, h * stats.scale_pos, h * stats.scale_neg)
  return jnp.where(stats.ready > 0, h_hat, 0.0)


def newer(stats: EntropyStats, previous: EntropyStats) -> EntropyStats:
  """`stats` where ready, else `previous` (a batch without loss tokens
  keeps the last statistics)."""
  return EntropyStats(*(jnp.where(stats.ready > 0, new, old)
                        for new, old in zip(stats, previous)))


def normalised_entropy(entropy, mask, *, pivot: float = DEFAULT_PIVOT,
                       legacy_sign: bool = False):
  """(h_hat [N, T] float32, 0 off the mask; its `EntropyStats`): HAPO's
  normalised entropy of one batch, in [-1, 1] on its valid tokens."""
  stats = entropy_stats(entropy, mask, pivot=pivot, legacy_sign=legacy_sign)
  h_hat = jnp.where(jnp.asarray(mask) > 0, normalise(entropy, stats), 0.0)
  return h_hat, stats


def adaptive_temperature(entropy, temperature, rule: TemperatureRule
                         ) -> jnp.ndarray:
  """``T * (1 + tau * clip(h_hat, -1, 1))``, h_hat of `entropy` against the
  rule's statistics; T itself while they are not ready. A greedy row (T =
  0) stays greedy. `entropy` and `temperature` broadcast together ([N])."""
  h_hat = jnp.clip(normalise(entropy, rule.stats), -1.0, 1.0)
  return temperature * (1.0 + rule.tau * h_hat)


class EntropyTemperature(NamedTuple):
  """The rollout's HAPO stage (state name ``temperature``), from the config
  (``rollout.temperature_tau``, ``rollout.entropy_pivot``,
  ``rollout.entropy_legacy_sign``).

  Attributes:
    tau: the sampler rule's strength; 0 = no rule (the plain sampler).
    pivot: the pivot quantile of the log-entropies.
    legacy_sign: the public code's sign of h_hat (module doc).
    entropy_hat: whether the batch carries h_hat (an objective reads it).
  """
  tau: float = 0.0
  pivot: float = DEFAULT_PIVOT
  legacy_sign: bool = False
  entropy_hat: bool = False

  @property
  def active(self) -> bool:
    """Whether the rollout computes h_hat and its statistics at all."""
    return self.tau > 0 or self.entropy_hat

  def init(self):
    """The previous step's statistics (none yet); ``()`` without a rule."""
    return init_stats() if self.tau > 0 else ()

  def rule(self, state):
    """The sampler's `TemperatureRule` for this step, or None (no rule)."""
    if not self.tau > 0:
      return None
    return TemperatureRule(jnp.float32(self.tau), state)

  def batch_fields(self, state, rule, rows, loss_mask, sample_mask, base):
    """(the batch's `assemble` keywords, the new state, measurements) after
    the credit stage (`batch_entropy_hat`); nothing when inactive.
    `rows(name)`: a round field of the step's rows [N, ...]; `base` [N]:
    each row's own temperature."""
    if not self.active:
      return {}, state, {}
    fields, stats, measures = batch_entropy_hat(
        self, rule, rows("token_entropies"), loss_mask, sample_mask,
        token_temperatures=None if rule is None
        else rows("token_temperatures"), base=base)
    if rule is not None:  # the next step's sampler reads these
      state = newer(stats, rule.stats)
    return fields, state, measures


# One compiled program per batch shape.
_normalised_entropy = jax.jit(normalised_entropy,
                              static_argnames=("pivot", "legacy_sign"))


def batch_entropy_hat(stage: EntropyTemperature,
                      rule: Optional[TemperatureRule], token_entropies,
                      loss_mask, sample_mask, *, token_temperatures=None,
                      base=None):
  """h_hat of a batch and its statistics, over the loss tokens, from the
  sampler's [N, T] entropies at each row's own temperature.

  Returns:
    (the `assemble` keywords: ``entropy_hat`` when an objective reads it,
    the per-token ``temperature`` [N, T] with a `rule`; the statistics for
    the next step's sampler; measurements). `base` [N]: each row's own
    temperature, to count the tokens the rule adapted.
  """
  h_hat, stats = _normalised_entropy(
      jnp.asarray(token_entropies), jnp.asarray(loss_mask),
      pivot=float(stage.pivot), legacy_sign=bool(stage.legacy_sign))
  # h_hat stays on the device for the batch; one scalar comes back.
  out = {"entropy_hat": h_hat} if stage.entropy_hat else {}
  real = jnp.asarray(loss_mask) > 0
  m = {"entropy_hat/high_share": float((real & (h_hat > 0)).sum()
                                       / jnp.maximum(real.sum(), 1))}
  if rule is not None:
    out["temperature"] = token_temperatures
    sampled = np.asarray(sample_mask) > 0
    # A token drawn at another temperature than its row's was adapted.
    adapted = sampled & ~np.isclose(token_temperatures,
                                    np.asarray(base)[:, None],
                                    rtol=1e-6, atol=0.0)
    total = max(sampled.sum(), 1)
    m["sampler/adapted_share"] = float(adapted.sum() / total)
    m["sampler/temperature_mean"] = float(
        (token_temperatures * sampled).sum() / total)
  return out, stats, m
