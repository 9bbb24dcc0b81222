"""Covariance-targeted objectives of the Entropy-Mechanism paper (Cui et al.,
"The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models", arXiv 2505.22617), as verl implements them
(``core_algos.compute_policy_loss_clip_cov`` / ``_kl_cov``).

The policy's entropy falls in proportion to the covariance between a
token's log-prob and its advantage. Per real token

  cov_t = (A_t - mean A) (logp_t - mean logp)

(means over the batch's real tokens, logp the current policy's, detached),
and the few tokens of highest covariance are restrained: Clip-Cov drops
their gradient, KL-Cov adds a |log r| penalty on them.

Batch coupling. The means and the selected share are statistics of the
whole batch. verl computes them per micro-batch (its policy loss sees one
micro-batch), so its selection changes with the micro-batch size. Here the
trainer's pre-pass gathers every real token's (A, logp) of the minibatch
(`Pool`, merged by concatenation: [M*T] floats, no vocabulary axis), and
each microbatch selects against the minibatch's means and threshold: the
result is the one-shot one whatever the microbatching.
"""

import numbers
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax import measures
from grpo_jax.objectives import _kit
from grpo_jax.objectives._kit import OBJECTIVES


class Pool(NamedTuple):
  """Every token of a minibatch, flattened: what the selection needs.

  Merged by concatenation (the pre-pass's record; it reports nothing).

  Attributes:
    advantages, logp: [K] float32, 0 under padding (logp detached).
    real: [K] float32, 1 on real tokens.
    eligible: [K] float32, 1 on real tokens the rule may select (Clip-Cov:
      those PPO's clip has not already cut).
  """
  advantages: jnp.ndarray
  logp: jnp.ndarray
  real: jnp.ndarray
  eligible: jnp.ndarray

  def merge(self, other):
    return Pool(*(jnp.concatenate([a, b]) for a, b in zip(self, other)))


def _pool(batch: _kit.Batch, eligible) -> Pool:
  return Pool(batch.advantages.ravel(),
              jax.lax.stop_gradient(batch.logp).ravel(),
              batch.mask.ravel(), (eligible & (batch.mask > 0)).ravel()
              .astype(jnp.float32))


def _covariance(advantages, logp, means):
  return (advantages - means[0]) * (logp - means[1])


def _means(pool: Pool):
  count = pool.real.sum()
  return (measures.safe_divide((pool.advantages * pool.real).sum(), count),
          measures.safe_divide((pool.logp * pool.real).sum(), count))


def _in_band(cov, band):
  if band is None:
    return jnp.ones(cov.shape, bool)
  return (cov > band[0]) & (cov < band[1])


def select(batch: _kit.Batch, eligible, pool: Pool, *, share,
           band=None):
  """[N, T] bool: the real, eligible tokens of `batch` among the
  max(1, floor(share * real tokens of the pool)) of highest covariance
  within `band` (exclusive (lb, ub); None: any) over the pool.

  The pool's threshold is the midpoint between the k-th and (k+1)-th
  highest candidate covariance, so a token's covariance recomputed in
  another microbatch falls on the same side. Tokens tied at the k-th value
  are all left out (verl's topk would take some of them).
  """
  means = _means(pool)
  pool_cov = _covariance(pool.advantages, pool.logp, means)
  candidates = (pool.eligible > 0) & _in_band(pool_cov, band)
  ordered = jnp.sort(jnp.where(candidates, pool_cov, -jnp.inf))[::-1]
  ordered = jnp.concatenate([ordered, jnp.full((1,), -jnp.inf)])
  k = jnp.maximum(jnp.floor(share * pool.real.sum()), 1.0).astype(jnp.int32)
  k = jnp.minimum(k, ordered.shape[0] - 1)
  threshold = 0.5 * (ordered[k - 1] + ordered[k])
  threshold = jnp.where(jnp.isfinite(ordered[k]), threshold, -jnp.inf)
  cov = _covariance(batch.advantages, jax.lax.stop_gradient(batch.logp),
                    means)
  return (eligible & (batch.mask > 0) & _in_band(cov, band)
          & (cov > threshold))


def _ppo_cut(batch, clip_low, clip_high):
  return _kit.ppo_term(batch.ratio, batch.advantages, clip_low, clip_high)[1]


def _clip_cov_pool(logp, old_logp, advantages, mask, *, clip_low, clip_high):
  """The pre-pass: the rows' tokens, eligible where PPO's clip did not cut."""
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  return {"pool": _pool(batch, ~_ppo_cut(batch, clip_low, clip_high))}


def _kl_cov_pool(logp, old_logp, advantages, mask):
  """The pre-pass: the rows' tokens, every real one eligible."""
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  return {"pool": _pool(batch, jnp.ones(batch.mask.shape, bool))}


def _check_share(name, value):
  _kit.check_hparam(name, value, low=0.0, strict=True)
  if isinstance(value, numbers.Real) and value > 1.0:
    raise ValueError(f"{name} must be in (0, 1]; got {value}.")


@OBJECTIVES.register(
    level="token", mechanism="clip", paper="2505.22617",
    # The selection needs no ratio: on policy it still drops gradients.
    on_policy_mask=True,
    examples=({}, {"clip_cov_ratio": 0.2, "clip_cov_lb": 0.0,
                   "clip_cov_ub": 1.0, "aggregation": "seq_mean_token_mean"},
              {"clip_low": 1.0, "clip_high": 1.0, "clip_cov_ratio": 0.5,
               "clip_cov_lb": -1.0}),
    prepass=_kit.PrePass(
        when=lambda **_: True, stats=_clip_cov_pool,
        loss_kwargs=lambda stats: {"pool": stats["pool"]},
        provides=("pool",)))
def clip_cov(logp, old_logp, advantages, mask, *, clip_low=0.2,
             clip_high=0.2, clip_cov_ratio=2e-4, clip_cov_lb=1.0,
             clip_cov_ub=5.0, pool: Optional[Pool] = None,
             aggregation="token_mean", horizon=None, token_weights=None):
  """Clip-Cov: PPO's clip, with the gradient of a few high-covariance
  tokens dropped.

    L_t = -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A) * (1 - s_t)
    s_t = 1 on the k = max(1, floor(clip_cov_ratio * n)) real tokens of
          highest cov_t with clip_cov_lb < cov_t < clip_cov_ub, among those
          PPO's clip has not cut (n real tokens of the minibatch)

  Entropy-Mechanism paper, arXiv 2505.22617; verl ``loss_mode=clip_cov``
  with its defaults (ratio 2e-4, band (1, 5), clip 0.2, ``token-mean``);
  the paper's recipe widens the PPO band to clip_low = clip_high = 1.

  Selection: verl draws the k tokens at random among the band's
  candidates (``torch.randperm``). Here they are the k of highest
  covariance within the band: deterministic, so the pre-pass and every
  microbatch agree on them (a random draw would need each token's
  identity across microbatches, which an objective does not see). This is
  a **reconstruction** of the sampling step; the band, the share and the
  candidates are verl's. Covariance and share over the minibatch (module
  docstring), where verl uses the micro-batch.

  clip_fraction: real tokens PPO's clip cut or the covariance rule
  dropped. cov_selected (extra): the share dropped (verl's pg_clipfrac).

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    clip_low, clip_high: PPO's band.
    clip_cov_ratio: the share of real tokens dropped, in (0, 1].
    clip_cov_lb, clip_cov_ub: the covariance band (lb < ub).
    pool: the minibatch's tokens from the pre-pass, or None (these rows).
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights (`objectives.corrections`).

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _kit.check_band(clip_low, clip_high)
  _check_share("clip_cov_ratio", clip_cov_ratio)
  if (isinstance(clip_cov_lb, (int, float))
      and isinstance(clip_cov_ub, (int, float))
      and not clip_cov_lb < clip_cov_ub):
    raise ValueError(f"clip_cov_lb={clip_cov_lb} must be below "
                     f"clip_cov_ub={clip_cov_ub}.")
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  term, cut = _kit.ppo_term(batch.ratio, batch.advantages, clip_low,
                            clip_high)
  eligible = ~cut  # verl's clip_by_origin tokens are no candidates
  if pool is None:
    pool = _pool(batch, eligible)
  dropped = select(batch, eligible, pool, share=clip_cov_ratio,
                   band=(clip_cov_lb, clip_cov_ub))
  return _kit.token_objective(
      jnp.where(dropped, 0.0, term), batch, aggregation=aggregation,
      horizon=horizon, clipped=cut | dropped, token_weights=token_weights,
      extra={"cov_selected": measures.Mean.of(dropped, batch.mask)})


def abs_log_ratio(x):
  """|x| with the gradient sign(x): 0 at x = 0, as torch's ``abs`` (JAX's
  ``abs`` has gradient 1 there, which would act on policy)."""
  return x * jax.lax.stop_gradient(jnp.sign(x))


@OBJECTIVES.register(
    level="token", mechanism="penalty", paper="2505.22617",
    examples=({}, {"kl_cov_ratio": 0.3, "ppo_kl_coef": 0.5,
                   "aggregation": "seq_mean_token_mean"},
              {"kl_cov_ratio": 1.0}),
    prepass=_kit.PrePass(
        when=lambda **_: True, stats=_kl_cov_pool,
        loss_kwargs=lambda stats: {"pool": stats["pool"]},
        provides=("pool",)))
def kl_cov(logp, old_logp, advantages, mask, *, kl_cov_ratio=2e-4,
           ppo_kl_coef=1.0, pool: Optional[Pool] = None,
           aggregation="token_mean", horizon=None, token_weights=None):
  """KL-Cov: the unclipped surrogate, with a |log r| penalty on the tokens
  of highest covariance.

    L_t = -r_t A_t + ppo_kl_coef * |log r_t| * s_t
    s_t = 1 on the k = max(1, floor(kl_cov_ratio * n)) real tokens of
          highest cov_t (n real tokens of the minibatch)

  There is no ratio clip: the penalty is the only trust region, and only
  where the covariance is highest. Entropy-Mechanism paper, arXiv
  2505.22617; verl ``loss_mode=kl_cov`` with its defaults (ratio 2e-4,
  coefficient 1, ``token-mean``); the paper uses 2e-3 for 7B models. The
  gradient of |log r| is sign(log r) (0 on policy, as in torch), so on
  policy this is REINFORCE. Covariance and share over the minibatch
  (module docstring), where verl uses the micro-batch; ties at the k-th
  covariance are left out (`select`). Exact otherwise.

  clip_fraction: the penalised share of real tokens (cov_selected, extra,
  the same).

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    kl_cov_ratio: the share of real tokens penalised, in (0, 1].
    ppo_kl_coef: the penalty's coefficient (>= 0).
    pool: the minibatch's tokens from the pre-pass, or None (these rows).
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights (`objectives.corrections`).

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  _check_share("kl_cov_ratio", kl_cov_ratio)
  _kit.check_hparam("ppo_kl_coef", ppo_kl_coef, low=0.0)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  eligible = jnp.ones(batch.mask.shape, bool)
  if pool is None:
    pool = _pool(batch, eligible)
  chosen = select(batch, eligible, pool, share=kl_cov_ratio)
  penalty = ppo_kl_coef * abs_log_ratio(batch.log_ratio)
  term = -batch.ratio * batch.advantages + jnp.where(chosen, penalty, 0.0)
  return _kit.token_objective(
      term, batch, aggregation=aggregation, horizon=horizon, clipped=chosen,
      token_weights=token_weights,
      extra={"cov_selected": measures.Mean.of(chosen, batch.mask)})
