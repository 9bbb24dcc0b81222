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

Clip-Cov's random draw (the paper's rule, ``clip_cov_rule="random"``)
needs a key: the objective carries it as its state (`ClipCovState`,
from the run's seed, or ``PRNGKey(seed)`` with the ``seed`` option set;
advanced once per optimiser step and checkpointed like any component
state), so no batch field or trainer argument changes. A token's uniform
depends on its (row, column) in the minibatch, which a microbatch's rows
do not know: the draw takes the minibatch in one microbatch (validation
rejects a ``train.microbatch_size`` that splits it; the ``top`` rule has
no such limit).
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


CLIP_COV_RULES = ("random", "top")


class ClipCovState(NamedTuple):
  """Clip-Cov's key for the random draw.

  Attributes:
    key: [2] uint32, a PRNG key; each optimiser step draws with it and then
      replaces it by ``split(key)[0]``.
  """
  key: jnp.ndarray


def clip_cov_init(seed: Optional[int] = None, key=None) -> ClipCovState:
  """The draw's first key: ``PRNGKey(seed)`` when `seed` is set; else the
  run's `key` (the trainer's, from ``config.seed``: `Objective.init`), and
  ``PRNGKey(0)`` outside a run."""
  if seed is not None and (not isinstance(seed, int)
                           or isinstance(seed, bool)):
    raise ValueError(f"seed={seed!r} must be an integer or None (the key "
                     "of Clip-Cov's random draw; None: the run's seed).")
  if seed is None and key is not None:
    return ClipCovState(key=jnp.asarray(key))
  return ClipCovState(key=jax.random.PRNGKey(0 if seed is None else seed))


def _clip_cov_update(state: ClipCovState, step_measures) -> ClipCovState:
  del step_measures  # a fresh draw each optimiser step
  return ClipCovState(key=jax.random.split(state.key)[0])


def token_uniforms(key, shape) -> jnp.ndarray:
  """[N, T] float32 uniforms on [0, 1): u[i, t] from
  ``fold_in(fold_in(key, i), t)``, so a token's draw depends on its row and
  column alone, not on how many padding columns follow."""
  rows, cols = shape
  one = lambda i, t: jax.random.uniform(
      jax.random.fold_in(jax.random.fold_in(key, i), t))
  return jax.vmap(lambda i: jax.vmap(lambda t: one(i, t))(
      jnp.arange(cols)))(jnp.arange(rows))


def draw(batch: _kit.Batch, pool: Pool, key, *, share, band):
  """[N, T] bool: min(k, C) of the pool's C candidates (eligible, with
  covariance in the exclusive `band`), drawn uniformly without
  replacement, k = max(1, floor(share * real tokens)): the candidates of
  the k smallest `token_uniforms` (verl's ``randperm(C)[:k]``).

  `pool` must hold `batch`'s own tokens, in order (one microbatch)."""
  if pool.real.shape[0] != batch.mask.size:
    raise ValueError(
        "clip_cov_rule='random' draws over the whole minibatch's tokens, "
        f"but these {batch.mask.shape[0]} rows are part of a pool of "
        f"{pool.real.shape[0]} tokens (microbatches); set "
        "train.microbatch_size=0, or clip_cov_rule='top'.")
  pool_cov = _covariance(pool.advantages, pool.logp, _means(pool))
  candidates = (pool.eligible > 0) & _in_band(pool_cov, band)
  u = token_uniforms(key, batch.mask.shape).ravel()
  k = jnp.maximum(jnp.floor(share * pool.real.sum()), 1.0).astype(jnp.int32)
  # The k-th smallest candidate draw; inf when fewer than k (take all).
  kth = jnp.sort(jnp.where(candidates, u, jnp.inf))[
      jnp.minimum(k, u.shape[0]) - 1]
  return (candidates & (u <= kth)).reshape(batch.mask.shape)


def _whole_minibatch(clip_cov_rule="random", **_):
  return clip_cov_rule == "random"


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
    # The random draw needs the minibatch's rows whole (config validation
    # and the microbatch law read this).
    whole_minibatch=_whole_minibatch,
    examples=({}, {"clip_cov_ratio": 0.2, "clip_cov_lb": 0.0,
                   "clip_cov_ub": 1.0, "aggregation": "seq_mean_token_mean"},
              {"clip_low": 1.0, "clip_high": 1.0, "clip_cov_ratio": 0.5,
               "clip_cov_lb": -1.0, "seed": 3},
              {"clip_cov_rule": "top", "clip_cov_ratio": 0.2,
               "clip_cov_lb": 0.0}),
    state=_kit.StateSpec(init=clip_cov_init, update=_clip_cov_update,
                         loss_kwargs=lambda state: {"key": state.key},
                         provides=("key",),
                         # A skipped step draws anew too: the next
                         # minibatch must not repeat this pattern.
                         skip=lambda state: _clip_cov_update(state, None)),
    prepass=_kit.PrePass(
        when=lambda **_: True, stats=_clip_cov_pool,
        loss_kwargs=lambda stats: {"pool": stats["pool"]},
        provides=("pool",)))
def clip_cov(logp, old_logp, advantages, mask, *, clip_low=0.2,
             clip_high=0.2, clip_cov_ratio=2e-4, clip_cov_lb=1.0,
             clip_cov_ub=5.0, clip_cov_rule="random", key=None,
             pool: Optional[Pool] = None,
             aggregation="token_mean", horizon=None, token_weights=None):
  """Clip-Cov: PPO's clip, with the gradient of a few high-covariance
  tokens dropped.

    L_t = -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A) * (1 - s_t)
    C   = {real t: clip_cov_lb < cov_t < clip_cov_ub, PPO's clip has not
           cut t},  k = max(1, floor(clip_cov_ratio * n))
    s_t = 1 on min(k, |C|) tokens of C drawn uniformly at random without
          replacement (n real tokens of the minibatch)

  Entropy-Mechanism paper, arXiv 2505.22617; verl ``loss_mode=clip_cov``
  with its defaults (ratio 2e-4, band (1, 5), clip 0.2, ``token-mean``);
  the paper's recipe widens the PPO band to clip_low = clip_high = 1.

  ``clip_cov_rule="random"`` (the default) is verl's draw
  (``torch.randperm`` over C, the first k): each token gets a uniform from
  `key` and its (row, column) (`token_uniforms`), and the k smallest among
  C are dropped. The key is the objective's state (`ClipCovState`, from
  the run's seed, or ``seed`` when set; a fresh one each optimiser step),
  so it needs the minibatch in one microbatch (module docstring).
  ``"top"`` drops the k of highest covariance in C instead:
  deterministic, exact under microbatching, a **reconstruction** (it
  restrains the strongest tokens of the band rather than a random share).
  Covariance and share over the minibatch, where verl uses the
  micro-batch.

  clip_fraction: real tokens PPO's clip cut or the covariance rule
  dropped. cov_selected (extra): the share dropped (verl's pg_clipfrac).

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    clip_low, clip_high: PPO's band.
    clip_cov_ratio: the share of real tokens dropped, in (0, 1].
    clip_cov_lb, clip_cov_ub: the covariance band (lb < ub).
    clip_cov_rule: ``random`` (verl's draw) or ``top``.
    key: the draw's PRNG key (from the state; ``random`` needs it).
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
  if clip_cov_rule not in CLIP_COV_RULES:
    raise ValueError(f"clip_cov_rule={clip_cov_rule!r} must be one of "
                     f"{CLIP_COV_RULES} (random: the paper's draw).")
  if clip_cov_rule == "random" and key is None:
    raise ValueError("clip_cov_rule='random' needs key= (the objective's "
                     "state supplies it: objectives.make('clip_cov'))")
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  term, cut = _kit.ppo_term(batch.ratio, batch.advantages, clip_low,
                            clip_high)
  eligible = ~cut  # verl's clip_by_origin tokens are no candidates
  if pool is None:
    pool = _pool(batch, eligible)
  band = (clip_cov_lb, clip_cov_ub)
  if clip_cov_rule == "random":
    dropped = draw(batch, pool, key, share=clip_cov_ratio, band=band)
  else:
    dropped = select(batch, eligible, pool, share=clip_cov_ratio, band=band)
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
