"""BAPO: PPO's clip whose bounds are searched on each optimiser step's batch,
so that positive-advantage tokens carry a set share of the gradient.

The bounds are absolute ratio bounds [c_low, c_high] picked from fixed grids
of candidates ``start + k * step`` (integer k: no float drift). The search
needs, for every candidate, the positive and the negative contribution
summed over the whole minibatch: two short vectors of sums, which merge
exactly over microbatches and devices (`measures.Sum`). The trainer's
pre-pass (`_kit.PrePass`) computes them over the whole minibatch before its
microbatches' gradients and hands them to every microbatch's loss, so every
microbatch (and, the sums being global under jit over the mesh, every
device) clips with the same bounds; one microbatch computes them from its
own rows, which are then the minibatch.
"""

import math
import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax import aggregation as agg
from grpo_jax import measures
from grpo_jax.objectives import _kit
from grpo_jax.objectives._kit import OBJECTIVES

# balance="share_grad": rho = P / (P + N) of the gradient-carrying r * |A|
# (VARIANTS.md's statistic); "ratio_value": the same share of the recipe's
# clipped values min(r, c_high) * A and max(r, c_low) * |A|.
BAPO_BALANCES = ("share_grad", "ratio_value")
# A ratio within this of a candidate bound counts as on it: a float32 ratio
# and a float32 bound a + k * delta for the same real number (VARIANTS'
# vector puts ratios exactly on 0.9 and 1.5) may land a few ulps apart
# either way.
BAPO_TOLERANCE = 1e-5
# Candidates per bound at most: the sums are [K] vectors, fixed in size.
BAPO_MAX_CANDIDATES = 1000


class BapoGrids(NamedTuple):
  """The candidate bounds, float32: ``low[k] = low_start + k * low_step``
  up to low_max, ``high[k]`` likewise."""
  low: np.ndarray
  high: np.ndarray


def _number(name: str, value) -> float:
  """`value` as a Python float; a ValueError naming `name` unless it is a
  concrete real number (the grids' sizes depend on it)."""
  problem = ValueError(
      f"{name} must be a concrete real number; got {value!r} "
      f"({type(value).__name__}): set {name} to a number.")
  if isinstance(value, bool) or not (
      isinstance(value, numbers.Real)
      or (hasattr(value, "dtype") and getattr(value, "ndim", None) == 0)):
    raise problem
  try:
    value = float(value)
  except (TypeError, jax.errors.ConcretizationTypeError):
    raise problem from None
  if not math.isfinite(value):
    raise ValueError(f"{name} must be finite; got {value}.")
  return value


def _grid(start_name, start, stop_name, stop, step_name, step) -> np.ndarray:
  if not step > 0:
    raise ValueError(f"{step_name} must be > 0; got {step}.")
  if not start <= stop:
    raise ValueError(
        f"{start_name}={start} must be <= {stop_name}={stop}: the search "
        f"moves the bound from {start_name} up to {stop_name}.")
  # c + step <= stop as the loop's test, on integer step counts.
  count = int(math.floor((stop - start) / step + 1e-9)) + 1
  if count > BAPO_MAX_CANDIDATES:
    raise ValueError(
        f"{step_name}={step} gives {count} candidate bounds between "
        f"{start_name} and {stop_name}; at most {BAPO_MAX_CANDIDATES}: "
        f"raise {step_name}.")
  return (start + np.arange(count, dtype=np.float64) * step).astype(
      np.float32)


def bapo_grids(*, low_start, low_max, low_step, high_start, high_max,
               high_step) -> BapoGrids:
  """The candidate bounds, after checking the options (each error names
  its option)."""
  low_start, low_max, low_step, high_start, high_max, high_step = (
      _number(n, v) for n, v in (
          ("low_start", low_start), ("low_max", low_max),
          ("low_step", low_step), ("high_start", high_start),
          ("high_max", high_max), ("high_step", high_step)))
  if not low_start > 0:
    raise ValueError(f"low_start must be > 0; got {low_start}.")
  if not low_max <= 1.0:
    raise ValueError(
        f"low_max must be <= 1 (the band must hold ratio 1, so that on "
        f"policy nothing is clipped); got {low_max}.")
  if not high_start >= 1.0:
    raise ValueError(
        f"high_start must be >= 1 (the band must hold ratio 1, so that on "
        f"policy nothing is clipped); got {high_start}.")
  return BapoGrids(
      low=_grid("low_start", low_start, "low_max", low_max, "low_step",
                low_step),
      high=_grid("high_start", high_start, "high_max", high_max,
                 "high_step", high_step))


def _check_search(rho0, balance):
  rho0 = _number("rho0", rho0)
  if not 0.0 < rho0 < 1.0:
    raise ValueError(
        f"rho0 must be in (0, 1) (the positive share of the balance); got "
        f"{rho0}.")
  _kit.check_choice("balance", balance, BAPO_BALANCES)
  return rho0


def bapo_balance_sums(ratio, advantages, mask, grids: BapoGrids, *,
                      balance="share_grad"):
  """(P [K_high], N [K_low]): the positive and negative contributions at
  every candidate bound (detached), sums over the rows given.

    share_grad:  P[j] = sum_{A>0, r <= high[j]} r * A
                 N[i] = sum_{A<0, r >= low[i]}  r * |A|
    ratio_value: P[j] = sum_{A>0} min(r, high[j]) * A
                 N[i] = sum_{A<0} max(r, low[i])  * |A|

  P depends on the upper bound alone and N on the lower alone, so two
  vectors hold the statistic of every (c_low, c_high) pair; sums, they
  merge over microbatches and devices by addition. Comparisons take
  `BAPO_TOLERANCE`.

  One pass over the tokens, O(N T) memory (no [N, T, K]): each token falls
  in the bin of the first candidate that lets it through
  (``searchsorted``); per-bin sums of w r and w (w = |A|), accumulated
  along the candidates, give every candidate's sum.

  Args:
    ratio, advantages, mask: [N, T] (advantages 0 under padding).
    grids: `bapo_grids(...)`.
    balance: one of `BAPO_BALANCES`.
  """
  _kit.check_choice("balance", balance, BAPO_BALANCES)
  ratio, advantages = jax.lax.stop_gradient((ratio, advantages))
  real = jnp.asarray(mask) > 0
  low, high = jnp.asarray(grids.low), jnp.asarray(grids.high)
  # What a token outside the band contributes: nothing (it passes no
  # gradient) or, as the recipe's, its clipped value.
  clipped = 1.0 if balance == "ratio_value" else 0.0
  # Upper bound: a token passes at high[j] iff j >= its bin (the count of
  # candidates with high + tol < r); bin K_high: it never passes.
  w = jnp.where(real & (advantages > 0), advantages, 0.0)
  below, _ = _binned(ratio, w, jnp.searchsorted(
      high + BAPO_TOLERANCE, ratio, side="left"), high.size)
  pos = below[:, 0] + clipped * high * (jnp.sum(w) - below[:, 1])
  # Lower bound: a token passes at low[i] iff i < its bin (the count of
  # candidates with low - tol <= r).
  w = jnp.where(real & (advantages < 0), -advantages, 0.0)
  below, total = _binned(ratio, w, jnp.searchsorted(
      low - BAPO_TOLERANCE, ratio, side="right"), low.size)
  neg = total[0] - below[:, 0] + clipped * low * below[:, 1]
  return pos, neg


def _binned(ratio, weight, bins, size):
  """([size, 2] running sums over bins 0..k of (w r, w); [2] totals)."""
  values = jnp.stack([weight * ratio, weight], axis=-1).reshape(-1, 2)
  per_bin = jax.ops.segment_sum(values, bins.reshape(-1),
                                num_segments=size + 1)
  return jnp.cumsum(per_bin, axis=0)[:size], jnp.sum(per_bin, axis=0)


def bapo_share(pos, neg):
  """rho = P / (P + N); 1 where N = 0 (no negative contribution)."""
  return jnp.where(neg > 0, pos / jnp.where(neg > 0, pos + neg, 1.0), 1.0)


def _first_reaching(rho, rho0):
  """The first k with rho[k] >= rho0, else the last k: the loop
  ``while rho[k] < rho0 and k < K: k += 1`` from k = 0, in one step."""
  reached = rho >= rho0
  return jnp.where(jnp.any(reached), jnp.argmax(reached), rho.shape[0] - 1)


class BapoSearch(NamedTuple):
  """The search's outcome: step counts, bounds and the balance."""
  k_low: jnp.ndarray
  k_high: jnp.ndarray
  c_low: jnp.ndarray
  c_high: jnp.ndarray
  rho_start: jnp.ndarray  # at (low[0], high[0])
  rho: jnp.ndarray  # at (c_low, c_high)


def bapo_search(pos, neg, grids: BapoGrids, *, rho0) -> BapoSearch:
  """VARIANTS.md's two loops, evaluated over every candidate at once.

    1. c_low = low[k], the first k with rho(low[k], high[0]) >= rho0,
       else the last candidate;
    2. then c_high = high[k], the first k with rho(c_low, high[k]) >= rho0,
       else the last.

  Args:
    pos, neg: `bapo_balance_sums` of the whole minibatch.
    grids: the candidates.
    rho0: the target positive share.
  """
  k_low = _first_reaching(bapo_share(pos[0], neg), rho0)
  k_high = _first_reaching(bapo_share(pos, neg[k_low]), rho0)
  low, high = jnp.asarray(grids.low), jnp.asarray(grids.high)
  return BapoSearch(k_low, k_high, low[k_low], high[k_high],
                    bapo_share(pos[0], neg[0]),
                    bapo_share(pos[k_high], neg[k_low]))


def _prepass(logp, old_logp, advantages, mask, *, low_start, low_max,
             low_step, high_start, high_max, high_step, balance):
  """The sums of one microbatch, as `measures.Sum` records."""
  grids = bapo_grids(low_start=low_start, low_max=low_max, low_step=low_step,
                     high_start=high_start, high_max=high_max,
                     high_step=high_step)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  pos, neg = bapo_balance_sums(batch.ratio, batch.advantages, batch.mask,
                               grids, balance=balance)
  return {"bapo_pos": measures.Sum(pos), "bapo_neg": measures.Sum(neg)}


@OBJECTIVES.register(
    level="token", mechanism="clip", paper="2510.18927",
    examples=({}, {"balance": "ratio_value"},
              {"low_start": 0.8, "low_max": 0.95, "high_max": 2.0,
               "high_step": 0.1, "dual_clip": None,
               "aggregation": "seq_mean_token_mean"}),
    # The bounds are one search over the whole minibatch: its sums come
    # from the trainer's pre-pass, the same for every microbatch.
    prepass=_kit.PrePass(
        when=lambda **_: True, stats=_prepass,
        loss_kwargs=lambda stats: {"pos_sums": stats["bapo_pos"].sum,
                                   "neg_sums": stats["bapo_neg"].sum},
        provides=("pos_sums", "neg_sums")))
def bapo(logp, old_logp, advantages, mask, *, low_start=0.6, low_max=0.9,
         low_step=0.05, high_start=1.2, high_max=3.0, high_step=0.05,
         rho0=0.5, balance="share_grad", dual_clip=3.0, pos_sums=None,
         neg_sums=None, aggregation="token_mean", horizon=None,
         token_weights=None):
  """BAPO: Balanced Policy Optimization with adaptive clipping.

  Per token, with r = exp(logp - old_logp) and absolute bounds c_low, c_high:
    L = -min(r * A, clip(r, c_low, c_high) * A)
  then the dual clip for A < 0: L = min(L, -dual_clip * A).

  The bounds are searched once per optimiser step, over the whole minibatch
  (`bapo_search`): from c_low = low_start, c_high = high_start,
    while rho < rho0 and c_low + low_step <= low_max: c_low += low_step
    then while rho < rho0 and c_high + high_step <= high_max:
      c_high += high_step
  with the positive share (balance="share_grad", default)
    rho = P / (P + N),  P = sum_{A>0, r <= c_high} r A,
                        N = sum_{A<0, r >= c_low} r |A|
  of the gradient-carrying tokens (rho = 1 without negative tokens: no
  search). Raising c_low drops negative tokens, raising c_high admits
  positive ones. balance="ratio_value" is the recipe's statistic, the
  share of the clipped values min(r, c_high) A and max(r, c_low) |A|; its
  lower loop cannot raise rho. The recipe compares P / N with
  adv_ratio_target t: rho0 = t / (1 + t) (its yaml's t = 1 is rho0 = 0.5,
  its example script's t = 0.5 is rho0 = 1/3).

  BAPO, Xi et al., arXiv 2510.18927; WooooDyy/BAPO
  ``recipe/bapo/policy_loss.py`` (registry ``bapo``): exact for the bounds
  and the loss; the default share_grad statistic is a **reconstruction**
  (VARIANTS.md 2.3: the recipe's clipped values contradict the mechanism
  its README describes). Defaults as VARIANTS.md: [0.6, 0.9] and
  [1.2, 3.0] in steps of 0.05, rho0 = 0.5, dual clip 3, ``token_mean``.
  A last partial step (max - start not a multiple of step) is not taken,
  where the recipe clamps to the max. The statistic ignores the dual clip
  and the corrections' token weights, as the recipe's does. A ratio within
  `BAPO_TOLERANCE` of a bound counts as inside the band, in the statistic
  and in the clip alike.

  clip_fraction: tokens with A > 0 and r > c_high, or A < 0 and r < c_low,
  plus those with A < 0 whose loss the dual clip's cap replaced. Records
  (extra): ``bapo_c_low``, ``bapo_c_high`` (the bounds) and
  ``bapo_rho_start``, ``bapo_rho`` (the share at the start bounds and at
  the chosen ones), each a token-weighted mean (exact over microbatches,
  which share the bounds; over a step's optimiser steps, their token mean).

  Args:
    logp, old_logp, mask: [N, T]; advantages: [N] or [N, T].
    low_start, low_max, low_step: the lower bound's candidates
      (0 < low_start <= low_max <= 1, low_step > 0).
    high_start, high_max, high_step: the upper bound's
      (1 <= high_start <= high_max, high_step > 0).
    rho0: the target positive share, in (0, 1).
    balance: one of `BAPO_BALANCES`.
    dual_clip: c > 1, or None (off).
    pos_sums, neg_sums: the whole minibatch's `bapo_balance_sums` (the
      trainer's pre-pass); None: these rows' own.
    aggregation, horizon: see `aggregation.sum_and_count`.
    token_weights: [N, T] detached weights of the loss terms
      (`objectives.corrections`), or None.

  Returns:
    (loss, ObjectiveAux).
  """
  agg.check_mode(aggregation, horizon)
  grids = bapo_grids(low_start=low_start, low_max=low_max, low_step=low_step,
                     high_start=high_start, high_max=high_max,
                     high_step=high_step)
  rho0 = _check_search(rho0, balance)
  _kit.check_dual_clip(dual_clip)
  batch = _kit.prepare(logp, old_logp, advantages, mask)
  a, ratio = batch.advantages, batch.ratio
  if pos_sums is None or neg_sums is None:
    pos_sums, neg_sums = bapo_balance_sums(ratio, a, batch.mask, grids,
                                           balance=balance)
  shapes = ((grids.high.size,), (grids.low.size,))
  if (jnp.shape(pos_sums), jnp.shape(neg_sums)) != shapes:
    raise ValueError(
        f"pos_sums and neg_sums must have shapes {shapes} (one per candidate "
        f"bound); got {jnp.shape(pos_sums)} and {jnp.shape(neg_sums)}.")
  found = jax.lax.stop_gradient(bapo_search(
      jnp.asarray(pos_sums, jnp.float32), jnp.asarray(neg_sums, jnp.float32),
      grids, rho0=rho0))
  cut = (((a > 0) & (ratio > found.c_high + BAPO_TOLERANCE))
         | ((a < 0) & (ratio < found.c_low - BAPO_TOLERANCE)))
  # A cut token keeps its clipped value and loses its gradient.
  bound = jnp.where(a > 0, found.c_high, found.c_low)
  term = -jnp.where(cut, bound, ratio) * a
  term, cut = _kit.dual_clip(term, cut, a, dual_clip)
  extra = {f"bapo_{name}": measures.Mean.of(
      jnp.broadcast_to(getattr(found, name), batch.mask.shape), batch.mask)
           for name in ("c_low", "c_high", "rho_start", "rho")}
  return _kit.token_objective(term, batch, aggregation=aggregation,
                              horizon=horizon, clipped=cut, ratio=ratio,
                              token_weights=token_weights, extra=extra)
