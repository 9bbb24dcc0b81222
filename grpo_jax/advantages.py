"""Group advantage estimators: rewards [P, G] -> advantages [P, G].

Every estimator is pure and jittable, computes in float32 whatever the input
dtype, and gives exactly 0 for a group whose rewards are all equal (including a
group of one completion): no baseline can be formed there, and 0/0 must never
become NaN.

| name      | advantage                                     | paper            |
|-----------|-----------------------------------------------|------------------|
| ``grpo``    | (R - mean_g R) / (std R + eps)              | arXiv 2402.03300 |
| ``dr_grpo`` | R - mean_g R                                | arXiv 2503.20783 |
| ``rloo``    | R_j - mean_{k!=j} R_k = G/(G-1) (R_j - mean_g R) | leave-one-out |

`multi_reward` combines K reward functions ([P, G, K]) either GRPO-style or
GDPO-style (arXiv 2601.05242); `collapse_rate` is the share of groups without
signal.
"""

from typing import Callable, Optional, Tuple

import jax.numpy as jnp

SCALES = ("group", "batch", "none")
MULTI_REWARD_MODES = ("sum_then_normalize", "normalize_then_sum")


def _check_choice(argument: str, value: str, choices: Tuple[str, ...]) -> None:
  if value not in choices:
    raise ValueError(
        f"{argument}={value!r} is unknown; choose one of {', '.join(choices)}.")


def _check_rewards(rewards, rank: int, letters: str) -> jnp.ndarray:
  """`rewards` as float32 after checking its rank and that groups are nonempty."""
  rewards = jnp.asarray(rewards)
  if rewards.ndim != rank:
    raise ValueError(
        f"rewards must be [{letters}] (rank {rank}); got shape {rewards.shape}.")
  if rewards.shape[1] == 0:
    raise ValueError(
        f"rewards must hold at least one completion per group (G >= 1); got "
        f"shape {rewards.shape}.")
  return rewards.astype(jnp.float32)


def _check_ddof(ddof: int, size: int) -> None:
  # A sample of one is constant: its advantage is 0 whatever ddof says.
  if ddof < 0 or (size > 1 and ddof >= size):
    raise ValueError(
        f"ddof={ddof!r} must be >= 0 and smaller than the {size} rewards the "
        "std is taken over; use ddof=1 (unbiased) or ddof=0.")


def _centered(x, axis: Optional[int]) -> jnp.ndarray:
  """x - mean(x) along `axis`, exactly 0 where x is constant along it."""
  centered = x - x.mean(axis=axis, keepdims=True)
  # Rounding in the mean can leave a constant group at +-1e-8 instead of 0; the
  # exact comparison sets it to 0, so a signal-free group stays signal-free.
  constant = x.max(axis=axis, keepdims=True) == x.min(axis=axis, keepdims=True)
  return jnp.where(constant, 0.0, centered)


def _std(x, axis: Optional[int], ddof: int) -> jnp.ndarray:
  """The std along `axis` (keepdims) with `ddof`; 0 for a single value."""
  size = x.size if axis is None else x.shape[axis]
  centered = x - x.mean(axis=axis, keepdims=True)
  var = (centered**2).sum(axis=axis, keepdims=True) / max(size - ddof, 1)
  # sqrt has an infinite derivative at 0; keep gradients through it finite.
  safe_var = jnp.where(var > 0, var, 1.0)
  return jnp.where(var > 0, jnp.sqrt(safe_var), 0.0)


def _divide_by_std(centered, std, eps: float) -> jnp.ndarray:
  # std == 0 only where `centered` is already exactly 0; dividing by 1 there
  # keeps eps=0 from producing 0/0.
  return centered / (jnp.where(std > 0, std, 1.0) + eps)


def _standardize(x, axis: Optional[int], *, eps: float, ddof: int
                 ) -> jnp.ndarray:
  _check_ddof(ddof, x.size if axis is None else x.shape[axis])
  return _divide_by_std(_centered(x, axis), _std(x, axis, ddof), eps)


def grpo(rewards, *, scale: str = "group", eps: float = 1e-6, ddof: int = 1
         ) -> jnp.ndarray:
  """GRPO's group-normalised advantage.

  A = (R - mean_g R) / (std R + eps), DeepSeekMath (arXiv 2402.03300).

  Args:
    rewards: [P, G] rewards of G completions for each of P prompts.
    scale: the std divided by: ``group`` (per group, the default), ``batch``
      (over all P*G rewards, the centring stays per group) or ``none`` (no
      division: Dr. GRPO).
    eps: added to the std.
    ddof: delta degrees of freedom of the std; 1 (the unbiased std) matches
      the common PyTorch implementations.

  Returns:
    [P, G] float32 advantages; exactly 0 for groups of equal rewards.
  """
  rewards = _check_rewards(rewards, 2, "P, G")
  _check_choice("scale", scale, SCALES)
  if scale == "group":
    return _standardize(rewards, -1, eps=eps, ddof=ddof)
  centered = _centered(rewards, -1)
  if scale == "none":
    return centered
  _check_ddof(ddof, rewards.size)
  return _divide_by_std(centered, _std(rewards, None, ddof), eps)


def dr_grpo(rewards) -> jnp.ndarray:
  """Dr. GRPO's advantage: A = R - mean_g R, no std (arXiv 2503.20783).

  Args:
    rewards: [P, G] rewards.

  Returns:
    [P, G] float32 advantages.
  """
  return _centered(_check_rewards(rewards, 2, "P, G"), -1)


def rloo(rewards) -> jnp.ndarray:
  """Leave-one-out baseline: A_j = R_j - mean_{k!=j} R_k.

  Equal to G/(G-1) * (R_j - mean_g R); a group of one has no baseline and
  gives 0.

  Args:
    rewards: [P, G] rewards.

  Returns:
    [P, G] float32 advantages.
  """
  rewards = _check_rewards(rewards, 2, "P, G")
  group_size = rewards.shape[-1]
  if group_size == 1:
    return jnp.zeros_like(rewards)
  return _centered(rewards, -1) * (group_size / (group_size - 1))


def multi_reward(rewards, weights, *, mode: str = "sum_then_normalize",
                 eps: float = 1e-6, ddof: int = 1) -> jnp.ndarray:
  """Advantages from K reward functions.

  ``sum_then_normalize``: A = grpo(sum_k w_k R_k).
  ``normalize_then_sum`` (GDPO, arXiv 2601.05242): B = sum_k w_k grpo(R_k),
  then A = (B - mean B) / (std B + eps) with mean and std over all P*G
  entries of the batch. The same `eps` and `ddof` serve the per-reward and the
  batch normalisation (the authors' code uses one eps, 1e-4, and the unbiased
  std for both). A group whose B is constant (every group where all K rewards
  are) gives exactly 0: its B is 0 and the batch mean is 0 but for rounding.

  Args:
    rewards: [P, G, K] rewards of K reward functions.
    weights: [K] weight of each reward function.
    mode: ``sum_then_normalize`` or ``normalize_then_sum``.
    eps: added to every std.
    ddof: delta degrees of freedom of every std.

  Returns:
    [P, G] float32 advantages.
  """
  rewards = _check_rewards(rewards, 3, "P, G, K")
  _check_choice("mode", mode, MULTI_REWARD_MODES)
  weights = jnp.asarray(weights)
  if weights.shape != rewards.shape[-1:]:
    raise ValueError(
        f"weights must be [K] with K={rewards.shape[-1]} (the last axis of "
        f"rewards); got shape {weights.shape}.")
  # Multiply and sum rather than einsum: a TPU matmul would round to bf16.
  weights = weights.astype(jnp.float32)[None, None, :]
  if mode == "sum_then_normalize":
    return grpo((rewards * weights).sum(axis=-1), eps=eps, ddof=ddof)
  per_reward = _standardize(jnp.swapaxes(rewards, 1, 2), -1, eps=eps, ddof=ddof)
  combined = (jnp.swapaxes(per_reward, 1, 2) * weights).sum(axis=-1)
  # Each group of `combined` has mean 0, so the batch mean is 0 up to rounding;
  # keep groups without signal at exactly 0 rather than at -mean/std.
  no_signal = combined.max(axis=-1, keepdims=True) == combined.min(
      axis=-1, keepdims=True)
  return jnp.where(no_signal, 0.0,
                   _standardize(combined, None, eps=eps, ddof=ddof))


def collapse_rate(rewards) -> jnp.ndarray:
  """Share of groups whose rewards are all equal (no learning signal).

  Args:
    rewards: [P, G], or [P, G, K] where a group counts only if each of its K
      rewards is constant over the group. A group of one counts as collapsed.

  Returns:
    A float32 scalar in [0, 1]; 0 for P = 0.
  """
  rewards = jnp.asarray(rewards)
  if rewards.ndim not in (2, 3):
    raise ValueError(
        f"rewards must be [P, G] or [P, G, K]; got shape {rewards.shape}.")
  if rewards.ndim == 2:
    rewards = rewards[..., None]
  rewards = _check_rewards(rewards, 3, "P, G, K")
  if rewards.shape[0] == 0:
    return jnp.zeros((), jnp.float32)
  constant = rewards.max(axis=1) == rewards.min(axis=1)  # [P, K]
  return constant.all(axis=-1).astype(jnp.float32).mean()


_ESTIMATORS = {"grpo": grpo, "dr_grpo": dr_grpo, "rloo": rloo}


def names() -> Tuple[str, ...]:
  """The registered estimators over [P, G] rewards, sorted."""
  return tuple(sorted(_ESTIMATORS))


def get(name: str) -> Callable[..., jnp.ndarray]:
  """The estimator registered as `name`: ``fn(rewards, **options)``."""
  if name not in _ESTIMATORS:
    raise ValueError(
        f"advantage estimator {name!r} is unknown; choose one of "
        f"{', '.join(names())}.")
  return _ESTIMATORS[name]
