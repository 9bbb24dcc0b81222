"""Packed log-prob passes: the model runs on the rows' real tokens only.

A batch of N rows of S = Sp + T columns (left-padded prompt, completion
padded to T) is mostly padding when completion lengths are long-tailed.
`plan` (numpy, on the host, from the masks) lays each microbatch's real
tokens into B packed sequences of L = S positions, a group's prompt once
and then its members' completions:

    [prompt | completion 1 | completion 2 | ...][next unit ...][padding]

A group whose completions do not fit in one sequence is split into several
units, each with its own copy of the prompt; with G = 1 a unit is one row.
Units go into sequences by first-fit decreasing, and B is rounded up to one
of a few sizes (`bucket`), so the update compiles for a few shapes only.

`packed_logprobs` runs the model on [B, L] with an attention mask that keeps
units apart and lets a completion token see its prompt and the earlier
tokens of its own completion only; positions continue from the prompt as
in the padded row, so every value is the padded pass's. The head runs on
the packed positions (the first completion token of each row, predicted
by its prompt's last state, as one column of its own), and the log-probs,
entropies and top-K log-probs are gathered back to [N, T]: everything
downstream (objectives, aggregations, corrections, regularisers) reads the
same [N, T] arrays as before. Padding columns hold 0.
"""

import math
from typing import NamedTuple, Optional

import jax.numpy as jnp
import numpy as np

from grpo_jax import logprobs as logprobs_lib
from grpo_jax.config import errors as config_errors
from grpo_jax import models


class Plan(NamedTuple):
  """Where each row's real tokens lie in the packed sequences.

  Every leaf is row-major ([M, ...]), so a plan is sliced into microbatches
  with its batch; indices are local to each microbatch's B*L positions.

  Attributes:
    destination: [M, S] int32, the flat packed position (sequence * L +
      offset) of each real token of the row; padding, and the prompt
      columns of every member of a unit but its first (the unit holds its
      prompt once), hold B*L, which the scatters drop.
    prompt_end: [M] int32, the flat position of the last prompt token of the
      row's unit: its state predicts the row's first completion token, and
      it names the unit in the attention mask.
    sequences: [M, B] bool, one-hot: the packed sequence that holds the
      row's completion. Its shape carries B, the static number of packed
      sequences of each microbatch, under jit.
  """
  destination: np.ndarray
  prompt_end: np.ndarray
  sequences: np.ndarray


def bucket(count: int, limit: int) -> int:
  """The smallest of 1, 2, 3, 4, 6, 8, 12, 16, ... (powers of two and 1.5x
  them) at or above `count`, at most `limit`: few shapes, at most a third
  of the sequences spare."""
  power = 1
  while True:
    for size in (power, power * 3 // 2):
      if size >= count:
        return max(1, min(size, limit))
    power *= 2


def _check_layout(mask, completion_start: int, group_size: int) -> None:
  prompt, completion = mask[:, :completion_start], mask[:, completion_start:]
  bad = np.flatnonzero(~prompt[:, -1] | (np.diff(prompt.astype(np.int8),
                                                 axis=1) < 0).any(axis=1))
  if bad.size:
    raise ValueError(
        f"row {bad[0]}'s prompt is not left-padded (real tokens, the last "
        "column included, after any padding); packing reads a prompt's "
        "real tokens as one block ending at completion_start.")
  bad = np.flatnonzero((np.diff(completion.astype(np.int8), axis=1) > 0)
                       .any(axis=1))
  if bad.size:
    raise ValueError(
        f"row {bad[0]}'s completion has a real token after padding; packing "
        "needs each completion's real tokens first (a right-padded row).")
  blocks = prompt.reshape(-1, group_size, prompt.shape[1])
  bad = np.flatnonzero((blocks != blocks[:, :1]).any(axis=(1, 2)))
  if bad.size:
    raise ValueError(
        f"the rows of group {bad[0]} (blocks of group_size={group_size}) "
        "have different prompt masks; rows of a group share one prompt.")


def _units(prompt_len, completion_len, group_size: int, length: int):
  """[(rows, unit length)]: each group's rows in runs whose prompt plus
  completions fit in `length`, in row order."""
  units = []
  for start in range(0, len(prompt_len), group_size):
    rows, used = [], int(prompt_len[start])
    for row in range(start, start + group_size):
      if rows and used + completion_len[row] > length:
        units.append((rows, used))
        rows, used = [], int(prompt_len[start])
      rows.append(row)
      used += int(completion_len[row])
    units.append((rows, used))
  return units


def _first_fit_decreasing(sizes, capacity: int):
  """(the sequence of each item, the number of sequences): the largest items
  first, each into the first sequence with room."""
  free, where = [], [0] * len(sizes)
  for item in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
    for sequence, room in enumerate(free):
      if sizes[item] <= room:
        break
    else:
      sequence = len(free)
      free.append(capacity)
    free[sequence] -= sizes[item]
    where[item] = sequence
  return where, len(free)


def plan(input_mask, completion_start: int, *, group_size: int = 1,
         microbatch_size: int = 0) -> Plan:
  """The packing of each microbatch of a [M, S] batch, on the host.

  Args:
    input_mask: [M, S], 1 on real tokens: a left-padded prompt in columns
      [0, completion_start), then a completion whose real tokens come first.
    completion_start: Sp.
    group_size: rows in consecutive blocks of this size share their prompt
      (a rollout's G completions; `batch.completion_hidden`); within a
      microbatch, blocks of gcd(microbatch rows, group_size).
    microbatch_size: rows per microbatch (0: all M); each microbatch packs
      on its own into the same number B of sequences (the largest count
      over the microbatches, rounded up by `bucket`).
  """
  mask = np.asarray(input_mask) > 0
  if mask.ndim != 2 or not 0 < completion_start < mask.shape[1]:
    raise ValueError(
        f"input_mask must be [M, S] with 0 < completion_start < S; got shape "
        f"{mask.shape} and completion_start={completion_start}.")
  rows, length = mask.shape
  size = microbatch_size or rows
  if rows % size:
    raise ValueError(
        f"microbatch_size={size} must divide the {rows} rows of the batch.")
  group_size = math.gcd(size, group_size)
  _check_layout(mask, completion_start, group_size)
  prompt_len = mask[:, :completion_start].sum(axis=1)
  completion_len = mask[:, completion_start:].sum(axis=1)
  packings = []
  for start in range(0, rows, size):
    units = _units(prompt_len[start:start + size],
                   completion_len[start:start + size], group_size, length)
    packings.append((units, *_first_fit_decreasing([u[1] for u in units],
                                                   length)))
  num_sequences = bucket(max(p[2] for p in packings), size)
  end = num_sequences * length  # past the end: the scatters drop it
  destination = np.full((rows, length), end, np.int32)
  prompt_end = np.zeros((rows,), np.int32)
  sequences = np.zeros((rows, num_sequences), bool)
  for start, (units, where, _) in zip(range(0, rows, size), packings):
    offsets = [0] * num_sequences
    for (members, used), sequence in zip(units, where):
      first = start + members[0]
      base = sequence * length + offsets[sequence]
      offsets[sequence] += used
      prompt = int(prompt_len[first])
      destination[first, completion_start - prompt:completion_start] = (
          base + np.arange(prompt))
      cursor = base + prompt
      for member in members:
        row = start + member
        prompt_end[row] = base + prompt - 1
        sequences[row, sequence] = True
        count = int(completion_len[row])
        destination[row, completion_start:completion_start + count] = (
            cursor + np.arange(count))
        cursor += count
  return Plan(destination, prompt_end, sequences)


def attention_mask(unit, member):
  """[B, L] unit ids (-1: padding) and member ids (-1: the unit's prompt) ->
  [B, L, L]: key <= query, same unit, and the key is the prompt or the
  query's own completion."""
  length = unit.shape[1]
  causal = jnp.tril(jnp.ones((length, length), bool))[None]
  same_unit = ((unit[:, :, None] == unit[:, None, :])
               & (unit[:, None, :] >= 0))
  sees = (member[:, None, :] < 0) | (member[:, None, :] == member[:, :, None])
  return causal & same_unit & sees


def packed_hidden(params, config: models.ModelConfig, tokens, input_mask,
                  completion_start: int, packing: Plan):
  """The hidden states [B, L, D] of the packed sequences of `tokens` [M, S]."""
  rows, length = tokens.shape
  num_sequences = packing.sequences.shape[1]
  where = packing.destination.reshape(-1)

  def scatter(values, fill):
    values = jnp.broadcast_to(values, (rows, length)).astype(jnp.int32)
    return jnp.full((num_sequences * length,), fill, jnp.int32).at[
        where].set(values.reshape(-1), mode="drop").reshape(
            num_sequences, length)

  columns = jnp.arange(length)[None, :]
  unit = scatter(packing.prompt_end[:, None], -1)
  member = scatter(jnp.where(columns < completion_start,
                             -1, jnp.arange(rows)[:, None]), -1)
  hidden, _ = models.forward(
      params, config, scatter(tokens, 0),
      scatter(models.positions_from_mask(input_mask), 0),
      attention_mask(unit, member))
  return hidden


def packed_logprobs(params, config: models.ModelConfig, tokens, input_mask,
                    completion_start: int, packing: Plan, *, temperature=1.0,
                    chunk_size: int = 4096, topk_ids=None):
  """`batch.policy_logprobs` computed on the packed sequences of `packing`
  (one microbatch's `plan`): the same (logp [M, T], entropy [M, T][,
  topk_logp [M, T, K]]), 0 on padding columns."""
  rows, length = tokens.shape
  sp, t = completion_start, length - completion_start
  size = packing.sequences.shape[1] * length
  hidden = packed_hidden(params, config, tokens, input_mask, sp, packing)
  unembedding = models.unembedding(params, config)
  temperature = jnp.asarray(temperature, jnp.float32)
  if temperature.ndim < 2:  # one per row: each token's
    temperature = jnp.broadcast_to(temperature.reshape(-1, 1), (rows, t))

  # The first completion column: each row's unit's last prompt state.
  first = logprobs_lib.token_logprobs(
      hidden.reshape(size, -1)[packing.prompt_end][:, None],
      unembedding, tokens[:, sp:sp + 1], temperature=temperature[:, :1],
      chunk_size=chunk_size,
      topk_ids=None if topk_ids is None else topk_ids[:, :1])
  if t == 1:
    outputs = tuple(first)
  else:
    # Later columns: the state of a row's token t - 1 predicts its token t.
    # Only real tokens are scored; the rest of the sequences score id 0.
    where = jnp.where(input_mask[:, sp + 1:] > 0,
                      packing.destination[:, sp:-1], size)

    def scatter(values, fill):
      flat = values.reshape((rows * (t - 1),) + values.shape[2:])
      return jnp.full((size,) + values.shape[2:], fill, values.dtype).at[
          where.reshape(-1)].set(flat, mode="drop").reshape(
              (-1, length) + values.shape[2:])

    rest = logprobs_lib.token_logprobs(
        hidden, unembedding, scatter(tokens[:, sp + 1:].astype(jnp.int32), 0),
        temperature=scatter(temperature[:, 1:], 1.0), chunk_size=chunk_size,
        topk_ids=None if topk_ids is None else scatter(
            topk_ids[:, 1:].astype(jnp.int32), 0))
    gather = lambda x: jnp.take(x.reshape((size,) + x.shape[2:]), where,
                                axis=0, mode="fill", fill_value=0.0)
    outputs = tuple(jnp.concatenate([a, gather(b)], axis=1)
                    for a, b in zip(first, rest))
  real = input_mask[:, sp:] > 0
  return tuple(jnp.where(real.reshape(real.shape + (1,) * (x.ndim - 2)),
                         x, 0.0) for x in outputs)


def attach(batch, *, group_size: int = 1, microbatch_size: int = 0):
  """`batch` (a `batch.Batch`) with ``packing``: its `plan`, made on the
  host from its input mask (a device-to-host copy of [M, S])."""
  completion_start = batch.tokens.shape[1] - batch.completion_mask.shape[1]
  return batch._replace(packing=plan(
      np.asarray(batch.input_mask), completion_start, group_size=group_size,
      microbatch_size=microbatch_size))


def with_plans(update_fn, *, group_size: int = 1, microbatch_size: int = 0):
  """``update_fn(state, batch, *rest)`` called with each batch's `plan`
  attached (`attach`): the trainer's packed update (``train.pack_rows``)."""
  def planned_update_fn(state, batch, *rest):
    return update_fn(state, attach(batch, group_size=group_size,
                                   microbatch_size=microbatch_size), *rest)
  return planned_update_fn


def check_mesh(mesh) -> None:
  """A config error unless `mesh` keeps the rows on one device: a plan
  packs the rows of the whole batch ('data' x 'fsdp' = 1)."""
  shards = math.prod(mesh.shape.get(axis, 1) for axis in ("data", "fsdp"))
  if shards != 1:
    config_errors.fail(
        "train.pack_rows", f"packs one device's rows, but the mesh splits "
        f"rows over 'data' x 'fsdp' ({shards} shards)",
        "set --config.mesh.shape=(1,1,1) (one device's rows) or "
        "train.pack_rows=False")


def packed_fraction(packing: Optional[Plan], length: int) -> float:
  """The share of packed positions that hold real tokens (a measurement)."""
  if packing is None:
    return 1.0
  sequences = np.shape(packing.sequences)[1]
  real = int((np.asarray(packing.destination) < sequences * length).sum())
  return real / max(1, sequences * length)
