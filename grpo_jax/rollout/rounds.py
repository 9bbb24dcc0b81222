"""One sampling round: the sample, score and shape stages for P prompts
(`sample_round` -> `Round`), and the settings they run with (`Sampler`,
`Pipeline`, bound once by `rollout.build.from_config`)."""

from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from grpo_jax import models
from grpo_jax import rewards as rewards_lib
from grpo_jax import sampling
from grpo_jax.rewards import shaping as shaping_lib
from grpo_jax.rollout import fields as fields_lib
from grpo_jax.rollout.fields import decode_completions
from grpo_jax.rollout import references as references_lib
from grpo_jax.runtime import sharding


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
  # S > 0: rows decode S at a time, each slot refilled as its row ends
  # (`sampling.sample`'s `slots`); 0: every row in one batch.
  slots: int = 0


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
  # The optional fields the estimator reads; one may add a greedy row.
  wanted = fields_lib.round_fields(pipeline.components["advantage"].reads)
  members = member_temperatures(
      s, greedy_row=any(field.greedy_row for field in wanted))
  w = members.size  # rows per prompt
  out = sharding.to_host(sampling.sample(
      params, pipeline.model_config, prompt_tokens, prompt_mask, key,
      num_samples=w, max_new_tokens=t, temperature=np.tile(members, p),
      top_k=s.top_k or None, top_p=s.top_p if s.top_p < 1.0 else None,
      eos_ids=s.eos_ids, pad_id=s.pad_id, record_topk=s.record_topk,
      temperature_rule=temperature_rule, slots=s.slots or None))
  verified, errors = _score(pipeline, examples, out, w)
  shaped, shape_errors = shaping_lib.shape_columns(
      pipeline.shapers, shape_states or {}, shaping_lib.RoundData(
          lengths=np.asarray(out.lengths),
          verified=np.asarray(verified, np.float32),
          verifier_names=tuple(pipeline.verifiers),
          verifier_weights=pipeline.weights[:len(pipeline.verifiers)],
          group_size=w, step=step,  # G + 1 with a greedy row
          prompt_index=np.repeat([e.index for e in examples], w),
          sampler_logp=out.tempered_logprobs, mask=out.mask,
          tokens=out.tokens))
  errors = np.concatenate([np.asarray(errors), shape_errors])
  every_row = lambda x: np.asarray(x).reshape((p, w) + np.shape(x)[1:])
  grouped = lambda x: every_row(x)[:, :g]
  rewards = every_row(np.concatenate(
      [np.asarray(verified, np.float32), shaped], axis=-1))
  view = fields_lib.RoundView(pipeline, examples, out, rewards, w, g)
  optional = {}
  for field in wanted:
    optional.update(field.compute(view))
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
      **optional, **topk, token_temperatures=None if out.temperatures is None
      else grouped(np.asarray(out.temperatures, np.float32)))


def member_temperatures(sampler: Sampler, *, greedy_row: bool = False
                        ) -> np.ndarray:
  """[G] float32 temperature of each group member (row p*G + g samples
  at entry g): `Sampler.member_temperatures`, or the one temperature; with
  `greedy_row` [G + 1], ReMax's greedy row (0) last."""
  members = (list(sampler.member_temperatures)
             or [sampler.temperature] * sampler.num_generations)
  return np.asarray(members + [0.0] * greedy_row, np.float32)


def reference_fn(params, pipeline: Pipeline) -> Callable:
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
