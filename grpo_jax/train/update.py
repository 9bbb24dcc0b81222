"""One optimiser step on one minibatch: the loss functions, the gradient
accumulated over microbatches, and `make_update_fn` (`train` calls it).

Inside `update_fn` the minibatch is split into microbatches and the
gradient accumulated with ``lax.scan``. Every microbatch's loss is its
``aux.loss_sum`` divided by the objective's count of the WHOLE minibatch
(each regulariser's likewise), so the accumulated gradient is the one-shot
gradient whatever the microbatch size; measurements are `measures`
records, merged exactly over microbatches and minibatches. The configured
corrections (`objectives.corrections`: sampler TIS / MIS / ICEPOP, OPSM,
the top-entropy mask) weigh each token's term of the objective, their
weights detached and the count the mask's. A non-finite loss or gradient,
or a minibatch without loss tokens, leaves params, optimiser state and
component states unchanged and is counted in ``skipped_updates``.
"""

import math
from typing import Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import optax

from grpo_jax.train import batch as batch_lib
from grpo_jax import measures
from grpo_jax import models
from grpo_jax import objectives
from grpo_jax.train import optim
from grpo_jax.train import packing as packing_lib
from grpo_jax.models import lora
from grpo_jax.objectives import corrections as corrections_lib
from grpo_jax.objectives import regularisers as regularisers_lib


def split_microbatches(batch, microbatch_size: int):
  """[M, ...] leaves -> [M / microbatch_size, microbatch_size, ...]."""
  rows = batch.tokens.shape[0]
  size = microbatch_size or rows
  if rows % size:
    raise ValueError(
        f"microbatch_size={size} must divide the minibatch of {rows} rows.")
  return jax.tree.map(
      lambda x: x.reshape((rows // size, size) + x.shape[1:]), batch)


def accumulate_gradients(grad_fn: Callable, params, micro_batches):
  """Sums ``grad_fn(params, micro) -> ((loss, records), grads)`` over the
  leading axis of `micro_batches` with ``lax.scan``.

  Returns (grads, summed loss, records merged over microbatches).
  """
  if micro_batches.tokens.shape[0] == 1:
    # No accumulator: zeros plus one gradient would cost two passes over
    # every parameter.
    (loss, records), grads = grad_fn(
        params, jax.tree.map(lambda x: x[0], micro_batches))
    return grads, loss, measures.merge_stacked(
        jax.tree.map(lambda x: x[None], records))

  def one(grads, micro):
    (loss, records), g = grad_fn(params, micro)
    return jax.tree.map(jnp.add, grads, g), (loss, records)
  zeros = jax.tree.map(jnp.zeros_like, params)
  grads, (losses, stacked) = jax.lax.scan(one, zeros, micro_batches)
  return grads, losses.sum(), measures.merge_stacked(stacked)


def state_measures(name: str, state) -> dict:
  """`Mean` records of a component state's scalar leaves (``objective/lam``)."""
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(state):
    if jnp.ndim(leaf) == 0:
      key = jax.tree_util.keystr(path, simple=True, separator="/")
      out[f"{name}/{key}"] = measures.Mean.scalar(leaf)
  return out


class LossFunctions(NamedTuple):
  """What one minibatch's gradient needs (`make_loss_functions`).

  Attributes:
    loss: ``loss(params, micro, states, counts, batch_stats) -> (loss,
      records)`` of one microbatch, divided by the minibatch's `counts`.
    counts: ``counts(mask) -> dict``: the objective's and each
      regulariser's denominator over the whole minibatch.
    pre_pass: None, or ``pre_pass(params, micro) -> (records, arrays)``:
      the objective's minibatch statistics of one microbatch (None when it
      has none) and the arrays the corrections' statistics read.
    batch_stats: ``batch_stats(mask, stacked) -> dict`` of the pre-pass
      outputs stacked over the minibatch's microbatches: what `loss` takes
      as `batch_stats` (``objective``: the merged records; ``corrections``:
      each correction's statistics of the whole minibatch).
  """
  loss: Callable
  counts: Callable
  pre_pass: Optional[Callable]
  batch_stats: Optional[Callable] = None


def batch_arrays(micro, logp, entropy, old_logp, topk_logp=None) -> dict:
  """Every array a regulariser, a correction or an objective may read, by
  name: the batch's fields, the forward's ``logp`` and ``entropy`` (with
  gradient), ``old_logp`` as the behaviour log-probs (on policy the
  forward's own, detached) and, when the objective reads it, ``topk_logp``
  [M, T, K]: the policy's log-probs at the sampler's top-K ids."""
  arrays = dict(micro._asdict())
  arrays.update(logp=logp, entropy=entropy, old_logp=old_logp)
  if topk_logp is not None:
    arrays.update(topk_logp=topk_logp)
  return arrays


def _read(arrays: dict, names, *, component: str) -> dict:
  unknown = [k for k in names if k not in arrays]
  if unknown:
    raise ValueError(
        f"{component} reads {unknown[0]!r}, which the update does not have; "
        f"it has {', '.join(sorted(arrays))}.")
  return {k: arrays[k] for k in names}


def make_loss_functions(*, model_config: models.ModelConfig,
                        objective: objectives.Objective,
                        regularisers: Sequence[
                            regularisers_lib.Regulariser] = (),
                        corrections: Sequence[
                            corrections_lib.Correction] = (),
                        chunk_size: int = 4096,
                        group_size: int = 1,
                        replay_coef: Optional[float] = None) -> LossFunctions:
  """The objective plus regularisers on the policy's log-probs.

  Args:
    model_config: the policy's `models.ModelConfig`.
    objective: an `objectives.make(...)` record.
    regularisers: `regularisers.make(...)` records (KL when beta > 0, the
      entropy bonus).
    corrections: `corrections.make(...)` records: token weights and masks
      (sampler TIS / MIS / ICEPOP, OPSM, top-entropy). Their product,
      detached, multiplies each token's term of the objective (the
      objective's count unchanged); regularisers are not weighted.
      `corrections.check_compatible` must accept them with `objective`.
    chunk_size: rows x columns per chunk of the log-prob computation.
    group_size: rows in consecutive blocks of this size share their prompt
      (a rollout's G completions), whose forward pass then runs once per
      block (`batch.completion_hidden`); 1 for batches laid out otherwise.
    replay_coef: None, or c_off of a batch with replayed rows
      (``Batch.replayed``; RePO, arXiv 2506.09340): the loss is then
      ``agg(fresh rows) + c_off * agg(replayed rows)``, each part divided by
      its own count, and the regularisers (KL) read only the fresh rows. A
      batch without ``replayed`` has no replayed rows.

  The log-probs use each row's sampling temperature (``Batch.temperature``),
  so that on policy every ratio is 1.
  """
  corrections = tuple(corrections)
  corrections_lib.check_compatible(objective, corrections)
  # Corrections whose statistic spans the whole minibatch (the top-entropy
  # quantile): with several microbatches a pre-pass computes it first.
  with_stats = tuple(c for c in corrections if c.prepass is not None)
  # DPPO's top-K forms: the chunked pass also gathers the policy's
  # log-probs at the sampler's top-K ids (K columns, never [M, T, V]).
  wants_topk = "topk_logp" in objective.reads

  def forward(params, micro):
    """(logp, entropy, topk_logp or None)."""
    rows, columns = micro.tokens.shape
    if wants_topk and micro.sampler_topk_ids is None:
      raise ValueError(
          f"objective {objective.name!r} reads the policy's log-probs at "
          "the sampler's top-K ids, but the batch has no sampler_topk_ids; "
          "set config.rollout.record_topk = K > 0.")
    topk_ids = micro.sampler_topk_ids if wants_topk else None
    if getattr(micro, "packing", None) is not None:
      # The rows' real tokens in packed sequences (`packing.plan`).
      out = packing_lib.packed_logprobs(
          params, model_config, micro.tokens, micro.input_mask,
          columns - micro.completion_mask.shape[1], micro.packing,
          temperature=micro.temperature, chunk_size=chunk_size,
          topk_ids=topk_ids)
      return out if wants_topk else (*out, None)
    # Microbatches start at multiples of their size, so blocks of
    # gcd(rows, G) rows lie within one group.
    out = batch_lib.policy_logprobs(
        params, model_config, micro.tokens, micro.input_mask,
        columns - micro.completion_mask.shape[1],
        temperature=micro.temperature, chunk_size=chunk_size,
        group_size=math.gcd(rows, group_size),
        topk_ids=topk_ids)
    return out if wants_topk else (*out, None)

  def behaviour(micro, logp):
    # On policy (no old_logp) the behaviour log-probs are these, detached.
    return (jax.lax.stop_gradient(logp) if micro.old_logp is None
            else micro.old_logp)

  def pre_pass(params, micro):
    logp, entropy, topk = jax.lax.stop_gradient(forward(params, micro))
    old = behaviour(micro, logp)
    arrays = batch_arrays(micro, logp, entropy, old, topk)
    # The objective's reads too: F-TIS's kept-token count needs the
    # sampler's log-probs.
    records = (None if objective.prepass is None else objective.prepass(
        logp, old, micro.advantages, micro.completion_mask,
        **_read(arrays, objective.reads,
                component=f"objective {objective.name!r}")))
    return records, {c.name: _read(arrays, c.prepass_reads,
                                   component=f"correction {c.name!r}")
                     for c in with_stats}

  def batch_stats(mask, stacked):
    records, arrays = stacked
    rows = lambda x: x.reshape((-1,) + x.shape[2:])  # [micro, m, T] -> [M, T]
    return {
        "objective": None if records is None else measures.merge_stacked(
            records),
        "corrections": {c.name: c.prepass(
            mask, **jax.tree.map(rows, arrays[c.name])) for c in with_stats}}

  def loss_fn(params, micro, states, counts, batch_stats):
    logp, entropy, topk = forward(params, micro)
    mask = micro.completion_mask
    old = behaviour(micro, logp)
    arrays = batch_arrays(micro, logp, entropy, old, topk)
    batch_stats = batch_stats or {}
    # The weights are detached: computed from detached arrays.
    weights, records = corrections_lib.combine(
        corrections, mask,
        {k: None if v is None else jax.lax.stop_gradient(v)
         for k, v in arrays.items()},
        batch_stats.get("corrections"))
    objective_loss = lambda part: objective.loss(
        states["objective"], logp, old, micro.advantages, part,
        batch_stats=batch_stats.get("objective"), token_weights=weights,
        **_read(arrays, objective.reads,
                component=f"objective {objective.name!r}"))[1]
    fresh, off = _replay_masks(mask, micro)
    aux = objective_loss(fresh)
    loss = measures.safe_divide(aux.loss_sum, counts["objective"])
    records.update(aux.measures(), entropy=measures.Mean.of(
        jax.lax.stop_gradient(entropy), mask))
    if off is not None:  # RePO: the replayed rows' own aggregate, x c_off
      aux_off = objective_loss(off)
      loss += replay_coef * measures.safe_divide(aux_off.loss_sum,
                                                 counts["replayed"])
      records.update({f"replayed/{k}": v
                      for k, v in aux_off.measures().items()})
    for reg in regularisers:
      sc, reg_records = reg.loss(
          states[reg.name], logp, fresh,
          **_read(arrays, reg.reads, component=f"regulariser {reg.name!r}"))
      loss += measures.safe_divide(sc.total, counts[reg.name])
      records.update(measures.stop_gradient(reg_records))
    if micro.old_logp is None and micro.sampler_logp is not None:
      # On policy the sampler's log-probs came from these params: measure
      # the gap over every sampled token, not only the loss's. (Off policy
      # the rollout measures it, before the params move.) Rows replayed
      # from earlier steps (POPO, RePO) were sampled by an older policy.
      sampled = micro.input_mask[:, -mask.shape[1]:]
      if getattr(micro, "replayed", None) is not None:
        sampled = sampled * (1 - micro.replayed.astype(sampled.dtype))[:, None]
      records["logprob/sampler_trainer_max_abs_diff"] = measures.Max.of(
          jnp.abs(jax.lax.stop_gradient(logp) - micro.sampler_logp), sampled)
    return loss, records

  def _replay_masks(mask, batch):
    """(fresh, replayed) loss masks; (mask, None) without a split."""
    replayed = getattr(batch, "replayed", None)
    if replay_coef is None or replayed is None:
      return mask, None
    off = jnp.asarray(replayed, mask.dtype)[:, None]
    return mask * (1 - off), mask * off

  def counts(mask, batch=None):
    fresh, off = _replay_masks(mask, batch)
    return {"objective": objective.count(fresh),
            **({} if off is None else {"replayed": objective.count(off)}),
            **{reg.name: reg.count(fresh) for reg in regularisers}}

  needs_pre_pass = objective.prepass is not None or with_stats
  return LossFunctions(loss_fn, counts,
                       pre_pass if needs_pre_pass else None,
                       batch_stats if needs_pre_pass else None)


def minibatch_gradient(loss_functions: LossFunctions, params, states, batch,
                       *, microbatch_size: int = 0, frozen=None):
  """(grads, loss, records) of one minibatch: the pre-pass statistics over
  all its rows, then the gradient accumulated over microbatches, each
  microbatch's loss divided by the whole minibatch's counts, so the result
  does not depend on `microbatch_size`. With `frozen` (a LoRA run's base)
  `params` are the adapters and the gradient is theirs alone."""
  micro_batches = split_microbatches(batch, microbatch_size)
  counts = loss_functions.counts(batch.completion_mask, batch)
  model_params = lambda p: p if frozen is None else lora.combine(frozen, p)
  batch_stats = None
  # One microbatch is the minibatch: its own statistics are exact.
  if loss_functions.pre_pass is not None and micro_batches.tokens.shape[0] > 1:
    batch_stats = loss_functions.batch_stats(
        batch.completion_mask, jax.lax.map(
            lambda micro: loss_functions.pre_pass(model_params(params), micro),
            micro_batches))
  grad_fn = jax.value_and_grad(
      lambda p, micro: loss_functions.loss(model_params(p), micro, states,
                                           counts, batch_stats), has_aux=True)
  return accumulate_gradients(grad_fn, params, micro_batches)


def make_update_fn(*, model_config: models.ModelConfig,
                   optimizer: optax.GradientTransformation,
                   objective: objectives.Objective,
                   regularisers: Sequence[regularisers_lib.Regulariser] = (),
                   corrections: Sequence[corrections_lib.Correction] = (),
                   microbatch_size: int = 0,
                   chunk_size: int = 4096, group_size: int = 1,
                   replay_coef: Optional[float] = None,
                   jit: bool = True) -> Callable:
  """Builds ``update_fn(state, batch, frozen=None) -> (state, records)``:
  one optimiser step of a `train.TrainState` on one minibatch
  (`batch_lib.Batch` of M rows); a LoRA run passes its frozen base params as `frozen` (`state.params` are
  then the adapters).

  The gradient is `minibatch_gradient`'s. Non-finite loss or gradients, or
  a minibatch without loss tokens, leave the state unchanged and count as
  a skipped update. `records` are `measures` records, merged exactly by the
  caller across minibatches. Arguments (`corrections` too): see
  `make_loss_functions`, and
  `microbatch_size` rows per accumulation step (0: the whole minibatch),
  `group_size` rows per shared prompt, `replay_coef` c_off of replayed
  rows,
  `jit` to jit with the state donated (False for `sharding.jit_sharded`).
  """
  loss_functions = make_loss_functions(
      model_config=model_config, objective=objective,
      regularisers=regularisers, corrections=corrections,
      chunk_size=chunk_size, group_size=group_size, replay_coef=replay_coef)

  def update_fn(state, batch, frozen=None):
    grads, loss, records = minibatch_gradient(
        loss_functions, state.params, state.states, batch,
        microbatch_size=microbatch_size, frozen=frozen)
    grad_norm = optax.global_norm(grads)
    empty = jnp.sum(batch.completion_mask) == 0
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    apply = finite & ~empty

    def step(state):
      updates, opt_state = optimizer.update(grads, state.opt_state,
                                            state.params)
      return state._replace(
          params=optax.apply_updates(state.params, updates),
          opt_state=opt_state,
          states=dict(state.states, objective=objective.update(
              state.states["objective"], records)))

    def skip(state):  # a stateful objective may still move (Clip-Cov's key)
      return state._replace(states=dict(
          state.states, objective=objective.update(
              state.states["objective"], records, applied=False)))

    # A branch, not a `where` per leaf: a skipped update then costs nothing,
    # and an applied one does not also read and select the old params and
    # moments (experiments/benchmarks/NOTES.md, "What changed").
    new_state = jax.lax.cond(apply, step, skip, state)
    count = lambda flag: measures.Sum(flag.astype(jnp.float32))
    records.update(
        loss=measures.Mean.scalar(loss),
        grad_norm=measures.Mean.scalar(grad_norm),
        # The rate this update used (inject_hyperparams keeps it in state).
        # A skipped update leaves the rate of the last applied one.
        learning_rate=measures.Mean.scalar(
            optim.current_learning_rate(new_state.opt_state)),
        skipped_updates=count(~apply), empty_minibatches=count(empty),
        nonfinite_updates=count(~finite & ~empty),
        optimizer_steps=count(jnp.ones((), bool)),
        **state_measures("objective", new_state.states["objective"]))
    return new_state, records

  if not jit:
    return update_fn
  return jax.jit(update_fn, donate_argnums=(0,))


def minibatches(batch, num_minibatches: int):
  """`num_minibatches` consecutive row slices of `batch` of equal size."""
  size = batch.tokens.shape[0] // num_minibatches
  return [jax.tree.map(lambda x, i=i: x[i * size:(i + 1) * size], batch)
          for i in range(num_minibatches)]


def applied_tokens(records, tokens) -> float:
  """The tokens the applied updates trained on: each update's `tokens` (its
  minibatch's input tokens) unless its record counts it in
  ``skipped_updates`` (non-finite or without loss tokens); 0 when every
  update was skipped."""
  return float(sum(float(n) for r, n in zip(records, tokens, strict=True)
                   if not float(r["skipped_updates"].value())))
