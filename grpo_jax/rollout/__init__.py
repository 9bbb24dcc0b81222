"""One step's batch as a pipeline of stages (orchestration only).

Each stage is a component built once from the config
(`rollout.build.make_components`) and called here in order; what a stage
computes lives in its own package:

  select    prompts of a sampling round          strategies.select
  sample    tokens, mask, sampler logp [N, T]    sampling.sample
  score     rewards [P, G, K] of the verifiers   rewards.verifiers
            in worker processes, with timeouts   (rewards.workers)
  shape     more reward columns; per-prompt      rewards.shapers,
            state updated once a step            rewards.shaping
  groups    keep, drop or refill groups; may     strategies.groups
            sample again, or add rows (RePO's      (rollout.added)
            K per group, replayed rows)
  budget    or, in place of select .. groups,    strategies.allocation
            groups of different sizes in the     (rollout.budgets)
            same N rows (sGPO, Knapsack, ...)
  filter    the members that train (GFPO, ...)   strategies.members
  estimate  advantages [P, G] (or [N, T])        advantages
  credit    per-token advantages                 credit
  rows      which tokens train                   strategies.rows
  (then the old and reference log-prob passes: `batch.assemble_batch`)

`generate(params, ref_params, step, key, states, *, pipeline)` returns
``(Batch, measurements, states)``: `states` holds the state of every stage
component by name (`STAGES`), carried by the trainer in ``TrainState``.
Rows are prompt major: row ``p*G + g`` is completion g of prompt p. Round r
of step s samples with ``fold_in(key, r)`` (the caller folds in the step)
and reads prompt index ``s * rounds_per_step + r``, so a resumed run
continues exactly.

The draw (select .. groups, then the step's fields and the member
filter: `draw_groups`) hands the rest an `episodes.Drawn` of N rows; under
an active budget stage the budget strategy draws them instead, groups of
different sizes in the same N rows (`rollout.budgets.draw`). From the
estimate on, one sequence serves both.

Beside it: `rollout.build` (the components, `from_config`),
`rollout.fields` (what the stages read of the rounds), `rollout.episodes`
(the rows as drawn and as the update trains on them), `rollout.added`
(rows a group strategy adds), `rollout.measures` (the step's
measurements).

Several processes (multi-host, one process per host) run the same program
on one global mesh, and every process builds the same step:

* prompts: every process reads all P prompts (the selection is a pure
  function of (seed, index)) and passes them to the jitted sampler as host
  arrays, which jit takes as replicated inputs;
* rewards need text on a host: every process gathers the sampler's output
  whole (`sharding.to_host`), decodes and scores only the rows of its own
  block of prompts (`sharding.process_rows`, so P must be a multiple of the
  process count), and the reward blocks are gathered back: every process
  has the same rewards, advantages and masks, and every measurement is
  global;
* the batch leaves as host-side or replicated arrays, whole on every
  process; the sharded update keeps each process's rows of it.
"""

import functools
import time
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax import credit as credit_lib
from grpo_jax import groups as groups_lib
from grpo_jax import sampling
from grpo_jax import strategies
from grpo_jax.rewards import shaping as shaping_lib
from grpo_jax.rollout import added as added_lib
from grpo_jax.rollout import budgets
from grpo_jax.rollout import episodes as episodes_lib
from grpo_jax.rollout import fields as fields_lib
from grpo_jax.rollout import measures as rollout_measures
from grpo_jax.rollout import references as references_lib
from grpo_jax.rollout import rounds
from grpo_jax.strategies import ragged
# One sampling round, re-exported: the rollout's public API.
from grpo_jax.rollout.rounds import (  # pylint: disable=unused-import
    decode_completions, encode_prompts, member_temperatures, Pipeline, Round,
    sample_round, Sampler, SEGMENT_FIELDS, TOPK_FIELDS)

# The stage components whose state the rollout carries, by state name.
STAGES = ("select", "shape", "groups", "advantage", "credit", "rows",
          "revisits", "temperature", "filter", "budget")


# Folded into the step's key for a group strategy's own draw (POPO's
# refill); rounds sample with fold_in(key, r), r < rounds_per_step.
_GROUPS_KEY = 0x9A0
# Folded into step 0's key for an estimator's offline pass (SPO's
# offline_init); its sampler calls use fold_in(that key, call number).
_OFFLINE_KEY = 0x0FF1

def groups_key(key):
  """The key of a group strategy's own draw (POPO's refill, the replay
  buffers'), apart from every round's ``fold_in(key, r)``."""
  return jax.random.fold_in(key, _GROUPS_KEY)


# -------------------------------------------------------------- a step


def credit_and_rows(components, states, adv, loss_mask, *, credit_reads=None,
                    row_reads=None):
  """The credit and rows stages on a step's N rows, every step path's:
  the credit rule's advantages (and the tokens it trains on, where it
  narrows the loss mask), then the row strategy's loss mask; `*_reads`:
  the arrays each stage reads, by name. Returns (advantages, loss mask,
  the credit rule's output (for its measurements), `states` with the two
  stages' new states)."""
  c = components
  credited, credit_state = c["credit"].apply(states["credit"], adv, loss_mask,
                                             **(credit_reads or {}))
  adv = np.asarray(credited.advantages)  # host arrays, as the estimator's
  if credited.mask is not None:  # a rule that trains on fewer tokens
    loss_mask = np.asarray(credited.mask, np.float32)
  loss_mask, rows_state = c["rows"].apply(states["rows"], loss_mask,
                                          **(row_reads or {}))
  return adv, loss_mask, credited, dict(states, credit=credit_state,
                                        rows=rows_state)


def select_groups(params, step: int, key, states, *, pipeline: Pipeline,
                  temperature_rule=None):
  """The select, sample, score and shape stages of every round the group
  strategy draws, and the groups it keeps: (`strategies.Selected`, states
  with the groups' and shapers' new states). Round r samples with
  ``fold_in(key, r)``; `temperature_rule`: HAPO's sampler rule, or None."""
  c, states = pipeline.components, dict(states)
  p = pipeline.num_prompts

  def examples(r):  # the prompts round r selects (a pure function)
    return c["select"].select(
        pipeline.task, step, r, p,
        **{name: states[name] for name in c["select"].reads})

  def resample(r, given):  # sample, score and shape P examples, key r
    return sample_round(params, list(given), jax.random.fold_in(key, r),
                        pipeline=pipeline, step=step,
                        shape_states=states.get("shape"),
                        temperature_rule=temperature_rule)

  draw = lambda r: resample(r, examples(r))  # round r of the selection

  helpers = {"reference": lambda: rounds.reference_fn(params, pipeline),
             # A stateful strategy's clock and its draw's own key.
             "step": lambda: step,
             "key": lambda: groups_key(key),
             # The step's prompts drawn again (GHPO's hints, AERO).
             "examples": lambda: examples, "resample": lambda: resample,
             "hint": lambda: functools.partial(
                 references_lib.hint_examples, task=pipeline.task,
                 tokenizer=pipeline.tokenizer)}
  selected, states["groups"] = c["groups"].apply(
      states["groups"], draw, p,
      **{name: helpers[name]() for name in c["groups"].reads})
  if "shape" in c:  # a stateful shaper folds in every round drawn
    # A strategy that samples the step's own prompts again (reads
    # "resample": GHPO's hinted rounds, AERO's extra draws) folds in its
    # plain round 0 alone: per-prompt history sees the policy's plain
    # sample, once per step, not hinted (easier) or re-drawn rows.
    folded = selected.rounds
    if "resample" in c["groups"].reads:
      folded = selected.rounds[:1]
    states["shape"] = shaping_lib.update_states(
        pipeline.shapers, states["shape"],
        # Groups refilled from a buffer were folded in when drawn; a round
        # rebuilt from others' rows (AERO) folds in as it was sampled.
        [fields_lib.shape_data(rnd if rnd.sampled is None else rnd.sampled,
                               pipeline, step) for rnd in folded])
  return selected, states


def group_data(selected, pipeline: Pipeline, **step_fields
               ) -> groups_lib.GroupData:
  """What the estimator reads of the kept groups (`GroupData`): the
  optional round fields where the rounds hold them, and `step_fields`
  (`fields.STEP_FIELDS`) by name."""
  gather = functools.partial(fields_lib.gather, selected)
  answer_ids = None
  if selected.rounds[0].answer_ids is not None:
    answer_ids = jnp.asarray(gather("answer_ids"), jnp.int32)
  return groups_lib.GroupData(
      rewards=jnp.asarray(gather("rewards")),
      weights=jnp.asarray(pipeline.weights),
      valid=jnp.asarray(selected.valid),
      lengths=jnp.asarray(gather("lengths"), jnp.int32),
      sequence_logprobs=jnp.asarray(
          (gather("sampler_logp") * gather("mask")).sum(-1), jnp.float32),
      entropies=jnp.asarray(gather("entropies"), jnp.float32),
      answer_ids=answer_ids,
      prompt_index=jnp.asarray(gather("prompt_index"), jnp.int32),
      greedy_rewards=None if selected.rounds[0].greedy_rewards is None
      else jnp.asarray(gather("greedy_rewards"), jnp.float32),
      **step_fields,
      **{field: jnp.asarray(gather(field)) for field in SEGMENT_FIELDS
         if getattr(selected.rounds[0], field) is not None})


def draw_groups(params, step: int, key, states, *, pipeline: Pipeline,
                temperature_rule=None):
  """The draw of [P, G] groups: the select, sample, score, shape and groups
  stages (`select_groups`), the fields of the step the estimator reads
  (`fields.STEP_FIELDS`) and the member filter. Returns (`episodes.Drawn`
  of the N = P * G rows, row p*G + g member g of group p; states)."""
  c = pipeline.components
  p, g = pipeline.num_prompts, pipeline.sampler.num_generations
  selected, states = select_groups(params, step, key, states,
                                   pipeline=pipeline,
                                   temperature_rule=temperature_rule)
  gather = functools.partial(fields_lib.gather, selected)
  n = p * g
  rows = lambda x: np.asarray(x).reshape((n,) + np.shape(x)[2:])

  @functools.cache  # each field gathered once a step (read several times)
  def field(name):
    present = getattr(selected.rounds[0], name) is not None
    return rows(gather(name)) if present else None

  step_fields, measures = {}, {}
  for name in c["advantage"].reads:  # fields of the step a stage computes
    if name in fields_lib.STEP_FIELDS:
      stage, compute = fields_lib.STEP_FIELDS[name]
      step_fields[name], states[stage], stage_measures = compute(
          params, selected, states[stage], c[stage], pipeline=pipeline,
          gather=gather)
      measures.update(stage_measures)
  groups = group_data(selected, pipeline, **step_fields)
  # The member filter (GFPO, BPPO): kept rows [N] (None: all), a token
  # mask, and GroupData.members where the estimator sees only the kept.
  groups, kept_rows, kept_tokens, filter_state, filter_measures = (
      strategies.filter_members(c.get("filter"), states.get("filter"),
                                groups, field("mask")))
  if "filter" in c:
    states["filter"] = filter_state
  measures.update(filter_measures)
  measures.update(selected.measurements or {})
  loss_mask = field("mask") * np.repeat(selected.valid, g)[:, None]
  if kept_rows is not None:  # filtered members: no loss
    kept_rows = np.asarray(kept_rows, bool)
    loss_mask = loss_mask * kept_rows[:, None]
  if kept_tokens is not None:  # BPPO's prefix
    loss_mask = loss_mask * np.asarray(kept_tokens, np.float32)
  # Groups refilled from a buffer (POPO): marked in every step's batch (one
  # structure), so the on-policy update leaves them out of the sampler gap.
  replayed = None
  if strategies.GROUP_STRATEGIES.entry(c["groups"].name).meta.replays:
    replayed = np.repeat(fields_lib.replayed_groups(selected),
                         g).astype(np.float32)

  def describe(adv, batch):
    if selected.replay is not None:  # the round's own, on its fresh rows
      return rollout_measures.describe_fresh(
          selected, adv, batch, pipeline, estimator=c["advantage"])
    return rollout_measures.describe(
        selected, adv, batch, pipeline, estimator=c["advantage"],
        members=groups.members, kept_rows=kept_rows)

  return episodes_lib.Drawn(
      groups=groups, group=np.repeat(np.arange(p, dtype=np.int32), g),
      prompt_ids=[selected.rounds[r].prompt_ids[i] for r, i in selected.picks],
      field=field, loss_mask=loss_mask, kept_rows=kept_rows,
      replayed=replayed, selected=selected, describe=describe,
      measures=measures), states


def generate(params, ref_params, step: int, key, states: Mapping[str, Any],
             *, pipeline: Pipeline):
  """One step's `Batch`, its measurements and the stages' new states.

  Args:
    params: the current policy params (sampling and old log-probs).
    ref_params: the reference params (read only by a KL regulariser).
    step: the training step (selects the prompts).
    key: this step's key, ``fold_in(base_key, step)``.
    states: the stage components' states by name (`STAGES`).
    pipeline: the bound `Pipeline`.

  Returns:
    (Batch, measurements dict of floats, states).
  """
  c, states = pipeline.components, dict(states)
  t0 = time.perf_counter()
  offline_measures = {}
  if step == 0 and c["advantage"].offline is not None:
    # SPO's offline init: the state from n samples of every training
    # problem under the initial policy, before step 0 draws by it. Step 0
    # is the flag: a resumed run starts after its checkpoint's step >= 1.
    states["advantage"], offline_measures = c["advantage"].offline(
        states["advantage"], budgets.profile_fn(
            params, jax.random.fold_in(key, _OFFLINE_KEY), pipeline),
        pipeline.task.train_indices())

  # The sampler-temperature stage (HAPO's), when the pipeline has one: its
  # rule from the previous step's statistics (None: the plain sampler).
  tempering = c.get("temperature")
  rule = None if tempering is None else tempering.rule(
      states.get("temperature") or tempering.init())
  if "budget" in c and c["budget"].active:  # groups of different sizes
    drawn, states = budgets.draw(params, step, key, states,
                                 pipeline=pipeline)
  else:
    drawn, states = draw_groups(params, step, key, states, pipeline=pipeline,
                                temperature_rule=rule)
  t1 = time.perf_counter()

  # Rows a group strategy adds beside the P x G (RePO's, row replay's).
  added = None if drawn.selected is None else drawn.selected.replay
  stage = None if added is None else added_lib.STAGES[type(added)]
  if stage is None:
    adv, states["advantage"] = c["advantage"].estimate(states["advantage"],
                                                       drawn.groups)
  else:
    adv, added_adv, states["advantage"] = stage.estimate(
        added, c["advantage"], states["advantage"], drawn.groups,
        drawn.selected.rounds[0], pipeline.weights)
  # Group advantages [P, W] become one per row; token-level ones are [N, T].
  adv = np.asarray(adv)
  if c["advantage"].output == "group":
    adv = ragged.gather_rows(adv, drawn.group)
  if drawn.kept_rows is not None:  # filtered members: advantage 0
    adv = np.where(drawn.kept_rows.reshape((-1,) + (1,) * (adv.ndim - 1)),
                   adv, 0.0).astype(np.float32)
  episodes = episodes_lib.Episodes(
      prompt_ids=drawn.prompt_ids, tokens=drawn.field("tokens"),
      sample_mask=drawn.field("mask"), loss_mask=drawn.loss_mask,
      advantages=adv, sampler_logp=drawn.field("sampler_logp"),
      replayed=drawn.replayed)
  fresh_adv = adv
  if stage is not None:
    episodes = stage.join(added, episodes, added_adv)
  adv, loss_mask, credited, states = credit_and_rows(
      c, states, episodes.advantages, episodes.loss_mask,
      credit_reads=fields_lib.credit_reads(c["credit"].reads, drawn.field,
                                           pipeline),
      row_reads={name: drawn.field(name) for name in c["rows"].reads})
  topk = {name: drawn.field(name) for name in TOPK_FIELDS
          if drawn.field(name) is not None}
  entropy, entropy_measures = {}, {}
  if tempering is not None:  # its batch fields (HAPO's h_hat), if active
    entropy, states["temperature"], entropy_measures = tempering.batch_fields(
        states.get("temperature"), rule, drawn.field, loss_mask,
        episodes.sample_mask,
        np.tile(member_temperatures(pipeline.sampler), pipeline.num_prompts))
  prompt_tokens, prompt_mask = sampling.pad_prompts(
      episodes.prompt_ids, buckets=pipeline.sampler.prompt_buckets,
      pad_id=pipeline.sampler.pad_id)
  batch = pipeline.assemble(
      params, ref_params, prompt_tokens, prompt_mask, episodes.tokens,
      episodes.sample_mask, loss_mask, adv,
      sampler_logp=episodes.sampler_logp, **topk, **entropy,
      **({} if episodes.replayed is None else
         {"replayed": episodes.replayed}))
  jax.block_until_ready((batch.old_logp, batch.ref_logp))
  if stage is not None:  # e.g. the fresh rows enter a replay buffer
    states["groups"] = stage.finish(added, states["groups"],
                                    drawn.selected.rounds[0], fresh_adv,
                                    weights=pipeline.weights, step=step)
  t2 = time.perf_counter()
  measurements = drawn.describe(adv, batch)
  if stage is not None:  # the added rows'
    measurements.update(stage.measures(added, added_adv, adv,
                                       states["groups"]))
  measurements.update(credit_lib.measurements(c["credit"].name, credited))
  measurements.update(drawn.measures)
  measurements.update(entropy_measures)
  measurements.update(offline_measures)
  measurements.update({"time/sample_s": t1 - t0, "time/logprob_s": t2 - t1})
  return batch, measurements, states


# --------------------------------------------------------- from a config
# Read by validation and the planner, which build nothing (`rollout.build`).


def group_layout(config) -> strategies.GroupLayout:
  """What a stateful group strategy's state is shaped by (`GroupLayout`)."""
  return strategies.GroupLayout(
      num_generations=int(config.rollout.num_generations),
      max_new_tokens=int(config.rollout.max_new_tokens),
      prompt_len=int(max(config.data.prompt_buckets)),
      weights=tuple(float(w) for w in config.rewards.weights) + tuple(
          float(o["weight"]) for o in config.rewards.shapers.values()))


def is_on_policy(config) -> bool:
  """Whether each rollout batch feeds exactly one optimiser step (one
  iteration, one minibatch), so its behaviour log-probs are the update's own
  and the old log-prob pass can be skipped (`batch.Batch`)."""
  return (config.train.num_iterations == 1
          and config.train.num_minibatches == 1)
