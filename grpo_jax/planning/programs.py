"""The programs of one step, compiled ahead of time from abstract inputs.

`abstract_training` builds what `train.build` builds (state with optimiser
moments, a LoRA run's frozen base, the KL reference) with `jax.eval_shape`;
`abstract_inputs` lays it out on the mesh as the trainer does; each
``*_program`` lowers and compiles one program with `jax.ShapeDtypeStruct`
inputs carrying those shardings, and `plan` gathers them into a `Plan`.
"""

import math
import re
import time
from typing import Any, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from grpo_jax.train import batch as batch_lib
from grpo_jax import models
from grpo_jax.train import optim
from grpo_jax.rollout import layout
from grpo_jax.rollout import repo as repo_rollout
from grpo_jax import rollout as rollout_lib
from grpo_jax import sampling
from grpo_jax.runtime import sharding
from grpo_jax import train as train_lib
from grpo_jax.train import update as update_lib
from grpo_jax.models import lora
from grpo_jax.objectives import regularisers as regularisers_lib
from grpo_jax.planning.architectures import model_config_from_name, param_count
from grpo_jax.planning.costs import (MemorySummary, forward_flops,
                                     memory_summary, sequence_forward_flops,
                                     training_flops, xla_flops)

def device_bytes(tree) -> int:
  """Bytes one device holds of a tree of ShapeDtypeStructs with shardings
  (the largest shard of each leaf; a replicated leaf whole)."""
  total = 0
  for x in jax.tree.leaves(tree):
    shape = x.shape
    sharding_ = getattr(x, "sharding", None)
    if sharding_ is not None:
      shape = sharding_.shard_shape(shape)
    total += math.prod(shape) * jnp.dtype(x.dtype).itemsize
  return int(total)


def with_shardings(tree, shardings):
  """ShapeDtypeStructs of `tree`'s leaves carrying `shardings` (a tree of
  the same structure, or one sharding for every leaf)."""
  if isinstance(shardings, jax.sharding.Sharding):
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=shardings),
        tree)
  return jax.tree.map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
      tree, shardings)


class Program(NamedTuple):
  """One compiled program of a step.

  Attributes:
    name: ``update``, ``sample``, ``old_logprobs``, ``ref_logprobs``.
    calls: times a step runs it.
    memory: its `MemorySummary` (per device); None where XLA refused to
      compile it for lack of device memory (`error`).
    resident: bytes per device held meanwhile that are not its arguments.
    xla_flops: XLA's FLOPs per device of one call (loop bodies once).
    flops: analytic FLOPs of one call, all devices.
    compile_s: seconds to lower and compile it.
    error: XLA's out-of-memory message, or "" when it compiled.
    needed: bytes per device XLA's message says it needed (temporaries),
      0 when it names none.
  """
  name: str
  calls: int
  memory: Optional[MemorySummary]
  resident: int
  xla_flops: Optional[float]
  flops: int
  compile_s: float
  error: str = ""
  needed: int = 0

  @property
  def peak(self) -> int:
    """Bytes per device at once; for a program that did not fit, a lower
    bound (what XLA said it needed, plus the resident buffers)."""
    if self.memory is None:
      return self.needed + self.resident
    return self.memory.peak + self.resident


class Plan(NamedTuple):
  """What `plan` found; `format_plan` prints it."""
  model_name: str
  model_config: models.ModelConfig
  num_params: int
  trainable_params: int
  mesh_shape: Dict[str, int]
  platform: str  # the devices compiled for, e.g. 'cpu' or 'TPU v5 lite'
  shapes: Dict[str, int]
  resident: Dict[str, int]  # buffer -> bytes per device
  programs: Tuple[Program, ...]
  six_nd: int  # 6 x params x tokens trained per step
  notes: Tuple[str, ...]

  @property
  def num_devices(self) -> int:
    return math.prod(self.mesh_shape.values())

  @property
  def peak(self) -> int:
    """The step's peak per device (a lower bound unless `fitted`)."""
    return max(p.peak for p in self.programs)

  @property
  def fitted(self) -> bool:
    """Whether every program compiled (XLA:CPU always compiles; XLA:TPU
    refuses a program that does not fit the chip)."""
    return not any(p.error for p in self.programs)

  @property
  def peak_program(self) -> str:
    return max(self.programs, key=lambda p: p.peak).name

  @property
  def step_flops(self) -> int:
    return sum(p.flops * p.calls for p in self.programs)

  @property
  def by_name(self) -> Dict[str, Program]:
    return {p.name: p for p in self.programs}

  def to_dict(self) -> dict:
    return dict(
        model=self.model_name, num_params=self.num_params,
        trainable_params=self.trainable_params,
        dtype=self.model_config.dtype,
        param_dtype=self.model_config.param_dtype,
        remat=self.model_config.remat, mesh=self.mesh_shape,
        platform=self.platform, shapes=self.shapes, resident=self.resident,
        peak_bytes=self.peak, peak_program=self.peak_program,
        fitted=self.fitted,
        step_flops=self.step_flops, six_nd=self.six_nd,
        programs=[dict(p._asdict(), peak=p.peak,
                       memory=p.memory and p.memory._asdict())
                  for p in self.programs],
        notes=list(self.notes))


class Training(NamedTuple):
  """What `train.build` makes, abstractly (ShapeDtypeStructs, no arrays).

  Attributes:
    model_config: the policy's (with LoRA's scale where adapters train).
    state: the `TrainState`; ``state.params`` are what trains.
    frozen: a LoRA run's frozen base params, else None.
    ref_params: the KL reference (LoRA: the frozen base itself), else None.
    update_fn: ``update.make_update_fn(..., jit=False)``.
    components: `train.make_components(config)`.
    group_size: rows per shared prompt in the update and the log-prob
      passes (`train.update_group_size`: 1 under an active budget stage or
      row replay, G + K under RePO).
  """
  model_config: models.ModelConfig
  state: Any
  frozen: Any
  ref_params: Any
  update_fn: Any
  components: Mapping[str, Any]
  group_size: int = 1


def abstract_policy(config, model_config: models.ModelConfig):
  """(model_config, trainable params, frozen params or None) as
  `train.load_policy` makes them, from `jax.eval_shape` (no weights): with
  ``lora.rank > 0`` fresh adapters train over the frozen base."""
  params = jax.eval_shape(
      lambda: models.init_params(model_config, jax.random.PRNGKey(0)))
  model_config = model_config.replace(remat=config.model.remat)
  lora_config = config.get("lora")
  if lora_config is None or not lora_config.get("rank", 0):
    return model_config, params, None
  model_config = model_config.replace(
      lora_scale=lora_config.alpha / lora_config.rank)
  adapters = jax.eval_shape(lambda p: lora.init_adapters(
      p, rank=lora_config.rank, targets=tuple(lora_config.targets),
      key=jax.random.PRNGKey(0)), params)
  return model_config, adapters, params


def policy_params(params, frozen):
  """The model params whose trainable part is `params` (LoRA: the frozen
  base with the adapters added), as `train.policy_params`."""
  return params if frozen is None else lora.combine(frozen, params)


def abstract_training(config, model_config: models.ModelConfig) -> Training:
  """`Training`: what `train.build` makes, abstractly.

  Composes train.py's public functions as `train.build` does (with
  `abstract_policy` for `train.load_policy`, which loads weights); a change
  there must be mirrored here until train.py exposes a build from given
  params (tests/test_plan.py checks the state against `train.build`'s).
  """
  model_config, params, frozen = abstract_policy(config, model_config)
  optimizer = optim.make_optimizer(
      total_steps=train_lib.total_optimizer_steps(config), **config.optimizer)
  components = train_lib.make_components(config)
  regularisers = [c for c in components.values()
                  if isinstance(c, regularisers_lib.Regulariser)]
  state = jax.eval_shape(
      lambda p: train_lib.init_state(p, optimizer, seed=config.seed,
                                     components=components), params)
  ref_params = None
  if any("ref_logp" in reg.reads for reg in regularisers):
    ref_params = frozen if frozen is not None else params
  group_size = train_lib.update_group_size(config, components)
  update_fn = update_lib.make_update_fn(
      model_config=model_config, optimizer=optimizer,
      objective=components["objective"], regularisers=regularisers,
      corrections=train_lib.make_corrections(config),
      microbatch_size=config.train.microbatch_size,
      chunk_size=config.train.chunk_size, group_size=group_size,
      replay_coef=repo_rollout.replay_coef(config), jit=False)
  return Training(model_config, state, frozen, ref_params, update_fn,
                  components, group_size)


def abstract_batch(config, *, rows: int, prompt_length: int,
                   token_advantages: bool) -> batch_lib.Batch:
  """ShapeDtypeStructs of a `batch.Batch` of `rows` rows as the rollout
  makes it (old log-probs off policy only, ref log-probs when beta > 0,
  the sampler's log-probs always, the replayed-row marks when the group
  strategy replays rows)."""
  t = config.rollout.max_new_tokens
  s = prompt_length + t
  f32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)
  on_policy = rollout_lib.is_on_policy(config)
  return batch_lib.Batch(
      tokens=jax.ShapeDtypeStruct((rows, s), jnp.int32),
      input_mask=f32(rows, s), completion_mask=f32(rows, t),
      advantages=f32(rows, t) if token_advantages else f32(rows),
      old_logp=None if on_policy else f32(rows, t),
      ref_logp=f32(rows, t) if config.kl.beta > 0 else None,
      sampler_logp=f32(rows, t), temperature=f32(rows),
      replayed=f32(rows) if layout.step_rows(config).adds_rows else None,
      **_abstract_topk(config, rows, t))


def _abstract_topk(config, rows: int, t: int) -> dict:
  """The sampler's top-K arrays, [rows, T, K], when it records them."""
  k = int(config.rollout.get("record_topk", 0))
  if not k:
    return {}
  return dict(sampler_topk_ids=jax.ShapeDtypeStruct((rows, t, k), jnp.int32),
              sampler_topk_logp=jax.ShapeDtypeStruct((rows, t, k),
                                                     jnp.float32))


class StepShapes(NamedTuple):
  """The shapes of one step: P prompts x G completions = N rows sampled;
  the rollout batch of `batch_rows` (N plus replayed rows) of Sp + T
  columns; update minibatches and microbatches, log-prob passes, in rows
  of that batch."""
  prompts: int
  generations: int
  rows: int
  batch_rows: int
  prompt_length: int
  new_tokens: int
  minibatch: int
  microbatch: int
  logprob_rows: int


def step_shapes(config, prompt_length: int = 0) -> StepShapes:
  """`StepShapes` of a config; `prompt_length` 0: the largest prompt
  bucket (the worst case a step can meet)."""
  r, t = config.rollout, config.train
  step = layout.step_rows(config)
  rows, batch_rows = step.sampled, step.total
  minibatch = batch_rows // t.num_minibatches
  return StepShapes(
      prompts=r.num_prompts, generations=r.num_generations, rows=rows,
      batch_rows=batch_rows,
      prompt_length=prompt_length or max(config.data.prompt_buckets),
      new_tokens=r.max_new_tokens, minibatch=minibatch,
      microbatch=t.microbatch_size or minibatch,
      logprob_rows=t.logprob_batch_size or batch_rows)


class Inputs(NamedTuple):
  """The programs' abstract inputs, laid out as the trainer lays them out
  (`sharding.tree_shardings` / `param_shardings`; rows over ('data',
  'fsdp'); host arrays, like the prompts, replicated)."""
  state: Any
  state_sharding: Any
  params: Any  # what trains: state.params
  frozen: Any  # a LoRA run's base, else None
  frozen_sharding: Any
  policy: Any  # the whole policy: params, with a LoRA base under them
  rows: NamedSharding
  whole: NamedSharding


def abstract_inputs(training: Training, mesh) -> Inputs:
  """`Inputs` of `training` on `mesh` (divisibility checked, as in
  `train.build`)."""
  state = training.state
  state_sh = sharding.tree_shardings(state, state.params, mesh, name="state")
  params = with_shardings(state.params,
                          sharding.param_shardings(state.params, mesh))
  frozen = frozen_sh = None
  if training.frozen is not None:
    frozen_sh = sharding.param_shardings(training.frozen, mesh)
    frozen = with_shardings(training.frozen, frozen_sh)
  return Inputs(
      state=with_shardings(state, state_sh), state_sharding=state_sh,
      params=params, frozen=frozen, frozen_sharding=frozen_sh,
      policy=policy_params(params, frozen),
      rows=NamedSharding(mesh, P(sharding.BATCH_AXES)),
      whole=sharding.replicated(mesh))


def resident_buffers(config, training: Training, inputs: Inputs,
                     shapes: StepShapes) -> Dict[str, int]:
  """Bytes per device of what stays on the device through a step, by name:
  ``params`` (what trains), ``optimizer_and_states`` (the rest of the
  state), ``frozen`` (a LoRA base, also its KL reference), ``ref_params``
  (the reference copy of full fine-tuning with KL) and ``rollout_batch``
  (the step's whole batch, kept on one device through the updates)."""
  resident = {"params": device_bytes(inputs.params),
              "optimizer_and_states": device_bytes(inputs.state)
                                      - device_bytes(inputs.params)}
  if inputs.frozen is not None:
    resident["frozen"] = device_bytes(inputs.frozen)
  elif training.ref_params is not None:
    resident["ref_params"] = resident["params"]
  resident["rollout_batch"] = device_bytes(abstract_batch(
      config, rows=shapes.batch_rows, prompt_length=shapes.prompt_length,
      token_advantages=training.components["advantage"].output == "token"))
  return resident


def resident_during(resident: Mapping[str, int],
                    arguments: Sequence[str]) -> int:
  """Bytes of the `resident` buffers (name -> bytes per device) that stay on
  the device while a program runs that takes the `arguments` ones as its
  arguments (and so counts them itself)."""
  unknown = set(arguments) - set(resident)
  if unknown:
    raise ValueError(f"arguments {sorted(unknown)} are not among the "
                     f"resident buffers {sorted(resident)}.")
  return sum(v for k, v in resident.items() if k not in arguments)


def out_of_memory(error: Exception) -> Tuple[str, int]:
  """(message, bytes needed or 0) of XLA's refusal to compile a program
  that does not fit the device, e.g. "RESOURCE_EXHAUSTED: Ran out of memory
  on HBM, the total memory required for HLO temporaries (31.96G) exceeds
  available HBM (15.75G)."; ("", 0) for any other error."""
  message = str(error).strip()
  if not message.startswith("RESOURCE_EXHAUSTED"):
    return "", 0
  message = message.splitlines()[0]
  needed = re.search(r"required[^(]*\(([0-9.]+)([KMGT])i?B?\)", message)
  if needed is None:
    return message, 0
  scale = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
  return message, int(float(needed.group(1)) * scale[needed.group(2)])


def _compiled_program(name, fn, args, *, mesh, calls, takes, resident,
                      flops) -> Program:
  """Lowers and compiles ``fn(*args)`` under `mesh` into a `Program`; a
  program XLA refuses for lack of device memory comes back with its
  message (`Program.error`) instead of raising."""
  start = time.perf_counter()
  with jax.set_mesh(mesh):
    lowered = fn.lower(*args)
    try:
      compiled = lowered.compile()
    except jax.errors.JaxRuntimeError as e:
      message, needed = out_of_memory(e)
      if not message:
        raise
      return Program(name, calls, None, resident_during(resident, takes),
                     None, int(flops), time.perf_counter() - start,
                     error=message, needed=needed)
  seconds = time.perf_counter() - start
  return Program(name, calls, memory_summary(compiled),
                 resident_during(resident, takes), xla_flops(compiled),
                 int(flops), seconds)


def update_program(config, training: Training, inputs: Inputs,
                   shapes: StepShapes, resident, *, mesh) -> Program:
  """The trainer's update on one minibatch, the state donated, laid out as
  `sharding.jit_sharded` lays it out (a LoRA base as a third argument)."""
  s = shapes
  batch = with_shardings(abstract_batch(
      config, rows=s.minibatch, prompt_length=s.prompt_length,
      token_advantages=training.components["advantage"].output == "token"),
                         inputs.rows)
  in_shardings = (inputs.state_sharding, inputs.rows)
  args = (inputs.state, batch)
  takes = ("params", "optimizer_and_states")
  if inputs.frozen is not None:
    in_shardings += (inputs.frozen_sharding,)
    args += (inputs.frozen,)
    takes += ("frozen",)
  jitted = jax.jit(training.update_fn, in_shardings=in_shardings,
                   out_shardings=(inputs.state_sharding, inputs.whole),
                   donate_argnums=(0,))
  micro_batches = s.minibatch // s.microbatch
  per_micro = sequence_forward_flops(
      training.model_config, rows=s.microbatch,
      prompt_length=s.prompt_length, completion_length=s.new_tokens,
      group_size=math.gcd(s.microbatch, training.group_size))
  # Forward, then the backward's two matmuls per forward one (gradients of
  # activations and of weights); a frozen base has no weight gradients
  # (LoRA's own small matmuls are left out); remat runs the forward again.
  passes = ((3 if inputs.frozen is None else 2)
            + (1 if training.model_config.remat else 0))
  flops = passes * per_micro * micro_batches
  if (training.components["objective"].prepass is not None
      and micro_batches > 1):
    flops += per_micro * micro_batches  # the statistics' pre-pass
  return _compiled_program(
      "update", jitted, args, mesh=mesh,
      calls=config.train.num_iterations * config.train.num_minibatches,
      takes=takes, resident=resident, flops=flops)


def sample_program(config, training: Training, inputs: Inputs,
                   shapes: StepShapes, resident, *, mesh) -> Program:
  """`sampling.sample` of P prompts x G completions: the prefill, then the
  decode loop (T - 1 steps after the prefill's token), in
  ``rollout.slots`` slots where set (the memory is the compiled program's;
  the FLOPs count every row at full length, an upper bound)."""
  r, s, cfg = config.rollout, shapes, training.model_config

  def sample_fn(params, prompt_tokens, prompt_mask, key):
    return sampling.sample(
        params, cfg, prompt_tokens, prompt_mask, key,
        num_samples=s.generations, max_new_tokens=s.new_tokens,
        temperature=r.temperature, top_k=r.top_k or None,
        top_p=r.top_p if r.top_p < 1.0 else None, eos_ids=(0,), pad_id=0,
        slots=r.get("slots", 0) or None)
  prompts = (s.prompts, s.prompt_length)
  args = (inputs.policy,
          jax.ShapeDtypeStruct(prompts, jnp.int32, sharding=inputs.whole),
          jax.ShapeDtypeStruct(prompts, jnp.bool_, sharding=inputs.whole),
          jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=inputs.whole))
  length = s.prompt_length + s.new_tokens
  decoded = s.rows * (s.new_tokens - 1)
  flops = (forward_flops(cfg, queries=s.prompts * s.prompt_length,
                         keys=length, logit_positions=s.prompts)
           + forward_flops(cfg, queries=decoded, keys=length,
                           logit_positions=decoded))
  # The rollout batch does not exist yet while sampling.
  takes = ("params",) + (() if inputs.frozen is None else ("frozen",))
  return _compiled_program("sample", jax.jit(sample_fn), args, mesh=mesh,
                           calls=1, takes=takes + ("rollout_batch",),
                           resident=resident, flops=flops)


def logprob_program(name: str, params, takes, config, training: Training,
                    inputs: Inputs, shapes: StepShapes, resident, *,
                    mesh) -> Program:
  """A rollout log-prob pass (`batch.policy_logprobs`, no gradient) of
  `params` over ``train.logprob_batch_size`` rows, as many times as the
  rollout batch's rows need (replayed rows too: `batch.assemble_batch`
  runs over the whole batch)."""
  s, cfg = shapes, training.model_config
  group = math.gcd(s.logprob_rows, training.group_size)

  def logprob_fn(params, tokens, input_mask, temperature):
    return batch_lib.policy_logprobs(
        params, cfg, tokens, input_mask, s.prompt_length,
        temperature=temperature, chunk_size=config.train.chunk_size,
        group_size=group)[0]
  columns = (s.logprob_rows, s.prompt_length + s.new_tokens)
  args = (params,
          jax.ShapeDtypeStruct(columns, jnp.int32, sharding=inputs.whole),
          jax.ShapeDtypeStruct(columns, jnp.float32, sharding=inputs.whole),
          jax.ShapeDtypeStruct((s.logprob_rows,), jnp.float32,
                               sharding=inputs.whole))
  flops = sequence_forward_flops(
      cfg, rows=s.logprob_rows, prompt_length=s.prompt_length,
      completion_length=s.new_tokens, group_size=group)
  return _compiled_program(name, jax.jit(logprob_fn), args, mesh=mesh,
                           calls=s.batch_rows // s.logprob_rows, takes=takes,
                           resident=resident, flops=flops)


PROGRAMS = ("update", "sample", "old_logprobs", "ref_logprobs")


def budget_notes(config, training: Training) -> list:
  """What the plan leaves out under an active budget stage: the sample
  program is the plain P x G one (a budget's ragged call of N rows has the
  same rows and prefill), and sGPO's profiling pass, which runs once, at
  the first step, in calls of at most N rows
  (`rollout.budgets.profile_batch`) that are neither compiled nor counted
  here."""
  budget = training.components["budget"]
  if not budget.active:
    return []
  notes = [f"budget.name={budget.name!r}: groups are ragged within the "
           "N rows; the update and log-prob passes share no prompt per "
           "block (group_size 1)."]
  if budget.profile_samples:
    notes.append(f"{budget.name!r} profiles every training problem "
                 f"({budget.profile_samples} completions each) once, at "
                 "the first step, in calls of at most N rows; that pass is "
                 "not compiled or counted here.")
  return notes


def plan(config, *, mesh, model_config: Optional[models.ModelConfig] = None,
         prompt_length: int = 0, programs: Sequence[str] = PROGRAMS) -> Plan:
  """Compiles a step's programs for `config` on `mesh`; see the module
  docstring.

  Args:
    config: a validated config. ``model.name`` is read without weights
      (`model_config_from_name`); ``model.dtype`` (and ``lora``) where the
      config has them.
    mesh: the mesh, whose size the config's ``mesh.shape`` must use
      (`mesh_for`).
    model_config: overrides ``model.name``.
    prompt_length: Sp; 0 = the largest of ``data.prompt_buckets``.
    programs: which of `PROGRAMS` to compile, among those the config runs
      (the old log-prob pass off policy only, the reference's with KL).

  Returns:
    A `Plan`.
  """
  notes = []
  if model_config is None:
    model_config, model_notes = model_config_from_name(
        config.model.name, dtype=config.model.get("dtype", "float32"),
        param_dtype=config.model.get("param_dtype", "float32"))
    notes += model_notes
  shapes = step_shapes(config, prompt_length)
  sharding.check_rows(shapes.minibatch, mesh, name="train.num_minibatches")
  training = abstract_training(config, model_config)
  rounds = training.components["groups"].rounds_per_step
  if rounds > 1:
    notes.append(f"groups.name={config.groups.name!r} may sample up to "
                 f"{rounds} rounds a step; the FLOPs count one.")
  notes += budget_notes(config, training)
  if shapes.batch_rows != shapes.rows:
    notes.append(f"groups.name={config.groups.name!r} replays rows: the "
                 f"update and log-prob passes see {shapes.batch_rows} rows "
                 f"a step, the sampler P x G = {shapes.rows}.")
  inputs = abstract_inputs(training, mesh)
  resident = resident_buffers(config, training, inputs, shapes)
  common = dict(config=config, training=training, inputs=inputs,
                shapes=shapes, resident=resident, mesh=mesh)

  compiled = []
  if "update" in programs:
    compiled.append(update_program(**common))
  if "sample" in programs:
    compiled.append(sample_program(**common))
  policy = ("params",) + (() if inputs.frozen is None else ("frozen",))
  if "old_logprobs" in programs and not rollout_lib.is_on_policy(config):
    compiled.append(logprob_program("old_logprobs", inputs.policy, policy,
                                    **common))
  if "ref_logprobs" in programs and config.kl.beta > 0:
    # LoRA: the reference is the frozen base itself.
    if inputs.frozen is not None:
      reference, takes = inputs.frozen, ("frozen",)
    else:
      reference, takes = inputs.params, ("ref_params",)
    compiled.append(logprob_program("ref_logprobs", reference, takes,
                                    **common))

  num_params = param_count(inputs.policy)
  device = mesh.devices.flat[0]
  s = shapes
  return Plan(
      model_name=config.model.name, model_config=training.model_config,
      num_params=num_params, trainable_params=param_count(inputs.params),
      mesh_shape=dict(mesh.shape),
      platform="cpu" if device.platform == "cpu" else device.device_kind,
      shapes=s._asdict(), resident=resident, programs=tuple(compiled),
      six_nd=training_flops(num_params, config.train.num_iterations
                            * s.batch_rows
                            * (s.prompt_length + s.new_tokens)),
      notes=tuple(notes))
