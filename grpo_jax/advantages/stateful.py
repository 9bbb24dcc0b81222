"""Estimators with state carried across steps: EBPO's global prior, AVSPO's
tracked collapse rate.

Each is a pure function ``fn(rewards, state, *, options, valid=None) ->
(advantages, new_state)``, its state a NamedTuple of float32 scalars made by
its ``*_init()``; the trainer keeps it in ``TrainState.states["advantage"]``
and checkpoints it. Filler groups (``valid`` False) get 0 and enter no
statistic of the state.
"""

from typing import NamedTuple

import jax.numpy as jnp

from grpo_jax import groups as groups_lib
from grpo_jax import registry
from grpo_jax.advantages import _kit

# ------------------------------------------------------------------ Welford


class Welford(NamedTuple):
  """Count, mean and sum of squared deviations of the values seen so far
  (Welford's online algorithm, merged one batch at a time), float32 [];
  the count is exact up to 2^24 values."""
  count: jnp.ndarray
  mean: jnp.ndarray
  m2: jnp.ndarray


def welford_init() -> Welford:
  zero = jnp.zeros((), jnp.float32)
  return Welford(count=zero, mean=zero, m2=zero)


def welford_update(acc: Welford, values, mask) -> Welford:
  """`acc` with the entries of `values` where `mask` is True added.

  The batch's own (n, mean, M2) merge into the accumulator as in Chan et
  al.'s parallel form of Welford's update: delta = mean_b - mean,
  mean += delta n_b / n', M2 += M2_b + delta^2 n n_b / n'.
  """
  m = jnp.broadcast_to(mask, values.shape).astype(jnp.float32)
  n_batch = m.sum()
  mean_batch = (values * m).sum() / jnp.maximum(n_batch, 1.0)
  m2_batch = (((values - mean_batch) * m)**2).sum()
  count = acc.count + n_batch
  share = n_batch / jnp.maximum(count, 1.0)
  delta = mean_batch - acc.mean
  return Welford(count=count, mean=acc.mean + delta * share,
                 m2=acc.m2 + m2_batch + delta**2 * acc.count * share)


def welford_variance(acc: Welford) -> jnp.ndarray:
  """The unbiased variance M2 / (n - 1); 0 below two values."""
  return jnp.where(acc.count > 1, acc.m2 / jnp.maximum(acc.count - 1, 1.0),
                   0.0)


# --------------------------------------------------------------------- EBPO

EBPO_SCALES = ("global_std", "group_std", "none")


class EBPOState(NamedTuple):
  """EBPO's global prior, three accumulators over the valid groups seen.

  Attributes:
    rewards: every reward: mu0 and sigma0^2.
    group_means: each group's mean reward: Var(group means).
    group_variances: each group's unbiased variance (G >= 2): its mean is
      the pooled within-prompt variance sigma_w^2.
  """
  rewards: Welford
  group_means: Welford
  group_variances: Welford


def ebpo_init() -> EBPOState:
  """The empty prior: the first step is plain GRPO."""
  return EBPOState(rewards=welford_init(), group_means=welford_init(),
                   group_variances=welford_init())


def ebpo_shrinkage(state: EBPOState, group_size: int, *,
                   tau2_min: float = 1e-6) -> jnp.ndarray:
  """S = (sigma_w^2 / G) / (sigma_w^2 / G + tau^2), a float32 [] in [0, 1],
  tau^2 = max(Var(group means) - sigma_w^2 / G, tau2_min); 0 on an empty
  state (sigma_w^2 = 0)."""
  noise = state.group_variances.mean / group_size
  tau2 = jnp.maximum(welford_variance(state.group_means) - noise, tau2_min)
  return noise / (noise + tau2)


def ebpo_update(state: EBPOState, rewards, valid) -> EBPOState:
  """`state` with the valid groups of `rewards` [P, G] added."""
  group_size = rewards.shape[1]
  group_mean = rewards.mean(axis=-1)
  variance = (((rewards - group_mean[:, None])**2).sum(axis=-1)
              / max(group_size - 1, 1))
  return EBPOState(
      rewards=welford_update(state.rewards, rewards, valid[:, None]),
      group_means=welford_update(state.group_means, group_mean, valid),
      # A group of one has no within-group variance.
      group_variances=welford_update(state.group_variances, variance,
                                     valid & (group_size > 1)))


def _check_ebpo(*, scale, eps, tau2_min, **_) -> None:
  _kit.check_choice("scale", scale, EBPO_SCALES)
  _kit.check_real("eps", eps, low=0.0)
  # At 0 an empty state's shrinkage is 0 / 0.
  _kit.check_real("tau2_min", tau2_min, low=0.0, low_open=True,
                  why="the floor of the between-prompt variance; the "
                  "default is 1e-6")


@_kit.register(
    input="PG", output="group",
    paper="arXiv 2602.05165 (EBPO; reconstruction)",
    # The prior's mean gives an all-equal group a nonzero advantage, and it
    # carries earlier batches' groups into this one's baselines.
    constant_group_zero=False, independent_groups=False, reads=("valid",),
    state=_kit.StateSpec(init=ebpo_init), check=_check_ebpo,
    examples=({}, {"scale": "group_std"}, {"scale": "none", "tau2_min": 1e-3}))
def ebpo(rewards, state: EBPOState, *, scale: str = "global_std",
         eps: float = 1e-6, tau2_min: float = 1e-6, valid=None):
  """Empirical Bayes PO: the group baseline shrunk toward a global prior.

    S   = (sigma_w^2 / G) / (sigma_w^2 / G + tau^2)
    b_p = S mu0 + (1 - S) mean_g R[p]
    A   = (R - b_p) / (sigma0 + eps)               (scale="global_std")

  mu0, sigma0^2 (unbiased) are over every reward seen so far; sigma_w^2 is
  the mean of the groups' unbiased variances and tau^2 = max(Var(group
  means) - sigma_w^2 / G, tau2_min) the between-prompt variance, all kept
  by Welford accumulators (`EBPOState`). Advantages use the state from
  before this batch; the batch's valid groups then update it. A pooled
  sigma_w^2 (not the group's own variance) gives an all-fail group
  A = -S mu0 / sigma0 < 0: a penalty that does not vanish.

  EBPO, "Empirical Bayes Shrinkage for Stabilizing Group-Relative Policy
  Optimization" (arXiv 2602.05165, seed 002 para. 111). No public code:
  this is a reconstruction from the abstract (VARIANTS.md section 1.3).

  The first step (empty state: S = 0, sigma0 undefined) is plain GRPO, and
  so is every step while the rewards seen have no spread (sigma0 = 0, so
  S = 0): ``global_std`` then divides by the group's std. A group of one
  gets 0 on the empty state and S (R - mu0) / sigma0 after.

  Args:
    rewards: [P, G] rewards.
    state: the `EBPOState` from before this batch (`ebpo_init()` first).
    scale: what R - b_p is divided by: ``global_std`` (sigma0 + eps, the
      default), ``group_std`` (the group's unbiased std + eps; an all-equal
      group, whose std is 0, is divided by 1) or ``none``.
    eps: added to the std.
    tau2_min: the floor of the between-prompt variance tau^2.
    valid: [P] bool, False for filler groups: they get 0 and do not enter
      the state. Default: all valid.

  Returns:
    ([P, G] float32 advantages, the updated `EBPOState`).
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  _check_ebpo(scale=scale, eps=eps, tau2_min=tau2_min)
  valid = _kit.check_valid(valid, rewards.shape[0])
  shrink = ebpo_shrinkage(state, rewards.shape[1], tau2_min=tau2_min)
  group_mean = rewards.mean(axis=-1, keepdims=True)
  # R - b_p written so that S = 0 is exactly GRPO's centring.
  centred = (_kit.centered(rewards, -1)
             + shrink * (group_mean - state.rewards.mean))
  group_scaled = _kit.divide_by_std(centred, _kit.std(rewards, -1, 1), eps)
  if scale == "global_std":
    sigma0 = jnp.sqrt(welford_variance(state.rewards))
    advantages = jnp.where(sigma0 > 0, centred / (sigma0 + eps), group_scaled)
  else:
    advantages = {"group_std": group_scaled, "none": centred}[scale]
  return (_kit.zero_fillers(advantages, valid),
          ebpo_update(state, rewards, valid))


# -------------------------------------------------------------------- AVSPO


class AVSPOState(NamedTuple):
  """AVSPO's tracker: the moving average of the advantage collapse rate."""
  acr_ema: jnp.ndarray  # [] float32


def avspo_init() -> AVSPOState:
  return AVSPOState(acr_ema=jnp.zeros((), jnp.float32))


def _check_avspo(*, momentum, acr_threshold, n_virtual, r_lo, r_hi, eps,
                 ddof, **_) -> None:
  _kit.check_real("momentum", momentum, low=0.0, high=1.0,
                  why="the moving average's weight on its past")
  # The collapse rate lies in [0, 1]: at 1 or above the gate never opens.
  _kit.check_real("acr_threshold", acr_threshold, low=0.0, high=1.0,
                  high_open=True, why="the tracked collapse rate opens the "
                  "gate above it; the default is 0.3")
  _kit.check_int("n_virtual", n_virtual, low=1)
  _kit.check_real("r_lo", r_lo)
  _kit.check_real("r_hi", r_hi)
  if not r_lo < r_hi:
    raise registry.OptionError(
        "r_hi", f"r_lo={r_lo!r} must be below r_hi={r_hi!r} (the virtual "
        "reward's two values); set r_hi above r_lo.")
  _kit.check_std_options(eps=eps, ddof=ddof)


@_kit.register(
    input="PG", output="group",
    paper="arXiv 2605.21125 (AVSPO; reconstruction)",
    # Once the gate opens, all-equal groups get nonzero advantages, the
    # batch's collapse rate gates every group, and the virtual rewards are
    # absolute values.
    constant_group_zero=False, independent_groups=False,
    shift_invariant=False, reads=("valid",),
    state=_kit.StateSpec(init=avspo_init), check=_check_avspo,
    examples=({}, {"momentum": 0.0, "acr_threshold": 0.0},
              {"acr_threshold": 0.0, "n_virtual": 3, "r_lo": -1.0,
               "r_hi": 2.0}))
def avspo(rewards, state: AVSPOState, *, momentum: float = 0.9,
          acr_threshold: float = 0.3, n_virtual: int = 1, r_lo: float = 0.0,
          r_hi: float = 1.0, eps: float = 1e-6, ddof: int = 1, valid=None):
  """Adaptive Virtual Sample PO: virtual rewards for collapsed groups, gated
  by the tracked advantage collapse rate (ACR).

    acr_ema <- m acr_ema + (1 - m) ACR         ACR: share of valid groups
                                               whose rewards are all equal
    gate     = acr_ema > acr_threshold          (this batch included)
    A        = grpo(R)                          gate off, or R varies
    A        = z([R0 x G, v x n_virtual])[:G]   gate on, all equal to R0,
               v = r_hi if R0 < (r_lo + r_hi) / 2 else r_lo

  z is GRPO's standardisation (ddof, eps) over the G real and n_virtual
  virtual values; only the real members get advantages. Below the threshold
  this is exactly GRPO; NGRPO is the case "always add r_max to every group".

  AVSPO, "Advantage Collapse in Group Relative Policy Optimization:
  Diagnosis and Mitigation" (arXiv 2605.21125, seed 000 para. 55). Its
  repository holds only a README: this is a reconstruction from the
  abstract (VARIANTS.md section 1.6). The moving average includes this
  batch's ACR ("real-time" monitoring); it starts at 0, so with the
  defaults the gate opens after four fully collapsed batches.

  Args:
    rewards: [P, G] rewards.
    state: the `AVSPOState` from before this batch (`avspo_init()` first).
    momentum: m, the moving average's weight on its past, in [0, 1].
    acr_threshold: the gate opens above it.
    n_virtual: virtual rewards per collapsed group (>= 1).
    r_lo, r_hi: the virtual reward's two values (r_lo < r_hi).
    eps, ddof: GRPO's std options.
    valid: [P] bool, False for filler groups: they get 0 and do not count in
      the ACR (a batch of fillers only leaves the average as it was).
      Default: all valid.

  Returns:
    ([P, G] float32 advantages; 0 for G = 1, the updated `AVSPOState`).
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  valid = _kit.check_valid(valid, rewards.shape[0])
  _check_avspo(momentum=momentum, acr_threshold=acr_threshold,
               n_virtual=n_virtual, r_lo=r_lo, r_hi=r_hi, eps=eps, ddof=ddof)
  acr = groups_lib.collapse_rate(rewards, valid=valid)
  acr_ema = jnp.where(valid.any(),
                      momentum * state.acr_ema + (1.0 - momentum) * acr,
                      state.acr_ema).astype(jnp.float32)
  advantages = _kit.standardize_groups(rewards, eps=eps, ddof=ddof)
  num_groups, group_size = rewards.shape
  if group_size > 1:  # a group of one keeps GRPO's 0
    first = rewards[:, :1]
    virtual = jnp.where(first < 0.5 * (r_lo + r_hi), r_hi, r_lo)
    padded = jnp.concatenate(
        [rewards, jnp.broadcast_to(virtual, (num_groups, n_virtual))], -1)
    lifted = _kit.standardize_groups(padded, eps=eps,
                                     ddof=ddof)[:, :group_size]
    collapsed = ~groups_lib.has_signal(rewards)
    advantages = jnp.where((acr_ema > acr_threshold) & collapsed[:, None],
                           lifted, advantages)
  return _kit.zero_fillers(advantages, valid), AVSPOState(acr_ema=acr_ema)
