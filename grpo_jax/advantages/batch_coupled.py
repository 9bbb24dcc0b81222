"""Estimators whose advantages depend on the whole batch: BNPO (a Beta fitted
over the batch's prompts) and REINFORCE++ (whitening over the batch's
tokens), with or without a group baseline.

Each is pure and jittable and computes in float32. Filler groups (``valid``
False) get 0 and enter no batch statistic.
"""

import jax.numpy as jnp
from jax.scipy import special

from grpo_jax import groups as groups_lib
from grpo_jax import registry
from grpo_jax.advantages import _kit

# ---------------------------------------------------------------------- BNPO

# Below this variance of the prompts' mean rewards the Beta fit is flat.
_FLAT_VARIANCE = 1e-12


def _check_rescale(r_min: float, r_max: float) -> None:
  _kit.check_real("r_min", r_min)
  _kit.check_real("r_max", r_max)
  if not r_max > r_min:
    raise registry.OptionError(
        "r_max", f"r_max={r_max!r} must exceed r_min={r_min!r} (BNPO maps "
        "rewards from [r_min, r_max] onto [0, 1]); set r_max above r_min.")


def _check_bnpo(*, r_min, r_max, decompose, max_weight, **_) -> None:
  _check_rescale(r_min, r_max)
  if not isinstance(decompose, bool):
    raise registry.OptionError(
        "decompose", f"decompose={decompose!r} must be True (one Beta per "
        "reward column) or False (one for the weighted sum).")
  _kit.check_real("max_weight", max_weight, low=0.0, low_open=True)


def _bnpo_domain(r_min: float = 0.0, r_max: float = 1.0, **_):
  return (r_min, r_max)


def beta_fit(means, valid):
  """BNPO's method-of-moments Beta over the valid prompts' mean rewards.

  m = mean_q p_q, v = var_q p_q (ddof=1), s = m(1 - m)/v - 1,
  alpha = max(1, 1 + s m / 3), beta = max(1, 1 + s (1 - m) / 3);
  alpha = beta = 1 (uniform) with fewer than two valid prompts, as the
  authors' code, or with v <= 1e-12, where their code divides by zero.

  Args:
    means: [P, C] mean reward in [0, 1] of each prompt, per column.
    valid: [P] bool, the prompts that enter the fit.

  Returns:
    (alpha, beta), each [1, C] float32.
  """
  m_valid = valid[:, None].astype(jnp.float32)
  count = m_valid.sum()
  m = (means * m_valid).sum(axis=0, keepdims=True) / jnp.maximum(count, 1.0)
  v = (((means - m) * m_valid)**2).sum(axis=0, keepdims=True) / jnp.maximum(
      count - 1.0, 1.0)
  uniform = (count < 2) | (v <= _FLAT_VARIANCE)
  s = m * (1.0 - m) / jnp.where(uniform, 1.0, v) - 1.0
  alpha = jnp.where(uniform, 1.0, jnp.maximum(1.0, 1.0 + s * m / 3.0))
  beta = jnp.where(uniform, 1.0, jnp.maximum(1.0, 1.0 + s * (1.0 - m) / 3.0))
  return alpha, beta


def _bnpo_column(scaled, valid, max_weight):
  """w_q (R~ - p_q) for rewards `scaled` [P, G, C] in [0, 1]."""
  means = scaled.mean(axis=1)  # [P, C]
  alpha, beta = beta_fit(means, valid)
  # Clipped: only rewards outside [r_min, r_max] leave [0, 1], which
  # train.validate rules out; this keeps a direct call finite.
  p = jnp.clip(means, 0.0, 1.0)
  # xlogy gives 0 * log 0 = 0 at alpha = 1 or beta = 1 (a flat side).
  log_pdf = (special.xlogy(alpha - 1.0, p) + special.xlog1py(beta - 1.0, -p)
             - special.betaln(alpha, beta))
  # The cap applies before the product: a pdf of 0 (p in {0, 1}) gives the
  # weight max_weight, not inf, and such a group's R~ - p is 0.
  weight = jnp.exp(jnp.minimum(-log_pdf, jnp.log(max_weight)))  # [P, C]
  return weight[:, None, :] * _kit.centered(scaled, 1)


@_kit.register(
    input="PGK", output="group", paper="arXiv 2506.02864",
    reads=("weights", "valid"), independent_groups=False,
    # The Beta is fitted to absolute success rates.
    shift_invariant=False, reward_range=_bnpo_domain, check=_check_bnpo,
    reward_range_of=lambda decompose=True, **_: (
        "columns" if decompose else "sum"),
    # The contract groups weigh their [0, 1] columns 1, 0.5: a sum in [0, 1.5].
    examples=({}, {"decompose": False, "r_max": 1.5},
              {"r_min": -1.0, "r_max": 2.0},
              {"max_weight": 10.0}))
def bnpo(rewards, weights, *, r_min: float = 0.0, r_max: float = 1.0,
         decompose: bool = True, max_weight: float = 1e6, valid=None
         ) -> jnp.ndarray:
  """BNPO: the group-centred reward divided by a Beta density of its group's
  success rate, the Beta fitted over the batch.

  R~ = (R - r_min) / (r_max - r_min), p_q = mean_g R~_q,
  (alpha, beta) = `beta_fit`(p), w_q = min(1 / Beta_pdf(p_q; alpha, beta),
  max_weight), A_qg = w_q (R~_qg - p_q); no std division (arXiv
  2506.02864, the authors' ``compute_bnpo_outcome_advantage``). With
  `decompose` (the paper's advantage decomposition) each reward column is
  normalised alone and A = (1/K) sum_k w_k A_k; without, BNPO of the
  weighted sum. The authors' code gives a group of one p = 0; here, as for
  every estimator, it gets 0.

  Args:
    rewards: [P, G, K] rewards, each column (or, without `decompose`, the
      weighted sum) in [r_min, r_max].
    weights: [K] weight of each reward column.
    r_min, r_max: the reward range mapped onto [0, 1].
    decompose: one Beta per column (True) or one for the weighted sum.
    max_weight: the cap on 1 / pdf.
    valid: [P] bool, False for filler groups: they get 0 and do not enter
      the Beta fit. Default: all valid.

  Returns:
    [P, G] float32 advantages; exactly 0 for groups of equal rewards.
  """
  rewards = _kit.check_rewards(rewards, 3, "P, G, K")
  weights = _kit.check_weights(weights, rewards.shape[-1])
  valid = _kit.check_valid(valid, rewards.shape[0])
  _check_bnpo(r_min=r_min, r_max=r_max, decompose=decompose,
              max_weight=max_weight)
  if decompose:
    columns, mix = rewards, weights / rewards.shape[-1]
  else:
    columns = groups_lib.weighted_sum(rewards, weights)[..., None]
    mix = jnp.ones((1,), jnp.float32)
  scaled = (columns - r_min) / (r_max - r_min)
  per_column = _bnpo_column(scaled, valid, max_weight)  # [P, G, C]
  return _kit.zero_fillers((per_column * mix[None, None, :]).sum(axis=-1),
                          valid)


# --------------------------------------------------------------- REINFORCE++


def _token_weights(lengths, valid):
  """[P, G] weight of each completion in a token-level batch statistic: its
  length in tokens (0 for fillers); one each where no length is known."""
  rows = jnp.broadcast_to(valid[:, None], lengths.shape).astype(jnp.float32)
  tokens = lengths * rows
  return jnp.where(tokens.sum() > 0, tokens, rows)


def whiten_tokens(x, *, lengths, valid, eps: float, ddof: int):
  """(x - mean) / sqrt(var + eps), mean and var over the batch's tokens.

  Every token of completion (p, g) carries x_pg, so each completion counts
  L_pg times: mean = sum L x / sum L, var = sum L (x - mean)^2 /
  (sum L - ddof) (verl's ``masked_whiten``, unbiased). Exactly 0 where the
  valid x are all equal.

  Args:
    x: [P, G] values, one per completion.
    lengths: [P, G] lengths in tokens; all 0 counts each completion once.
    valid: [P] bool; filler groups enter neither statistic and get 0.
    eps: added to the variance.
    ddof: delta degrees of freedom, in tokens.

  Returns:
    [P, G] float32.
  """
  weights = _token_weights(lengths, valid)
  total = weights.sum()
  mean = (weights * x).sum() / jnp.maximum(total, 1.0)
  var = (weights * (x - mean)**2).sum() / jnp.maximum(total - ddof, 1.0)
  whitened = (x - mean) / jnp.sqrt(var + eps)
  counted = weights > 0
  constant = (jnp.where(counted, x, -jnp.inf).max()
              == jnp.where(counted, x, jnp.inf).min())
  return _kit.zero_fillers(jnp.where(constant, 0.0, whitened), valid)


def _check_whitening(rewards, lengths, valid, eps, ddof):
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  _kit.check_std_options(eps=eps, ddof=ddof)
  return (rewards, _kit.check_lengths(lengths, rewards.shape),
          _kit.check_valid(valid, rewards.shape[0]))


@_kit.register(
    input="PG", output="group", paper="arXiv 2501.03262",
    reads=("lengths", "valid"), independent_groups=False,
    # No group baseline: a constant group (one of one member too) gets R
    # minus the batch mean.
    constant_group_zero=False, min_group_size=1,
    check=_kit.check_std_options,
    examples=({}, {"eps": 1e-6}, {"ddof": 0}))
def reinforce_plus_plus(rewards, *, eps: float = 1e-8, ddof: int = 1,
                        lengths=None, valid=None) -> jnp.ndarray:
  """REINFORCE++: the reward whitened over the batch's tokens, no baseline.

  A = (R - mean) / sqrt(var + eps), mean and var over every token of the
  batch (`whiten_tokens`), arXiv 2501.03262 as verl's
  ``reinforce_plus_plus`` computes it with gamma = 1 (its default): the
  outcome reward is every token's return, so the advantage is one per
  completion. A group of equal rewards gets its offset from the batch mean,
  not 0.

  Args:
    rewards: [P, G] rewards.
    eps: added to the variance (verl's 1e-8).
    ddof: delta degrees of freedom of the variance, in tokens.
    lengths: [P, G] lengths in tokens; default 0 (each completion once).
    valid: [P] bool, False for filler groups (0, in no statistic).

  Returns:
    [P, G] float32 advantages.
  """
  rewards, lengths, valid = _check_whitening(rewards, lengths, valid, eps,
                                            ddof)
  return whiten_tokens(rewards, lengths=lengths, valid=valid, eps=eps,
                       ddof=ddof)


@_kit.register(
    input="PG", output="group", paper="arXiv 2501.03262",
    reads=("lengths", "valid"), independent_groups=False,
    # Whitening shifts by the batch mean of the centred rewards, which the
    # token weights make nonzero: a constant group gets -mean / std.
    constant_group_zero=False, check=_kit.check_std_options,
    examples=({}, {"eps": 1e-6}, {"ddof": 0}))
def reinforce_plus_plus_baseline(rewards, *, eps: float = 1e-8,
                                 ddof: int = 1, lengths=None, valid=None
                                 ) -> jnp.ndarray:
  """REINFORCE++-baseline: subtract the group mean, then whiten the batch.

  A = whiten(R - mean_g R) over the batch's tokens (`whiten_tokens`), arXiv
  2501.03262 as verl's ``reinforce_plus_plus_baseline``. verl gives a group
  of one the baseline 0; here its centred reward is 0.

  Args:
    rewards: [P, G] rewards.
    eps: added to the variance (verl's 1e-8).
    ddof: delta degrees of freedom of the variance, in tokens.
    lengths: [P, G] lengths in tokens; default 0 (each completion once).
    valid: [P] bool, False for filler groups (0, in no statistic).

  Returns:
    [P, G] float32 advantages.
  """
  rewards, lengths, valid = _check_whitening(rewards, lengths, valid, eps,
                                            ddof)
  return whiten_tokens(_kit.centered(rewards, -1), lengths=lengths,
                       valid=valid, eps=eps, ddof=ddof)
