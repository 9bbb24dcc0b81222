"""POPO's group replay (VARIANTS.md 4.7): zero-variance groups refilled from
a buffer of earlier effective groups, drawn by recency and quality.

The group buffer is `buffer.RolloutBuffer` with one slot per *group*: the
per-completion fields gain a member axis (tokens, mask and behaviour_logp
``[C, G, T]``, advantages and rewards ``[C, G]``) while the prompt, its
index and the step stay per slot. `buffer.add`, `buffer.evict` and
`buffer.take` act on it unchanged (they map over the leading slot axis); its
draw is `popo_refill`, not `buffer.sample` (POPO's priority is not |A|).

All functions are pure and jit-able. A refilled group trains through
decoupled PPO (`objectives.decoupled_ppo`, C_is = 2 by default) with its
stored ``behaviour_logp`` as the behaviour policy.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax import groups as groups_lib
from grpo_jax import registry
from grpo_jax.strategies import buffer as buffer_lib
from grpo_jax.strategies._kit import GROUP_STRATEGIES
from grpo_jax.strategies._kit import Selected

POPO_QUALITIES = ("std", "mean")


def group_buffer_init(capacity: int, group_size: int, prompt_len: int,
                      completion_len: int) -> buffer_lib.RolloutBuffer:
  """An empty group buffer: `capacity` groups of `group_size` completions."""
  if isinstance(group_size, bool) or not isinstance(group_size, int) \
      or group_size < 1:
    raise ValueError(f"group_size={group_size!r} must be an integer >= 1.")
  rows = buffer_lib.init(capacity, prompt_len, completion_len)
  widen = lambda x: jnp.repeat(x[:, None], group_size, axis=1)
  return rows._replace(tokens=widen(rows.tokens), mask=widen(rows.mask),
                       behaviour_logp=widen(rows.behaviour_logp),
                       advantages=widen(rows.advantages),
                       rewards=widen(rows.rewards))


def popo_quality(rewards, *, quality: str = "std", ddof: int = 1
                 ) -> jnp.ndarray:
  """[C] a stored group's quality q: the std (`ddof`) or the mean of its
  rewards [C, G] (**reconstruction**; default the std)."""
  r = jnp.asarray(rewards, jnp.float32)
  if quality not in POPO_QUALITIES:
    raise ValueError(f"quality={quality!r} is unknown; choose one of "
                     f"{', '.join(POPO_QUALITIES)}.")
  if r.ndim != 2:
    raise ValueError(f"rewards must be [C, G]; got shape {r.shape}.")
  if quality == "mean":
    return r.mean(axis=1)
  centred = r - r.mean(axis=1, keepdims=True)
  return jnp.sqrt((centred**2).sum(axis=1) / max(r.shape[1] - ddof, 1))


def recency_quality_weights(age, quality, valid=None, *, tau_rec: float = 2.0
                            ) -> jnp.ndarray:
  """POPO's draw probabilities (seed 000 para. 30; **reconstruction**):

    w_j = exp(-age_j / tau_rec) * q_j,   P_j = w_j / sum_k w_k

  over the valid slots (0 for the rest, and all 0 when no weight is > 0).

  Args:
    age: [C] steps since each group was drawn.
    quality: [C] q >= 0.
    valid: [C] bool; default all.
    tau_rec: the recency scale (> 0).
  """
  if not tau_rec > 0:
    raise ValueError(f"tau_rec={tau_rec!r} must be > 0.")
  age = jnp.asarray(age, jnp.float32)
  q = jnp.asarray(quality, jnp.float32)
  valid = jnp.ones(age.shape, bool) if valid is None else jnp.asarray(valid,
                                                                       bool)
  w = jnp.where(valid, jnp.exp(-age / tau_rec) * jnp.maximum(q, 0.0), 0.0)
  return w / jnp.maximum(w.sum(), jnp.finfo(jnp.float32).tiny)


def popo_probabilities(buffer: buffer_lib.RolloutBuffer, now, *,
                       tau_rec: float = 2.0, quality: str = "std"
                       ) -> jnp.ndarray:
  """[C] each stored group's chance of being the first draw at step `now`."""
  return recency_quality_weights(
      jnp.asarray(now) - buffer.step,
      popo_quality(buffer.rewards, quality=quality), buffer.valid,
      tau_rec=tau_rec)


def popo_refill(buffer: buffer_lib.RolloutBuffer, key, zero_variance, now, *,
                tau_rec: float = 2.0, quality: str = "std"):
  """Which stored group replaces each zero-variance group of the batch.

  Buffer groups are drawn without replacement by `popo_probabilities`
  (Gumbel top-k) and handed to the zero-variance groups in batch order;
  a group stays as it is (no loss: it has no signal) when the buffer runs
  out of groups of positive weight.

  Args:
    buffer: the group buffer (`group_buffer_init`), C slots.
    key: the draw's key.
    zero_variance: [P] bool, the batch's groups without signal
      (``~groups.has_signal(rewards)``).
    now: the current step.

  Returns:
    (slots [P] int32, the buffer slot replacing each group, -1 where none;
    replaced [P] bool).
  """
  zero_variance = jnp.asarray(zero_variance, bool)
  p = popo_probabilities(buffer, now, tau_rec=tau_rec, quality=quality)
  n = min(zero_variance.shape[0], p.shape[0])
  scores = jnp.where(p > 0, jnp.log(jnp.where(p > 0, p, 1.0))
                     + jax.random.gumbel(key, p.shape), -jnp.inf)
  _, drawn = jax.lax.top_k(scores, n)
  rank = jnp.cumsum(zero_variance) - 1
  pick = jnp.clip(rank, 0, n - 1)
  replaced = zero_variance & (rank < n) & jnp.isfinite(scores[drawn[pick]])
  return jnp.where(replaced, drawn[pick], -1).astype(jnp.int32), replaced


# ------------------------------------------------- POPO, wired as a stage


class PopoState(NamedTuple):
  """POPO's group-strategy state in ``TrainState.states["groups"]``: the
  group buffer and what a refilled group needs beside it, C slots.

  Attributes:
    groups: the group buffer (`group_buffer_init`); its ``rewards`` [C, G]
      are each member's weighted total (the quality is taken over them),
      ``behaviour_logp`` [C, G, T] the sampler's log-probs, ``advantages``
      unused (0: a refilled group's are the estimator's).
    columns: [C, G, K] float32, the reward columns as scored.
    lengths: [C, G] int32; truncated: [C, G] bool.
    token_entropies: [C, G, T] float32, the sampler's (credit rules).
  """
  groups: buffer_lib.RolloutBuffer
  columns: jnp.ndarray
  lengths: jnp.ndarray
  truncated: jnp.ndarray
  token_entropies: jnp.ndarray


def _check_popo_options(capacity, tau_rec, quality) -> None:
  """`registry.OptionError` naming the first option out of range (a config
  error names ``groups.kwargs.<option>``)."""
  registry.check_int("capacity", capacity, low=1, why="the stored groups")
  registry.check_real("tau_rec", tau_rec, low=0.0, low_open=True,
                      why="the recency scale, in steps; the default is 2")
  registry.check_choice("quality", quality, POPO_QUALITIES)


def popo_init(layout, *, capacity: int = 64, tau_rec: float = 2.0,
              quality: str = "std") -> PopoState:
  """An empty `PopoState` for groups of `layout` (a `GroupLayout`)."""
  _check_popo_options(capacity, tau_rec, quality)
  g, t = int(layout.num_generations), int(layout.max_new_tokens)
  k = len(layout.weights)
  return PopoState(
      groups=group_buffer_init(capacity, g, int(layout.prompt_len), t),
      columns=jnp.zeros((capacity, g, k), jnp.float32),
      lengths=jnp.zeros((capacity, g), jnp.int32),
      truncated=jnp.zeros((capacity, g), bool),
      token_entropies=jnp.zeros((capacity, g, t), jnp.float32))


@jax.jit
def popo_push(state: PopoState, fresh: PopoState, keep) -> PopoState:
  """`state` with the `keep` [P] groups of `fresh` (P groups in the same
  layout, prompts at the buffer's width) written in: free slots first,
  then over the oldest (`buffer.add`)."""
  target = buffer_lib.targets(state.groups, keep)
  put = lambda old, new: old.at[target].set(new.astype(old.dtype),
                                            mode="drop")
  return PopoState(
      groups=buffer_lib.add(state.groups, fresh.groups, keep),
      columns=put(state.columns, fresh.columns),
      lengths=put(state.lengths, fresh.lengths),
      truncated=put(state.truncated, fresh.truncated),
      token_entropies=put(state.token_entropies, fresh.token_entropies))


_popo_refill = jax.jit(popo_refill, static_argnames=("tau_rec", "quality"))


def _left_padded(prompt_ids, width: int):
  """[P, width] int32 tokens and float32 mask of left-padded id lists."""
  tokens = np.zeros((len(prompt_ids), width), np.int32)
  mask = np.zeros((len(prompt_ids), width), np.float32)
  for row, ids in enumerate(prompt_ids):
    if len(ids) > width:
      raise ValueError(f"a prompt of {len(ids)} tokens does not fit the "
                       f"group buffer's {width}; the largest of "
                       "data.prompt_buckets sets it.")
    if len(ids):
      tokens[row, width - len(ids):] = ids
      mask[row, width - len(ids):] = 1.0
  return tokens, mask


def round_groups(rnd, weights, step: int, prompt_len: int) -> PopoState:
  """The P groups of a sampling round (`rollout.Round`) as buffer records
  drawn at `step` (host arrays; `weights` [K] give the total reward)."""
  p, g, t = np.shape(rnd.tokens)
  prompt_tokens, prompt_mask = _left_padded(rnd.prompt_ids, prompt_len)
  rewards = np.asarray(rnd.rewards, np.float32)
  entropies = (np.zeros((p, g, t), np.float32)
               if rnd.token_entropies is None else rnd.token_entropies)
  return PopoState(
      groups=buffer_lib.RolloutBuffer(
          prompt_tokens=prompt_tokens, prompt_mask=prompt_mask,
          tokens=np.asarray(rnd.tokens, np.int32),
          mask=np.asarray(rnd.mask, np.float32),
          behaviour_logp=np.asarray(rnd.sampler_logp, np.float32),
          advantages=np.zeros((p, g), np.float32),
          rewards=(rewards * np.asarray(weights, np.float32)).sum(-1),
          prompt_index=np.asarray(rnd.prompt_index, np.int32),
          step=np.full((p,), step, np.int32), valid=np.ones((p,), bool)),
      columns=rewards, lengths=np.asarray(rnd.lengths, np.int32),
      truncated=np.asarray(rnd.truncated, bool),
      token_entropies=np.asarray(entropies, np.float32))


def refill_round(rnd, stored: PopoState, where):
  """`rnd` with the groups `where` [P] replaced by `stored` ([P] records,
  host arrays; rows elsewhere ignored): prompt, tokens, masks, lengths,
  truncation, the stored behaviour log-probs as the rows' sampler
  log-probs, reward columns and entropies. ``replayed`` marks them and
  ``sampled`` keeps the round as sampled (its measurements describe the
  plain sample)."""
  where = np.asarray(where, bool)
  s = stored.groups

  def put(value, new):
    out = np.array(value, copy=True)
    out[where] = np.asarray(new, out.dtype)[where]
    return out

  mask = np.asarray(s.mask, np.float32)
  entropies = ((np.asarray(stored.token_entropies) * mask).sum(-1)
               / np.maximum(mask.sum(-1), 1.0))
  prompt_ids = [np.asarray(s.prompt_tokens[i])[s.prompt_mask[i] > 0].tolist()
                if where[i] else ids for i, ids in enumerate(rnd.prompt_ids)]
  fields = dict(tokens=s.tokens, mask=s.mask, lengths=stored.lengths,
                truncated=stored.truncated, sampler_logp=s.behaviour_logp,
                rewards=stored.columns, entropies=entropies,
                prompt_index=s.prompt_index)
  if rnd.token_entropies is not None:
    fields["token_entropies"] = stored.token_entropies
  return rnd._replace(
      prompt_ids=prompt_ids, replayed=where, sampled=rnd.sampled or rnd,
      **{name: put(getattr(rnd, name), value)
         for name, value in fields.items()})


@GROUP_STRATEGIES.register(
    rounds_per_step=lambda **_: 1, reads=("step", "key"), state=popo_init,
    replays=True, paper="POPO (seed 000 para. 30); reconstruction",
    examples=({}, {"capacity": 3, "tau_rec": 1.0, "quality": "mean"}))
def popo(draw, num_prompts, *, state: PopoState, layout, step, key,
         capacity: int = 64, tau_rec: float = 2.0, quality: str = "std"):
  """POPO's refill of ineffective groups (seed 000 para. 30;
  **reconstruction** of the priority, VARIANTS.md 4.7).

  One round is drawn. Each group without reward variance (its weighted
  total reward equal over the members: zero advantage under every
  estimator) is replaced by a stored effective group of an earlier step,
  drawn without replacement with probability

    P_j ∝ exp(-(step - step_j) / tau_rec) * q_j

  (q: the stored group's reward std, or mean with ``quality="mean"``;
  `popo_refill`, Gumbel top-k with `key`). Then this round's effective
  groups enter the buffer (free slots, then the oldest). A refilled group
  keeps its prompt, tokens and reward columns, and its stored sampler
  log-probs become the rows' sampler log-probs: an objective weighing by
  the behaviour policy (decoupled PPO, ``pi_prox / mu`` truncated at
  ``is_cap``) corrects its staleness. Its advantages are recomputed by
  the estimator from the stored rewards (for a group estimator: the
  advantages it had when drawn). A zero-variance group left when the buffer
  runs out of weight stays as sampled (no signal, as in GRPO).

  Limits (documented, not changed): the variance test is on the weighted
  total, whatever the estimator; under a per-reward one (gdpo) a group
  whose columns differ but cancel in the total is replaced though it had
  signal. ``quality="mean"`` clamps q at 0 (`recency_quality_weights`):
  a stored group of negative mean total is never drawn, so use it with
  rewards whose totals are >= 0.

  Args:
    draw: ``draw(r) -> Round``; one round is drawn.
    num_prompts: P.
    state: the `PopoState` (capacity groups).
    layout: the run's `GroupLayout` (reward weights).
    step: the training step (the recency's clock; stored groups' step).
    key: the draw's key (from the step's key: deterministic).
    capacity: stored groups (the state's size).
    tau_rec: the recency scale in steps (> 0); default 2.
    quality: ``"std"`` (default) or ``"mean"`` of the stored rewards.

  Returns:
    (Selected, new state); ``Selected.measurements``: ``replay/
    zero_variance_groups`` and ``replay/refilled_groups`` (shares of the P
    groups), ``replay/buffer_fill`` (share of slots holding a group, after
    this step's push) and ``replay/mean_age`` (steps, over refilled groups;
    0 when none).
  """
  del capacity  # the state's size
  rnd = draw(0)
  weights = np.asarray(layout.weights, np.float32)
  signal = np.asarray(groups_lib.has_signal(
      np.asarray(rnd.rewards, np.float32), weights, per_reward=False))
  slots, replaced = jax.device_get(_popo_refill(
      state.groups, key, jnp.asarray(~signal), jnp.asarray(step, jnp.int32),
      tau_rec=float(tau_rec), quality=quality))
  replaced = np.asarray(replaced, bool)
  new_state = popo_push(
      state, round_groups(rnd, weights, step,
                          state.groups.prompt_tokens.shape[1]),
      jnp.asarray(signal))
  age = 0.0
  if replaced.any():
    stored = jax.device_get(buffer_lib.take(
        state, jnp.asarray(np.where(replaced, slots, 0))))
    age = float((step - np.asarray(stored.groups.step))[replaced].mean())
    rnd = refill_round(rnd, stored, replaced)
  measurements = {
      "replay/zero_variance_groups": float((~signal).mean()),
      "replay/refilled_groups": float(replaced.mean()),
      "replay/buffer_fill": float(np.asarray(new_state.groups.valid).mean()),
      "replay/mean_age": age,
  }
  return Selected(rounds=[rnd], picks=[(0, i) for i in range(num_prompts)],
                  valid=np.ones(num_prompts, bool),
                  measurements=measurements), new_state
