"""FIPO's future-KL influence weights, a correction (`corrections.CORRECTIONS`).

FIPO (seed 002 para. 78, "Future-KL Influence Policy Optimization") weighs
each token's PPO term by how far the policy has already moved on the tokens
that follow it: a token whose continuation the update pushed up is worth
more. The weight depends on the current ratio, so it is computed inside the
loss, from the update's own (detached) log-probs, like every correction.
"""

import numbers

import jax
import jax.numpy as jnp

from grpo_jax.objectives import _kit
from grpo_jax.objectives import corrections

# The safety clamp's band (ms-swift's constants, not options there either).
FIPO_SAFETY_BAND = (0.8, 1.0)


def discounted_future_sum(values, gamma):
  """F_t = sum_{k >= t} gamma^(k - t) values_k along the last axis, by a
  reverse `lax.scan` (F_t = values_t + gamma F_{t+1}); [N, T] -> [N, T]."""
  def step(carry, column):
    carry = column + gamma * carry
    return carry, carry
  _, out = jax.lax.scan(step, jnp.zeros(values.shape[:-1], values.dtype),
                        jnp.moveaxis(values, -1, 0), reverse=True)
  return jnp.moveaxis(out, 0, -1)


def _check_options(half_life, clip_range, safety, dual_clip,
                   clip_high_only=True):
  if not isinstance(clip_high_only, bool):
    raise ValueError(f"clip_high_only must be True or False; got "
                     f"{clip_high_only!r}.")
  corrections.check_number("half_life", half_life, low=0.0, strict=True)
  corrections.check_number("clip_range", clip_range, low=0.0, strict=True)
  if isinstance(clip_range, numbers.Real) and clip_range >= 1.0:
    raise ValueError(
        f"clip_range must be in (0, 1) (the band [1 - clip_range, 1 + "
        f"clip_range]); got {clip_range!r}.")
  for name, value in (("safety", safety), ("dual_clip", dual_clip)):
    if value is not None:
      corrections.check_number(name, value, low=1.0, strict=True)


@corrections.register(
    level="token", reads=("logp", "old_logp", "advantages"),
    statistic="future_kl",
    paper="FIPO (seed 002 para. 78; ms-swift _compute_fipo_influence, a "
    "port of qwenpilot/FIPO)",
    examples=({}, {"clip_high_only": False, "half_life": 4.0},
              {"dual_clip": 3.0, "safety": None}))
def fipo(mask, *, logp, old_logp, advantages, half_life=32.0, clip_range=0.2,
         clip_high_only=True, safety=4.0, dual_clip=None):
  """FIPO: each token weighed by the discounted log-ratio of its future.

    d_t       = (logp_t - old_logp_t) m_t   (0 where r_t > dual_clip, if set)
    F_t       = sum_{k >= t} gamma^(k - t) d_k,   gamma = 2^(-1 / half_life)
    f_t       = clip(exp(F_t), lo, 1 + clip_range),
                lo = 1 (clip_high_only) or 1 - clip_range
    f_t      <- clip(f_t, 0.8, 1.0)  where A_t < 0 and r_t > safety
    L_t       = f_t * (any token-level objective's term, ppo_clip in FIPO)

  r_t = exp(logp_t - old_logp_t), all detached. On policy (the first inner
  step, r = 1) d = 0 and f = 1: the objective's own gradient (GRPO's).
  A dual-clipped token (r_t > dual_clip) does not feed its predecessors'
  F (ms-swift's participation mask, its ``delta``); the objective's own
  dual clip is a separate option. Masked tokens neither contribute nor
  receive. EXACT-CODE via the ms-swift port (VARIANTS.md 3.4): half-life
  32, clip range 0.2 high-only, safety threshold 4.0 (None: off).

  truncated: real tokens whose exp(F) a bound (or the safety clamp)
  replaced. statistic: F_t.

  Args:
    mask: [N, T] loss tokens.
    logp, old_logp: [N, T] current and proximal log-probs (detached here).
    advantages: [N] or [N, T].
    half_life: tau (> 0) in tokens; gamma = 2^(-1/tau).
    clip_range: eps_f in (0, 1).
    clip_high_only: lower bound 1 (True) or 1 - eps_f.
    safety: the ratio above which an A < 0 token's weight is clamped to
      [0.8, 1] (> 1), or None.
    dual_clip: the ratio above which a token leaves the future sums (> 1),
      or None.

  Returns:
    TokenWeights.
  """
  _check_options(half_life, clip_range, safety, dual_clip, clip_high_only)
  real, a = corrections.real_arrays(mask, logp=logp, old_logp=old_logp)
  advantages = corrections.token_advantages(advantages, real)
  x = jnp.where(real, _kit.clipped_log_ratio(a["logp"], a["old_logp"]), 0.0)
  ratio = jnp.exp(x)
  delta = x if dual_clip is None else jnp.where(ratio > dual_clip, 0.0, x)
  gamma = 2.0 ** (-1.0 / half_life)
  future = jnp.where(real, discounted_future_sum(delta, gamma), 0.0)
  # exp of a sum of clipped log-ratios: bound it before the exp.
  raw = jnp.exp(jnp.clip(future, -_kit.LOG_RATIO_BOUND,
                         _kit.LOG_RATIO_BOUND))
  low = 1.0 if clip_high_only else 1.0 - clip_range
  weight = jnp.clip(raw, low, 1.0 + clip_range)
  if safety is not None:
    unsafe = (advantages < 0) & (ratio > safety)
    weight = jnp.where(unsafe, jnp.clip(weight, *FIPO_SAFETY_BAND), weight)
  weight = jnp.where(real, weight, 0.0)
  truncated = real & (weight != raw)
  return corrections.TokenWeights(weight, truncated, future)

