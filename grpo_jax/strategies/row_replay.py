"""The rollout-level replay buffer (seed 000 para. 23; VARIANTS.md 4.6;
**reconstruction**: the mechanism is from the abstract).

Individual rollouts (rows, not groups) of earlier steps are kept in a
fixed-capacity `buffer.RolloutBuffer` on the device, each with its prompt,
prompt id, tokens, mask, behaviour (sampler) log-probs, stored advantage,
total reward and the step that drew it. Each step:

  evict   rows older than ``tau_max`` steps are freed:
          valid &= (step - step_j) <= tau_max;
  draw    R rows without replacement, P_j ∝ |A_j| ** power over the valid
          rows (Gumbel top-k, keyed; a row of A = 0 is never drawn);
  train   the batch is the P * G fresh rows then the R drawn ones; a
          replayed row keeps its STORED advantage (not re-estimated: its
          group is gone) and trains through decoupled PPO with
          mu = its stored behaviour log-probs, pi_prox = the trainer's
          recomputed old log-probs;
  push    the fresh rows with a nonzero advantage enter the buffer (free
          slots, then the oldest), after the draw: a step never replays
          itself.

The strategy (`replay`) draws the round and the R rows; the push needs the
fresh rows' advantages, so the step's stage (`grpo_jax.rollout.replay`) does
it with `push_rows`. All array functions are pure and jit-able.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax import registry
from grpo_jax.strategies import buffer as buffer_lib
from grpo_jax.strategies._kit import GROUP_STRATEGIES
from grpo_jax.strategies._kit import Selected
from grpo_jax.strategies import replay as _popo  # _left_padded, shared


class ReplayDraw(NamedTuple):
  """The R rows a step replays (host arrays), `Selected.replay`.

  Attributes:
    records: a `buffer.RolloutBuffer` of R rows (the drawn slots' records;
      meaningless where not ``drawn``).
    drawn: [R] bool, False for a slot the buffer could not fill (no loss).
  """
  records: buffer_lib.RolloutBuffer
  drawn: np.ndarray


def check_options(rows, tau_max, power, capacity) -> None:
  """`registry.OptionError` naming the first option out of range (a config
  error names ``groups.kwargs.<option>``)."""
  registry.check_int("rows", rows, low=1, why="rows replayed per step")
  registry.check_int("tau_max", tau_max, low=0, why="the oldest row's "
                     "age, in steps")
  registry.check_int("capacity", capacity, low=1, why="the stored rows")
  if rows > capacity:
    raise registry.OptionError(
        "rows", f"rows={rows} exceeds capacity={capacity}: a step cannot "
        "draw more rows than the buffer holds; lower rows or raise "
        "capacity.")
  registry.check_real("power", power, low=0.0, low_open=True,
                      why="P_j is proportional to |A_j| ** power")


def replay_init(layout, *, rows: int = 8, tau_max: int = 4,
                power: float = 1.0, capacity: int = 256
                ) -> buffer_lib.RolloutBuffer:
  """An empty buffer of `capacity` rows shaped by `layout` (a
  `GroupLayout`: the widest prompt and T)."""
  check_options(rows, tau_max, power, capacity)
  return buffer_lib.init(capacity, int(layout.prompt_len),
                         int(layout.max_new_tokens))


def draw_rows(buffer: buffer_lib.RolloutBuffer, key, now, *, rows: int,
              tau_max: int, power: float = 1.0):
  """Evicts the rows older than `tau_max`, then draws `rows` of the rest.

  Returns:
    (evicted buffer, slots [R] int32, drawn [R] bool, evicted: the number
    of slots the age limit freed).
  """
  kept = buffer_lib.evict(buffer, now, tau_max)
  evicted = (buffer.valid & ~kept.valid).sum().astype(jnp.int32)
  slots, drawn = buffer_lib.sample(kept, key, rows, power)
  return kept, slots, drawn, evicted


_draw_rows = jax.jit(draw_rows, static_argnames=("rows", "tau_max", "power"))
push_rows = jax.jit(buffer_lib.add)


def round_rows(rnd, advantages, weights, step: int, prompt_len: int
               ) -> buffer_lib.RolloutBuffer:
  """The P * G rows of a sampling round (`rollout.Round`) as buffer
  records drawn at `step`, prompt-major (host arrays): `advantages` [P, G]
  the estimator's, `weights` [K] give each row's total reward."""
  p, g, t = np.shape(rnd.tokens)
  prompt_tokens, prompt_mask = _popo._left_padded(rnd.prompt_ids,  # pylint: disable=protected-access
                                                   prompt_len)
  rewards = (np.asarray(rnd.rewards, np.float32)
             * np.asarray(weights, np.float32)).sum(-1)
  rows = lambda x: np.asarray(x).reshape((p * g,) + np.shape(x)[2:])
  return buffer_lib.RolloutBuffer(
      prompt_tokens=np.repeat(prompt_tokens, g, axis=0),
      prompt_mask=np.repeat(prompt_mask, g, axis=0),
      tokens=rows(np.asarray(rnd.tokens, np.int32)),
      mask=rows(np.asarray(rnd.mask, np.float32)),
      behaviour_logp=rows(np.asarray(rnd.sampler_logp, np.float32)),
      advantages=rows(np.asarray(advantages, np.float32)),
      rewards=rows(rewards),
      prompt_index=np.repeat(np.asarray(rnd.prompt_index, np.int32), g),
      step=np.full((p * g,), step, np.int32),
      valid=np.ones((p * g,), bool))


@GROUP_STRATEGIES.register(
    rounds_per_step=lambda **_: 1, reads=("step", "key"), state=replay_init,
    replays=True, replay_rows=lambda rows=8, **_: int(rows),
    paper="rollout-level replay buffer (seed 000 para. 23); reconstruction",
    examples=({}, {"rows": 2, "tau_max": 1, "power": 2.0, "capacity": 6}))
def replay(draw, num_prompts, *, state: buffer_lib.RolloutBuffer, layout,
           step, key, rows: int = 8, tau_max: int = 4, power: float = 1.0,
           capacity: int = 256):
  """Rollout-level replay (seed 000 para. 23; **reconstruction**,
  VARIANTS.md 4.6): R stored rows of earlier steps join each batch.

  One round is drawn and kept whole. The buffer's rows older than
  `tau_max` steps are evicted (age = step - step_j > tau_max), then `rows`
  = R rows are drawn without replacement with probability

    P_j ∝ |A_j| ** power     (A_j the stored advantage; A = 0: never)

  by Gumbel top-k with `key`. They ride along in ``Selected.replay`` (a
  `ReplayDraw`); `grpo_jax.rollout.replay` appends them to the fresh rows
  with their stored advantages and behaviour log-probs, and pushes the
  fresh rows (advantage != 0) after this draw.

  Args:
    draw: ``draw(r) -> Round``; one round is drawn.
    num_prompts: P.
    state: the `buffer.RolloutBuffer` (capacity rows).
    layout: the run's `GroupLayout` (unused here: it shaped the state).
    step: the training step (the age's clock).
    key: the draw's key (from the step's key: deterministic).
    rows: R, rows replayed per step (>= 1, <= capacity); default 8.
    tau_max: the age limit in steps (>= 0); default 4.
    power: a of |A| ** a (> 0); default 1.
    capacity: stored rows (the state's size); default 256.

  Returns:
    (Selected, the evicted buffer); ``Selected.measurements``:
    ``replay/rows_drawn`` (of R), ``replay/evicted`` (slots the age limit
    freed) and ``replay/mean_age`` (steps, over the drawn rows; 0 if none).
  """
  del layout, capacity  # they shaped the state
  rnd = draw(0)
  kept, slots, drawn, evicted = jax.device_get(_draw_rows(
      state, key, jnp.asarray(step, jnp.int32), rows=int(rows),
      tau_max=int(tau_max), power=float(power)))
  drawn = np.asarray(drawn, bool)
  kept = jax.tree.map(jnp.asarray, kept)
  records = jax.device_get(buffer_lib.take(kept, jnp.asarray(slots)))
  age = step - np.asarray(records.step)
  measurements = {
      "replay/rows_drawn": float(drawn.sum()),
      "replay/evicted": float(evicted),
      "replay/mean_age": float(age[drawn].mean()) if drawn.any() else 0.0,
  }
  return Selected(rounds=[rnd], picks=[(0, i) for i in range(num_prompts)],
                  valid=np.ones(num_prompts, bool),
                  measurements=measurements,
                  replay=ReplayDraw(records=records, drawn=drawn)), kept
