"""The training batch and the log-prob passes that complete it.

`assemble_batch` joins prompts and completions into a `Batch` and adds the
behaviour (old) and reference log-probs with the trainer's own forward pass
(`policy_logprobs`, at the sampler's temperature), so that a ratio is 1
until the policy moves.
"""

import functools
import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax import logprobs as logprobs_lib
from grpo_jax import models
from grpo_jax.runtime import sharding
from grpo_jax.train import packing as packing_lib


class Batch(NamedTuple):
  """The training batch of one step; N = P*G rows, S = Sp + T columns.

  Attributes:
    tokens: [N, S] int32, left-padded prompt then completion.
    input_mask: [N, S] float32, 1 on real prompt and completion tokens.
    completion_mask: [N, T] float32, 1 on tokens that enter the loss.
    advantages: [N] float32, or [N, T] for token-level credit.
    old_logp: [N, T] float32 behaviour log-probs (trainer's forward pass),
      or None on policy: the batch feeds a single optimiser step, whose own
      log-probs, detached, are then the behaviour log-probs (ratio exactly 1,
      one forward pass fewer per step).
    ref_logp: [N, T] float32 reference log-probs, or None when beta == 0.
    sampler_logp: [N, T] float32 the sampler's tempered log-probs, on and
      off policy (mismatch corrections and measurements read them), or None
      for a batch built without them.
    temperature: [N] float32, each row's sampling temperature (0: greedy,
      scored at 1); the trainer's log-probs use it row by row. [N, T] with
      HAPO's entropy-adaptive sampler (``rollout.temperature_tau > 0``):
      each token's own temperature, which it is scored at.
    sampler_topk_ids, sampler_topk_logp: [N, T, K] int32 / float32, the
      sampler's K most likely ids at each position and their tempered
      log-probs (`logprobs.topk_logprobs`), recorded only with
      ``rollout.record_topk = K > 0`` (DPPO's top-K forms read them);
      None otherwise.
    entropy_hat: [N, T] float32, HAPO's normalised entropy of each token
      over the batch's loss tokens (`entropy_norm.normalised_entropy` of
      the sampler's entropies), computed by the rollout for an objective
      that reads it or for the adaptive sampler; None otherwise
    replayed: [N] float32, 1 on rows replayed from earlier steps (RePO's
      per-prompt cache, the rollout-level buffer), 0 on fresh rows; None
      when the step replays nothing. With a replay coefficient
      (`update.make_loss_functions`) the loss aggregates the two parts
      separately and the regularisers read only the fresh rows.
    packing: None, or a `packing.Plan` of the rows: the update's forward
      then runs on the packed sequences (``train.pack_rows``; attached per
      minibatch by `packing.with_plans`).
  """
  tokens: jnp.ndarray
  input_mask: jnp.ndarray
  completion_mask: jnp.ndarray
  advantages: jnp.ndarray
  old_logp: Optional[jnp.ndarray]
  ref_logp: Optional[jnp.ndarray]
  sampler_logp: Optional[jnp.ndarray]
  temperature: jnp.ndarray
  sampler_topk_ids: Optional[jnp.ndarray] = None
  sampler_topk_logp: Optional[jnp.ndarray] = None
  entropy_hat: Optional[jnp.ndarray] = None
  replayed: Optional[jnp.ndarray] = None
  packing: Optional[packing_lib.Plan] = None


def completion_hidden(params, config: models.ModelConfig, tokens, input_mask,
                      completion_start: int, *, group_size: int = 1):
  """The hidden states that predict the completion tokens, [N, T, D].

  Row i's ``h[i, s-1]`` for ``s = completion_start ... S-1``: the hidden
  state one position earlier predicts each completion token.

  With ``group_size`` G > 1, rows in consecutive blocks of G share their
  prompt columns (as `assemble_batch` lays out a group's completions). Each
  prompt then runs through the model once (`models.forward_shared_prompts`,
  one scan over the layers for both parts); its keys and values are repeated
  G times and the completions attend to them through the cache, so a step
  pays for P prompts instead of N = P*G. The values are those of the full
  forward pass, and so is the gradient: the repeat sums the G rows'
  gradients into their shared prompt.
  """
  n, s = tokens.shape
  if group_size == 1:
    hidden, _ = models.forward(params, config, tokens,
                               models.positions_from_mask(input_mask),
                               models.causal_attention_mask(input_mask))
    return hidden[:, completion_start - 1:-1]
  if n % group_size:
    raise ValueError(
        f"group_size={group_size} must divide the {n} rows of tokens.")
  sp = completion_start
  positions = models.positions_from_mask(input_mask)
  real = input_mask.astype(bool)
  slots = jnp.arange(s)[None, None, :]
  # Causal over the cache's slots, real keys only (padding queries see no
  # key and give zeros, as in `models.causal_attention_mask`).
  def visible(queries, keys):
    return (slots <= queries[None, :, None]) & keys[:, None, :]
  prompt_keys = real[::group_size] & (jnp.arange(s) < sp)[None, :]
  hidden_p, hidden_c = models.forward_shared_prompts(
      params, config,
      (tokens[::group_size, :sp], positions[::group_size, :sp],
       visible(jnp.arange(sp), prompt_keys)),
      (tokens[:, sp:], positions[:, sp:], visible(jnp.arange(sp, s), real)),
      group_size=group_size)
  return jnp.concatenate(
      [jnp.repeat(hidden_p[:, -1:], group_size, axis=0), hidden_c[:, :-1]],
      axis=1)


def policy_logprobs(params, config: models.ModelConfig, tokens, input_mask,
                    completion_start: int, *, temperature=1.0,
                    chunk_size: int = 4096, group_size: int = 1,
                    topk_ids=None):
  """Log-probs and entropy of the completion tokens, teacher-forced.

  logp[i, t] = log_softmax(h[i, s-1] W / temperature)[tokens[i, s]] with
  s = completion_start + t: the hidden state one position earlier predicts
  each completion token. Use the sampler's temperature, so that on policy
  the ratio is 1 (PITFALLS.md, "Temperature on one side only").

  Args:
    params: model parameters.
    config: the `models.ModelConfig`.
    tokens: [N, S] int32, left-padded prompt then T = S - completion_start
      completion tokens.
    input_mask: [N, S], 1 on real prompt and completion tokens.
    completion_start: Sp, the column of the first completion token.
    temperature: the sampling temperature, a float or [N] per row.
    chunk_size: positions (of N*T) per chunk of `logprobs.token_logprobs`.
    group_size: rows in consecutive blocks of this size share their prompt
      columns, which then run once per block (`completion_hidden`).
    topk_ids: None, or [N, T, K] ids (the sampler's top-K) whose log-probs
      the chunked pass gathers too (`logprobs.token_logprobs`).

  Returns:
    (logp [N, T], entropy [N, T]) float32; with `topk_ids`, (logp,
    entropy, topk_logp [N, T, K]).
  """
  if tokens.ndim != 2 or input_mask.shape != tokens.shape:
    raise ValueError(
        f"tokens and input_mask must both be [N, S]; got {tokens.shape} and "
        f"{input_mask.shape}.")
  if not 0 < completion_start < tokens.shape[1]:
    raise ValueError(
        f"completion_start must be in (0, S={tokens.shape[1]}); got "
        f"{completion_start}.")
  hidden = completion_hidden(params, config, tokens, input_mask,
                             completion_start, group_size=group_size)
  out = logprobs_lib.token_logprobs(
      hidden, models.unembedding(params, config),
      tokens[:, completion_start:], temperature=temperature,
      chunk_size=chunk_size, topk_ids=topk_ids)
  return tuple(out)


@functools.partial(jax.jit, static_argnames=(
    "config", "completion_start", "chunk_size", "group_size"))
def _jitted_logprobs(params, tokens, input_mask, temperature, *, config,
                     completion_start, chunk_size, group_size):
  return policy_logprobs(params, config, tokens, input_mask, completion_start,
                         temperature=temperature, chunk_size=chunk_size,
                         group_size=group_size)


@functools.partial(jax.jit, static_argnames=(
    "config", "completion_start", "chunk_size"))
def _jitted_packed_logprobs(params, tokens, input_mask, temperature, packing,
                            *, config, completion_start, chunk_size):
  return packing_lib.packed_logprobs(
      params, config, tokens, input_mask, completion_start, packing,
      temperature=temperature, chunk_size=chunk_size)


def batched_logprobs(params, config, tokens, input_mask, completion_start, *,
                     temperature, chunk_size, batch_size=0, group_size=1,
                     with_entropy=False, pack_rows=False):
  """`policy_logprobs` over rows in slices of `batch_size` (0: all), no grad;
  `temperature` is [N] per row (traced: new values never recompile); rows
  in blocks of `group_size` share their prompt (see `completion_hidden`).
  With `pack_rows` each slice runs on its real tokens alone
  (`packing.packed_logprobs`; 0 on padding columns).

  Returns logp [N, T] float32, or (logp, entropy) with `with_entropy`.
  """
  rows = tokens.shape[0]
  size = batch_size or rows
  # Slices start at multiples of `size`, so blocks of gcd(size, G) rows lie
  # within one group.
  group_size = math.gcd(size, group_size)
  temperature = _row_or_token_temperatures(temperature, rows)
  if pack_rows:
    plan = packing_lib.plan(np.asarray(input_mask), completion_start,
                            group_size=group_size, microbatch_size=size)
    pieces = [
        _jitted_packed_logprobs(
            params, tokens[i:i + size], input_mask[i:i + size],
            temperature[i:i + size],
            jax.tree.map(lambda x, i=i: x[i:i + size], plan), config=config,
            completion_start=completion_start, chunk_size=chunk_size)
        for i in range(0, rows, size)]
  else:
    pieces = [
        _jitted_logprobs(params, tokens[i:i + size], input_mask[i:i + size],
                         temperature[i:i + size], config=config,
                         completion_start=completion_start,
                         chunk_size=chunk_size, group_size=group_size)
        for i in range(0, rows, size)]
  logp = jnp.concatenate([piece[0] for piece in pieces], axis=0)
  if not with_entropy:
    return logp
  return logp, jnp.concatenate([piece[1] for piece in pieces], axis=0)


def _row_or_token_temperatures(temperature, rows: int):
  """float32 [N] row temperatures (a float broadcast), or [N, T] per-token
  ones (HAPO's adaptive sampler) as they are."""
  temperature = jnp.asarray(temperature, jnp.float32)
  if temperature.ndim == 2:
    return temperature
  return jnp.broadcast_to(temperature, (rows,))


def sampler_mismatch(logp, sampler_logp, mask):
  """max |logp - sampler_logp| over the real tokens of [N, T] arrays: the
  trainer's and the sampler's log-probs of the same tokens under the same
  params (PITFALLS.md, "Sampler and trainer disagree"); in float32 the
  SmolLM2 quickstart logs 5e-6 to 6e-5."""
  return (abs(logp - sampler_logp) * mask).max()


def assemble_batch(params, ref_params, prompt_tokens, prompt_mask,
                   completion_tokens, completion_mask, loss_mask, advantages,
                   *, model_config, temperature, chunk_size: int,
                   logprob_batch_size: int = 0, beta: float = 0.0,
                   sampler_logp=None, on_policy: bool = False,
                   sampler_topk_ids=None, sampler_topk_logp=None,
                   entropy_hat=None, replayed=None,
                   pack_rows: bool = False) -> Batch:
  """Concatenates prompts and completions and adds old (and ref) log-probs.

  On policy (see `Batch`) the old log-prob pass is skipped and ``old_logp``
  is None; `sampler_logp` is carried either way.

  Args:
    params: the policy that sampled (its log-probs are old_logp).
    ref_params: the reference; used only when beta > 0.
    prompt_tokens, prompt_mask: [P, Sp] left-padded prompts.
    completion_tokens: [N, T] with N = P*G, prompt-major.
    completion_mask: [N, T] the sampler's mask (real completion tokens).
    loss_mask: [N, T] the tokens that enter the loss (a subset).
    advantages: [N].
    model_config, chunk_size, logprob_batch_size: see `batched_logprobs`.
    temperature: the sampler's, a float, [N] per row or [N, T] per token.
    beta: KL coefficient; 0 skips the reference forward pass.
    sampler_logp: [N, T] the sampler's tempered log-probs, or None.
    on_policy: the batch feeds one optimiser step: no old log-prob pass.
    sampler_topk_ids, sampler_topk_logp: [N, T, K] the sampler's top-K
      ids and log-probs, or None (not recorded).
    entropy_hat: [N, T] HAPO's normalised entropies, or None.
    replayed: [N] 1 on rows replayed from earlier steps, or None.
    pack_rows: the old and reference passes run on the real tokens alone
      (`batched_logprobs`; ``train.pack_rows``).
  """
  prompt_tokens = np.asarray(prompt_tokens)
  completion_tokens = np.asarray(completion_tokens)
  n, sp = completion_tokens.shape[0], prompt_tokens.shape[1]
  if n % prompt_tokens.shape[0]:
    raise ValueError(
        f"completion_tokens has {n} rows, not a multiple of the "
        f"{prompt_tokens.shape[0]} prompts.")
  g = n // prompt_tokens.shape[0]
  tokens = jnp.asarray(np.concatenate(
      [np.repeat(prompt_tokens, g, axis=0), completion_tokens], axis=1),
      jnp.int32)
  input_mask = jnp.asarray(np.concatenate(
      [np.repeat(np.asarray(prompt_mask, np.float32), g, axis=0),
       np.asarray(completion_mask, np.float32)], axis=1))
  temperature = _row_or_token_temperatures(temperature, n)
  logprob_kwargs = dict(temperature=temperature, chunk_size=chunk_size,
                        batch_size=logprob_batch_size, group_size=g,
                        pack_rows=pack_rows)
  old_logp = None
  if not on_policy:
    old_logp = batched_logprobs(params, model_config, tokens, input_mask, sp,
                                **logprob_kwargs)
  if sampler_logp is not None:
    sampler_logp = jnp.asarray(sampler_logp, jnp.float32)
  ref_logp = None
  if beta > 0:
    ref_logp = batched_logprobs(ref_params, model_config, tokens, input_mask,
                                sp, **logprob_kwargs)
  if jax.process_count() > 1:
    # Rows may lie on other hosts; the update places its rows itself.
    old_logp, ref_logp = sharding.to_host((old_logp, ref_logp))
  return Batch(
      tokens=tokens, input_mask=input_mask,
      completion_mask=jnp.asarray(loss_mask, jnp.float32),
      advantages=jnp.asarray(advantages, jnp.float32),
      old_logp=old_logp, ref_logp=ref_logp, sampler_logp=sampler_logp,
      temperature=temperature,
      sampler_topk_ids=None if sampler_topk_ids is None else jnp.asarray(
          sampler_topk_ids, jnp.int32),
      sampler_topk_logp=None if sampler_topk_logp is None else jnp.asarray(
          sampler_topk_logp, jnp.float32),
      entropy_hat=None if entropy_hat is None else jnp.asarray(
          entropy_hat, jnp.float32),
      replayed=None if replayed is None else jnp.asarray(replayed,
                                                         jnp.float32))
