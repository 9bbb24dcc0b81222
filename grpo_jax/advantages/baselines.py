"""Estimators whose baseline is not the plain group mean: MDP-GRPO (a dual
anchor through a prospect-theoretic value), ReMax (the reward of a greedy
completion of the same prompt) and GPG (the group mean rescaled by the
batch's share of rewarded rows).

Each is pure and jittable and computes in float32. Filler groups (``valid``
False) get 0 (the `advantages.make` record sets them) and enter no batch
statistic.
"""

import jax.numpy as jnp

from grpo_jax import groups as groups_lib
from grpo_jax.advantages import _kit

# ------------------------------------------------------------------ MDP-GRPO


def _check_mdp_options(*, mix, anchor, anchor_scale, gain_power, loss_power,
                       loss_aversion, bound, eps, ddof, **_) -> None:
  # The registry's ``check``: train.validate refuses a bad value before any
  # compute, naming it.
  _kit.check_real("mix", mix, low=0.0, high=1.0)  # the absolute anchor's share
  _kit.check_real("anchor", anchor)
  for key, value in (("anchor_scale", anchor_scale),
                     ("gain_power", gain_power), ("loss_power", loss_power),
                     ("loss_aversion", loss_aversion), ("bound", bound)):
    _kit.check_real(key, value, low=0.0, low_open=True)
  _kit.check_std_options(eps=eps, ddof=ddof)


def prospect_value(x, *, gain_power: float = 0.88, loss_power: float = 0.88,
                   loss_aversion: float = 2.25) -> jnp.ndarray:
  """Kahneman-Tversky's value: v(x) = x^a for x >= 0, -lam (-x)^b below.

  Defaults are the 1992 estimates a = b = 0.88, lam = 2.25: losses weigh
  2.25 times gains of the same size, and both saturate (a, b < 1).
  """
  # Each power sees only its own side (0 on the other), so no negative base
  # reaches a fractional power.
  gains = jnp.power(jnp.maximum(x, 0.0), gain_power)
  losses = jnp.power(jnp.maximum(-x, 0.0), loss_power)
  return jnp.where(x >= 0, gains, -loss_aversion * losses)


@_kit.register(
    input="PG", output="group",
    paper="MDP-GRPO (seed 000 para. 17; reconstruction)",
    # The anchor term gives an all-equal group (and a group of one) the
    # advantage of its absolute reward: it is the point of the method.
    constant_group_zero=False, shift_invariant=False,
    # The anchor alone moves a group of one; without it (mix 0) it is z = 0.
    min_group_size=lambda mix=0.5, **_: 1 if mix > 0 else 2,
    check=_check_mdp_options,
    examples=({}, {"mix": 0.0}, {"mix": 1.0, "bound": 1.0},
              {"loss_aversion": 1.0, "gain_power": 1.0, "loss_power": 1.0,
               "ddof": 0}))
def mdp_grpo(rewards, *, mix: float = 0.5, anchor: float = 0.5,
             anchor_scale: float = 0.5, gain_power: float = 0.88,
             loss_power: float = 0.88, loss_aversion: float = 2.25,
             bound: float = 3.0, eps: float = 1e-6, ddof: int = 1
             ) -> jnp.ndarray:
  """MDP-GRPO's dual-anchor, prospect-shaped, clipped advantage.

    x = (1 - m) z(R) + m (R - anchor) / anchor_scale
    v = x^a (x >= 0),  -lam (-x)^b (x < 0)          (`prospect_value`)
    A = clip(v, -bound, bound)

  z(R) = (R - mean_g R) / (std_g R + eps) is GRPO's z-score (0 for an
  all-equal group): the second, absolute anchor keeps a gradient in
  homogeneous groups (an all-correct group is pushed up, an all-wrong one
  down) where mean-centring gives none. Defaults are for rewards in
  [0, 1]. MDP-GRPO (seed 000 para. 17) has no public code or formulas
  beyond its abstract: this is a reconstruction (VARIANTS.md 1.10), every
  constant a keyword argument.

  Args:
    rewards: [P, G] rewards.
    mix: m, the absolute anchor's share in [0, 1].
    anchor, anchor_scale: the absolute anchor (R - anchor) / anchor_scale.
    gain_power, loss_power, loss_aversion: a, b and lam of the value.
    bound: the clip of |A|.
    eps, ddof: of the group std in z.

  Returns:
    [P, G] float32 advantages in [-bound, bound].
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  _check_mdp_options(mix=mix, anchor=anchor, anchor_scale=anchor_scale,
                     gain_power=gain_power, loss_power=loss_power,
                     loss_aversion=loss_aversion, bound=bound, eps=eps,
                     ddof=ddof)
  z = _kit.standardize_groups(rewards, eps=eps, ddof=ddof)
  x = (1.0 - mix) * z + mix * (rewards - anchor) / anchor_scale
  value = prospect_value(x, gain_power=gain_power, loss_power=loss_power,
                         loss_aversion=loss_aversion)
  return jnp.clip(value, -bound, bound)


# --------------------------------------------------------------------- ReMax


def greedy_baseline(greedy_rewards, weights, num_groups: int) -> jnp.ndarray:
  """[P, 1] float32 greedy baselines from [P] (already summed) or [P, K]
  (summed here with the [K] weights) greedy rewards."""
  greedy_rewards = jnp.asarray(greedy_rewards, jnp.float32)
  if greedy_rewards.ndim == 2:
    greedy_rewards = groups_lib.weighted_sum(greedy_rewards[:, None, :],
                                             weights)[:, 0]
  if greedy_rewards.shape != (num_groups,):
    raise ValueError(
        f"greedy_rewards must be [P] or [P, K] with P={num_groups}; got "
        f"shape {greedy_rewards.shape}.")
  return greedy_rewards[:, None]


@_kit.register(
    input="PG", output="group", paper="arXiv 2310.10505",
    reads=("greedy_rewards", "weights"),
    # The baseline is another completion's reward: an all-equal group gets
    # R - R_greedy, and a shift moves R but (in the contract suite) not
    # the greedy rewards alone; shifting both leaves A unchanged (tested).
    constant_group_zero=False, shift_invariant=False,
    min_group_size=1,  # the greedy completion is a baseline for one sample
    examples=({},))
def remax(rewards, *, greedy_rewards=None, weights=None) -> jnp.ndarray:
  """ReMax: the baseline is the reward of a greedy completion of the prompt.

    A_pg = R_pg - R_greedy_p

  ReMax (arXiv 2310.10505; verl's ``remax``): one extra completion per
  prompt decoded greedily (temperature 0) is scored but never trained on;
  its reward is the baseline of every sampled completion of that prompt.
  The rollout samples it when the estimator reads ``greedy_rewards``
  (`rollout.sample_round`). A group of one still has a baseline.

  Args:
    rewards: [P, G] rewards of the sampled completions.
    greedy_rewards: [P, K] (the reward columns of the greedy completion,
      summed with `weights`) or [P] (already summed).
    weights: [K] weights of the columns; default ones.

  Returns:
    [P, G] float32 advantages.
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  if greedy_rewards is None:
    raise ValueError("remax needs greedy_rewards ([P] or [P, K]), the "
                     "rewards of a greedy completion of each prompt.")
  if weights is None and jnp.ndim(greedy_rewards) == 2:
    weights = jnp.ones((jnp.shape(greedy_rewards)[1],), jnp.float32)
  return rewards - greedy_baseline(greedy_rewards, weights, rewards.shape[0])


# ----------------------------------------------------------------------- GPG


def _check_f_norm(*, f_norm, **_) -> None:
  _kit.check_real("f_norm", f_norm, low=0.0, low_open=True)


@_kit.register(
    input="PG", output="group", paper="arXiv 2504.02546",
    reads=("valid",),
    # The scale counts the batch's rewarded rows, and a zero reward is an
    # absolute value.
    independent_groups=False, shift_invariant=False, check=_check_f_norm,
    examples=({}, {"f_norm": 2.0}))
def gpg(rewards, *, f_norm: float = 1.0, valid=None) -> jnp.ndarray:
  """GPG's advantage: the group-centred reward, rescaled by the share of
  rows with a nonzero reward, no std.

    A = (B / M) (R - mean_g R) / f_norm

  B the rows of the batch, M those whose reward is nonzero (at least 1):
  Group Policy Gradient (arXiv 2504.02546), as verl's
  ``compute_gpg_outcome_advantage``. When few rows earn a reward the
  gradient of the few is scaled up. Use with the ``gpg`` objective
  (-A logp). verl gives a group of one the baseline 0 (A = (B/M) R); here,
  as for every estimator, it gets 0.

  Args:
    rewards: [P, G] rewards.
    f_norm: a constant divisor (verl's ``f_norm``, default 1).
    valid: [P] bool, False for filler groups: they get 0 and count in
      neither B nor M. Default: all valid.

  Returns:
    [P, G] float32 advantages; exactly 0 for groups of equal rewards.
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  _check_f_norm(f_norm=f_norm)
  valid = _kit.check_valid(valid, rewards.shape[0])
  rows = jnp.broadcast_to(valid[:, None], rewards.shape)
  batch_rows = rows.sum().astype(jnp.float32)
  rewarded = (rows & (rewards != 0)).sum().astype(jnp.float32)
  scale = batch_rows / jnp.maximum(rewarded, 1.0)
  return _kit.zero_fillers(scale * _kit.centered(rewards, -1) / f_norm,
                          valid)
