"""Responses remembered per prompt, to measure how far the policy moved on a
prompt between two visits (SPO's KL-adaptive forgetting; seed 002 para. 7).

At each visit of prompt x the rollout stores one response y of it (member 0
of its group) and the trainer's log-probs of y under the policy that
sampled it. At the next visit of x it rescores the stored y under the
current policy:

  D_x = sum_t m_t |logp_then(y_t) - logp_now(y_t)| / sum_t m_t

(0 at a first visit: nothing stored, an empty mask) and stores the new
response. D_x reaches the estimator as `groups.GroupData.divergence`.

The memory is a fixed-size table keyed by `data.Example.index` (one slot per
problem, `capacity` slots of `num_tokens` tokens), part of the rollout's
state in ``TrainState`` and checkpointed; an index outside the table is
neither read nor written (its D is 0). After verl's ``recipe/spo``
(``_get_spo_rho``), which keeps the same per prompt in dictionaries.
"""

from typing import Any, Callable, NamedTuple

import jax.numpy as jnp
import numpy as np

from grpo_jax import sampling
from grpo_jax.data import prompt_ids as prompt_ids_lib


class Revisits(NamedTuple):
  """The response stored at each slot's last visit.

  Attributes:
    tokens: [C, T] int32 completion tokens (0 where nothing is stored).
    mask: [C, T] float32, 1 on the stored response's real tokens; all 0 for
      a slot never visited.
    logp: [C, T] float32, the trainer's log-probs of the stored tokens
      under the policy of that visit.
  """
  tokens: jnp.ndarray
  mask: jnp.ndarray
  logp: jnp.ndarray


def init(*, capacity: int, num_tokens: int) -> Revisits:
  """An empty memory of `capacity` slots of `num_tokens` tokens."""
  for name, value in (("capacity", capacity), ("num_tokens", num_tokens)):
    if not isinstance(value, int) or value < 1:
      raise ValueError(f"{name}={value!r} must be an integer >= 1.")
  zeros = jnp.zeros((capacity, num_tokens), jnp.float32)
  return Revisits(tokens=jnp.zeros((capacity, num_tokens), jnp.int32),
                  mask=zeros, logp=zeros)


def _tracked(memory: Revisits, prompt_index) -> jnp.ndarray:
  index = jnp.asarray(prompt_index, jnp.int32)
  return (index >= 0) & (index < memory.tokens.shape[0])


def lookup(memory: Revisits, prompt_index) -> Revisits:
  """The stored responses of [P] prompts, [P, T] each; empty (mask 0) for
  an index outside the table."""
  tracked = _tracked(memory, prompt_index)
  slot = jnp.clip(jnp.asarray(prompt_index, jnp.int32), 0,
                  memory.tokens.shape[0] - 1)
  keep = tracked[:, None]
  return Revisits(tokens=jnp.where(keep, memory.tokens[slot], 0),
                  mask=jnp.where(keep, memory.mask[slot], 0.0),
                  logp=jnp.where(keep, memory.logp[slot], 0.0))


def divergence(stored_logp, current_logp, mask) -> jnp.ndarray:
  """[P] D = sum_t m |stored - current| / sum_t m over [P, T] arrays; 0
  for an empty row (a first visit)."""
  mask = jnp.asarray(mask, jnp.float32)
  gap = jnp.abs(jnp.asarray(stored_logp, jnp.float32)
                - jnp.asarray(current_logp, jnp.float32)) * mask
  return gap.sum(-1) / jnp.maximum(mask.sum(-1), 1.0)


def first_of_each(prompt_index) -> jnp.ndarray:
  """[P] bool, True at the first occurrence of each index in the batch:
  a prompt drawn twice in one batch stores its first response only (a
  scatter of duplicates would keep an unspecified one)."""
  index = jnp.asarray(prompt_index, jnp.int32)
  same = index[None, :] == index[:, None]  # [P, P]
  return jnp.argmax(same, axis=1) == jnp.arange(index.shape[0])


def store(memory: Revisits, prompt_index, tokens, mask, logp, write
          ) -> Revisits:
  """`memory` with the [P, T] responses written at the slots of the
  prompts where `write` [P] is True (and the index is in the table; the
  first of duplicates, `first_of_each`). Each row's tokens past its mask
  are stored as 0."""
  capacity = memory.tokens.shape[0]
  write = (jnp.asarray(write, bool) & _tracked(memory, prompt_index)
           & first_of_each(prompt_index))
  slot = jnp.where(write, jnp.asarray(prompt_index, jnp.int32), capacity)
  mask = jnp.asarray(mask, jnp.float32)
  put = lambda table, rows: table.at[slot].set(rows.astype(table.dtype),
                                               mode="drop")
  return Revisits(
      tokens=put(memory.tokens, jnp.where(mask > 0, tokens, 0)),
      mask=put(memory.mask, mask),
      logp=put(memory.logp, jnp.where(mask > 0, logp, 0.0)))


class Memory(NamedTuple):
  """The rollout's `Revisits` component: ``init() -> state``; ``()`` and
  ``active`` False when no estimator reads ``divergence``; `prompt_ids`
  how ids take slots (the estimator's table's mode, `slots`)."""
  active: bool
  init: Callable[[], Any]
  prompt_ids: str = "exact"


def make(*, capacity: int = 0, num_tokens: int = 0,
         prompt_ids: str = "exact") -> Memory:
  """The memory of `capacity` slots of `num_tokens` tokens; inactive (no
  state) with capacity 0."""
  if not capacity:
    return Memory(False, lambda: ())
  init(capacity=capacity, num_tokens=num_tokens)  # checks the sizes
  prompt_ids_lib.check_mode(prompt_ids)
  if prompt_ids != "exact":  # a shared slot holds another prompt's response
    raise ValueError(f"prompt_ids={prompt_ids!r}: the revisit memory needs "
                     "'exact' ids (one prompt per slot), or D would rescore "
                     "another prompt's response.")
  return Memory(True, lambda: init(capacity=capacity, num_tokens=num_tokens),
                prompt_ids)


def slots(memory: Revisits, prompt_index, prompt_ids: str = "exact"):
  """[P] int32, each prompt id's slot in `memory` (`prompt_ids.slots`; -1:
  none), what `revisit` takes."""
  slot, tracked = prompt_ids_lib.slots(
      np.asarray(prompt_index), memory.tokens.shape[0], prompt_ids)
  return np.where(tracked, slot, -1).astype(np.int32)


def revisit(memory: Revisits, prompt_index, write, prompt_tokens,
            prompt_mask, tokens, mask, *, score: Callable):
  """(D [P], the new memory, measurements) for one step's prompts: the
  stored responses
  and the new ones ([P, T] `tokens`, `mask`) scored in one pass under the
  current policy, D against the stored log-probs, then the new responses
  and their log-probs stored where `write` [P] (valid groups).

  Args:
    memory: the `Revisits` before this step.
    prompt_index: [P] int, each prompt's slot.
    write: [P] bool, the prompts whose response is stored.
    prompt_tokens, prompt_mask: [P, Sp] left-padded prompts.
    tokens, mask: [P, T] the response of each prompt to store.
    score: ``score(tokens [R, Sp + T], input_mask, completion_start) ->
      logp [R, T]``: the trainer's log-probs under the current policy at
      the responses' temperature, as numpy.
  """
  stored = lookup(memory, prompt_index)
  seen = np.asarray(stored.mask).any(-1)
  prompt_tokens = jnp.asarray(prompt_tokens, jnp.int32)
  prompt_mask = jnp.asarray(prompt_mask, jnp.float32)
  both = lambda a, b, dtype: jnp.concatenate([
      jnp.concatenate([prompt_tokens.astype(dtype), jnp.asarray(a, dtype)], 1),
      jnp.concatenate([prompt_tokens.astype(dtype), jnp.asarray(b, dtype)], 1)])
  rows = both(stored.tokens, tokens, jnp.int32)
  input_mask = jnp.concatenate([
      jnp.concatenate([prompt_mask, stored.mask], 1),
      jnp.concatenate([prompt_mask, jnp.asarray(mask, jnp.float32)], 1)])
  logp = jnp.asarray(score(rows, input_mask, prompt_tokens.shape[1]))
  num_prompts = prompt_tokens.shape[0]
  gap = divergence(stored.logp, logp[:num_prompts], stored.mask)
  valid = np.asarray(write, bool)
  count = max(valid.sum(), 1)
  measures = {
      "revisits/divergence_mean": float((np.asarray(gap) * valid).sum()
                                        / count),
      "revisits/revisited_share": float((seen & valid).sum() / count)}
  return gap, store(memory, prompt_index, tokens, mask, logp[num_prompts:],
                    write), measures


def step_divergence(params, selected, memory: Revisits, component, *,
                    pipeline, gather) -> tuple:
  """The step field ``divergence`` (`rollout.fields.STEP_FIELDS`): (D [P],
  the new memory, measurements). Each kept group's stored response is
  rescored under `params`, then its member 0's response stored; `component`
  is the bound ``revisits`` stage (its ``prompt_ids`` mode), `gather` the
  picked groups' round fields [P, ...]."""
  s = pipeline.sampler
  prompt_tokens, prompt_mask = sampling.pad_prompts(
      [selected.rounds[r].prompt_ids[i] for r, i in selected.picks],
      buckets=s.prompt_buckets, pad_id=s.pad_id)
  # Member 0's temperature: the stored response's.
  temperature = float(np.asarray(s.member_temperatures or (s.temperature,),
                                 np.float32)[0])
  return revisit(
      memory, slots(memory, gather("prompt_index"), component.prompt_ids),
      selected.valid, prompt_tokens, prompt_mask, gather("tokens")[:, 0],
      gather("mask")[:, 0], score=lambda *rows: pipeline.logprobs(
          params, *rows, temperature)[0])
