"""The rollout built from a config: the stage components by state name
(`make_components`: each registry's record with its options bound) and
`rollout.generate` with its `rollout.Pipeline` bound (`from_config`: the
sampler's settings and the tokenizer's ids, the task, verifiers and
shapers, where rewards are scored, the trainer's log-prob passes);
nothing reads the config after. `train.build` calls both once.

The config facts that validation and the planner read without building
anything stay in `rollout` (`rollout.group_layout`, `rollout.is_on_policy`).
"""

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax import advantages as advantages_lib
from grpo_jax.train import batch as batch_lib
from grpo_jax import credit as credit_lib
from grpo_jax import data
from grpo_jax.sampling import entropy_norm
from grpo_jax import models
from grpo_jax.rollout import revisits as revisits_lib
from grpo_jax import rewards as rewards_lib
from grpo_jax import rollout as rollout_lib
from grpo_jax.runtime import sharding
from grpo_jax import strategies


def _jitted(estimator):
  # One compiled program per step's estimate: the estimator and its state
  # stay on the device, and an estimator of many small ops runs as one.
  return estimator._replace(estimate=jax.jit(estimator.estimate))


def make_components(config) -> dict:
  """The stage components of `config` by state name (`rollout.STAGES`)."""
  rounds = strategies.make_group_strategy(
      config.groups.name, layout=rollout_lib.group_layout(config),
      **config.groups.kwargs)
  return {
      "select": strategies.make_selection(
          config.select.name, rounds_per_step=rounds.rounds_per_step,
          **config.select.kwargs),
      "groups": rounds,
      "advantage": _jitted(advantages_lib.make(config.advantage.name,
                                               **config.advantage.kwargs)),
      "shape": rewards_lib.make_shape_stage(config.rewards.shapers),
      "credit": credit_lib.make(config.credit.name, **config.credit.kwargs),
      "rows": strategies.make_row_strategy(config.rows.name,
                                           **config.rows.kwargs),
      "filter": strategies.make_member_filter(
          config.filter.name, group_size=int(config.rollout.num_generations),
          columns=rewards_lib.column_names(config.rewards.functions)
          + tuple(config.rewards.shapers), **config.filter.kwargs),
      "revisits": _revisit_memory(config),
      "temperature": _entropy_stage(config),
      # Group sizes per prompt (strategies.allocation); "fixed" is inactive.
      "budget": strategies.make_budget(
          config.budget.name, num_prompts=int(config.rollout.num_prompts),
          num_rows=int(config.rollout.num_prompts
                       * config.rollout.num_generations),
          **config.budget.kwargs),
  }


def _entropy_stage(config) -> entropy_norm.EntropyTemperature:
  """HAPO's stage: the sampler rule when ``rollout.temperature_tau > 0``,
  h_hat in the batch when the objective reads ``entropy_hat``."""
  from grpo_jax import objectives  # pylint: disable=g-import-not-at-top
  reads = objectives.OBJECTIVES.entry(config.objective.name).meta.reads
  r = config.rollout
  return entropy_norm.EntropyTemperature(
      tau=float(r.temperature_tau), pivot=float(r.entropy_pivot),
      legacy_sign=bool(r.entropy_legacy_sign),
      entropy_hat="entropy_hat" in reads)


def _revisit_memory(config) -> revisits_lib.Memory:
  """The responses an estimator reading ``divergence`` (SPO's KL-adaptive
  rho) needs stored: one per slot of its per-prompt table (its
  ``capacity`` option), of ``rollout.max_new_tokens`` tokens; inactive
  otherwise."""
  name, options = config.advantage.name, dict(config.advantage.kwargs)
  if "divergence" not in advantages_lib.meta(name, **options).reads:
    return revisits_lib.make()
  init = advantages_lib.meta(name).state.init
  capacity = options.get(
      "capacity", inspect.signature(init).parameters["capacity"].default)
  return revisits_lib.make(
      capacity=int(capacity), num_tokens=int(config.rollout.max_new_tokens),
      prompt_ids=advantages_lib.meta(name, **options).prompt_ids or "exact")


def _trainer_logprobs(params, tokens, input_mask, completion_start,
                      temperature, *, model_config, chunk_size, batch_size):
  """(logp, entropy) [R, T] numpy of completion rows under `params`, the
  trainer's forward pass (`batch.batched_logprobs`), whole on every
  process."""
  return sharding.to_host(batch_lib.batched_logprobs(
      params, model_config, jnp.asarray(tokens, jnp.int32),
      jnp.asarray(input_mask, jnp.float32), completion_start,
      temperature=temperature, chunk_size=chunk_size, batch_size=batch_size,
      with_entropy=True))


def from_config(config, model_config, tokenizer, components=None):
  """`rollout.generate` with the `rollout.Pipeline` of `config` bound
  (`components`: `make_components(config)` unless given); nothing reads
  the config after."""
  r = config.rollout
  if r.num_prompts % jax.process_count():
    raise ValueError(
        f"rollout.num_prompts={r.num_prompts} does not split over "
        f"{jax.process_count()} processes (each scores its own block of "
        "prompts); make it a multiple of the process count.")
  eos_ids, pad_id = models.eos_and_pad(tokenizer)
  if r.record_topk > model_config.vocab_size:
    raise ValueError(
        f"config.rollout.record_topk: {r.record_topk} exceeds the model's "
        f"vocabulary of {model_config.vocab_size} ids; set "
        f"rollout.record_topk <= {model_config.vocab_size}.")
  components = components or make_components(config)
  shapers = (components["shape"] if "shape" in components
             else rewards_lib.make_shape_stage(config.rewards.shapers)).shapers
  # The trainer scores each row at its member's temperature (row p*G + g).
  row_temperatures = (np.tile(np.asarray(r.member_temperatures, np.float32),
                              r.num_prompts)
                      if len(r.member_temperatures) else r.temperature)
  pipeline = rollout_lib.Pipeline(
      num_prompts=r.num_prompts,
      sampler=rollout_lib.Sampler(
          num_generations=r.num_generations, max_new_tokens=r.max_new_tokens,
          temperature=r.temperature, top_k=r.top_k, top_p=r.top_p,
          prompt_buckets=tuple(config.data.prompt_buckets),
          system_prompt=config.data.system_prompt, eos_ids=tuple(eos_ids),
          pad_id=pad_id,
          member_temperatures=tuple(float(x)
                                    for x in r.member_temperatures),
          record_topk=int(r.record_topk), slots=int(r.slots)),
      model_config=model_config, tokenizer=tokenizer,
      task=data.make_task(config.data, seed=config.seed),
      format_prompt=data.format_prompt,
      verifiers={rewards_lib.references.column(name): (rewards_lib.get(name),
                                                       float(weight))
                 for name, weight in zip(config.rewards.functions,
                                         config.rewards.weights)},
      shapers=shapers,
      scoring=rewards_lib.ScoreOptions(
          workers=config.rewards.workers,
          timeout_s=float(config.rewards.timeout_s),
          deadline_s=float(config.rewards.deadline_s)),
      components=components,
      logprobs=functools.partial(
          _trainer_logprobs, model_config=model_config,
          chunk_size=config.train.chunk_size,
          batch_size=config.train.logprob_batch_size),
      assemble=functools.partial(
          batch_lib.assemble_batch, model_config=model_config,
          temperature=row_temperatures, chunk_size=config.train.chunk_size,
          logprob_batch_size=config.train.logprob_batch_size,
          beta=float(config.kl.beta),
          on_policy=rollout_lib.is_on_policy(config),
          pack_rows=bool(config.train.get("pack_rows", False))))
  return functools.partial(rollout_lib.generate, pipeline=pipeline)
