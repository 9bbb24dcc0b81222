"""The rollout-level replay buffer's rows as stages of `rollout.generate`
(VARIANTS.md 4.6; **reconstruction**): the P * G fresh rows, then R rows
replayed from the buffer, in one batch of a fixed P * G + R rows
(``replay_rows`` in the strategy's metadata, `layout.step_rows`; the
update compiles once).

The strategy (``replay``, `strategies.row_replay`) draws the round, evicts
the rows older than tau_max and draws R stored rows (|A| ** a);
`rollout.added` runs this module's stages for them:

  rows      rows 0 .. P*G - 1 are the round's, prompt-major; rows P*G + j
            the replayed ones, each with its own prompt. A slot the buffer
            could not fill is a row with an empty loss mask and advantage
            0 (it borrows the first fresh prompt). Rows no longer share a
            prompt by blocks, so the batch is assembled with one prompt per
            row and the update runs with group size 1
            (`train.update_group_size`).
  estimate  the configured estimator on the fresh [P, G] groups only; a
            replayed row keeps its STORED advantage, passed through
            unchanged (its group is gone; VARIANTS.md 4.6).
  mu        a replayed row's sampler log-probs are its stored behaviour
            log-probs, so decoupled PPO weighs it by min(pi_old / mu, C)
            with pi_old the trainer's recomputed log-probs; train.validate
            requires an objective that weighs by the behaviour policy.
  loss      one aggregate over fresh and replayed rows (batch = fresh U
            replay); ``Batch.replayed`` marks the replayed rows so the
            update leaves them out of the sampler/trainer gap measure.
  push      the fresh rows with a nonzero advantage and a non-empty mask
            enter the buffer after the draw (a step never replays itself).

Reward shapers are carried (a stored row keeps its total over every
column). What a step with these rows does not carry yet (train.validate
refuses each, naming the field): budgets, member filters, non-identity
credit rules, row strategies reading round fields, per-member temperatures,
HAPO's entropy_hat, whole-minibatch objectives, token-level estimators and
estimators reading fields beyond rewards, lengths, log-probs, entropies and
prompt ids (`rollout.checks.check_replay_stages` adds: top-K, per-token
temperatures, stateful estimators).
"""

import jax.numpy as jnp
import numpy as np

from grpo_jax.rollout import layout
from grpo_jax.strategies import row_replay


def replay_rows(config) -> int:
  """R, the rows a step replays beside its P * G (0: none)."""
  return layout.step_rows(config).replayed


def _prompt_ids(records, i) -> list:
  return np.asarray(records.prompt_tokens[i])[
      np.asarray(records.prompt_mask[i]) > 0].tolist()


def estimate(added, estimator, state, groups, rnd, weights):
  """(fresh [P, G], replayed [R], state): the estimator on the fresh
  groups alone; a replayed row keeps its stored advantage (0 where the
  buffer could not fill the slot)."""
  del rnd, weights
  fresh, state = estimator.estimate(state, groups)
  drawn = np.asarray(added.drawn, bool)
  stored = np.where(drawn, np.asarray(added.records.advantages, np.float32),
                    0.0)
  return fresh, stored, state


def join(added, episodes, added_adv):
  """`episodes` (the fresh rows, one prompt per block) followed by the R
  replayed rows, each with its own prompt: one prompt per row."""
  rec, drawn = added.records, np.asarray(added.drawn, bool)
  n = episodes.num_rows
  g = n // len(episodes.prompt_ids)
  rec_mask = np.asarray(rec.mask, np.float32) * drawn[:, None]
  # An unfilled replay slot borrows the first fresh prompt.
  prompts = [episodes.prompt_ids[i // g] for i in range(n)] + [
      _prompt_ids(rec, j) if drawn[j] else episodes.prompt_ids[0]
      for j in range(drawn.shape[0])]
  return episodes._replace(
      prompt_ids=prompts,
      tokens=np.concatenate([episodes.tokens,
                             np.asarray(rec.tokens, np.int32)]),
      sample_mask=np.concatenate([episodes.sample_mask, rec_mask]),
      loss_mask=np.concatenate([episodes.loss_mask, rec_mask]),
      advantages=np.concatenate([episodes.advantages, added_adv]
                                ).astype(np.float32),
      sampler_logp=np.concatenate([
          np.asarray(episodes.sampler_logp, np.float32),
          np.asarray(rec.behaviour_logp, np.float32) * drawn[:, None]]),
      replayed=np.concatenate([np.zeros(n), np.ones(drawn.shape[0])]
                              ).astype(np.float32))


def finish(added, state, rnd, fresh_adv, *, weights, step):
  """The buffer after the step: the fresh rows enter it after the draw
  (stored advantage: the estimator's); rows of A = 0 would never be drawn,
  so are not stored."""
  del added
  fresh_adv = np.asarray(fresh_adv, np.float32)
  n = fresh_adv.size
  mask = np.asarray(rnd.mask, np.float32).reshape(n, -1)
  keep = (fresh_adv.reshape(n) != 0) & (mask.sum(-1) > 0)
  return row_replay.push_rows(
      state, row_replay.round_rows(rnd, fresh_adv.reshape(rnd.lengths.shape),
                                   weights, step,
                                   state.prompt_tokens.shape[1]),
      jnp.asarray(keep))


def measures(added, added_adv, adv, state) -> dict:
  """``replay/*``: the buffer's fill after the push, the replayed rows'
  mean |A| (as trained)."""
  del added_adv
  drawn = np.asarray(added.drawn, bool)
  replayed = np.asarray(adv)[-drawn.shape[0]:]
  return {"replay/buffer_fill": float(np.asarray(state.valid).mean()),
          "replay/advantage_abs_mean_replayed": float(
              np.abs(replayed)[drawn].mean()) if drawn.any() else 0.0}


# ------------------------------------------------------------ the config

# The GroupData fields this path fills for the fresh groups.
VIEW_FIELDS = ("valid", "lengths", "sequence_logprobs", "entropies",
               "prompt_index")


def check_config(c, objective) -> None:
  """ValueError ``config.<field>: problem; fix.`` unless `c`'s group
  strategy, when it replays rows (``replay_rows``: ``replay``), can run:
  every other stage is one this path carries (see the module doc). Called
  by `train.validate` before any compute (the strategy's option checks
  and `rollout.checks.check_replay_stages` ran before)."""
  from grpo_jax import advantages  # pylint: disable=g-import-not-at-top
  from grpo_jax.rollout import path_checks  # pylint: disable=g-import-not-at-top
  if not replay_rows(c):
    return
  why = f"groups.name={c.groups.name!r} appends replayed rows to the batch"
  fail = path_checks.fail
  path_checks.check_fixed_budget(c, why)
  if advantages.meta(c.advantage.name,
                     **c.advantage.kwargs).output != "group":
    fail("advantage.name", f"estimator {c.advantage.name!r} gives token-"
         f"level advantages, but {why} stores one advantage per row",
         "use grpo, dr_grpo or rloo")
  path_checks.check_estimator_reads(c, why, VIEW_FIELDS)
  # Reward shapers are carried: the fresh groups and the stored rows
  # read totals over every column.
  path_checks.check_plain_stages(c, why, shapers=False)
  if objective.prepass is not None:
    fail("objective.name", f"objective {c.objective.name!r} takes "
         "statistics over the whole minibatch, which a stored row does not "
         f"fit ({why})", "use decoupled_ppo")
