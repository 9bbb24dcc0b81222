"""The laws every registered credit rule obeys, as plain functions.

Plain functions of a `credit.Credit` record (and its registry metadata) and
a `CreditBatch`: tests/contracts/test_credit.py runs them on every
registered rule with each of its example options, and a notebook can run
them on a new one. Each raises AssertionError.
"""

from typing import Any, Dict, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax.testing import assert_close, assert_finite, numpy


class CreditBatch(NamedTuple):
  """A step's batch as the rollout gives a rule: [N] advantages, the [N, T]
  loss mask and every array a rule may read (`credit.READS`)."""
  advantages: jnp.ndarray  # [N]
  mask: jnp.ndarray  # [N, T]
  reads: Dict[str, Any]


def credit_batch(key, *, p: int = 3, g: int = 4, t: int = 6,
                 vocab: int = 3) -> CreditBatch:
  """P groups of G right-padded rows (lengths 1 .. T; the last group a
  filler, all 0), tokens of a small vocabulary (so that prefixes and
  positions are shared), entropies in [0, 2) (0 under padding), 0/1
  rewards and their group z-scores as the advantages (a group of equal
  rewards gives 0)."""
  keys = jax.random.split(key, 4)
  n = p * g
  lengths = jax.random.randint(keys[0], (n,), 1, t + 1)
  mask = (jnp.arange(t)[None, :] < lengths[:, None]).astype(jnp.float32)
  mask = mask.at[(p - 1) * g:].set(0.0)  # a filler group
  tokens = jax.random.randint(keys[1], (n, t), 0, vocab)
  entropies = jax.random.uniform(keys[2], (n, t), maxval=2.0) * mask
  rewards = jax.random.bernoulli(keys[3], 0.5, (p, g)).astype(jnp.float32)
  centred = rewards - rewards.mean(-1, keepdims=True)
  std = rewards.std(-1, ddof=1, keepdims=True)
  advantages = (centred / (std + 1e-6)).reshape(-1)
  advantages = advantages.at[(p - 1) * g:].set(0.0)
  return CreditBatch(advantages, mask, dict(
      token_entropies=entropies, tokens=tokens.astype(jnp.int32),
      rewards=rewards.reshape(-1), num_generations=g))


def _apply(rule, batch: CreditBatch, **overrides):
  arrays = dict(batch.reads)
  arrays.update(overrides)
  advantages = arrays.pop("advantages", batch.advantages)
  mask = arrays.pop("mask", batch.mask)
  out, _ = rule.apply(rule.init(), advantages, mask,
                      **{k: arrays[k] for k in rule.reads})
  return out


def _tokens(out, mask):
  """The output advantages as [N, T] (`uniform` passes [N] through)."""
  adv = jnp.asarray(out.advantages, jnp.float32)
  if adv.ndim == 1:
    adv = jnp.broadcast_to(adv[:, None], mask.shape) * (mask > 0)
  return adv


def check_shapes_padding_and_measures(rule, batch: CreditBatch):
  """[N, T] (or `uniform`'s [N]) finite float32 advantages, 0 under
  padding and on filler rows; a narrowed mask is a subset of the loss
  tokens; measures are finite scalars."""
  out = _apply(rule, batch)
  n, t = batch.mask.shape
  adv = jnp.asarray(out.advantages)
  assert adv.shape in ((n, t), (n,)), adv.shape
  assert adv.dtype == jnp.float32, adv.dtype
  assert_finite(adv)
  if adv.ndim == 2:
    assert np.all(numpy(adv)[numpy(batch.mask) == 0] == 0.0)
  if out.mask is not None:
    narrowed = numpy(out.mask)
    assert narrowed.shape == (n, t)
    assert np.all((narrowed == 0) | (narrowed == numpy(batch.mask)))
  for key, value in out.measures.items():
    assert jnp.shape(value) == (), key
    assert np.isfinite(float(value)), (key, value)


def check_jit_matches_eager(rule, batch: CreditBatch):
  """The rule under an outer jit equals its plain call, measures too."""
  static = batch.reads["num_generations"]
  reads = {k: v for k, v in batch.reads.items() if k != "num_generations"}
  fn = lambda adv, mask, reads: _apply(
      rule, batch._replace(reads=dict(reads, num_generations=static)),
      advantages=adv, mask=mask)
  assert_close(jax.jit(fn)(batch.advantages, batch.mask, reads),
               _apply(rule, batch))


def check_padding_is_ignored(rule, batch: CreditBatch):
  """Padding columns (any values under them) and a further filler group
  change no real token's advantage, nor the measures."""
  out = _apply(rule, batch)
  n, t = batch.mask.shape
  g = batch.reads["num_generations"]
  pad_t = lambda x, v: jnp.concatenate(
      [x, jnp.full((x.shape[0], 2), v, x.dtype)], axis=1)
  pad_n = lambda x, v: jnp.concatenate(
      [x, jnp.full((g,) + x.shape[1:], v, x.dtype)], axis=0)
  reads = dict(batch.reads)
  reads["token_entropies"] = pad_n(pad_t(reads["token_entropies"], 9.0), 9.0)
  reads["tokens"] = pad_n(pad_t(reads["tokens"], 1), 1)
  reads["rewards"] = pad_n(reads["rewards"], 1.0)
  padded = _apply(rule, CreditBatch(
      pad_n(batch.advantages, 0.0), pad_n(pad_t(batch.mask, 0.0), 0.0),
      reads))
  assert_close(_tokens(padded, pad_n(pad_t(batch.mask, 0.0), 0.0))[:n, :t],
               _tokens(out, batch.mask))
  assert_close(dict(padded.measures), dict(out.measures))


def check_rows_permute_within_groups(rule, batch: CreditBatch):
  """Permuting the members of each group permutes the output rows."""
  g = batch.reads["num_generations"]
  n = batch.mask.shape[0]
  order = np.arange(n).reshape(-1, g)[:, ::-1].reshape(-1)
  take = lambda x: jnp.asarray(x)[order]
  reads = {k: (take(v) if k != "num_generations" else v)
           for k, v in batch.reads.items()}
  permuted = _apply(rule, CreditBatch(take(batch.advantages),
                                      take(batch.mask), reads))
  out = _apply(rule, batch)
  assert_close(_tokens(permuted, take(batch.mask)),
               take(_tokens(out, batch.mask)))
  assert_close(dict(permuted.measures), dict(out.measures), atol=1e-5)


def check_scales_with_advantages(rule, batch: CreditBatch):
  """(metadata ``linear``) f(c A) = c f(A) for c > 0, and A = 0 gives 0."""
  out = _tokens(_apply(rule, batch), batch.mask)
  scaled = _tokens(_apply(rule, batch, advantages=2.5 * batch.advantages),
                   batch.mask)
  assert_close(scaled, 2.5 * out, atol=1e-5)
  zero = _tokens(_apply(rule, batch, advantages=jnp.zeros_like(
      batch.advantages)), batch.mask)
  assert_close(zero, jnp.zeros_like(zero))


def check_neutral_is_uniform(rule, batch: CreditBatch):
  """(with the metadata's ``neutral`` options) every loss token gets its
  row's advantage, as `uniform`, and the mask is kept."""
  out = _apply(rule, batch)
  expected = jnp.broadcast_to(batch.advantages[:, None], batch.mask.shape)
  assert_close(_tokens(out, batch.mask), expected * batch.mask)
  assert out.mask is None


def check_token_advantages_accepted(rule, batch: CreditBatch):
  """(rules without ``row_advantages``) [N, T] advantages constant along
  each row give what the [N] ones give."""
  rows = _tokens(_apply(rule, batch), batch.mask)
  tokens = jnp.broadcast_to(batch.advantages[:, None], batch.mask.shape)
  out = _tokens(_apply(rule, batch, advantages=tokens), batch.mask)
  assert_close(out * batch.mask, rows)  # `uniform` passes padding through


# Each law and the metadata flag it needs (None: every rule).
CREDIT_LAWS = (
    (check_shapes_padding_and_measures, None),
    (check_jit_matches_eager, None),
    (check_padding_is_ignored, None),
    (check_rows_permute_within_groups, None),
    (check_scales_with_advantages, "linear"),
    (check_token_advantages_accepted, "token_advantages"),
)
