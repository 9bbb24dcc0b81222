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
            sample again
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

Beside it: `rollout.build` (the components, `from_config`),
`rollout.fields` (what the stages read of the rounds), `rollout.measures`
(the step's measurements), and the steps whose rows are not P x G groups
(`rollout.budgets`, `rollout.repo`, `rollout.replay`).

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
from typing import (Any, Callable, Mapping, NamedTuple, Optional, Sequence,
                    Tuple)

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax import credit as credit_lib
from grpo_jax.sampling import entropy_norm
from grpo_jax import groups as groups_lib
from grpo_jax import models
from grpo_jax.rollout import references as references_lib
from grpo_jax.rollout import revisits as revisits_lib
from grpo_jax import rewards as rewards_lib
from grpo_jax.rollout import fields as fields_lib
from grpo_jax.rollout import measures as rollout_measures
from grpo_jax import sampling
from grpo_jax.runtime import sharding
from grpo_jax import strategies
from grpo_jax.rewards import shaping as shaping_lib

# The stage components whose state the rollout carries, by state name.
STAGES = ("select", "shape", "groups", "advantage", "credit", "rows",
          "revisits", "temperature", "filter", "budget")


class Round(NamedTuple):
  """One sampling round, numpy, grouped [P, G, ...]."""
  prompt_ids: list  # P token lists
  tokens: np.ndarray  # [P, G, T] int
  mask: np.ndarray  # [P, G, T] float32, the sampled tokens
  lengths: np.ndarray  # [P, G] int
  truncated: np.ndarray  # [P, G] bool
  sampler_logp: np.ndarray  # [P, G, T] float32
  rewards: np.ndarray  # [P, G, K]: the verifiers', then the shapers'
  columns: Tuple[str, ...]  # the K column names
  errors: np.ndarray  # [K verifiers] completions whose verifier raised
  entropies: np.ndarray  # [P, G] float32, mean token entropy (GroupData)
  prompt_index: np.ndarray  # [P] int32, the examples' task indices
  answer_ids: Optional[np.ndarray] = None  # [P, G] int32, when read
  # [P, K], the greedy row's rewards, when read (ReMax); it never trains.
  greedy_rewards: Optional[np.ndarray] = None
  # SD-GRPO's segment fields (`SEGMENT_FIELDS`), when read: [P, G, S]
  # rewards and valid, [P, G, T] token segment ids.
  segment_rewards: Optional[np.ndarray] = None
  segment_valid: Optional[np.ndarray] = None
  segment_ids: Optional[np.ndarray] = None
  # The sampler's top-K ids and log-probs [P, G, T, K], when it records
  # them (`Sampler.record_topk`; DPPO's top-K forms).
  sampler_topk_ids: Optional[np.ndarray] = None
  sampler_topk_logp: Optional[np.ndarray] = None
  # [P, G, T] float32, the sampler's entropy at each token at its row's
  # temperature (0 under padding): what a credit rule reads.
  token_entropies: Optional[np.ndarray] = None
  # [P, G] bool, rows a group strategy replaced by a reference solution
  # (EDGE-GRPO's guided correction), and the round as it was sampled
  # before (the plain sample the measurements describe).
  injected: Optional[np.ndarray] = None
  sampled: Optional[Any] = None
  # [P, G, T] float32, each token's sampling temperature, with HAPO's
  # entropy-adaptive sampler (`entropy_norm`; 0 under padding).
  token_temperatures: Optional[np.ndarray] = None
  # [P] bool, groups a group strategy refilled from its buffer of earlier
  # steps' groups (POPO); `sampled` then holds the round as sampled.
  replayed: Optional[np.ndarray] = None


# Folded into the step's key for a group strategy's own draw (POPO's
# refill); rounds sample with fold_in(key, r), r < rounds_per_step.
_GROUPS_KEY = 0x9A0
# Folded into step 0's key for an estimator's offline pass (SPO's
# offline_init); its sampler calls use fold_in(that key, call number).
_OFFLINE_KEY = 0x0FF1
# The GroupData fields `rollout.fields.segments` fills, for an estimator
# that reads them.
SEGMENT_FIELDS = ("segment_rewards", "segment_valid", "segment_ids")
# The Round (and Batch) fields of the sampler's top-K, when recorded.
TOPK_FIELDS = ("sampler_topk_ids", "sampler_topk_logp")


class Sampler(NamedTuple):
  """The sampler's settings and the tokenizer's ids."""
  num_generations: int
  max_new_tokens: int
  temperature: float
  top_k: int
  top_p: float
  prompt_buckets: Sequence[int]
  system_prompt: str
  eos_ids: Tuple[int, ...]
  pad_id: int
  # Each member's own temperature [G] (MDP-GRPO); () = `temperature` for all.
  member_temperatures: Tuple[float, ...] = ()
  # K > 0: the sampler records each position's top-K ids and log-probs.
  record_topk: int = 0


class Pipeline(NamedTuple):
  """Everything `generate` needs, bound once by `rollout.build.from_config`.

  Attributes:
    num_prompts: P, the groups of a batch.
    sampler: `Sampler`.
    model_config, tokenizer: the model's.
    task: ``train(index, batch_size)`` and ``heldout(n)`` (`data.make_task`).
    format_prompt: ``(tokenizer, question, *, system_prompt) -> str``.
    verifiers: name -> (``fn(prompts, completions, answers)``, weight).
    shapers: name -> (`rewards.Shaper` or ``fn(lengths [N]) -> [N]``,
      weight); the ``shape`` component holds their states.
    components: the stage records by state name (`STAGES`).
    assemble: ``assemble(params, ref_params, prompt_tokens, prompt_mask,
      tokens, sample_mask, loss_mask, advantages, sampler_logp,
      **topk) -> Batch`` (topk: the sampler's `TOPK_FIELDS` when recorded).
    scoring: where and how long the verifiers run (`rewards.ScoreOptions`;
      the default scores in this process, with no timeout).
  """
  num_prompts: int
  sampler: Sampler
  model_config: models.ModelConfig
  tokenizer: Any
  task: Any
  format_prompt: Callable
  verifiers: Mapping[str, Tuple[Callable, float]]
  shapers: Mapping[str, Tuple[Callable, float]]
  components: Mapping[str, Any]
  assemble: Callable
  scoring: rewards_lib.ScoreOptions = rewards_lib.ScoreOptions()
  # ``logprobs(params, tokens, input_mask, completion_start, temperature)
  # -> (logp, entropy)`` numpy, the trainer's (SPO's revisits, EDGE's
  # reference rows).
  logprobs: Optional[Callable] = None

  @property
  def columns(self) -> Tuple[str, ...]:
    return tuple(self.verifiers) + tuple(self.shapers)

  @property
  def weights(self) -> np.ndarray:
    return np.asarray([w for _, w in self.verifiers.values()]
                      + [w for _, w in self.shapers.values()], np.float32)


# ----------------------------------------------------------- one round


def groups_key(key):
  """The key of a group strategy's own draw (POPO's refill, the replay
  buffers'), apart from every round's ``fold_in(key, r)``."""
  return jax.random.fold_in(key, _GROUPS_KEY)


def plain_selection(params, step: int, key, states, *, pipeline: Pipeline
                    ) -> Tuple[strategies.Selected, Any]:
  """(Selected, the group strategy's new state) of a step path whose rounds
  carry no shaper state or temperature rule (RePO's, the replay buffer's):
  the strategy's ``draw(r)`` is round r of the step's selection, sampled
  with ``fold_in(key, r)`` and scored, and it may read the helpers
  ``step`` and ``key`` (`groups_key`)."""
  c = pipeline.components

  def draw(r):
    examples = c["select"].select(
        pipeline.task, step, r, pipeline.num_prompts,
        **{name: states[name] for name in c["select"].reads})
    return sample_round(params, examples, jax.random.fold_in(key, r),
                        pipeline=pipeline, step=step)
  helpers = {"step": step, "key": groups_key(key)}
  return c["groups"].apply(
      states["groups"], draw, pipeline.num_prompts,
      **{name: helpers[name] for name in c["groups"].reads})


def encode_prompts(tokenizer, examples, *, format_prompt: Callable,
                   system_prompt: str = "") -> list:
  """Token id lists of the formatted prompts."""
  ids = []
  for example in examples:
    text = format_prompt(tokenizer, example.question,
                         system_prompt=system_prompt or None)
    if isinstance(text, str):
      text = tokenizer.encode(text, add_special_tokens=False)
    ids.append(list(text))
  return ids


def decode_completions(tokenizer, tokens, lengths) -> list:
  """Texts of the completions, special tokens (end ids) dropped."""
  return [tokenizer.decode(list(row[:n]), skip_special_tokens=True)
          for row, n in zip(np.asarray(tokens), np.asarray(lengths))]


def _score(pipeline: Pipeline, examples, out, g: int):
  """Verifier rewards [P*g, K_v] and error counts [K_v] of `g` rows per
  prompt; each process scores its own block of prompts, then the blocks
  are gathered."""
  block = sharding.process_rows(len(examples))
  rows = slice(block.start * g, block.stop * g)
  local = examples[block]
  completions = decode_completions(pipeline.tokenizer, out.tokens[rows],
                                   out.lengths[rows])
  result = rewards_lib.score(
      pipeline.verifiers, [e.question for e in local for _ in range(g)],
      completions, [e.answer for e in local for _ in range(g)],
      **pipeline.scoring._asdict())
  errors = np.asarray([[result.num_errors[name]
                        for name in pipeline.verifiers]])
  return (sharding.gather_process_blocks(result.per_function),
          sharding.gather_process_blocks(errors).sum(axis=0))


def sample_round(params, examples, key, *, pipeline: Pipeline,
                 step: int = 0, shape_states=None,
                 temperature_rule=None) -> Round:
  """The sample, score and shape stages for one round of P prompts; the
  shapers read `step` and their states (`shape_states`, name -> state);
  `temperature_rule`: HAPO's per-token sampler rule, or None."""
  s = pipeline.sampler
  p, g, t = len(examples), s.num_generations, s.max_new_tokens
  # What a shaper needs the prompt to say (LCPO's target length).
  examples = shaping_lib.with_instructions(examples, pipeline.shapers)
  prompt_ids = encode_prompts(pipeline.tokenizer, examples,
                              format_prompt=pipeline.format_prompt,
                              system_prompt=s.system_prompt)
  prompt_tokens, prompt_mask = sampling.pad_prompts(
      prompt_ids, buckets=s.prompt_buckets, pad_id=s.pad_id)
  # ReMax's greedy row (temperature 0) follows each prompt's G members:
  # scored, its rewards kept as `greedy_rewards`, never trained on.
  greedy_row = "greedy_rewards" in pipeline.components["advantage"].reads
  members = member_temperatures(s, greedy_row=greedy_row)
  w = members.size  # rows per prompt
  out = sharding.to_host(sampling.sample(
      params, pipeline.model_config, prompt_tokens, prompt_mask, key,
      num_samples=w, max_new_tokens=t, temperature=np.tile(members, p),
      top_k=s.top_k or None, top_p=s.top_p if s.top_p < 1.0 else None,
      eos_ids=s.eos_ids, pad_id=s.pad_id, record_topk=s.record_topk,
      temperature_rule=temperature_rule))
  verified, errors = _score(pipeline, examples, out, w)
  answer_ids = None
  if "answer_ids" in pipeline.components["advantage"].reads:
    # A member's class is the first member with its answer, never a later
    # row: the greedy row changes no sampled member's id.
    answer_ids = fields_lib.answer_ids(decode_completions(
        pipeline.tokenizer, out.tokens, out.lengths), w)[:, :g]
  segments = {}
  if "segment_rewards" in pipeline.components["advantage"].reads:
    segments = fields_lib.segments(pipeline, examples, out, w)
  shaped, shape_errors = shaping_lib.shape_columns(
      pipeline.shapers, shape_states or {}, shaping_lib.RoundData(
          lengths=np.asarray(out.lengths),
          verified=np.asarray(verified, np.float32),
          verifier_names=tuple(pipeline.verifiers),
          verifier_weights=pipeline.weights[:len(pipeline.verifiers)],
          group_size=w, step=step,  # G + 1 with ReMax's greedy row
          prompt_index=np.repeat([e.index for e in examples], w),
          sampler_logp=out.tempered_logprobs, mask=out.mask,
          tokens=out.tokens))
  errors = np.concatenate([np.asarray(errors), shape_errors])
  every_row = lambda x: np.asarray(x).reshape((p, w) + np.shape(x)[1:])
  grouped = lambda x: every_row(x)[:, :g]
  rewards = every_row(np.concatenate(
      [np.asarray(verified, np.float32), shaped], axis=-1))
  # With HAPO's rule, the entropy at each row's own temperature (the
  # policy's, which its statistics are taken over), not at the adapted one.
  entropies = out.entropies if out.base_entropies is None else (
      out.base_entropies)
  topk = {}
  if s.record_topk:
    topk = dict(sampler_topk_ids=grouped(out.topk_ids),
                sampler_topk_logp=grouped(out.topk_logprobs))
  return Round(
      prompt_ids=prompt_ids, tokens=grouped(out.tokens),
      mask=grouped(np.asarray(out.mask, np.float32)),
      lengths=grouped(out.lengths), truncated=grouped(out.truncated),
      sampler_logp=grouped(out.tempered_logprobs),
      rewards=rewards[:, :g], columns=pipeline.columns, errors=errors,
      entropies=grouped(fields_lib.row_mean(entropies, out.mask)),
      token_entropies=grouped(np.asarray(entropies, np.float32)),
      prompt_index=np.asarray([e.index for e in examples], np.int32),
      answer_ids=answer_ids,
      greedy_rewards=rewards[:, g] if greedy_row else None, **segments,
      **topk, token_temperatures=None if out.temperatures is None
      else grouped(np.asarray(out.temperatures, np.float32)))


def member_temperatures(sampler: Sampler, *, greedy_row: bool = False
                        ) -> np.ndarray:
  """[G] float32 temperature of each group member (row p*G + g samples
  at entry g): `Sampler.member_temperatures`, or the one temperature; with
  `greedy_row` [G + 1], ReMax's greedy row (0) last."""
  members = (list(sampler.member_temperatures)
             or [sampler.temperature] * sampler.num_generations)
  return np.asarray(members + [0.0] * greedy_row, np.float32)


def _reference_fn(params, pipeline: Pipeline) -> Callable:
  """``reference(round) -> strategies.groups.References``: the reference
  solutions of a round's prompts as rows of the replaced (last) member,
  scored by the verifiers, their log-probs the trainer's under `params`."""
  s = pipeline.sampler
  temperature = float(member_temperatures(s)[-1])

  def score(examples, tokens, lengths):
    return _score(pipeline, examples, _Rows(tokens, lengths), 1)

  def reference(rnd):
    return references_lib.reference_rows(
        rnd, [pipeline.task.example(int(i)) for i in rnd.prompt_index],
        tokenizer=pipeline.tokenizer, task=pipeline.task,
        num_tokens=s.max_new_tokens, eos_id=s.eos_ids[0], pad_id=s.pad_id,
        prompt_buckets=s.prompt_buckets, score=score,
        logprobs=lambda *rows: pipeline.logprobs(params, *rows, temperature),
        num_columns=len(pipeline.columns))
  return reference


class _Rows(NamedTuple):  # what `_score` reads of a sampler's output
  tokens: np.ndarray
  lengths: np.ndarray


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
  if "budget" in c and c["budget"].active:  # ragged groups in N rows
    from grpo_jax.rollout import budgets as budget_rollout  # pylint: disable=g-import-not-at-top
    return budget_rollout.generate(params, ref_params, step, key, states,
                                   pipeline=pipeline)
  groups_meta = strategies.GROUP_STRATEGIES.entry(c["groups"].name).meta
  if groups_meta.extra_rows:  # RePO: G + K rows per group
    from grpo_jax.rollout import repo as repo_rollout  # pylint: disable=g-import-not-at-top
    return repo_rollout.generate(params, ref_params, step, key, states,
                                 pipeline=pipeline)
  if groups_meta.replay_rows:  # row replay: P * G fresh + R stored rows
    from grpo_jax.rollout import replay as replay_rollout  # pylint: disable=g-import-not-at-top
    return replay_rollout.generate(params, ref_params, step, key, states,
                                   pipeline=pipeline)
  p, g = pipeline.num_prompts, pipeline.sampler.num_generations
  t0 = time.perf_counter()
  offline_measures = {}
  if step == 0 and c["advantage"].offline is not None:
    # SPO's offline init: the state from n samples of every training
    # problem under the initial policy, before step 0 draws by it. Step 0
    # is the flag: a resumed run starts after its checkpoint's step >= 1.
    from grpo_jax.rollout import budgets as budget_rollout  # pylint: disable=g-import-not-at-top
    states["advantage"], offline_measures = c["advantage"].offline(
        states["advantage"], budget_rollout.profile_fn(
            params, jax.random.fold_in(key, _OFFLINE_KEY), pipeline),
        pipeline.task.train_indices())

  def examples(r):  # the prompts round r selects (a pure function)
    return c["select"].select(
        pipeline.task, step, r, p,
        **{name: states[name] for name in c["select"].reads})

  def resample(r, given):  # sample, score and shape P examples, key r
    return sample_round(params, list(given), jax.random.fold_in(key, r),
                        pipeline=pipeline, step=step,
                        shape_states=states.get("shape"),
                        temperature_rule=rule)

  draw = lambda r: resample(r, examples(r))  # round r of the selection

  # HAPO's entropy-adaptive sampler: the previous step's statistics.
  entropy_stage = c.get("temperature")
  rule = None if entropy_stage is None else entropy_stage.rule(
      states.get("temperature") or entropy_stage.init())

  helpers = {"reference": lambda: _reference_fn(params, pipeline),
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
  gather = functools.partial(fields_lib.gather, selected)
  t1 = time.perf_counter()

  prompt_tokens, prompt_mask = sampling.pad_prompts(
      [selected.rounds[r].prompt_ids[i] for r, i in selected.picks],
      buckets=pipeline.sampler.prompt_buckets,
      pad_id=pipeline.sampler.pad_id)
  divergence, revisit_measures = None, {}
  if "divergence" in c["advantage"].reads:  # SPO's KL-adaptive rho
    # Each prompt's stored response rescored, then member 0's stored.
    temperature = float(member_temperatures(pipeline.sampler)[0])
    divergence, states["revisits"], revisit_measures = revisits_lib.revisit(
        states["revisits"], revisits_lib.slots(
            states["revisits"], gather("prompt_index"),
            c["revisits"].prompt_ids), selected.valid,
        prompt_tokens, prompt_mask, gather("tokens")[:, 0],
        gather("mask")[:, 0], score=lambda *rows: pipeline.logprobs(
            params, *rows, temperature)[0])
  answer_ids = None
  if selected.rounds[0].answer_ids is not None:
    answer_ids = jnp.asarray(gather("answer_ids"), jnp.int32)
  groups = groups_lib.GroupData(
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
      divergence=divergence,
      **{field: jnp.asarray(gather(field)) for field in SEGMENT_FIELDS
         if getattr(selected.rounds[0], field) is not None})
  # The member filter (GFPO, BPPO): kept rows [N] (None: all), a token
  # mask, and GroupData.members where the estimator sees only the kept.
  groups, kept_rows, kept_tokens, filter_state, filter_measures = (
      strategies.filter_members(c.get("filter"), states.get("filter"),
                                groups, gather("mask").reshape(p * g, -1)))
  if "filter" in c:
    states["filter"] = filter_state
  adv, states["advantage"] = c["advantage"].estimate(states["advantage"],
                                                     groups)
  n = p * g
  rows = lambda x: np.asarray(x).reshape((n,) + np.shape(x)[2:])
  # Group advantages [P, G] become one per row; token-level ones are [N, T].
  adv = {"group": rows, "token": np.asarray}[c["advantage"].output](adv)
  sample_mask = rows(gather("mask"))
  loss_mask = sample_mask * np.repeat(selected.valid, g)[:, None]
  if kept_rows is not None:  # filtered members: no loss, advantage 0
    kept_rows = np.asarray(kept_rows, bool)
    loss_mask = loss_mask * kept_rows[:, None]
    adv = np.where(kept_rows.reshape((n,) + (1,) * (adv.ndim - 1)), adv,
                   0.0).astype(np.float32)
  if kept_tokens is not None:  # BPPO's prefix
    loss_mask = loss_mask * np.asarray(kept_tokens, np.float32)
  adv, loss_mask, credited, states = credit_and_rows(
      c, states, adv, loss_mask,
      credit_reads=fields_lib.credit_reads(c["credit"].reads, gather, rows,
                                           pipeline),
      row_reads={name: rows(gather(name)) for name in c["rows"].reads})
  sampler_logp = rows(gather("sampler_logp"))
  topk = {name: rows(gather(name)) for name in TOPK_FIELDS
          if getattr(selected.rounds[0], name) is not None}
  entropy, entropy_measures = {}, {}
  if entropy_stage is not None and entropy_stage.active:
    entropy, stats, entropy_measures = entropy_norm.batch_entropy_hat(
        entropy_stage, rule, rows(gather("token_entropies")), loss_mask,
        sample_mask, token_temperatures=None if rule is None
        else rows(gather("token_temperatures")),
        base=np.tile(member_temperatures(pipeline.sampler), p))
    if rule is not None:  # the next step's sampler reads these
      states["temperature"] = entropy_norm.newer(stats, rule.stats)
  # Groups refilled from a buffer (POPO): marked in every step's batch (one
  # structure), so the on-policy update leaves them out of the sampler gap.
  replayed = {}
  if groups_meta.replays:
    replayed["replayed"] = np.repeat(fields_lib.replayed_groups(selected),
                                     g).astype(np.float32)
  batch = pipeline.assemble(
      params, ref_params, prompt_tokens, prompt_mask, rows(gather("tokens")),
      sample_mask, loss_mask, adv, sampler_logp=sampler_logp, **topk,
      **entropy, **replayed)
  jax.block_until_ready((batch.old_logp, batch.ref_logp))
  t2 = time.perf_counter()
  measurements = rollout_measures.describe(
      selected, adv, batch, pipeline, estimator=c["advantage"],
      members=groups.members, kept_rows=kept_rows)
  measurements.update(credit_lib.measurements(c["credit"].name, credited))
  measurements.update(revisit_measures)
  measurements.update(filter_measures)
  measurements.update(selected.measurements or {})
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
