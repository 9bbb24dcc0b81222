"""Group-relative estimators over [P, G] rewards: grpo, dr_grpo, rloo, opo
(length-weighted baseline) and pass_at_k (only the best member credited).

Each is pure and jittable, computes in float32 whatever the input dtype, and
gives exactly 0 for a group whose rewards are all equal (a group of one
included).

grpo, dr_grpo and rloo honour `groups.GroupData.members` (``members=True``
in their metadata): given ``members`` [P, G] bool, each forms its mean, std
or leave-one-out baseline over the kept members only, the others get 0,
and a group of fewer than 2 kept members, or of equal kept rewards, gets
exactly 0 (GFPO's advantage over its kept subset, arXiv 2508.09726).
"""

import jax.numpy as jnp

from grpo_jax.advantages import _kit
from grpo_jax.advantages.segments import masked_group_z


def _kept(rewards, members, *, scale="none", eps=0.0, ddof=0):
  """The group z-score (or centring, scale none) over the kept members."""
  return masked_group_z(rewards[..., None], members[..., None], scale=scale,
                        eps=eps, ddof=ddof)[..., 0]


def _group_scale(rewards, centred, *, eps, ddof, valid, members=None):
  del valid  # per group: no batch statistic
  if members is not None:
    _kit.check_ddof(ddof, rewards.shape[-1])
    return _kept(rewards, members, scale="group", eps=eps, ddof=ddof)
  _kit.check_ddof(ddof, rewards.shape[-1])
  return _kit.divide_by_std(centred, _kit.std(rewards, -1, ddof), eps)


def _batch_scale(rewards, centred, *, eps, ddof, valid, members=None):
  _kit.check_ddof(ddof, rewards.size)
  _, sd = _kit.batch_moments(rewards, valid, ddof, members)
  return _kit.divide_by_std(centred, sd, eps)


def _no_scale(rewards, centred, *, eps, ddof, valid, members=None):
  del rewards, eps, ddof, valid, members
  return centred


# What the centred rewards are divided by.
_SCALES = {"group": _group_scale, "batch": _batch_scale, "none": _no_scale}
SCALES = tuple(_SCALES)


def _check_scaled(choices):
  """The ``check`` of an estimator whose options are a `scale` among
  `choices` and the std's eps and ddof."""
  def check(*, scale, eps, ddof, **_):
    _kit.check_choice("scale", scale, choices)
    _kit.check_std_options(eps=eps, ddof=ddof)
  return check


@_kit.register(
    input="PG", output="group", paper="arXiv 2402.03300", reads=("valid",),
    # scale="batch" divides every group by one batch std.
    independent_groups=lambda scale="group", **_: scale != "batch",
    members=True, check=_check_scaled(SCALES),
    examples=({}, {"scale": "batch"}, {"scale": "none"}, {"ddof": 0}))
def grpo(rewards, *, scale: str = "group", eps: float = 1e-6, ddof: int = 1,
         valid=None, members=None) -> jnp.ndarray:
  """GRPO's group-normalised advantage.

  A = (R - mean_g R) / (std R + eps), DeepSeekMath (arXiv 2402.03300).

  Args:
    rewards: [P, G] rewards of G completions for each of P prompts.
    scale: the std divided by: ``group`` (per group, the default), ``batch``
      (over the rewards of all valid groups; the centring stays per group) or
      ``none`` (no division: Dr. GRPO).
    eps: added to the std.
    ddof: delta degrees of freedom of the std; 1 (the unbiased std) matches
      the common PyTorch implementations.
    valid: [P] bool, False for filler groups: they get 0 and do not enter
      the batch std. Default: all valid.
    members: [P, G] bool, the kept members (`GroupData.members`): mean and
      std over them only (the batch std over the kept members of the valid
      groups), 0 elsewhere. Default: every member.

  Returns:
    [P, G] float32 advantages; exactly 0 for groups of equal rewards.
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  _kit.check_choice("scale", scale, SCALES)
  valid = _kit.check_valid(valid, rewards.shape[0])
  members = _kit.check_members(members, rewards.shape)
  centred = (_kit.centered(rewards, -1) if members is None
             else _kept(rewards, members))
  advantages = _SCALES[scale](rewards, centred, eps=eps, ddof=ddof,
                              valid=valid, members=members)
  return _kit.zero_fillers(advantages, valid)


@_kit.register(input="PG", output="group", paper="arXiv 2503.20783",
               members=True)
def dr_grpo(rewards, *, members=None) -> jnp.ndarray:
  """Dr. GRPO's advantage: A = R - mean_g R, no std (arXiv 2503.20783).

  Args:
    rewards: [P, G] rewards.
    members: [P, G] bool kept members: the mean over them, 0 elsewhere.

  Returns:
    [P, G] float32 advantages.
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  members = _kit.check_members(members, rewards.shape)
  if members is not None:
    return _kept(rewards, members)
  return _kit.centered(rewards, -1)


@_kit.register(input="PG", output="group", paper="arXiv 2402.14740",
               members=True)
def rloo(rewards, *, members=None) -> jnp.ndarray:
  """Leave-one-out baseline: A_j = R_j - mean_{k!=j} R_k (RLOO, arXiv
  2402.14740).

  Equal to G/(G-1) * (R_j - mean_g R); a group of one has no baseline and
  gives 0.

  Args:
    rewards: [P, G] rewards.
    members: [P, G] bool kept members S: A_j = R_j - mean_{k in S, k != j}
      R_k = |S|/(|S|-1) (R_j - mean_S R) for j in S, 0 elsewhere and where
      |S| < 2.

  Returns:
    [P, G] float32 advantages.
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  members = _kit.check_members(members, rewards.shape)
  if members is not None:
    kept = members.sum(axis=-1, keepdims=True).astype(jnp.float32)
    factor = jnp.where(kept > 1, kept / jnp.maximum(kept - 1, 1.0), 0.0)
    return _kept(rewards, members) * factor
  group_size = rewards.shape[-1]
  if group_size == 1:
    return jnp.zeros_like(rewards)
  return _kit.centered(rewards, -1) * (group_size / (group_size - 1))


@_kit.register(input="PG", output="group", paper="arXiv 2505.23585",
               reads=("lengths",))
def opo(rewards, *, lengths=None) -> jnp.ndarray:
  """OPO's optimal baseline: A = R - sum_g L_g R_g / sum_g L_g, no std.

  On-Policy RL with Optimal reward baseline (arXiv 2505.23585): for
  sequence-level rewards the variance-minimising baseline weights each
  completion by its squared score-function norm, which the paper takes as
  proportional to its length L in tokens. A group whose lengths sum to 0
  (no length known) falls back to equal weights, Dr. GRPO's baseline.
  verl's ``opo`` gives a group of one the baseline 0; here, as for every
  estimator, a group of one gets 0.

  Args:
    rewards: [P, G] rewards.
    lengths: [P, G] completion lengths in tokens; default all 0 (equal
      weights).

  Returns:
    [P, G] float32 advantages; exactly 0 for groups of equal rewards.
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  lengths = _kit.check_lengths(lengths, rewards.shape)
  total = lengths.sum(axis=-1, keepdims=True)
  weights = jnp.where(total > 0, lengths, 1.0)
  baseline = ((weights * rewards).sum(axis=-1, keepdims=True)
              / weights.sum(axis=-1, keepdims=True))
  return _kit.zero_where_constant(rewards, rewards - baseline)


# The divisor of pass@k's credit: the group std (verl's default) or none.
PASS_AT_K_SCALES = ("group", "none")


@_kit.register(input="PG", output="group", paper="arXiv 2503.19595",
               check=_check_scaled(PASS_AT_K_SCALES),
               examples=({}, {"scale": "none"}, {"ddof": 0}))
def pass_at_k(rewards, *, scale: str = "group", eps: float = 1e-6,
              ddof: int = 1) -> jnp.ndarray:
  """pass@k-style credit: only the best completion of a group is credited.

  A_best = (R_max - R_second) / (std_g R + eps), every other A = 0: the
  best member's margin over the runner-up, which is what it adds to the
  group's max (verl's ``grpo_passk``, after arXiv 2503.19595). Ties at the
  top give the whole group 0, so no completion is singled out arbitrarily.
  verl refuses G = 1; here a group of one gets 0.

  Args:
    rewards: [P, G] rewards.
    scale: ``group`` (divide by the group std, verl's default) or ``none``.
    eps: added to the std.
    ddof: delta degrees of freedom of the std.

  Returns:
    [P, G] float32 advantages, nonzero at most once per group.
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  _kit.check_choice("scale", scale, PASS_AT_K_SCALES)
  group_size = rewards.shape[-1]
  if group_size == 1:
    return jnp.zeros_like(rewards)
  _kit.check_ddof(ddof, group_size)
  top_two = jnp.sort(rewards, axis=-1)[:, -2:]
  margin = top_two[:, 1:] - top_two[:, :1]  # [P, 1]
  best = jnp.arange(group_size)[None, :] == jnp.argmax(rewards, -1)[:, None]
  credit = jnp.where(best, margin, 0.0)
  if scale == "group":
    credit = _kit.divide_by_std(credit, _kit.std(rewards, -1, ddof), eps)
  return credit
