"""Entropy-adaptive clipping: HAPO's asymmetric adaptive clip with its
differential advantage redistribution.

The objective reads ``entropy_hat`` ([N, T], HAPO's normalised entropy in
[-1, 1], `entropy_norm`), which the rollout computes once per batch from the
sampler's per-token entropies over all of the batch's loss tokens
(`Batch.entropy_hat`). A whole-batch statistic read as an array keeps the
loss a sum of per-token terms: microbatched and one-shot losses agree
(tests/contracts). The authors' code instead recomputes h_hat inside the
loss from the current forward's entropy of each micro-batch, so its
statistic depends on the micro-batch size and drifts with the policy over a
batch's minibatch steps; the rollout's is the batch-level statistic of the
policy that sampled it, the one the authors' trainer hands the next
rollout's sampler (`entropy_norm`).
"""

import jax
import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax import measures
from grpo_jax.objectives import _kit
from grpo_jax.objectives._kit import OBJECTIVES

# What the run must record for HAPO as its authors run it: the sampler's
# entropy-adaptive per-token temperatures (`config.rollout.temperature_tau`).
TOKEN_TEMPERATURES = "token_temperatures"


def check_entropy_hat(entropy_hat, mask) -> jnp.ndarray:
  """[N, T] float32 h_hat, detached and 0 under padding; zeros for None
  (every token at the pivot: the mechanism is off)."""
  mask = jnp.asarray(mask)
  if entropy_hat is None:
    return jnp.zeros(mask.shape, jnp.float32)
  entropy_hat = jnp.asarray(entropy_hat)
  if entropy_hat.shape != mask.shape:
    raise ValueError(
        f"entropy_hat must be [N, T] = {tuple(mask.shape)} like logp; got "
        f"shape {tuple(entropy_hat.shape)}.")
  # Padding may hold anything: select, never multiply.
  return jax.lax.stop_gradient(
      jnp.where(mask > 0, entropy_hat.astype(jnp.float32), 0.0))


def adaptive_bands(entropy_hat, clip_low, clip_high, clip_alpha):
  """Per-token (eps_low', eps_high'): the lower band widened on low-entropy
  tokens (h_hat <= 0), the upper one on high-entropy tokens (h_hat > 0)."""
  low = entropy_hat <= 0
  eps_low = jnp.where(low, clip_low * (1.0 - clip_alpha * entropy_hat),
                      clip_low)
  eps_high = jnp.where(low, clip_high,
                       clip_high * (1.0 + clip_alpha * entropy_hat))
  return eps_low, eps_high


def redistributed_advantages(advantages, entropy_hat, ratio, eps_low,
                             eps_high, adv_beta):
  """HAPO's differential advantage redistribution, per token.

  A_ent = A (1 + adv_beta h_hat); inside the neutral zone (1 - eps_low'/2,
  1 + eps_high'/2) of the ratio a low-entropy token takes A_ent and a
  high-entropy one A; outside it the other way round.
  """
  boosted = advantages * (1.0 + adv_beta * entropy_hat)
  inside = (ratio > 1.0 - eps_low / 2) & (ratio < 1.0 + eps_high / 2)
  low = entropy_hat <= 0
  return jnp.where(low == inside, boosted, advantages)


@OBJECTIVES.register(
    level="token", mechanism="clip",
    paper="HAPO (starriver030515/HAPO; seed 002 para. 109)",
    reads=("entropy_hat",), requires=(TOKEN_TEMPERATURES,),
    examples=({}, {"clip_alpha": 0.5, "adv_beta": 0.5, "clip_high": 0.28},
              {"dual_clip": None, "aggregation": "seq_mean_token_mean"}))
def hapo(logp, old_logp, advantages, mask, *, clip_low=0.2, clip_high=0.2,
         clip_alpha=1.0, adv_beta=1.0, dual_clip=10.0, entropy_hat=None,
         aggregation="token_mean", horizon=None, token_weights=None):
  """HAPO's loss: asymmetric adaptive clip, differential advantage
  redistribution, PPO's dual clip.

  With h_hat in [-1, 1] the token's normalised entropy (`entropy_norm`) and
  r = exp(logp - old_logp):

    eps_low'  = eps_low (1 - alpha h_hat)   if h_hat <= 0, else eps_low
    eps_high' = eps_high (1 + alpha h_hat)  if h_hat > 0,  else eps_high
    A_ent     = A (1 + beta h_hat)
    zone      = 1 - eps_low'/2 < r < 1 + eps_high'/2
    A'        = A_ent if (h_hat <= 0) == zone else A
    L         = -min(r A', clip(r, 1 - eps_low', 1 + eps_high') A'),
                then min(L, -c A') where A' < 0 (dual clip c)

  Confident (low-entropy) tokens may fall further (a wider lower band) and
  get a damped advantage while their ratio is still near 1; uncertain
  (high-entropy) tokens may rise further and get an amplified advantage
  once their ratio has moved. A' is a constant of the loss, so on policy
  (r = 1, inside every zone) the gradient is REINFORCE's with A' (low-entropy
  tokens' advantages damped), not with A.

  HAPO (Heterogeneous Adaptive Policy Optimization; the authors' verl code
  ``core_algos.ada_clip``, ``ada_advantage``, ``compute_policy_loss`` and
  ``recipe/*.sh``: alpha = beta = 1, band 0.2 / 0.2, c = 10, token mean).
  Exact code, with the intended sign of h_hat (see `entropy_norm`) and h_hat
  read from the batch instead of recomputed per micro-batch (module doc).
  Without `entropy_hat` every h_hat is 0 and this is `ppo_clip` with the
  dual clip.

  clip_fraction: tokens whose gradient the (adaptive) clip or the dual clip
  cut, as `ppo_clip`'s. redistributed: share of real tokens whose advantage
  A' differs from A. entropy_hat: `Moments` of h_hat over real tokens.

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    clip_low, clip_high: the band before adaptation.
    clip_alpha: the band's entropy slope (>= 0).
    adv_beta: the advantage's entropy slope (>= 0).
    dual_clip: c > 1, or None (off).
    entropy_hat: [N, T] h_hat (read from the batch), or None.
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _kit.check_band(clip_low, clip_high)
  _kit.check_hparam("clip_alpha", clip_alpha, low=0.0)
  _kit.check_hparam("adv_beta", adv_beta, low=0.0)
  _kit.check_dual_clip(dual_clip)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  h_hat = check_entropy_hat(entropy_hat, batch.mask)
  ratio = batch.ratio
  eps_low, eps_high = adaptive_bands(h_hat, clip_low, clip_high, clip_alpha)
  adv = redistributed_advantages(batch.advantages, h_hat, ratio, eps_low,
                                 eps_high, adv_beta)
  term, cut = _kit.dual_clipped_ppo_term(ratio, adv, eps_low, eps_high,
                                         dual_clip)
  extra = {"redistributed": measures.Mean.of(adv != batch.advantages,
                                             batch.mask),
           "entropy_hat": measures.Moments.of(h_hat, batch.mask)}
  return _kit.token_objective(term, batch, aggregation=aggregation,
                              horizon=horizon, clipped=cut, ratio=ratio,
                              token_weights=token_weights, extra=extra)
