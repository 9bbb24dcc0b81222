"""Group data: what the stages after scoring know about each group.

One step holds P groups of G completions each, N = P*G rows, prompt major
(row ``p*G + g``). Everything a group stage (estimators now; group
strategies, credit rules later) reads about them travels in one `GroupData`,
and an entry's metadata ``reads`` names the fields it takes as keyword
arguments after its rewards.

`has_signal` is the one test of whether a group can get a nonzero advantage;
dynamic sampling and `collapse_rate` both use it.
"""

from typing import NamedTuple, Optional

import jax.numpy as jnp


class GroupData(NamedTuple):
  """The groups of one step.

  Attributes:
    rewards: [P, G, K] float32, K reward columns: the reward functions', then
      the shapers' (overlong, ...).
    weights: [K] float32 weight of each column; an estimator over [P, G]
      rewards sees sum_k w_k R_k.
    valid: [P] bool, False for filler groups that carry no loss (dynamic
      sampling's leftovers): they get advantage 0 and enter no batch
      statistic.
    lengths: [P, G] int32 completion lengths in tokens.
    sequence_logprobs: [P, G] float32, the sum over each completion's tokens
      of the sampler's tempered log-probs (no gradient; divide by `lengths`
      for the mean; 0 for an empty completion).
    entropies: [P, G] float32, the mean over each completion's tokens of the
      entropy of the sampler's full tempered next-token distribution (0 for
      an empty completion).
    answer_ids: [P, G] int32, each completion's answer-equivalence class in
      its group: the index of the group's first member whose parsed answer
      is the same (`rewards.verifiers.same_answer`), -1 where no answer
      parses (a class of its own); estimators compare ids for equality only.
    prompt_index: [P] int32, each prompt's `data.Example.index` (stable in
      its task), -1 where the task gives none.
    segment_rewards: [P, G, S] float32, the reward of each segment of a
      multi-part problem (`rewards.verifiers.segment_scores`: segment s is
      the completion's s-th ``\\boxed{}``, 1 if it equals the s-th
      sub-answer); S is the task's fixed ``max_segments``.
    segment_valid: [P, G, S] bool, the segments the problem has (slots past
      its number of parts are False).
    segment_ids: [P, G, T] int32, the segment each completion token belongs
      to, -1 for none (`rewards.verifiers.segment_token_ids`). A token map
      is per row ([N, T] as rows p*G + g), but it is stored grouped, like
      every other field, so that whatever selects, slices or permutes
      groups and members (dynamic sampling's picks, the contract laws)
      moves it with its rewards; an estimator reshapes it to [N, T] for
      free.
    greedy_rewards: [P, K] float32, the reward columns of one extra
      completion of each prompt decoded greedily (temperature 0), scored but
      never trained on: ReMax's baseline. The rollout samples it only for an
      estimator that reads it.
    divergence: [P] float32, how far the policy moved on each prompt since
      its previous visit: the masked token mean of
      |logp_then(y_prev) - logp_now(y_prev)| over the response y_prev stored
      at that visit (`revisits`), 0 at a first visit (SPO's KL-adaptive
      forgetting). The rollout computes it only for an estimator that reads
      it.
    members: [P, G] bool, the members of each group that count (a member
      filter's kept subset, GFPO's k of G'); None = every member. A member
      counts where ``valid[p] & members[p, g]``: one outside gets advantage
      exactly 0, enters no group or batch statistic (the mean, std or
      leave-one-out baseline is over the kept members; a group with fewer
      than 2 kept, or kept rewards all equal, gets exactly 0), and its rows
      carry no loss (the rollout zeroes their loss-mask rows). Only an
      estimator whose metadata says ``members=True`` takes it
      (`advantages.make` refuses it to any other).

  The rollout fills every field (`greedy_rewards` and the segment fields
  only for an estimator that reads them); the optional fields are None in
  group data built without them (`from_rewards` by default), and an
  estimator that reads one names it in its metadata ``reads``.
  """
  rewards: jnp.ndarray
  weights: jnp.ndarray
  valid: jnp.ndarray
  lengths: jnp.ndarray
  sequence_logprobs: Optional[jnp.ndarray] = None
  entropies: Optional[jnp.ndarray] = None
  answer_ids: Optional[jnp.ndarray] = None
  prompt_index: Optional[jnp.ndarray] = None
  segment_rewards: Optional[jnp.ndarray] = None
  segment_valid: Optional[jnp.ndarray] = None
  segment_ids: Optional[jnp.ndarray] = None
  greedy_rewards: Optional[jnp.ndarray] = None
  divergence: Optional[jnp.ndarray] = None
  members: Optional[jnp.ndarray] = None


def _as_pgk(rewards) -> jnp.ndarray:
  """[P, G] or [P, G, K] rewards as [P, G, K] float32, G >= 1."""
  rewards = jnp.asarray(rewards)
  if rewards.ndim not in (2, 3):
    raise ValueError(
        f"rewards must be [P, G] or [P, G, K]; got shape {rewards.shape}.")
  if rewards.shape[1] == 0:
    raise ValueError(
        f"rewards must hold at least one completion per group (G >= 1); got "
        f"shape {rewards.shape}.")
  if rewards.ndim == 2:
    rewards = rewards[..., None]
  return rewards.astype(jnp.float32)


def check_weights(weights, num_rewards: int) -> jnp.ndarray:
  """[K] float32 weights; ones when None."""
  if weights is None:
    return jnp.ones((num_rewards,), jnp.float32)
  weights = jnp.asarray(weights, jnp.float32)
  if weights.shape != (num_rewards,):
    raise ValueError(
        f"weights must be [K] with K={num_rewards} (the last axis of "
        f"rewards); got shape {weights.shape}.")
  return weights


def check_valid(valid, num_groups: int) -> jnp.ndarray:
  """[P] bool; all True when None."""
  if valid is None:
    return jnp.ones((num_groups,), bool)
  valid = jnp.asarray(valid)
  if valid.shape != (num_groups,):
    raise ValueError(
        f"valid must be [P] with P={num_groups}; got shape {valid.shape}.")
  return valid.astype(bool)


def from_rewards(rewards, weights=None, *, valid=None, lengths=None,
                 **fields) -> GroupData:
  """`GroupData` from rewards, the rest defaulted.

  Args:
    rewards: [P, G] (one column) or [P, G, K].
    weights: [K]; default ones.
    valid: [P] bool; default all True.
    lengths: [P, G] token counts; default zeros.
    **fields: the optional fields (``sequence_logprobs``, ...) as arrays;
      default None.

  Returns:
    A `GroupData` of float32 rewards and weights, bool valid, int32 lengths.
  """
  rewards = _as_pgk(rewards)
  p, g, k = rewards.shape
  if lengths is None:
    lengths = jnp.zeros((p, g), jnp.int32)
  lengths = jnp.asarray(lengths, jnp.int32)
  if lengths.shape != (p, g):
    raise ValueError(
        f"lengths must be [P, G] = {(p, g)}; got shape {lengths.shape}.")
  return GroupData(rewards=rewards, weights=check_weights(weights, k),
                   valid=check_valid(valid, p), lengths=lengths,
                   **{name: jnp.asarray(value) for name, value in fields.items()})


def weighted_sum(rewards, weights) -> jnp.ndarray:
  """sum_k w_k R_k: [P, G, K] rewards and [K] weights -> [P, G] float32."""
  rewards = _as_pgk(rewards)
  weights = check_weights(weights, rewards.shape[-1])
  # Multiply and sum rather than einsum: a TPU matmul would round to bf16.
  return (rewards * weights[None, None, :]).sum(axis=-1)


def has_signal(rewards, weights=None, *, per_reward: bool = True,
               members=None) -> jnp.ndarray:
  """[P] True where a group can get a nonzero advantage.

  per_reward=False (estimators over [P, G]): sum_k w_k R_k varies within the
  group. per_reward=True (estimators over [P, G, K], e.g. GDPO, which
  normalises each reward alone): some w_k R_k varies. A reward of weight 0
  never gives signal; a group of one never has any. A group without signal
  gets exactly zero advantages from every estimator; the converse holds
  too, except where GDPO's normalised rewards cancel (R_2 = 1 - R_1 under
  equal weights).

  Args:
    rewards: [P, G] or [P, G, K].
    weights: [K]; default ones.
    per_reward: see above.
    members: [P, G] bool, the members counted (`GroupData.members`);
      default all. Equal rewards among a group's members (or fewer than
      two of them) is no signal, whatever the others hold.

  Returns:
    [P] bool.
  """
  rewards = _as_pgk(rewards)
  weights = check_weights(weights, rewards.shape[-1])
  if per_reward:
    weighted = rewards * weights[None, None, :]
  else:
    weighted = weighted_sum(rewards, weights)[..., None]
  if members is None:
    return (weighted.max(axis=1) != weighted.min(axis=1)).any(axis=-1)
  kept = jnp.asarray(members, bool)[..., None]
  high = jnp.where(kept, weighted, -jnp.inf).max(axis=1)
  low = jnp.where(kept, weighted, jnp.inf).min(axis=1)
  return (high > low).any(axis=-1)


def collapse_rate(rewards, weights=None, *, per_reward: bool = True,
                  valid=None, members=None) -> jnp.ndarray:
  """Share of groups without signal (`has_signal` False): 1 - mean_p signal.

  Groups that `has_signal` calls signal-free get exactly zero advantages, so
  this is the share of the batch that teaches nothing.

  Args:
    rewards: [P, G] or [P, G, K]; a group of one counts as collapsed.
    weights: [K]; default ones.
    per_reward: as in `has_signal`; pass ``estimator.input == "PGK"``.
    valid: [P] bool, the groups counted; default all.
    members: [P, G] bool, each group's members counted (`has_signal`);
      default all.

  Returns:
    A float32 scalar in [0, 1]; 0 when no group is counted (P = 0).
  """
  rewards = _as_pgk(rewards)
  valid = check_valid(valid, rewards.shape[0])
  signal = has_signal(rewards, weights, per_reward=per_reward,
                      members=members)
  collapsed = (valid & ~signal).sum().astype(jnp.float32)
  return collapsed / jnp.maximum(valid.sum(), 1).astype(jnp.float32)
