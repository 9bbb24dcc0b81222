"""The optimiser: global-norm clipping, then AdamW on a warmup + decay
schedule, with the learning rate kept in the optimiser state."""

import jax
import jax.numpy as jnp
import optax


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
                   b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
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


def current_learning_rate(opt_state) -> jnp.ndarray:
  """The learning rate an injected-hyperparameter optimiser state holds
  (`make_optimizer`'s), NaN if there is none."""
  has_hyperparams = lambda node: hasattr(node, "hyperparams")
  for node in jax.tree.leaves(opt_state, is_leaf=has_hyperparams):
    if has_hyperparams(node) and "learning_rate" in node.hyperparams:
      return jnp.asarray(node.hyperparams["learning_rate"], jnp.float32)
  return jnp.asarray(jnp.nan, jnp.float32)
