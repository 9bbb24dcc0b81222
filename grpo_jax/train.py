"""The training step and the loop: TrainState, update_fn, train().

One step (see DESIGN.md, "One training step, as data"):

1. `rollout.generate` samples G completions for each of P prompts, scores
   them, computes advantages and the behaviour (and reference) log-probs with
   `policy_logprobs`, and returns a `rollout.Batch` of N = P*G rows. When the
   batch feeds a single optimiser step the behaviour log-probs are the
   update's own, detached, and that pass is skipped (`rollout.is_on_policy`).
2. The loop makes ``num_iterations`` passes over the batch in minibatches; each
   minibatch is one call of the jitted `update_fn`, i.e. one optimiser step.
3. Inside `update_fn` the minibatch is split into microbatches and the
   gradient accumulated with ``lax.scan``. Every microbatch's loss is its
   ``aux.loss_sum`` divided by the loss count of the WHOLE minibatch (and the
   KL term likewise), so the accumulated gradient is the one-shot gradient
   whatever the microbatch size.
4. A non-finite loss or gradient leaves params, optimiser state and
   objective state unchanged and is counted in ``skipped_updates``.

Everything random derives from (seed, step): the data of step s is
``task.train(s, P)`` and its sampling key ``fold_in(key, s)``, so a run resumed
from a checkpoint continues exactly as an uninterrupted one.
"""

import inspect
import logging
import os
import time
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from grpo_jax import aggregation as agg
from grpo_jax import checkpoint as checkpoint_lib
from grpo_jax import kl as kl_lib
from grpo_jax import metrics as metrics_lib
from grpo_jax import models
from grpo_jax import objectives
from grpo_jax import rollout as rollout_lib
from grpo_jax import sharding


class TrainState(NamedTuple):
  """Everything a checkpoint must hold to continue a run exactly.

  Attributes:
    params: the policy's parameters.
    opt_state: the optax state.
    step: [] int32, training steps (rollouts) completed.
    key: the run's base PRNG key; step s samples with ``fold_in(key, s)``.
    objective_state: a stateful objective's state (R2VPO's dual variable),
      else ().
  """
  params: Any
  opt_state: Any
  step: jnp.ndarray
  key: jnp.ndarray
  objective_state: Any


# ------------------------------------------------------------- optimiser


def make_schedule(*, learning_rate: float, warmup_steps: int, decay: str,
                  total_steps: int, final_lr_fraction: float = 0.1
                  ) -> optax.Schedule:
  """Linear warmup to `learning_rate`, then cosine/linear decay or constant.

  Args:
    learning_rate: peak learning rate (>= 0).
    warmup_steps: optimiser steps of linear warmup from 0.
    decay: ``cosine``, ``linear`` or ``constant``.
    total_steps: optimiser steps of the whole run (warmup included).
    final_lr_fraction: the decayed learning rate at the end, as a fraction.
  """
  if learning_rate < 0:
    raise ValueError(f"learning_rate must be >= 0; got {learning_rate}.")
  end = learning_rate * final_lr_fraction
  decay_steps = max(total_steps - warmup_steps, 1)
  if decay == "cosine":
    after = optax.cosine_decay_schedule(
        learning_rate, decay_steps, alpha=final_lr_fraction)
  elif decay == "linear":
    after = optax.linear_schedule(learning_rate, end, decay_steps)
  elif decay == "constant":
    after = optax.constant_schedule(learning_rate)
  else:
    raise ValueError(
        f"decay={decay!r} is unknown; choose cosine, linear or constant.")
  if warmup_steps <= 0:
    return after
  warmup = optax.linear_schedule(0.0, learning_rate, warmup_steps)
  return optax.join_schedules([warmup, after], [warmup_steps])


def make_optimizer(*, learning_rate: float, warmup_steps: int = 0,
                   decay: str = "constant", total_steps: int = 1,
                   final_lr_fraction: float = 0.1, weight_decay: float = 0.0,
                   b1: float = 0.9, b2: float = 0.99, eps: float = 1e-8,
                   max_grad_norm: float = 1.0
                   ) -> optax.GradientTransformation:
  """Global-norm clipping, then AdamW on the warmup + decay schedule.

  The learning rate is an injected hyperparameter, so the value used at each
  step is in the optimiser state (``learning_rate`` measurement).
  """
  schedule = make_schedule(
      learning_rate=learning_rate, warmup_steps=warmup_steps, decay=decay,
      total_steps=total_steps, final_lr_fraction=final_lr_fraction)
  return optax.chain(
      optax.clip_by_global_norm(max_grad_norm),
      optax.inject_hyperparams(optax.adamw)(
          learning_rate=schedule, b1=b1, b2=b2, eps=eps,
          weight_decay=weight_decay))


# -------------------------------------------------------------- log-probs


# Re-exported: the trainer's log-probs are the rollout's (one definition).
policy_logprobs = rollout_lib.policy_logprobs


# ------------------------------------------------------------- the update


def _takes(fn: Callable, name: str) -> bool:
  return name in inspect.signature(fn).parameters


def objective_call_kwargs(objective_name: str, objective_kwargs: dict, *,
                          aggregation: str, horizon: Optional[int]) -> dict:
  """Keyword arguments for the objective: its hparams, plus aggregation and
  horizon when it takes them (sequence-level objectives do not)."""
  fn = objectives.get(objective_name)
  kwargs = dict(objective_kwargs)
  if _takes(fn, "aggregation"):
    kwargs["aggregation"] = aggregation
  if _takes(fn, "horizon"):
    kwargs["horizon"] = horizon
  return kwargs


def kl_aggregation(objective_name: str, aggregation: str) -> str:
  """The KL term uses the objective's aggregation; sequence-level objectives
  (which have none) use ``seq_mean_token_mean``, their per-sequence mean."""
  if objectives.is_sequence_level(objective_name):
    return "seq_mean_token_mean"
  return aggregation


def _split(batch, num_micro: int):
  """[M, ...] leaves -> [num_micro, M / num_micro, ...]."""
  return jax.tree.map(
      lambda x: x.reshape((num_micro, x.shape[0] // num_micro) + x.shape[1:]),
      batch)


def _safe_divide(total, count):
  return jnp.where(count > 0, total / jnp.maximum(count, 1e-12), 0.0)


class _MicroStats(NamedTuple):
  """Sums over microbatches, turned into measurements at the end."""
  loss: jnp.ndarray
  tokens: jnp.ndarray
  ratio_mean: jnp.ndarray  # token-weighted sums
  ratio_var: jnp.ndarray
  clip_fraction: jnp.ndarray
  approx_kl: jnp.ndarray
  entropy: jnp.ndarray  # sum over tokens
  ratio_max: jnp.ndarray
  ratio_min: jnp.ndarray
  kl: jnp.ndarray  # sum over microbatches of kl sums
  sampler_mismatch: jnp.ndarray  # max |logp - sampler_logp|


def make_update_fn(*, model_config: models.ModelConfig,
                   optimizer: optax.GradientTransformation,
                   objective_name: str, objective_kwargs: dict,
                   aggregation: str, horizon: Optional[int] = None,
                   objective_state_kwargs: Optional[dict] = None,
                   beta: float = 0.0, kl_estimator: str = "k3",
                   temperature: float = 1.0, microbatch_size: int = 0,
                   chunk_size: int = 4096, jit: bool = True) -> Callable:
  """Builds ``update_fn(state, batch) -> (state, measurements)``.

  One call is one optimiser step on one minibatch (`rollout.Batch` of M
  rows). The gradient is accumulated over M / microbatch_size microbatches;
  each microbatch contributes ``aux.loss_sum / C + beta * kl_sum / C_kl`` with
  C, C_kl the counts of the whole minibatch, so the result does not depend on
  the microbatch size. Non-finite loss or gradients skip the update.

  Args:
    model_config: the policy's `models.ModelConfig`.
    optimizer: e.g. `make_optimizer(...)`.
    objective_name: a name of `objectives.names()`.
    objective_kwargs: its hyperparameters (not aggregation / horizon).
    aggregation, horizon: the loss aggregation (ignored by sequence-level
      objectives).
    objective_state_kwargs: options of a stateful objective's update (e.g.
      R2VPO's ``eta``).
    beta: KL coefficient; 0 means `batch.ref_logp` is never read.
    kl_estimator: ``k1``, ``k2`` or ``k3``.
    temperature: the sampling temperature (for `policy_logprobs`).
    microbatch_size: rows per accumulation step; 0 = the whole minibatch.
    chunk_size: positions (of N*T) per chunk of the log-prob computation.
    jit: jit with the state donated (False for debugging).
  """
  objective = objectives.get(objective_name)
  call_kwargs = objective_call_kwargs(
      objective_name, objective_kwargs, aggregation=aggregation,
      horizon=horizon)
  stateful = objectives.stateful(objective_name)
  state_options = dict(objective_state_kwargs or {})
  kl_mode = kl_aggregation(objective_name, aggregation)
  kl_fn = kl_lib.get(kl_estimator) if beta > 0 else None

  def loss_kwargs(objective_state):
    if stateful is None:
      return call_kwargs
    return dict(call_kwargs, **stateful.state_kwargs(objective_state))

  def micro_loss(params, micro, counts, objective_state):
    completion_start = micro.tokens.shape[1] - micro.completion_mask.shape[1]
    logp, entropy = policy_logprobs(
        params, model_config, micro.tokens, micro.input_mask,
        completion_start, temperature=temperature, chunk_size=chunk_size)
    # On policy (no old_logp) the behaviour log-probs are these, detached.
    old_logp = (jax.lax.stop_gradient(logp) if micro.old_logp is None
                else micro.old_logp)
    _, aux = objective(logp, old_logp, micro.advantages,
                       micro.completion_mask, **loss_kwargs(objective_state))
    loss = _safe_divide(aux.loss_sum, counts[0])
    kl_sum = jnp.zeros((), jnp.float32)
    if kl_fn is not None:
      kl_values = kl_fn(logp, micro.ref_logp)
      kl_sc = agg.sum_and_count(kl_values, micro.completion_mask, kl_mode,
                                horizon=horizon)
      kl_sum = kl_sc.total
      loss = loss + beta * _safe_divide(kl_sc.total, counts[1])
    mismatch = jnp.zeros((), jnp.float32)
    if micro.sampler_logp is not None:
      # Over every sampled token (the loss mask may drop some).
      mismatch = rollout_lib.sampler_mismatch(
          jax.lax.stop_gradient(logp), micro.sampler_logp,
          micro.input_mask[:, completion_start:])
    return loss, (aux, entropy, kl_sum, mismatch)

  grad_fn = jax.value_and_grad(micro_loss, has_aux=True)

  def update_fn(state: TrainState, batch):
    rows = batch.tokens.shape[0]
    micro_rows = microbatch_size or rows
    if rows % micro_rows:
      raise ValueError(
          f"microbatch_size={micro_rows} must divide the minibatch of {rows} "
          "rows.")
    mask = batch.completion_mask
    # The denominators of the whole minibatch, known before any microbatch:
    # the objective evaluated at ratio 1 has the same count.
    at_one = jnp.zeros_like(mask)  # any log-probs: only the count is used
    _, aux_at_one = objective(at_one, at_one, batch.advantages, mask,
                              **loss_kwargs(state.objective_state))
    kl_count = agg.sum_and_count(jnp.zeros_like(mask), mask, kl_mode,
                                 horizon=horizon).count
    counts = (aux_at_one.loss_count, kl_count)

    def accumulate(carry, micro):
      grads, stats = carry
      (loss, (aux, entropy, kl_sum, mismatch)), g = grad_fn(
          state.params, micro, counts, state.objective_state)
      tokens = micro.completion_mask.sum()
      stats = _MicroStats(
          loss=stats.loss + loss,
          tokens=stats.tokens + tokens,
          ratio_mean=stats.ratio_mean + aux.ratio_mean * tokens,
          ratio_var=stats.ratio_var + aux.ratio_var * tokens,
          clip_fraction=stats.clip_fraction + aux.clip_fraction * tokens,
          approx_kl=stats.approx_kl + aux.approx_kl * tokens,
          entropy=stats.entropy + (entropy * micro.completion_mask).sum(),
          ratio_max=jnp.maximum(stats.ratio_max, jnp.where(
              tokens > 0, aux.ratio_max, -jnp.inf)),
          ratio_min=jnp.minimum(stats.ratio_min, jnp.where(
              tokens > 0, aux.ratio_min, jnp.inf)),
          kl=stats.kl + kl_sum,
          sampler_mismatch=jnp.maximum(stats.sampler_mismatch, mismatch))
      return (jax.tree.map(jnp.add, grads, g), stats), None

    zero = jnp.zeros((), jnp.float32)
    init_stats = _MicroStats(zero, zero, zero, zero, zero, zero, zero,
                             jnp.asarray(-jnp.inf), jnp.asarray(jnp.inf), zero,
                             zero)
    zero_grads = jax.tree.map(jnp.zeros_like, state.params)
    (grads, stats), _ = jax.lax.scan(
        accumulate, (zero_grads, init_stats),
        _split(batch, rows // micro_rows))

    grad_norm = optax.global_norm(grads)
    finite = jnp.isfinite(stats.loss) & jnp.isfinite(grad_norm)
    updates, new_opt_state = optimizer.update(
        grads, state.opt_state, state.params)
    new_params = optax.apply_updates(state.params, updates)
    tokens = stats.tokens
    per_token = lambda x: _safe_divide(x, tokens)
    new_objective_state = state.objective_state
    if stateful is not None:
      combined_aux = aux_at_one._replace(ratio_var=per_token(stats.ratio_var))
      new_objective_state = stateful.update(
          state.objective_state, combined_aux, **objective_kwargs,
          **state_options)
    keep = lambda new, old: jax.tree.map(
        lambda a, b: jnp.where(finite, a, b), new, old)
    new_state = state._replace(
        params=keep(new_params, state.params),
        opt_state=keep(new_opt_state, state.opt_state),
        objective_state=keep(new_objective_state, state.objective_state))

    measurements = {
        "loss": stats.loss,
        "grad_norm": grad_norm,
        # The rate this update used (inject_hyperparams stores it in the
        # new state).
        "learning_rate": current_learning_rate(new_opt_state),
        "skipped_updates": 1.0 - finite.astype(jnp.float32),
        "ratio_mean": per_token(stats.ratio_mean),
        "ratio_var": per_token(stats.ratio_var),
        "ratio_max": jnp.where(tokens > 0, stats.ratio_max, 0.0),
        "ratio_min": jnp.where(tokens > 0, stats.ratio_min, 0.0),
        "clip_fraction": per_token(stats.clip_fraction),
        "approx_kl": per_token(stats.approx_kl),
        "entropy": per_token(stats.entropy),
    }
    if kl_fn is not None:
      measurements["kl"] = _safe_divide(stats.kl, kl_count)
    if batch.sampler_logp is not None:
      measurements["logprob/sampler_trainer_max_abs_diff"] = (
          stats.sampler_mismatch)
    if stateful is not None:
      for name, value in stateful.state_kwargs(
          new_state.objective_state).items():
        measurements[f"objective/{name}"] = value
    return new_state, measurements

  if not jit:
    return update_fn
  return jax.jit(update_fn, donate_argnums=(0,))


def current_learning_rate(opt_state) -> jnp.ndarray:
  """The learning rate an injected-hyperparameter optimiser state holds
  (`make_optimizer`'s), NaN if there is none."""
  has_hyperparams = lambda node: hasattr(node, "hyperparams")
  for node in jax.tree.leaves(opt_state, is_leaf=has_hyperparams):
    if has_hyperparams(node) and "learning_rate" in node.hyperparams:
      return jnp.asarray(node.hyperparams["learning_rate"], jnp.float32)
  return jnp.asarray(jnp.nan, jnp.float32)


def init_objective_state(objective_name: str, state_options: dict):
  """A stateful objective's initial state (R2VPO: lam0), else ()."""
  stateful = objectives.stateful(objective_name)
  if stateful is None:
    return ()
  init_kwargs = {k: v for k, v in state_options.items()
                 if _takes(stateful.init, k)}
  return stateful.init(**init_kwargs)


def init_state(params, optimizer, *, seed: int, objective_name: str,
               objective_state_kwargs: Optional[dict] = None) -> TrainState:
  """Step 0: the model's params, a fresh optimiser state, key from seed."""
  return TrainState(
      params=params,
      opt_state=optimizer.init(params),
      step=jnp.zeros((), jnp.int32),
      key=jax.random.PRNGKey(seed),
      objective_state=init_objective_state(
          objective_name, dict(objective_state_kwargs or {})))


def minibatches(batch, minibatch_size: int):
  """Consecutive row slices of `batch` of `minibatch_size` rows (0: all)."""
  rows = batch.tokens.shape[0]
  size = minibatch_size or rows
  return [jax.tree.map(lambda x, i=i: x[i:i + size], batch)
          for i in range(0, rows, size)]


def combine_update_measurements(all_measurements) -> dict:
  """Averages the optimiser steps' measurements of one training step;
  skipped updates add up, ratio extremes take the extreme."""
  all_measurements = jax.device_get(all_measurements)
  out = {}
  for name in all_measurements[0]:
    values = np.asarray([m[name] for m in all_measurements], np.float64)
    if name == "skipped_updates":
      out[name] = values.sum()
    elif name in ("ratio_max", "logprob/sampler_trainer_max_abs_diff"):
      out[name] = values.max()
    elif name == "ratio_min":
      out[name] = values.min()
    else:
      out[name] = values.mean()
  out["optimizer_steps"] = float(len(all_measurements))
  return out


# ---------------------------------------------------------------- the loop


class Run(NamedTuple):
  """What `build` makes from a config, everything `train` needs."""
  config: Any
  model_config: models.ModelConfig
  tokenizer: Any
  state: TrainState
  ref_params: Any
  update_fn: Callable
  rollout_fn: Callable  # (params, ref_params, step, key) -> (batch, measures)
  mesh: jax.sharding.Mesh  # sampling, log-probs and the update run on it.


def total_optimizer_steps(config) -> int:
  rows = config.rollout.num_prompts * config.rollout.num_generations
  per_step = rows // (config.train.minibatch_size or rows)
  return config.train.num_steps * config.train.num_iterations * per_step


def build(config) -> Run:
  """Validates `config`, loads model, task and rewards; builds the functions.

  The reference params are a copy of the initial params and exist only when
  ``kl.beta > 0``.
  """
  from configs import common  # pylint: disable=g-import-not-at-top
  common.validate(config)
  model_config, params, tokenizer = rollout_lib.load_model(
      config.model.name, seed=config.seed)
  optimizer = make_optimizer(
      total_steps=total_optimizer_steps(config), **config.optimizer)
  objective_kwargs = dict(config.objective.kwargs)
  state_options = dict(config.objective.state)
  state = init_state(params, optimizer, seed=config.seed,
                     objective_name=config.objective.name,
                     objective_state_kwargs=state_options)
  beta = float(config.kl.beta)
  # A distinct copy: update_fn donates the state's buffers.
  ref_params = jax.tree.map(jnp.copy, params) if beta > 0 else None
  # Params, optimiser state and reference params laid out on the mesh.
  mesh = sharding.mesh_from_config(config.mesh)
  sharding.check_rows(
      config.train.minibatch_size or
      config.rollout.num_prompts * config.rollout.num_generations, mesh,
      name="train.minibatch_size")
  state = sharding.shard_tree(state, state.params, mesh)
  if ref_params is not None:
    ref_params = sharding.shard_params(ref_params, mesh)
  horizon = config.objective.horizon or None
  update_fn = make_update_fn(
      model_config=model_config, optimizer=optimizer,
      objective_name=config.objective.name,
      objective_kwargs=objective_kwargs,
      aggregation=config.objective.aggregation, horizon=horizon,
      objective_state_kwargs=state_options, beta=beta,
      kl_estimator=config.kl.estimator,
      temperature=config.rollout.temperature,
      microbatch_size=config.train.microbatch_size,
      chunk_size=config.train.chunk_size, jit=False)
  update_fn = sharding.jit_sharded(update_fn, state, mesh)
  rollout_fn = rollout_lib.from_config(config, model_config, tokenizer)
  return Run(config, model_config, tokenizer, state, ref_params, update_fn,
             rollout_fn, mesh)


def train_step(run: Run, state: TrainState, step: int):
  """One training step: rollout, num_iterations x minibatches of updates.

  Returns (state, measurements dict of floats).
  """
  c = run.config
  t0 = time.perf_counter()
  # Under the mesh the sampler and the log-prob passes split their rows
  # over ('data', 'fsdp') like the update (see `sharding.constrain`).
  with jax.set_mesh(run.mesh):
    batch, measurements = run.rollout_fn(state.params, run.ref_params, step,
                                         jax.random.fold_in(state.key, step))
  t1 = time.perf_counter()
  update_measurements = []
  for _ in range(c.train.num_iterations):
    for minibatch in minibatches(batch, c.train.minibatch_size):
      state, m = run.update_fn(state, minibatch)
      update_measurements.append(m)
  measurements.update(combine_update_measurements(update_measurements))
  jax.block_until_ready(state.params)
  t2 = time.perf_counter()
  # Placed like the old count: replicated over the mesh, so that every
  # process holds it and a multi-host checkpoint can save it.
  state = state._replace(step=jax.device_put(
      np.asarray(step + 1, np.int32), state.step.sharding))
  measurements["time/rollout_s"] = t1 - t0
  measurements["time/update_s"] = t2 - t1
  tokens = float(np.asarray(batch.input_mask).sum()) * c.train.num_iterations
  measurements["tokens_per_s"] = (
      float(np.asarray(batch.completion_mask).sum()) / max(t2 - t0, 1e-9))
  measurements["time/update_tokens_per_s"] = tokens / max(t2 - t1, 1e-9)
  return state, measurements


def train(config, workdir: str, *, callback: Optional[Callable] = None,
          run: Optional[Run] = None) -> TrainState:
  """Trains for ``config.train.num_steps`` steps, resuming if possible.

  Writes ``workdir/metrics.jsonl``, TensorBoard events, ``curves.png`` and
  checkpoints under ``workdir/checkpoints`` (every ``checkpoint.every`` steps
  and at the end). If a checkpoint exists the run continues from the latest
  one, exactly as if it had never stopped.

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
  run = run or build(config)
  os.makedirs(workdir, exist_ok=True)
  checkpointer = checkpoint_lib.Checkpointer(
      os.path.join(workdir, "checkpoints"),
      max_to_keep=config.checkpoint.max_to_keep)
  # A copy: update_fn donates the state's buffers, and run.state must stay
  # usable (tests reuse one `run` for several trainings).
  state = jax.tree.map(jnp.copy, run.state)
  start = checkpointer.latest_step() or 0
  if start:
    state, _ = checkpointer.restore(state, start)
    logging.info("resuming from the checkpoint of step %d in %s", start,
                 workdir)
  writer = None
  if sharding.is_main_process():
    writer = metrics_lib.MetricsWriter(
        workdir, start_step=start, tensorboard=config.metrics.tensorboard)
  metadata = {"config": config.to_json_best_effort()}
  try:
    for step in range(start, config.train.num_steps):
      state, measurements = train_step(run, state, step)
      if writer is not None:
        record = writer.write(step, measurements)
      else:
        record = metrics_lib.to_record(step, measurements)
      if callback is not None:
        callback(step, record)
      done = step + 1
      if done % config.checkpoint.every == 0 or done == config.train.num_steps:
        checkpointer.save(done, state, metadata)
  finally:
    if writer is not None:
      writer.close()
    checkpointer.close()
  if writer is not None and config.metrics.plot:
    metrics_lib.plot(metrics_lib.read(writer.path),
                     os.path.join(workdir, metrics_lib.PLOT_FILE))
  return state


def restore_metadata(workdir: str, *, step=None) -> tuple:
  """(step, metadata) of a run's checkpoint (default: the latest)."""
  checkpointer = checkpoint_lib.Checkpointer(
      os.path.join(workdir, "checkpoints"))
  try:
    step = checkpointer.latest_step() if step is None else step
    return step, checkpointer.metadata(step)
  finally:
    checkpointer.close()


def restore(workdir: str, template: TrainState, *, step=None):
  """(state, metadata) of a run's checkpoint `step` (default: the latest)."""
  checkpointer = checkpoint_lib.Checkpointer(
      os.path.join(workdir, "checkpoints"))
  try:
    return checkpointer.restore(template, step)
  finally:
    checkpointer.close()
