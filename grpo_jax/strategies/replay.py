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

import jax
import jax.numpy as jnp

from grpo_jax.strategies import buffer as buffer_lib

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
