"""The training step and the loop: TrainState, build(), train().

One step (see DESIGN.md, "One training step, as data"):

1. `rollout.generate` samples G completions for each of P prompts, scores
   them, computes advantages and the behaviour (and reference) log-probs with
   `batch.policy_logprobs`, and returns a `batch.Batch` of N = P*G rows. When
   the batch feeds a single optimiser step the behaviour log-probs are the
   update's own, detached, and that pass is skipped (`rollout.is_on_policy`).
2. The loop makes ``num_iterations`` passes over the batch in minibatches; each
   minibatch is one call of the jitted `update_fn`, i.e. one optimiser step.
3. `update_fn` (`update.make_update_fn`) accumulates the minibatch's
   gradient over microbatches, exactly the one-shot gradient, and skips a
   non-finite or empty update (counted in ``skipped_updates``).

Every component (objective, regularisers, advantage estimator) is a record
built once in `build`; its state lives in ``TrainState.states`` under its
name, stateless ones holding ``()``, and is checkpointed with the rest.

Everything random derives from (seed, step): the data of step s is
``task.train(s, P)`` and its sampling key ``fold_in(key, s)``, so a run resumed
from a checkpoint continues exactly as an uninterrupted one. A run's
checkpoints are read back for evaluation and export by `train.saved_runs`.
"""

import inspect
import json
import logging
import os
import pathlib
import time
from typing import Any, Callable, Mapping, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax.runtime import checkpoint as checkpoint_lib
from grpo_jax import config as config_lib
from grpo_jax import evaluation
from grpo_jax.runtime import faults
from grpo_jax import measures
from grpo_jax.runtime import metrics as metrics_lib
from grpo_jax import models
from grpo_jax import objectives
from grpo_jax.train import optim
from grpo_jax.train import packing
from grpo_jax.train import resume
from grpo_jax.objectives import corrections as corrections_lib
from grpo_jax.objectives import regularisers as regularisers_lib
from grpo_jax import rollout as rollout_lib
from grpo_jax.rollout import build as rollout_build
from grpo_jax.rollout import checks as stage_checks
from grpo_jax.rollout import layout
from grpo_jax.rollout import repo as repo_rollout
from grpo_jax.runtime import sharding
from grpo_jax.runtime import tracking
from grpo_jax.train import update as update_lib
from grpo_jax.models import loading
from grpo_jax.models import lora
from grpo_jax.rewards import references as reward_references
from grpo_jax.rewards import workers as reward_workers


class TrainState(NamedTuple):
  """Everything a checkpoint must hold to continue a run exactly.

  Attributes:
    params: the policy's parameters.
    opt_state: the optax state.
    step: [] int32, training steps (rollouts) completed.
    key: the run's base PRNG key; step s samples with ``fold_in(key, s)``.
    states: every component's state by name (``objective``, ``kl``, ...):
      R2VPO's dual variable, an estimator's running statistics; ``()`` for
      a stateless one.
  """
  params: Any
  opt_state: Any
  step: jnp.ndarray
  key: jnp.ndarray
  states: Mapping[str, Any]


def init_state(params, optimizer, *, seed: int,
               components: Mapping[str, Any]) -> TrainState:
  """Step 0: the model's params, a fresh optimiser state, key from seed,
  and every component's initial state (``components``: name -> record
  with ``init()``, ``objective`` required; `initial_state`)."""
  key = jax.random.PRNGKey(seed)
  state_key = jax.random.fold_in(key, _STATE_KEY)
  return TrainState(
      params=params,
      opt_state=optimizer.init(params),
      step=jnp.zeros((), jnp.int32),
      key=key,
      states={name: initial_state(c, state_key)
              for name, c in components.items()})


def initial_state(component, key):
  """``component.init()``; an init that takes ``key=`` (the objective's:
  Clip-Cov's draw) is given the run's key for states' own randomness."""
  if "key" in inspect.signature(component.init).parameters:
    return component.init(key=key)
  return component.init()


# Folded into the run's key for the states' own randomness: above any step
# count, so that no step's key fold_in(key, s) is theirs.
_STATE_KEY = 0x0B1EC7
# Component states a checkpoint written before the component kept state
# holds empty: they resume from their initial state (`checkpoint.restore`).
INITIAL_STATES = ("states/objective",)


# ---------------------------------------------------------------- the loop


class Loop(NamedTuple):
  """The loop's settings, read from the config once by `build`."""
  num_steps: int
  num_iterations: int  # passes over each rollout batch
  num_minibatches: int  # optimiser steps per pass
  checkpoint_every: int
  max_to_keep: int
  tensorboard: bool
  plot: bool
  eval_every: int = 0  # steps between held-out evaluations; 0 = none
  # `faults.check_health`'s limits; 0 = never stop.
  max_nonfinite_updates: int = 10
  max_failing_steps: int = 3
  reward_names: tuple = ()  # the verifiers' and the shapers'
  on_corrupt: str = "error"  # `checkpoint.ON_CORRUPT`
  # (state path prefix, the config field sizing it) for restore errors.
  state_hints: tuple = ()
  wandb: Optional[tracking.Settings] = None  # None: no W&B logging


class Run(NamedTuple):
  """What `build` makes from a config, everything `train` needs; nothing
  reads the config after `build` (it is kept as the checkpoints' metadata)."""
  config: Any
  model_config: models.ModelConfig
  tokenizer: Any
  state: TrainState
  ref_params: Any
  # A LoRA run's frozen base params (state.params are the adapters); None
  # when every weight trains.
  frozen: Any
  update_fn: Callable
  # (params, ref_params, step, key, stage states)
  #   -> (batch, measurements, stage states): `rollout.generate`.
  rollout_fn: Callable
  mesh: jax.sharding.Mesh  # sampling, log-probs and the update run on it.
  loop: Loop
  # params -> held-out figures (`evaluation.from_config`); None when off.
  evaluate_fn: Optional[Callable] = None


def total_optimizer_steps(config) -> int:
  return (config.train.num_steps * config.train.num_iterations
          * config.train.num_minibatches)


def update_group_size(config, components) -> int:
  """The update's shared-prompt block (`update.make_update_fn` group_size), for
  `build` and the planner alike: 1 under an active budget stage (ragged
  groups: rows of a block no longer share a prompt), else G plus RePO's K
  replay rows per group."""
  rows = layout.step_rows(config)
  if components["budget"].active or rows.replayed:
    return 1  # (row replay: replayed rows carry their own prompts)
  return rows.generations + rows.extra_per_group


def make_components(config) -> dict:
  """Every component of a config, built once, by the name its state has in
  ``TrainState.states``: the rollout's stages (`rollout.STAGES`: select,
  groups, advantage, credit, rows), ``objective`` and each regulariser
  (``kl`` when ``kl.beta > 0``, ``asymmetric_kl`` with ``kl.beta_neg >
  0`` too, ``entropy_bonus`` when ``entropy.coef > 0``, aggregated like the
  objective; ``llds`` when ``llds.coef > 0``, a token mean). The corrections are
  stateless: `make_corrections`."""
  objective = objectives.make(config.objective.name,
                              **config.objective.kwargs)
  components = dict(rollout_build.make_components(config), objective=objective)
  if config.kl.beta > 0:
    # kl.beta_neg > 0: MDP-GRPO's asymmetric KL, kl.beta on tokens of A >= 0.
    name, betas = (("asymmetric_kl", dict(beta_pos=float(config.kl.beta),
                                          beta_neg=float(config.kl.beta_neg)))
                   if config.kl.get("beta_neg", 0.0) > 0
                   else ("kl", dict(beta=float(config.kl.beta))))
    components[name] = regularisers_lib.make(
        name, estimator=config.kl.estimator, **betas,
        aggregation=objective.aggregation, horizon=objective.horizon)
  if config.entropy.coef > 0:
    components["entropy_bonus"] = regularisers_lib.make(
        "entropy_bonus", coef=float(config.entropy.coef),
        aggregation=objective.aggregation, horizon=objective.horizon)
  if config.llds.coef > 0:
    components["llds"] = regularisers_lib.make(
        # The authors' token mean over all response tokens, whatever the
        # objective's aggregation.
        "llds", lam=float(config.llds.coef), gate=config.llds.gate,
        aggregation="token_mean")
  return components


def make_corrections(config) -> list:
  """The token weights and masks of ``config.corrections`` (name ->
  options), in order (`objectives.corrections`)."""
  return [corrections_lib.make(name, **options)
          for name, options in config.corrections.items()]


def enable_compilation_cache(path: str) -> None:
  """Keeps every compiled program under `path` (jax's persistent cache;
  "" leaves jax's setting alone), so that the first step of a rerun loads
  the sampler and the update instead of compiling them."""
  if not path:
    return
  jax.config.update("jax_compilation_cache_dir", os.path.expanduser(path))
  # Cache every program: the step's smaller ones add up too.
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # 0: auto


def validate(config):
  """Returns `config` when a run can start from it; else ValueError
  ``config.<field>: problem; fix.`` before any model loads or any function
  compiles: the fields (`config.check_fields`), then each stage's options
  and what the stages need of each other (`rollout.checks.check_stages`)."""
  config_lib.check_fields(config)
  stage_checks.check_stages(config)
  return config


def build(config) -> Run:
  """Validates `config`, then `build_validated`."""
  return build_validated(validate(config))


def build_validated(config) -> Run:
  """Loads model, task and rewards of a validated config; builds the
  functions.

  The reference params are a copy of the initial params and exist only when
  ``kl.beta > 0``. A hub model's revision is pinned to the commit loaded
  (`Run.config`, saved with every checkpoint), so that resuming, evaluating
  or exporting (a LoRA run's adapters above all) reads the same base weights
  even after the hub's branch moves on.
  """
  config_lib.check_files(config)
  if config.train.get("pack_rows", False):  # before loading: one device's rows
    packing.check_mesh(sharding.mesh_from_config(config.mesh))
  enable_compilation_cache(config.train.compilation_cache_dir)
  if config.rewards.workers:  # their start overlaps loading and compiling
    reward_workers.start(config.rewards.workers)
  model_config, params, frozen, tokenizer = load_policy(config)
  config = pin_hub_revision(config)
  optimizer = optim.make_optimizer(
      total_steps=total_optimizer_steps(config), **config.optimizer)
  components = make_components(config)
  objective = components["objective"]
  regularisers = [c for name, c in components.items()
                  if isinstance(c, regularisers_lib.Regulariser)]
  state = init_state(params, optimizer, seed=config.seed,
                     components=components)
  # Params, optimiser state and reference params laid out on the mesh.
  mesh = sharding.mesh_from_config(config.mesh)
  sharding.check_rows(
      layout.step_rows(config).total // config.train.num_minibatches,
      mesh, name="train.num_minibatches")
  state = sharding.shard_tree(state, state.params, mesh)
  if frozen is not None:
    frozen = sharding.shard_params(frozen, mesh)
  ref_params = None
  if any("ref_logp" in reg.reads for reg in regularisers):
    # LoRA: the frozen base is the reference. Otherwise a distinct copy,
    # since update_fn donates the state's buffers.
    ref_params = frozen if frozen is not None else sharding.shard_params(
        jax.tree.map(jnp.copy, params), mesh)
  update_fn = update_lib.make_update_fn(
      model_config=model_config, optimizer=optimizer, objective=objective,
      regularisers=regularisers, corrections=make_corrections(config),
      microbatch_size=config.train.microbatch_size,
      chunk_size=config.train.chunk_size,
      group_size=update_group_size(config, components),
      replay_coef=repo_rollout.replay_coef(config), jit=False)
  update_fn = sharding.jit_sharded(update_fn, state, mesh, frozen=frozen)
  if config.train.get("pack_rows", False):  # each minibatch's plan, on host
    update_fn = packing.with_plans(
        update_fn, group_size=update_group_size(config, components),
        microbatch_size=config.train.microbatch_size)
  rollout_fn = rollout_build.from_config(
      config, model_config, tokenizer,
      {name: components[name] for name in rollout_lib.STAGES})
  loop = Loop(
      num_steps=config.train.num_steps,
      num_iterations=config.train.num_iterations,
      num_minibatches=config.train.num_minibatches,
      checkpoint_every=config.checkpoint.every,
      max_to_keep=config.checkpoint.max_to_keep,
      tensorboard=config.metrics.tensorboard, plot=config.metrics.plot,
      eval_every=config.eval.every,
      max_nonfinite_updates=config.train.max_nonfinite_updates,
      max_failing_steps=config.rewards.max_failing_steps,
      # A shaper that raises counts like a verifier (its column is 0 then).
      reward_names=(reward_references.columns(config.rewards.functions)
                    + tuple(config.rewards.shapers)),
      on_corrupt=config.checkpoint.on_corrupt,
      state_hints=_state_hints(config, components),
      wandb=tracking.settings_from_config(config.metrics))
  evaluate_fn = evaluation.from_config(config, model_config, tokenizer)
  return Run(config, model_config, tokenizer, state, ref_params, frozen,
             update_fn, rollout_fn, mesh, loop, evaluate_fn)


def _check_objective_unchanged(config, saved: dict, state, ckpt_dir: str):
  """`INITIAL_STATES` lets a checkpoint written before its objective kept
  state resume; a checkpoint of another, stateless objective must not."""
  name = json.loads(saved.get("config", "{}")).get(
      "objective", {}).get("name", config.objective.name)
  if name != config.objective.name and jax.tree.leaves(
      state.states.get("objective", ())):
    raise checkpoint_lib.StateMismatch(
        f"the checkpoints in {ckpt_dir} were written by objective {name!r}; "
        f"config.objective.name is {config.objective.name!r}, whose state "
        "they do not hold: set it back, or train in a new --workdir")


def _state_hints(config, components) -> tuple:
  """What sizes a stage's fixed-capacity state, for a checkpoint of
  another size (`checkpoint.StateMismatch`)."""
  if not jax.tree.leaves(components["groups"].init()):
    return ()
  return (("states/groups/", (
      f"group strategy {config.groups.name!r}'s buffer holds "
      "config.groups.kwargs.capacity groups, each of rollout.num_generations "
      "x rollout.max_new_tokens tokens and a prompt of the largest "
      "data.prompt_buckets (RePO's: capacity prompts x "
      "groups.kwargs.max_cache_size entries of rollout.max_new_tokens "
      "tokens); resume with the capacity it was written with")),)


# Folded into the seed for the LoRA A matrices' initialisation.
_LORA_KEY = 0x10A4


def pin_hub_revision(config):
  """`config`, or a copy whose ``model.revision`` is the commit of the hub
  snapshot ``model.name`` resolved to (from the local cache)."""
  name = config.model.name
  if (config.model.revision or pathlib.Path(name).expanduser().exists()
      or not loading.is_hub_id(name)):
    return config
  pinned = config.copy_and_resolve_references()
  pinned.model.revision = loading.hub_snapshot(name).name
  return pinned


def load_policy(config) -> tuple:
  """(model_config, trainable params, frozen params or None, tokenizer).

  Full fine-tuning trains the loaded params (frozen None); with
  ``lora.rank > 0`` the trainable params are fresh adapters
  (`models.lora`) and the loaded params are the frozen base. Params are
  float32 either way; ``model.dtype`` is the compute dtype.
  """
  model_config, params, tokenizer = models.load_model(
      config.model.name, seed=config.seed, revision=config.model.revision,
      dtype=config.model.dtype)
  model_config = model_config.replace(remat=config.model.remat)
  if not config.lora.rank:
    return model_config, params, None, tokenizer
  model_config = model_config.replace(
      lora_scale=config.lora.alpha / config.lora.rank)
  adapters = lora.init_adapters(
      params, rank=config.lora.rank, targets=tuple(config.lora.targets),
      key=jax.random.fold_in(jax.random.PRNGKey(config.seed), _LORA_KEY))
  return model_config, adapters, params, tokenizer


def policy_params(run: Run, params):
  """The model params of the policy whose trainable part is `params`
  (`state.params`): with LoRA, the base and the adapters together."""
  return params if run.frozen is None else lora.combine(run.frozen, params)


def train_step(run: Run, state: TrainState, step: int):
  """One training step: rollout, num_iterations x minibatches of updates.

  Returns (state, measurements dict of floats).
  """
  loop = run.loop
  t0 = time.perf_counter()
  # Under the mesh the sampler and the log-prob passes split their rows
  # over ('data', 'fsdp') like the update (see `sharding.constrain`).
  with jax.set_mesh(run.mesh):
    batch, measurements, stage_states = run.rollout_fn(
        policy_params(run, state.params), run.ref_params, step,
        jax.random.fold_in(state.key, step),
        {name: state.states[name] for name in rollout_lib.STAGES})
  state = state._replace(states=dict(state.states, **stage_states))
  t1 = time.perf_counter()
  records, tokens = [], []
  for _ in range(loop.num_iterations):
    for minibatch in update_lib.minibatches(batch, loop.num_minibatches):
      tokens.append(minibatch.input_mask.sum())
      state, r = run.update_fn(state, minibatch)
      records.append(r)
  records, tokens = jax.device_get((records, tokens))
  measurements.update(
      (name, float(value)) for name, value in
      measures.values(measures.merge_all(records)).items())
  measurements["nonfinite_updates/trailing"] = float(
      faults.trailing_nonfinite(records))
  jax.block_until_ready(state.params)
  t2 = time.perf_counter()
  # Placed like the old count: replicated over the mesh, so that every
  # process holds it and a multi-host checkpoint can save it.
  state = state._replace(step=jax.device_put(
      np.asarray(step + 1, np.int32), state.step.sharding))
  measurements["time/rollout_s"] = t1 - t0
  measurements["time/update_s"] = t2 - t1
  measurements["tokens_per_s"] = (
      float(np.asarray(batch.completion_mask).sum()) / max(t2 - t0, 1e-9))
  # The tokens of the updates that were applied: 0 when all were skipped.
  measurements["time/update_tokens_per_s"] = (
      update_lib.applied_tokens(records, tokens) / max(t2 - t1, 1e-9))
  return state, measurements


def evaluate_step(run: Run, state: TrainState) -> dict:
  """`run.evaluate_fn`'s held-out figures of the state's params as
  ``eval/<name>`` measurements, and ``time/eval_s``."""
  t0 = time.perf_counter()
  with jax.set_mesh(run.mesh):  # the params' mesh, as in the rollout
    figures = run.evaluate_fn(policy_params(run, state.params))
  measurements = {f"eval/{name}": value for name, value in figures.items()}
  measurements["time/eval_s"] = time.perf_counter() - t0
  return measurements


def train(config, workdir: str, *, callback: Optional[Callable] = None,
          run: Optional[Run] = None) -> TrainState:
  """Trains for ``config.train.num_steps`` steps, resuming if possible.

  Writes ``workdir/config.json`` (the config as run), ``metrics.jsonl``,
  TensorBoard events, ``curves.png`` and checkpoints under
  ``workdir/checkpoints`` (every ``checkpoint.every`` steps and at the end).
  If a checkpoint exists the run continues from the latest one, exactly as
  if it had never stopped; a config that differs from the one it saved
  (beyond `resume.RESUMABLE`: num_steps, checkpoint/eval/logging settings)
  is refused first, unless ``train.allow_config_change``. With ``eval.every`` the held-out
  figures (`evaluation.from_config`) join the record of every
  ``eval.every``-th step and of the last, as ``eval/<name>``.

  Faults (`faults`, `checkpoint`): the workdir is probed for writing before
  the model loads. SIGTERM or a first SIGINT ends the run after the current
  step with a checkpoint (the returned state's step then falls short of
  ``num_steps``); an unreadable newest checkpoint is an error unless
  ``checkpoint.on_corrupt="previous"``; too many non-finite updates in a row
  or a reward failing every step stop the run with an error, and a periodic
  checkpoint waits for a finite update, so the newest one is a good one.

  On several processes every process calls `train` with the same config
  and workdir (storage all of them see): all take part in each step and
  in each orbax save, and only process 0 writes metrics, TensorBoard and
  the plot. The measurements are global figures (see `rollout`), and
  `callback` runs on every process with the same record.

  Args:
    config: a validated-or-not ConfigDict (validated here before compute).
    workdir: the run directory.
    callback: called as ``callback(step, record)`` after each step.
    run: a prebuilt `build(config)` (tests reuse compiled functions).

  Returns:
    The final TrainState.
  """
  ckpt_dir = checkpoint_directory(workdir)
  if run is None:
    validate(config)  # before the probe makes the workdir
  checkpoint_lib.check_writable(ckpt_dir)
  # A resume under another config, before the model loads.
  resume.check_config_unchanged(config if run is None else run.config,
                                ckpt_dir)
  # From the start: a preemption while the model loads ends the run too.
  with faults.StopSignals() as signals:
    run = run or build_validated(config)
    checkpoint_lib.check_writable(ckpt_dir,
                                  needed_bytes=_tree_bytes(run.state))
    return _loop(run, workdir, ckpt_dir, signals, callback)


def _loop(run: Run, workdir: str, ckpt_dir: str, signals: faults.StopSignals,
          callback: Optional[Callable]) -> TrainState:
  """`train`'s resume, steps and saves, under `signals`."""
  loop = run.loop
  checkpointer = checkpoint_lib.Checkpointer(ckpt_dir,
                                             max_to_keep=loop.max_to_keep)
  writer, failed = None, False
  try:
    # A copy: update_fn donates the state's buffers, and run.state must
    # stay usable (tests reuse one `run` for several trainings).
    state = jax.tree.map(jnp.copy, run.state)
    start, health = 0, faults.Health()
    restored = checkpointer.restore_newest(state, on_corrupt=loop.on_corrupt,
                                           hints=loop.state_hints,
                                           initial=INITIAL_STATES)
    if restored is not None:
      start, state, saved = restored
      _check_objective_unchanged(run.config, saved, state, ckpt_dir)
      health = faults.Health.from_json(saved.get("health"))
      logging.info("resuming from the checkpoint of step %d in %s", start,
                   workdir)
    stop = signals.requested(start)
    if stop:
      logging.warning("stopped by %s before step %d; nothing was lost.",
                      stop, start)
      return state
    config_json = run.config.to_json_best_effort()
    if sharding.is_main_process():
      writer = metrics_lib.MetricsWriter(
          workdir, start_step=start, tensorboard=loop.tensorboard,
          wandb=loop.wandb, config=json.loads(config_json))
      metrics_lib.write_config(workdir, config_json)
    save_due = False
    for step in range(start, loop.num_steps):
      state, measurements = train_step(run, state, step)
      if run.evaluate_fn is not None and (
          (step + 1) % loop.eval_every == 0 or step + 1 == loop.num_steps):
        measurements.update(evaluate_step(run, state))
      if writer is not None:
        record = writer.write(step, measurements)
      else:
        record = metrics_lib.to_record(step, measurements)
      if callback is not None:
        callback(step, record)
      health = faults.check_health(
          health, step, measurements, reward_names=loop.reward_names,
          max_nonfinite_updates=loop.max_nonfinite_updates,
          max_failing_steps=loop.max_failing_steps)
      done = step + 1
      stop = signals.requested(done)
      save_due |= done % loop.checkpoint_every == 0
      # A step whose every update was non-finite may be the start of a storm
      # that stops the run: its periodic save waits for a finite update, so
      # that the newest checkpoint is from before the storm.
      stalled = bool(loop.max_nonfinite_updates and health.nonfinite_streak
                     and health.last_finite_step != step)
      if (save_due and not stalled) or stop or done == loop.num_steps:
        checkpointer.save(done, state, {"config": config_json,
                                        "health": health.to_json()})
        save_due = False
        stop = stop or signals.requested(done)  # one that came during the save
      if stop and done < loop.num_steps:
        logging.warning(
            "stopped by %s after step %d of %d; checkpoint %d saved in %s. "
            "Rerun the same command to resume.", stop, done, loop.num_steps,
            done, ckpt_dir)
        break
  except BaseException:
    failed = True  # W&B marks the run failed
    raise
  finally:
    if writer is not None:
      writer.close(failed=failed)
    checkpointer.close()
  if writer is not None and loop.plot:
    metrics_lib.plot(metrics_lib.read(writer.path),
                     os.path.join(workdir, metrics_lib.PLOT_FILE))
  return state


def checkpoint_directory(workdir: str) -> str:
  """Where a run in `workdir` keeps its checkpoints."""
  return os.path.join(workdir, "checkpoints")


def _tree_bytes(tree) -> int:
  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))
