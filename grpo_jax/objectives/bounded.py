"""PPO's clip with bounded gradients for the clipped tokens: CE-GPPO (GPPO
with beta1 = beta2 = 1)."""

import jax
import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax.objectives import _kit
from grpo_jax.objectives._kit import OBJECTIVES


@OBJECTIVES.register(
    level="token", mechanism="clip", paper="2509.20712",
    examples=({}, {"beta_low": 1.0, "beta_high": 1.0, "dual_clip": None},
              {"beta_low": 0.25, "dual_clip": 10.0,
               "aggregation": "seq_mean_token_mean"}))
def ce_gppo(logp, old_logp, advantages, mask, *, clip_low=0.2, clip_high=0.2,
            beta_low=0.75, beta_high=1.0, dual_clip=3.0,
            aggregation="token_mean", horizon=None, token_weights=None):
  """CE-GPPO: PPO's clip that keeps a bounded gradient on clipped tokens.

  Per token, with r = exp(logp - old_logp), u = r / sg(r) (value 1, gradient
  that of r) and
    low  = (A < 0) and (r < 1 - clip_low)
    high = (A > 0) and (r > 1 + clip_high):
      low:       L = -beta_low  * (1 - clip_low)  * u * A
      high:      L = -beta_high * (1 + clip_high) * u * A
      otherwise: L = -r * A
  then PPO's dual clip for A < 0: L = min(L, -dual_clip * A).

  A clipped token keeps PPO's clipped value (times beta) but, instead of no
  gradient, d L / d logp = -beta * (1 -+ clip) * A: bounded, whatever r.
  beta_low = beta_high = 1 is GPPO. Inside the band it is `ppo_clip`.

  CE-GPPO, arXiv 2509.20712; the authors' ``compute_gppo_loss_general_beta``
  (Kwai-Klear/CE-GPPO). Defaults: the function's beta_low = 0.75 (their yaml
  has 0.25, the 1.5B script 0.5, the 7B script 0.75), beta_high = 1, the band
  0.2 / 0.2, dual clip c = 3 (their scripts set 10), ``token_mean``.

  clip_fraction: real tokens in low or high (gradient scaled to the bound),
  plus, as for `ppo_clip`, tokens with A < 0 whose loss the dual clip's cap
  replaced (gradient cut).

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    clip_low, clip_high: the band [1 - clip_low, 1 + clip_high].
    beta_low, beta_high: the gradient scales (>= 0) of the low and high
      clipped tokens.
    dual_clip: c > 1, or None (off).
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _kit.check_band(clip_low, clip_high)
  _kit.check_hparam("beta_low", beta_low, low=0.0)
  _kit.check_hparam("beta_high", beta_high, low=0.0)
  _kit.check_dual_clip(dual_clip)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  a, ratio, x = batch.advantages, batch.ratio, batch.log_ratio
  unit = jnp.exp(x - jax.lax.stop_gradient(x))
  low = (a < 0) & (ratio < 1.0 - clip_low)
  high = (a > 0) & (ratio > 1.0 + clip_high)
  term = jnp.where(
      low, -beta_low * (1.0 - clip_low) * unit * a,
      jnp.where(high, -beta_high * (1.0 + clip_high) * unit * a,
                -ratio * a))
  term, clipped = _kit.dual_clip(term, low | high, a, dual_clip)
  return _kit.token_objective(term, batch, aggregation=aggregation,
                              horizon=horizon, clipped=clipped, ratio=ratio,
                              token_weights=token_weights)
