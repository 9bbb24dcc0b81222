"""A rollout buffer of fixed capacity on device: what replay strategies keep.

The buffer is a NamedTuple of fixed-shape arrays, one slot per stored
completion (a row of a past batch), so it lives in a stage's state in
`TrainState`, is saved with every checkpoint and passes through `jit`
unchanged in shape. Its three operations are pure functions:

* `add` writes a batch's kept rows into the free slots first, then over the
  oldest ones (the smallest ``step``);
* `evict` frees the slots older than ``max_age`` steps (a rollout-level
  replay buffer's age limit, VARIANTS.md 4.6);
* `sample` draws ``n`` slots without replacement with probability
  proportional to ``|advantage| ** power`` (Gumbel top-k, so it jits);
  slots whose advantage is 0 are never drawn.

A replayed row trains through decoupled PPO: its stored ``behaviour_logp``
is the behaviour policy mu, the trainer's recomputed old log-probs the
proximal policy (`objectives.decoupled_ppo`).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from grpo_jax import registry


class RolloutBuffer(NamedTuple):
  """Stored rows, one per slot; ``valid`` False marks a free slot.

  Attributes:
    prompt_tokens: [C, Lp] int32, left-padded prompts.
    prompt_mask: [C, Lp] float32.
    tokens: [C, T] int32 completion tokens.
    mask: [C, T] float32 completion mask.
    behaviour_logp: [C, T] float32, the sampler's log-probs of the tokens.
    advantages: [C] float32, the row's advantage when it was drawn.
    rewards: [C] float32, its total reward.
    prompt_index: [C] int32, the stable id of its prompt (`Example.index`).
    step: [C] int32, the training step that drew it.
    valid: [C] bool.
  """
  prompt_tokens: jnp.ndarray
  prompt_mask: jnp.ndarray
  tokens: jnp.ndarray
  mask: jnp.ndarray
  behaviour_logp: jnp.ndarray
  advantages: jnp.ndarray
  rewards: jnp.ndarray
  prompt_index: jnp.ndarray
  step: jnp.ndarray
  valid: jnp.ndarray


def init(capacity: int, prompt_len: int, completion_len: int
         ) -> RolloutBuffer:
  """An empty buffer of `capacity` slots for prompts of up to `prompt_len`
  and completions of `completion_len` tokens."""
  # The capacity is a strategy's option (``groups.kwargs.capacity``); the
  # lengths come from the run's layout.
  registry.check_int("capacity", capacity, low=1, why="the buffer's slots")
  for name, value in (("prompt_len", prompt_len),
                      ("completion_len", completion_len)):
    if int(value) < 1:
      raise ValueError(f"buffer {name} must be at least 1, got {value}.")
  c, lp, t = int(capacity), int(prompt_len), int(completion_len)
  return RolloutBuffer(
      prompt_tokens=jnp.zeros((c, lp), jnp.int32),
      prompt_mask=jnp.zeros((c, lp), jnp.float32),
      tokens=jnp.zeros((c, t), jnp.int32),
      mask=jnp.zeros((c, t), jnp.float32),
      behaviour_logp=jnp.zeros((c, t), jnp.float32),
      advantages=jnp.zeros((c,), jnp.float32),
      rewards=jnp.zeros((c,), jnp.float32),
      prompt_index=jnp.full((c,), -1, jnp.int32),
      step=jnp.zeros((c,), jnp.int32),
      valid=jnp.zeros((c,), bool))


def add(buffer: RolloutBuffer, rows: RolloutBuffer, keep) -> RolloutBuffer:
  """`buffer` with the `keep` rows of `rows` written in.

  Free slots fill first (in slot order), then the oldest valid ones (the
  smallest ``step``, ties by slot). Kept rows beyond the capacity are
  dropped, the last ones first.

  Args:
    buffer: the buffer, capacity C.
    rows: n candidate rows in the buffer's layout (``valid`` is ignored;
      prompts left-padded to at most the buffer's width).
    keep: [n] bool, the rows to store.
  """
  keep = jnp.asarray(keep, bool)
  target = targets(buffer, keep)
  rows = rows._replace(valid=keep,
                       prompt_tokens=_left_pad(rows.prompt_tokens,
                                               buffer.prompt_tokens.shape[1]),
                       prompt_mask=_left_pad(rows.prompt_mask,
                                             buffer.prompt_mask.shape[1]))
  return jax.tree.map(
      lambda old, new: old.at[target].set(new.astype(old.dtype), mode="drop"),
      buffer, rows)


def targets(buffer: RolloutBuffer, keep) -> jnp.ndarray:
  """[n] int32 the slot each `keep` row is written to by `add` (free slots
  first, then the oldest), C (out of range: dropped) for the rest; a
  stage keeping arrays beside the buffer writes them to the same slots."""
  capacity = buffer.valid.shape[0]
  keep = jnp.asarray(keep, bool)
  # Slots in overwrite order: free ones first, then by age.
  age_key = jnp.where(buffer.valid, buffer.step, jnp.iinfo(jnp.int32).min)
  order = jnp.lexsort((jnp.arange(capacity), age_key))
  rank = jnp.cumsum(keep) - 1
  return jnp.where(keep & (rank < capacity),
                   order[jnp.clip(rank, 0, capacity - 1)], capacity)


def _left_pad(x, width: int):
  """[n, L] -> [n, width], zeros prepended (prompts are left-padded)."""
  short = width - x.shape[1]
  if short < 0:
    raise ValueError(f"a prompt of {x.shape[1]} tokens does not fit the "
                     f"buffer's {width}; build the buffer with a wider "
                     "prompt_len.")
  return jnp.pad(x, ((0, 0), (short, 0)))


def evict(buffer: RolloutBuffer, now, max_age: int) -> RolloutBuffer:
  """Frees the slots drawn more than `max_age` steps before step `now`."""
  return buffer._replace(
      valid=buffer.valid & (jnp.asarray(now) - buffer.step <= max_age))


def probabilities(buffer: RolloutBuffer, power: float = 1.0):
  """[C] each slot's chance of being the first draw: ``|A| ** power`` over
  the valid slots, normalised; 0 for free slots and for A = 0."""
  weight = jnp.where(buffer.valid, jnp.abs(buffer.advantages) ** power, 0.0)
  weight = jnp.where(buffer.advantages == 0, 0.0, weight)
  return weight / jnp.maximum(weight.sum(), jnp.finfo(jnp.float32).tiny)


def sample(buffer: RolloutBuffer, key, n: int, power: float = 1.0):
  """`n` slots drawn without replacement, proportional to ``|A| ** power``.

  Returns:
    (slots [n] int32, drawn [n] bool): ``drawn`` is False where fewer than
    `n` slots could be drawn (the slot index there is meaningless).
  """
  if n > buffer.valid.shape[0]:
    raise ValueError(f"cannot draw {n} rows from a buffer of "
                     f"{buffer.valid.shape[0]} slots; draw fewer or build a "
                     "larger buffer.")
  p = probabilities(buffer, power)
  # Gumbel top-k: argsort of log p + Gumbel noise samples without
  # replacement with these probabilities.
  scores = jnp.where(p > 0, jnp.log(jnp.where(p > 0, p, 1.0))
                     + jax.random.gumbel(key, p.shape), -jnp.inf)
  _, slots = jax.lax.top_k(scores, n)
  return slots.astype(jnp.int32), jnp.isfinite(scores[slots])


def take(buffer: RolloutBuffer, slots) -> RolloutBuffer:
  """The records at `slots`, in the buffer's layout."""
  return jax.tree.map(lambda x: x[slots], buffer)
