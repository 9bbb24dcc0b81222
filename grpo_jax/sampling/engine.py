"""The generation engine: N rows decoded in S < N slots, refilled as rows end.

A static batch (`sampling._sample`) decodes all N rows together until the
last one ends. With long-tailed lengths (most answers short, a few running
to the limit) most of its steps then feed rows that are done. Here a fixed
number of slots decode: each slot holds one row, with its own position and
its own cache region, and the moment its row ends (an end id or
``max_new_tokens``) it takes the next pending row, without leaving the
compiled `while_loop`. The loop ends when no row is left.

* Prompts are prefilled once, into a cache of their own length ``Sp``; a
  slot taking a row copies its prompt's keys/values into its first ``Sp``
  cache columns (only on the steps where some slot is refilled), so the rows
  of a group share one prefill as in the static batch.
* A refilled slot draws its first token from its prompt's prefill logits,
  in place of the logits its decode step computed for the old row; that
  step's key/value go to the last cache column, which no row ever reads
  (token ``T - 1`` is never fed back).
* Every slot keeps its own position, and writes its key/value at its own
  column (`decoding.forward` with an [S] cache index): a scatter.
* Row n draws its token t from the keys ``fold_in(fold_in(key, n), t)``
  (`draw.token_keys`), as the static batch does: the rows' tokens do not
  depend on which slot, or which neighbours, they decoded beside.

Per-slot regions, not pages: a slot's region is ``Sp + T`` columns whether
its row is short or long. A paged cache would hold only the pages in use,
but under XLA (without a paged-attention kernel, which JAX ships for TPU
only) every decode step would gather a slot's pages into one contiguous
array before its attention dots, a copy of the whole live cache per layer
per step on top of the read that the regions' attention does in place;
`experiments/benchmarks/sampler.py --paged_check` measures the two.
"""

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from grpo_jax.sampling import decoding
from grpo_jax.sampling import draw
from grpo_jax.runtime import sharding
from grpo_jax.models import lora


class Rows(NamedTuple):
  """The outputs of all R rows, filled in as their slots decode them."""
  tokens: jnp.ndarray  # [R, T] int32
  logprobs: jnp.ndarray  # [R, T] float32
  tempered_logprobs: jnp.ndarray
  entropies: jnp.ndarray
  lengths: jnp.ndarray  # [R] int32
  ended: jnp.ndarray  # [R] bool: drew an end id (not cut at T)
  topk_ids: Optional[jnp.ndarray] = None
  topk_logprobs: Optional[jnp.ndarray] = None
  temperatures: Optional[jnp.ndarray] = None
  base_entropies: Optional[jnp.ndarray] = None


class SlotState(NamedTuple):
  """The fixed-size carry of the engine's loop (S slots)."""
  row: jnp.ndarray  # [S] int32, the row each slot decodes; R: idle.
  step: jnp.ndarray  # [S] int32, the index of the slot's next token.
  last_tokens: jnp.ndarray  # [S] int32, the token drawn last.
  cache: tuple  # per layer (k [S, K, hd, L], v [S, K, L, hd])
  taken: jnp.ndarray  # [] int32, rows handed to slots so far (of `order`).
  rows: Rows


def _prompt_caches(cache, config):
  """The prefill's [layers, P, Sp, K, hd] cache -> per layer (keys [P, K,
  hd, Sp], values [P, K, Sp, hd]), the slots' layouts."""
  keys = jnp.transpose(cache.k, (0, 1, 3, 4, 2))
  values = jnp.transpose(cache.v, (0, 1, 3, 2, 4))
  return tuple(zip(decoding.split_layers(keys, config.num_layers),
                   decoding.split_layers(values, config.num_layers)))


def _copy_prompts(cache, prompt_cache, slots, prompts):
  """Writes prompt ``prompts[s]``'s keys/values into the first Sp columns
  of slot ``slots[s]``; a slot index of S (out of range) writes nothing."""
  out = []
  for (k, v), (pk, pv) in zip(cache, prompt_cache):
    sp = pk.shape[-1]
    out.append((k.at[slots, :, :, :sp].set(pk[prompts], mode="drop"),
                v.at[slots, :, :sp, :].set(pv[prompts], mode="drop")))
  return tuple(out)


def _scatter(buffer, rows, steps, values, live):
  """``buffer[rows[s], steps[s]] = values[s]`` for the live slots only (an
  idle slot's row index is sent out of range, where the write drops)."""
  rows = jnp.where(live, rows, buffer.shape[0])
  return buffer.at[rows, steps].set(values.astype(buffer.dtype), mode="drop")


@functools.partial(
    jax.jit, static_argnames=("config", "num_slots", "num_samples",
                              "max_new_tokens", "top_k", "top_p", "greedy",
                              "eos_ids", "pad_id", "record_topk",
                              "logits_hook"))
def sample_slots(params, prompt_tokens, prompt_mask, key, temperature,
                 temperature_rule=None, row_prompt=None, *, config,
                 num_slots, num_samples, max_new_tokens, top_k, top_p,
                 greedy, eos_ids, pad_id, record_topk=0, logits_hook=None):
  """`sampling._sample`'s rows, decoded in `num_slots` slots; the same
  arguments (checked by `sampling.sample`) and a `SampleOutput`'s fields
  as a dict."""
  if lora.has_adapters(params):
    params = lora.merge(params, config.lora_scale)
  num_prompts, prompt_length = prompt_tokens.shape
  if row_prompt is None:
    row_prompt = jnp.repeat(jnp.arange(num_prompts), num_samples)
  num_rows, steps = row_prompt.shape[0], max_new_tokens
  temperature = jnp.broadcast_to(temperature, (num_rows,))
  cache_length = prompt_length + steps
  out_rows = decoding.output_rows(params, config)
  cache, prompt_logits = decoding.prefill(params, config, prompt_tokens,
                                          prompt_mask, prompt_mask, out_rows)
  prompt_cache = _prompt_caches(cache, config)
  prompt_lengths = prompt_mask.sum(-1).astype(jnp.int32)
  layers = decoding.weights(params, config,
                            fused=decoding.fuse_projections())
  keys = draw.row_keys(key, num_rows)
  eos = jnp.asarray(eos_ids, jnp.int32)
  columns = jnp.arange(cache_length)
  # Rows in the order slots take them: padding rows (row_prompt -1) last,
  # never taken: they end before their first token.
  real = row_prompt >= 0
  order = jnp.argsort(~real, stable=True).astype(jnp.int32)
  num_real = real.sum().astype(jnp.int32)

  def pending(taken, count):
    """The row `order[taken + count]` (elementwise over `count`), or R (no
    row) past the last real one."""
    index = taken + count
    return jnp.where(index < num_real,
                     order[jnp.minimum(index, num_rows - 1)], num_rows)

  def decode(state):
    """One step of every slot: (logits [S, V] of its next token, cache)."""
    prompt = jnp.maximum(row_prompt[jnp.minimum(state.row, num_rows - 1)],
                         0)
    fresh = state.step == 0
    # A fresh slot's forward feeds a stale token: its key/value go to the
    # last column, never read, and its logits are replaced below.
    column = jnp.where(fresh, cache_length - 1,
                       prompt_length + state.step - 1)
    positions = prompt_lengths[prompt] + jnp.maximum(state.step - 1, 0)
    prompt_columns = jnp.pad(prompt_mask[prompt], ((0, 0), (0, steps)))
    attention_mask = (prompt_columns | (columns[None, :] >= prompt_length)) & (
        columns[None, :] <= column[:, None])
    hidden, cache = decoding.forward(params, layers, config,
                                     state.last_tokens, positions,
                                     attention_mask, state.cache, column)
    logits = decoding.decode_logits(hidden, out_rows)
    return jnp.where(fresh[:, None], prompt_logits[prompt], logits), cache

  def body(state):
    logits, cache = decode(state)
    live = state.row < num_rows
    row = jnp.minimum(state.row, num_rows - 1)
    if logits_hook is not None:
      logits = logits_hook(logits, row, state.step)
    drawn = draw.step(logits, draw.token_keys(keys[row], state.step),
                      temperature[row], greedy=greedy, top_k=top_k,
                      top_p=top_p, record_topk=record_topk,
                      temperature_rule=temperature_rule)
    hit_end = ((drawn.tokens[:, None] == eos[None, :]).any(-1) if eos_ids
               else jnp.zeros_like(live))
    finished = ~live | hit_end | (state.step + 1 == steps)
    put = lambda buffer, values: _scatter(buffer, state.row, state.step,
                                          values, live)
    rows = state.rows
    optional = {name: put(getattr(rows, name), getattr(drawn, name))
                for name in draw.OPTIONAL_FIELDS
                if getattr(drawn, name) is not None}
    ending = jnp.where(live & finished, state.row, num_rows)
    rows = rows._replace(
        tokens=put(rows.tokens, drawn.tokens),
        logprobs=put(rows.logprobs, drawn.logprobs),
        tempered_logprobs=put(rows.tempered_logprobs,
                              drawn.tempered_logprobs),
        entropies=put(rows.entropies, drawn.entropies),
        lengths=rows.lengths.at[ending].set(state.step + 1, mode="drop"),
        ended=rows.ended.at[ending].set(hit_end, mode="drop"), **optional)
    # Finished slots take the next pending rows, in slot order.
    rank = jnp.cumsum(finished) - 1
    next_row = jnp.where(finished, pending(state.taken, rank), state.row)
    refilled = finished & (next_row < num_rows)
    cache = jax.lax.cond(
        refilled.any(),
        lambda c: _copy_prompts(
            c, prompt_cache, jnp.where(refilled, jnp.arange(num_slots),
                                       num_slots),
            jnp.maximum(row_prompt[jnp.minimum(next_row, num_rows - 1)], 0)),
        lambda c: c, cache)
    return SlotState(
        row=next_row, step=jnp.where(finished, 0, state.step + 1),
        last_tokens=drawn.tokens, cache=cache,
        taken=state.taken + refilled.sum().astype(jnp.int32), rows=rows)

  first = pending(jnp.int32(0), jnp.arange(num_slots))
  empty = jnp.zeros((num_rows, steps), jnp.float32)
  rows = Rows(tokens=jnp.full((num_rows, steps), pad_id, jnp.int32),
              logprobs=empty, tempered_logprobs=empty, entropies=empty,
              lengths=jnp.zeros((num_rows,), jnp.int32),
              ended=~real)
  if record_topk:
    shape = (num_rows, steps, record_topk)
    rows = rows._replace(topk_ids=jnp.zeros(shape, jnp.int32),
                         topk_logprobs=jnp.zeros(shape, jnp.float32))
  if temperature_rule is not None:
    rows = rows._replace(temperatures=empty, base_entropies=empty)
  kv = config.num_kv_heads, config.head_dim
  cache = tuple(
      (jnp.zeros((num_slots, *kv, cache_length), prompt_cache[0][0].dtype),
       jnp.zeros((num_slots, kv[0], cache_length, kv[1]), prompt_cache[0][0].dtype))
      for _ in range(config.num_layers))
  cache = _copy_prompts(cache, prompt_cache, jnp.arange(num_slots),
                        jnp.maximum(row_prompt[jnp.minimum(
                            first, num_rows - 1)], 0))
  cache = sharding.constrain(cache, sharding.DECODE_CACHE)
  state = SlotState(
      row=first, step=jnp.zeros((num_slots,), jnp.int32),
      last_tokens=jnp.zeros((num_slots,), jnp.int32), cache=cache,
      taken=jnp.minimum(num_slots, num_real).astype(jnp.int32), rows=rows)
  state = jax.lax.while_loop(lambda s: (s.row < num_rows).any(), body, state)

  rows = state.rows
  mask = jnp.arange(steps)[None, :] < rows.lengths[:, None]
  return dict(
      tokens=rows.tokens, mask=mask.astype(jnp.float32),
      lengths=rows.lengths, truncated=~rows.ended, logprobs=rows.logprobs,
      tempered_logprobs=rows.tempered_logprobs, entropies=rows.entropies,
      topk_ids=rows.topk_ids, topk_logprobs=rows.topk_logprobs,
      temperatures=rows.temperatures, base_entropies=rows.base_entropies)
