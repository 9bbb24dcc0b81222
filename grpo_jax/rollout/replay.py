"""One step under the rollout-level replay buffer (VARIANTS.md 4.6;
**reconstruction**): the P * G fresh rows, then R rows replayed from the
buffer, in one batch of a fixed P * G + R rows (the update compiles once).

`rollout.generate` hands the step here when the group strategy declares
registry metadata ``replay_rows`` (``replay``,
`strategies.row_replay`). The strategy draws the round, evicts the rows
older than tau_max and draws R stored rows (|A| ** a); then:

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

What this path does not carry (train.validate refuses each, naming the
field): budgets, reward shapers, member filters, non-identity credit
rules, row strategies reading round fields, per-member temperatures,
HAPO's entropy_hat, whole-minibatch objectives, token-level estimators and
estimators reading fields beyond rewards, lengths, log-probs, entropies and
prompt ids (`rollout.checks.check_replay_stages` adds: top-K, per-token
temperatures, stateful estimators).
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax import groups as groups_lib
from grpo_jax import rollout as rollout_lib
from grpo_jax.rollout import layout
from grpo_jax.rollout import measures as rollout_measures
from grpo_jax import sampling
from grpo_jax.strategies import row_replay


def replay_rows(config) -> int:
  """R, the rows a step replays beside its P * G (0: none)."""
  return layout.step_rows(config).replayed


def _prompt_ids(records, i) -> list:
  return np.asarray(records.prompt_tokens[i])[
      np.asarray(records.prompt_mask[i]) > 0].tolist()


def generate(params, ref_params, step: int, key, states, *, pipeline):
  """`rollout.generate` under row replay: the same arguments and returns
  (Batch of P * G + R rows, measurements, states)."""
  c, states = pipeline.components, dict(states)
  p, g = pipeline.num_prompts, pipeline.sampler.num_generations
  t0 = time.perf_counter()

  selected, states["groups"] = rollout_lib.plain_selection(
      params, step, key, states, pipeline=pipeline)
  rnd, rep = selected.rounds[0], selected.replay
  rec, drawn = rep.records, np.asarray(rep.drawn, bool)
  t1 = time.perf_counter()

  mask = np.asarray(rnd.mask, np.float32)
  groups = groups_lib.GroupData(
      rewards=jnp.asarray(rnd.rewards, jnp.float32),
      weights=jnp.asarray(pipeline.weights),
      valid=jnp.ones((p,), bool),
      lengths=jnp.asarray(rnd.lengths, jnp.int32),
      sequence_logprobs=jnp.asarray(
          (np.asarray(rnd.sampler_logp) * mask).sum(-1), jnp.float32),
      entropies=jnp.asarray(rnd.entropies, jnp.float32),
      prompt_index=jnp.asarray(rnd.prompt_index, jnp.int32))
  fresh_adv, states["advantage"] = c["advantage"].estimate(
      states["advantage"], groups)
  fresh_adv = np.asarray(fresh_adv, np.float32)  # [P, G]

  n = p * g
  flat = lambda x: np.asarray(x).reshape((n,) + np.shape(x)[2:])
  rec_mask = np.asarray(rec.mask, np.float32) * drawn[:, None]
  tokens = np.concatenate([flat(rnd.tokens),
                           np.asarray(rec.tokens, np.int32)])
  sample_mask = np.concatenate([flat(mask), rec_mask])
  adv = np.concatenate([flat(fresh_adv), np.where(
      drawn, np.asarray(rec.advantages, np.float32), 0.0)]).astype(np.float32)
  sampler_logp = np.concatenate([
      flat(np.asarray(rnd.sampler_logp, np.float32)),
      np.asarray(rec.behaviour_logp, np.float32) * drawn[:, None]])
  replayed = np.concatenate([np.zeros(n), np.ones(drawn.shape[0])]
                            ).astype(np.float32)
  adv, loss_mask, _, states = rollout_lib.credit_and_rows(c, states, adv,
                                                         sample_mask)
  # One prompt per row; an unfilled replay slot borrows the first prompt.
  prompts = [rnd.prompt_ids[i // g] for i in range(n)] + [
      _prompt_ids(rec, j) if drawn[j] else rnd.prompt_ids[0]
      for j in range(drawn.shape[0])]
  prompt_tokens, prompt_mask = sampling.pad_prompts(
      prompts, buckets=pipeline.sampler.prompt_buckets,
      pad_id=pipeline.sampler.pad_id)
  batch = pipeline.assemble(
      params, ref_params, prompt_tokens, prompt_mask, tokens, sample_mask,
      loss_mask, adv, sampler_logp=sampler_logp, replayed=replayed)
  jax.block_until_ready((batch.old_logp, batch.ref_logp))

  # The fresh rows enter the buffer after the draw (stored advantage: the
  # estimator's); rows of A = 0 would never be drawn, so are not stored.
  keep = (fresh_adv.reshape(n) != 0) & (flat(mask).sum(-1) > 0)
  buf = states["groups"]
  states["groups"] = row_replay.push_rows(
      buf, row_replay.round_rows(rnd, fresh_adv, pipeline.weights, step,
                                 buf.prompt_tokens.shape[1]),
      jnp.asarray(keep))
  t2 = time.perf_counter()

  measurements = rollout_measures.describe_fresh(
      selected, adv, batch, pipeline, estimator=c["advantage"])
  measurements.update(selected.measurements or {})
  measurements["replay/buffer_fill"] = float(
      np.asarray(states["groups"].valid).mean())
  measurements["replay/advantage_abs_mean_replayed"] = float(
      np.abs(adv[n:])[drawn].mean()) if drawn.any() else 0.0
  measurements.update({"time/sample_s": t1 - t0, "time/logprob_s": t2 - t1})
  return batch, measurements, states


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
  path_checks.check_plain_stages(c, why)
  if objective.prepass is not None:
    fail("objective.name", f"objective {c.objective.name!r} takes "
         "statistics over the whole minibatch, which a stored row does not "
         f"fit ({why})", "use decoupled_ppo")
