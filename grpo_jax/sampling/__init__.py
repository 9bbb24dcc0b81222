"""KV-cached sampling: prefill the prompts once, then decode in a while loop.

Prompts are left-padded to a bucket length (`pad_prompts`), so that every
prompt's last token sits in the same column and one jitted function serves all
prompts of a bucket. `sample` runs:

1. prefill: one forward pass over the ``[P, Sp]`` prompts that writes their
   keys/values into a cache of length ``L = Sp + T`` and gives the logits of the
   next token;
2. grouping: the prefilled cache and last logits are repeated ``G`` times
   (rows ``p*G + g``), so a prompt is never prefilled more than once;
3. decode: a ``jax.lax.while_loop`` over a fixed-size `DecodeState` that feeds
   one token per row per step, writes its key/value at slot ``Sp + t`` in place,
   computes the logits of that single position, and draws the next token. It
   stops when every row has produced an end-of-sequence id or after ``T`` tokens.

With ``slots=S`` (fewer than the N rows) the rows decode S at a time
instead, each slot taking the next row as soon as its own ends
(`engine`): the same rows, for long-tailed lengths.

The prefill and the decode step are `decoding.prefill` and
`decoding.forward` (the same blocks as `models.forward`, laid out for one
token per row); the draw is `draw.next_token`.

Every row carries its own positions (``0..len-1`` for its real prompt tokens, then
``len, len+1, ...``), so left padding changes nothing but the cache slots used.

Log-probs (see PITFALLS.md, "Sampler and trainer disagree"): with logits ``z``
and temperature ``tau`` each generated token ``y`` gets two numbers,

* ``tempered_logprobs = log_softmax(z / tau)[y]``: the plain tempered
  distribution over the full vocabulary. This is what the trainer recomputes
  teacher-forced with ``logprobs.token_logprobs(hidden, W, tokens,
  temperature=tau)``, so it is the behaviour log-prob to use in importance
  ratios. Both are computed in float32 the same way.
* ``logprobs = log q(y)``, where ``q`` is the distribution actually sampled
  from: ``softmax(z / tau)`` restricted to the top-k / top-p set and
  renormalised. Without top-k / top-p it equals ``tempered_logprobs``; with them
  it is ``>=`` it (renormalising over a subset only raises probabilities).

Greedy decoding samples from a point mass, so its ``logprobs`` are 0, and its
``tempered_logprobs`` use ``tau = 1`` (``log_softmax(z)[y]``).

Temperature is per row: a float (every row) or an ``[N]`` array (row ``p*G +
g``), normalised to ``[N]`` at entry and broadcast as ``[N, 1]`` against each
step's ``[N, V]`` logits. A row of temperature 0 decodes greedily while the
others sample; ``greedy=True`` makes every row greedy (and compiles no random
draw). The rule "greedy rows are scored at 1" is
`logprobs.scoring_temperature`, which `logprobs.token_logprobs` applies too,
so the trainer scores each row with the sampler's ``[N]`` temperatures as they
are. The temperature is traced, never static: new values never recompile.
With HAPO's ``temperature_rule`` each token is drawn at its own temperature,
set from the entropy of its row's distribution (`entropy_norm`), and the
``[N, T]`` temperatures are recorded for the trainer to score at; without
one the program is the plain one.

Sharding: traced under ``with jax.set_mesh(mesh):`` (as the trainer does)
the prefill, the grouped cache and every decode step split their rows over
``('data', 'fsdp')`` and the key/value heads over ``'tensor'``
(`sharding.constrain`), so each device decodes and caches only its rows;
params may be laid out by `sharding.shard_params`. The tokens are the same as
on one device.

Randomness: the caller passes the key. A trainer must pass a fresh key per
rollout, e.g. ``jax.random.fold_in(key, step)``; the same key and the same
prompts give the same completions. Row n draws its token t from its own key
(`draw.token_keys`), so its tokens do not depend on the other rows, on
the slots, or on how the rows are split over devices.
"""

import functools
from typing import Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax.sampling import decoding
from grpo_jax.sampling import draw
from grpo_jax.sampling import engine
from grpo_jax.sampling import entropy_norm
from grpo_jax import logprobs as logprobs_lib
from grpo_jax.runtime import sharding
from grpo_jax.models import lora

# Steps of 1.5x and 2x: a prompt pads by at most a third (a prefill costs
# FLOPs per padded position too), for twice the buckets of powers of two.
DEFAULT_BUCKETS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
                   1536, 2048, 3072, 4096, 6144, 8192)

# Incremented each time `_sample` is traced (i.e. compiled for a new shape or
# static argument); tests use it to check one compile per bucket.
_TRACE_COUNT = 0


def trace_count() -> int:
  """How many times the sampler has been traced in this process."""
  return _TRACE_COUNT


class SampleOutput(NamedTuple):
  """Completions of N = P*G rows, ordered prompt-major (row ``p*G + g``).

  Attributes:
    tokens: [N, T] int32 generated tokens; ``pad_id`` after the end.
    mask: [N, T] float32, 1 for generated tokens up to and including the first
      end-of-sequence id, 0 after it.
    lengths: [N] int32, ``mask.sum(-1)``.
    truncated: [N] bool, True where no end-of-sequence id was produced within
      ``max_new_tokens``.
    logprobs: [N, T] float32, log-prob of each token under the distribution it
      was drawn from (tempered and truncated by top-k / top-p, renormalised);
      0 for greedy rows and under padding.
    tempered_logprobs: [N, T] float32, ``log_softmax(logits / temperature)`` at
      each token (temperature 1 for greedy rows), what ``token_logprobs``
      gives teacher-forced with the same temperatures; 0 under padding.
    entropies: [N, T] float32, the entropy of that full tempered
      distribution at each token (what ``token_logprobs`` gives as its
      entropy); 0 under padding.
    topk_ids, topk_logprobs: [N, T, K] int32 / float32 with
      ``record_topk=K``: the K most likely ids of that full tempered
      distribution at each position and their log-probs
      (`logprobs.topk_logprobs`: what ``token_logprobs(..., topk_ids=)``
      gives), 0 under padding; None when K = 0.
    temperatures: [N, T] float32 with a ``temperature_rule`` (HAPO): the
      temperature each token was drawn at (0 on greedy rows and under
      padding), which the log-probs and entropies above use and the
      trainer scores it at; None without a rule.
    base_entropies: [N, T] float32 with a ``temperature_rule``: the entropy
      at each token of the row's own (base) temperature, which the rule
      normalises and HAPO's statistics are taken over; None without a rule.
  """
  tokens: jnp.ndarray
  mask: jnp.ndarray
  lengths: jnp.ndarray
  truncated: jnp.ndarray
  logprobs: jnp.ndarray
  tempered_logprobs: jnp.ndarray
  entropies: jnp.ndarray
  topk_ids: Optional[jnp.ndarray] = None
  topk_logprobs: Optional[jnp.ndarray] = None
  temperatures: Optional[jnp.ndarray] = None
  base_entropies: Optional[jnp.ndarray] = None


class DecodeState(NamedTuple):
  """The fixed-size carry of the decode loop (N rows, T new tokens)."""
  step: jnp.ndarray  # [] int32, index of the next token to draw.
  last_tokens: jnp.ndarray  # [N] int32, the token drawn at step - 1.
  cache: tuple  # per layer (k [N, K, hd, L], v [N, K, L, hd]).
  done: jnp.ndarray  # [N] bool, the row has produced an end id.
  lengths: jnp.ndarray  # [N] int32, tokens drawn while live (end id included).
  tokens: jnp.ndarray  # [N, T] int32
  logprobs: jnp.ndarray  # [N, T] float32
  tempered_logprobs: jnp.ndarray  # [N, T] float32
  entropies: jnp.ndarray  # [N, T] float32
  # [N, T, K] with record_topk = K > 0, else None (nothing compiled).
  topk_ids: Optional[jnp.ndarray] = None
  topk_logprobs: Optional[jnp.ndarray] = None
  # [N, T] with a temperature rule (HAPO), else None (nothing compiled):
  # each token's temperature, and the entropy at its row's own temperature.
  temperatures: Optional[jnp.ndarray] = None
  base_entropies: Optional[jnp.ndarray] = None


def pad_prompts(token_lists: Sequence[Sequence[int]], *,
                buckets: Sequence[int] = DEFAULT_BUCKETS, pad_id: int = 0):
  """Left-pads prompts to the smallest bucket that holds the longest one.

  Args:
    token_lists: P prompts, each a non-empty sequence of token ids.
    buckets: increasing candidate lengths Sp; one compile per bucket used.
    pad_id: the id written into padding.

  Returns:
    (tokens [P, Sp] int32, mask [P, Sp] int32), mask 1 on real tokens, which
    sit at the right end of each row.
  """
  if not token_lists:
    raise ValueError("token_lists is empty; pass at least one prompt.")
  lengths = [len(t) for t in token_lists]
  if min(lengths) == 0:
    raise ValueError(
        f"token_lists[{lengths.index(0)}] is an empty prompt; every prompt "
        "needs at least one token.")
  longest = max(lengths)
  fitting = [b for b in sorted(buckets) if b >= longest]
  if not fitting:
    raise ValueError(
        f"token_lists holds a prompt of {longest} tokens, longer than the "
        f"largest bucket {max(buckets)}; add a larger bucket to buckets=.")
  length = fitting[0]
  tokens = np.full((len(token_lists), length), pad_id, np.int32)
  mask = np.zeros((len(token_lists), length), np.int32)
  for row, ids in enumerate(token_lists):
    tokens[row, length - len(ids):] = np.asarray(ids, np.int32)
    mask[row, length - len(ids):] = 1
  return tokens, mask


def _check_inputs(config, prompt_tokens, prompt_mask, *, num_samples,
                  max_new_tokens, temperature, top_k, top_p, row_prompt=None):
  """ValueErrors naming the argument for unusable `sample` inputs."""
  if num_samples < 1:
    raise ValueError(f"num_samples must be >= 1; got {num_samples}.")
  if row_prompt is not None:
    if np.ndim(row_prompt) != 1 or num_samples != 1:
      raise ValueError(
          f"row_prompt must be [N] (one prompt index per row, -1 padding) "
          f"with num_samples=1; got shape {np.shape(row_prompt)} and "
          f"num_samples={num_samples}.")
    if not isinstance(row_prompt, jax.core.Tracer) and np.any(
        np.asarray(row_prompt) >= np.shape(prompt_tokens)[0]):
      raise ValueError(
          f"row_prompt holds {int(np.max(row_prompt))}, beyond the "
          f"{np.shape(prompt_tokens)[0]} prompts.")
  if max_new_tokens < 1:
    raise ValueError(f"max_new_tokens must be >= 1; got {max_new_tokens}.")
  if top_k is not None and not 1 <= top_k <= config.vocab_size:
    raise ValueError(
        f"top_k must be in [1, vocab_size={config.vocab_size}] or None; got "
        f"{top_k}.")
  if top_p is not None and not 0 < top_p <= 1:
    raise ValueError(f"top_p must be in (0, 1] or None; got {top_p}.")
  if np.ndim(prompt_tokens) != 2:
    raise ValueError(
        f"prompt_tokens must be [P, Sp] (rank 2); got shape "
        f"{np.shape(prompt_tokens)}. Use pad_prompts to build it.")
  if np.shape(prompt_mask) != np.shape(prompt_tokens):
    raise ValueError(
        f"prompt_mask has shape {np.shape(prompt_mask)} but prompt_tokens has "
        f"shape {np.shape(prompt_tokens)}; they must match.")
  logprobs_lib.check_temperature(
      temperature, np.shape(prompt_tokens)[0] * num_samples
      if row_prompt is None else np.shape(row_prompt)[0])
  if isinstance(prompt_mask, jax.core.Tracer):
    return  # Values are checked only when they are known.
  mask = np.asarray(prompt_mask) > 0
  lengths = mask.sum(-1)
  if (lengths == 0).any():
    raise ValueError(
        f"prompt_mask row {int(np.argmin(lengths))} has no real token (an "
        "empty prompt); every prompt needs at least one token.")
  left_padded = (mask == (np.arange(mask.shape[1]) >=
                          (mask.shape[1] - lengths)[:, None])).all()
  if not left_padded:
    raise ValueError(
        "prompt_mask must be left-padded (each row 0...0 1...1); use "
        "pad_prompts to build the prompts.")
  max_positions = getattr(config, "max_position_embeddings", None)
  if max_positions is not None and lengths.max() + max_new_tokens > max_positions:
    raise ValueError(
        f"prompt_tokens holds a prompt of {int(lengths.max())} tokens; with "
        f"max_new_tokens={max_new_tokens} it exceeds max_position_embeddings="
        f"{max_positions}. Shorten the prompt or lower max_new_tokens.")


def sample(params, config, prompt_tokens, prompt_mask, key, *, num_samples=1,
           max_new_tokens: int, temperature=1.0,
           top_k: Optional[int] = None, top_p: Optional[float] = None,
           greedy: bool = False, eos_ids: Sequence[int], pad_id: int = 0,
           record_topk: int = 0,
           temperature_rule: Optional[entropy_norm.TemperatureRule] = None,
           row_prompt=None, slots: Optional[int] = None,
           logits_hook: Optional[Callable] = None) -> SampleOutput:
  """Samples G completions for each of P left-padded prompts.

  Row n draws ``y_t ~ q(. | prompt, y_<t)`` with ``q = softmax(z / tau_n)``,
  optionally restricted to the ``top_k`` largest logits and then to the smallest
  set whose probability reaches ``top_p`` (nucleus sampling, arXiv:1904.09751),
  renormalised; a greedy row (``tau_n = 0``, or every row with ``greedy``)
  takes ``argmax z``. See the module docstring for the two log-probs returned.

  Compiles once per (prompt bucket Sp, P, config, num_samples, max_new_tokens,
  greedy, top_k, top_p, eos_ids, pad_id); temperature is traced, so a float
  and any [N] array share one compile.

  Args:
    params: model parameters (`models.init_params` / `models.load`), with
      or without LoRA adapters (merged into their matrices for sampling).
    config: the `models.ModelConfig`.
    prompt_tokens: [P, Sp] int32, left-padded (see `pad_prompts`).
    prompt_mask: [P, Sp], nonzero on real tokens.
    key: PRNG key; pass a fresh one per call (``fold_in(key, step)``).
    num_samples: G completions per prompt; the prompt is prefilled once.
    max_new_tokens: T, the most tokens generated per row.
    temperature: tau >= 0: a float for every row, or [N] float per row (N =
      P * num_samples, row p*G + g; may be traced). A row of 0 decodes
      greedily, its ``logprobs`` 0 and ``tempered_logprobs`` at tau = 1.
      Ignored when greedy.
    top_k: keep only the k largest logits (None: all).
    top_p: keep the smallest top set of probability >= top_p (None: all).
    greedy: argmax decoding of every row (no random draw is compiled).
    eos_ids: every end-of-sequence id (chat models have several, e.g.
      ``models.eos_ids(tokenizer)``); ``()`` generates exactly T tokens.
    pad_id: the id written after a row has ended.
    record_topk: K > 0 also records each position's K most likely ids and
      their tempered log-probs (`SampleOutput.topk_ids`); 0 (default)
      records nothing and compiles the same program as before.
    temperature_rule: None (default: the same program as before), or HAPO's
      entropy-adaptive rule (`entropy_norm.TemperatureRule`, traced): token
      t of row n is drawn at ``tau_n (1 + tau clip(h_hat, -1, 1))``, h_hat
      the entropy of ``softmax(z / tau_n)`` normalised by the rule's
      statistics (`entropy_norm.adaptive_temperature`), and each token's
      temperature is recorded (`SampleOutput.temperatures`).
    row_prompt: None (rows ``p*G + g``), or [N] int32 (traced: any values
      share one compile per N), the prompt each row continues: groups of
      different sizes (a budget strategy's ragged rows) still prefill each
      prompt once, and a row of -1 is padding: it ends before its first
      token (length 0, not truncated). Needs num_samples=1.
    slots: None (default: every row decodes in one batch until the last
      ends), or S < N: rows decode S at a time, a slot taking the next
      pending row as soon as its row ends, inside one compiled loop
      (`engine`): for long-tailed lengths, where a batch of N would run
      most of its steps on rows that are done. The same tokens and
      log-probs as without (each row draws from its own keys), up to the
      rounding of a smaller batch.
    logits_hook: None, or a function ``(logits [N', V] float32, rows [N']
      int32, steps [N'] int32) -> logits`` applied before each draw (rows:
      the output row of each logit row, steps: the index of the token
      drawn), e.g. to ban ids or force an end; static: one compile per
      function. The recorded log-probs are those of the changed logits.

  Returns:
    `SampleOutput` with N = P*G rows ordered ``p*G + g``.
  """
  _check_inputs(config, prompt_tokens, prompt_mask, num_samples=num_samples,
                max_new_tokens=max_new_tokens, temperature=temperature,
                top_k=top_k, top_p=top_p, row_prompt=row_prompt)
  if (isinstance(record_topk, bool) or not isinstance(
      record_topk, (int, np.integer))
      or not 0 <= record_topk <= config.vocab_size):
    raise ValueError(
        f"record_topk must be an int in [0, vocab_size={config.vocab_size}] "
        f"(0: off); got {record_topk!r}.")
  if temperature_rule is not None:
    temperature_rule = _check_rule(temperature_rule)
  num_rows = (np.shape(prompt_tokens)[0] * int(num_samples)
              if row_prompt is None else np.shape(row_prompt)[0])
  # One code path: every temperature is [N] from here (greedy: all rows 0), so
  # a float and an array share one compile. A known value goes in as a host
  # array: a jnp op under `jax.set_mesh` would type its result with the
  # mesh, and a float (broadcast here) would then compile apart from an
  # [N] array passed as it is.
  temperature = 0.0 if greedy else temperature
  if isinstance(temperature, jax.core.Tracer):
    temperature = jnp.broadcast_to(jnp.asarray(temperature, jnp.float32),
                                   (num_rows,))
  else:
    temperature = np.ascontiguousarray(np.broadcast_to(
        np.asarray(temperature, np.float32), (num_rows,)))
  if slots is not None and (isinstance(slots, bool) or not isinstance(
      slots, (int, np.integer)) or slots < 1):
    raise ValueError(f"slots must be an int >= 1 or None; got {slots!r}.")
  decode = _sample
  if slots is not None and slots < num_rows:
    decode = functools.partial(_sample_in_slots, num_slots=int(slots))
  return decode(
      params, jnp.asarray(prompt_tokens, jnp.int32),
      jnp.asarray(prompt_mask) > 0, key, temperature,
      config=config, num_samples=int(num_samples),
      max_new_tokens=int(max_new_tokens), top_k=top_k,
      top_p=None if top_p is None or top_p >= 1 else float(top_p),
      greedy=bool(greedy), eos_ids=tuple(int(i) for i in eos_ids),
      pad_id=int(pad_id), record_topk=int(record_topk),
      temperature_rule=temperature_rule,
      row_prompt=None if row_prompt is None else jnp.asarray(row_prompt,
                                                             jnp.int32),
      logits_hook=logits_hook)


def _sample_in_slots(*args, **kwargs) -> SampleOutput:
  return SampleOutput(**engine.sample_slots(*args, **kwargs))


def _check_rule(rule) -> entropy_norm.TemperatureRule:
  """The rule as float32 host arrays (as a known temperature goes in); a
  ValueError naming `temperature_rule` unless it is one with tau >= 0."""
  if not isinstance(rule, entropy_norm.TemperatureRule):
    raise ValueError(
        "temperature_rule must be an entropy_norm.TemperatureRule(tau, "
        f"stats) or None; got {type(rule).__name__}.")
  if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(rule)):
    return rule
  rule = jax.tree.map(lambda x: np.asarray(x, np.float32), rule)
  if not 0 <= rule.tau < 1:  # NaN fails too; T (1 - tau) must stay > 0
    raise ValueError(
        f"temperature_rule.tau must be in [0, 1); got {rule.tau}.")
  return rule


@functools.partial(
    jax.jit, static_argnames=("config", "num_samples", "max_new_tokens",
                              "top_k", "top_p", "greedy", "eos_ids", "pad_id",
                              "record_topk", "logits_hook"))
def _sample(params, prompt_tokens, prompt_mask, key, temperature,
            temperature_rule=None, row_prompt=None, *, config, num_samples,
            max_new_tokens, top_k, top_p, greedy, eos_ids, pad_id,
            record_topk=0, logits_hook=None):
  global _TRACE_COUNT
  _TRACE_COUNT += 1
  if lora.has_adapters(params):
    # One merged copy for the whole call: the decode step then reads one
    # matrix per projection, as without adapters.
    params = lora.merge(params, config.lora_scale)
  num_prompts, prompt_length = prompt_tokens.shape
  num_rows = (num_prompts * num_samples if row_prompt is None
              else row_prompt.shape[0])
  # `sample` passes [N]; a [] temperature (callers lowering `_sample`
  # directly) means every row.
  temperature = jnp.broadcast_to(temperature, (num_rows,))
  cache_length = prompt_length + max_new_tokens
  # Hoisted out of the loop: the output matrix, vocabulary-major.
  rows = decoding.output_rows(params, config)

  prompt_slots = jnp.pad(prompt_mask, ((0, 0), (0, max_new_tokens)))  # [P, L]
  cache, logits = decoding.prefill(params, config, prompt_tokens,
                                   prompt_mask, prompt_slots, rows)

  slots = jnp.arange(cache_length)
  # Groups share the prefilled prompt: rows p*G + g copy prompt p (or,
  # with `row_prompt`, row n copies prompt row_prompt[n]).
  def repeat(x, axis=0):
    if row_prompt is not None:
      return jnp.take(x, jnp.maximum(row_prompt, 0), axis=axis)
    return jnp.repeat(x, num_samples, axis=axis)
  # Per-layer caches and weights for the unrolled decode step, the cache
  # laid out once for its attention dots (`decoding.forward`): the prefill's
  # [layers, P, L, K, hd] -> keys [N, K, hd, L] and values [N, K, L, hd].
  # Left [N, L, K, hd], XLA transposed all of it at every step.
  keys = jnp.transpose(repeat(cache.k, axis=1), (0, 1, 3, 4, 2))
  values = jnp.transpose(repeat(cache.v, axis=1), (0, 1, 3, 2, 4))
  cache = tuple(zip(decoding.split_layers(keys, config.num_layers),
                    decoding.split_layers(values, config.num_layers)))
  # Under a mesh the N rows (and kv heads) are split from here on; the
  # decode step's own constraints keep the loop's cache split the same way.
  cache = sharding.constrain(cache, sharding.DECODE_CACHE)
  layers = decoding.weights(params, config,
                            fused=decoding.fuse_projections())
  logits = repeat(logits)
  row_lengths = repeat(prompt_mask.sum(-1).astype(jnp.int32))  # [N]
  row_slots = repeat(prompt_slots)  # [N, L]
  eos = jnp.asarray(eos_ids, jnp.int32)

  keys = draw.row_keys(key, num_rows)
  row_ids = jnp.arange(num_rows)

  def record(state, step, logits):
    """Draws the token of `step` from `logits` and writes it into the state."""
    if logits_hook is not None:
      logits = logits_hook(logits, row_ids, jnp.full((num_rows,), step))
    drawn = draw.step(logits, draw.token_keys(keys, step), temperature,
                      greedy=greedy, top_k=top_k, top_p=top_p,
                      record_topk=record_topk,
                      temperature_rule=temperature_rule)
    live = ~state.done
    tokens = jnp.where(live, drawn.tokens, pad_id)
    ended = (tokens[:, None] == eos[None, :]).any(-1) if eos_ids else False

    def write(buffer, column):
      """Column `step` of [N, T] or [N, T, K] `buffer`, 0 on ended rows."""
      column = jnp.where(live.reshape((-1,) + (1,) * (column.ndim - 1)),
                         column, 0).astype(buffer.dtype)
      return jax.lax.dynamic_update_slice(
          buffer, column[:, None], (0, step) + (0,) * (column.ndim - 1))

    optional = {name: write(getattr(state, name), getattr(drawn, name))
                for name in draw.OPTIONAL_FIELDS
                if getattr(drawn, name) is not None}
    return state._replace(
        step=step + 1,
        last_tokens=tokens,
        done=state.done | (live & ended),
        lengths=state.lengths + live.astype(jnp.int32),
        tokens=jax.lax.dynamic_update_slice(state.tokens, tokens[:, None],
                                            (0, step)),
        logprobs=write(state.logprobs, drawn.logprobs),
        tempered_logprobs=write(state.tempered_logprobs,
                                drawn.tempered_logprobs),
        entropies=write(state.entropies, drawn.entropies), **optional)

  def keep_going(state):
    return (state.step < max_new_tokens) & ~state.done.all()

  def decode_step(state):
    step = state.step
    slot = prompt_length + step - 1  # where the last drawn token goes
    attention_mask = (row_slots | (slots[None, :] >= prompt_length)) & (
        slots[None, :] <= slot)
    hidden, cache = decoding.forward(
        params, layers, config, state.last_tokens, row_lengths + step - 1,
        attention_mask, state.cache, slot)
    state = state._replace(cache=cache)
    return record(state, step, decoding.decode_logits(hidden, rows))

  empty = jnp.zeros((num_rows, max_new_tokens), jnp.float32)
  state = DecodeState(
      step=jnp.zeros((), jnp.int32),
      last_tokens=jnp.zeros((num_rows,), jnp.int32),
      cache=cache,
      # A padding row (row_prompt -1) is done before its first token.
      done=(jnp.zeros((num_rows,), bool) if row_prompt is None
            else row_prompt < 0),
      lengths=jnp.zeros((num_rows,), jnp.int32),
      tokens=jnp.full((num_rows, max_new_tokens), pad_id, jnp.int32),
      logprobs=empty,
      tempered_logprobs=empty,
      entropies=empty)
  if record_topk:
    shape = (num_rows, max_new_tokens, record_topk)
    state = state._replace(topk_ids=jnp.zeros(shape, jnp.int32),
                           topk_logprobs=jnp.zeros(shape, jnp.float32))
  if temperature_rule is not None:
    state = state._replace(temperatures=empty, base_entropies=empty)
  state = record(state, state.step, logits)
  state = jax.lax.while_loop(keep_going, decode_step, state)

  mask = jnp.arange(max_new_tokens)[None, :] < state.lengths[:, None]
  return SampleOutput(
      tokens=state.tokens, mask=mask.astype(jnp.float32),
      lengths=state.lengths, truncated=~state.done, logprobs=state.logprobs,
      tempered_logprobs=state.tempered_logprobs, entropies=state.entropies,
      topk_ids=state.topk_ids, topk_logprobs=state.topk_logprobs,
      temperatures=state.temperatures, base_entropies=state.base_entropies)
