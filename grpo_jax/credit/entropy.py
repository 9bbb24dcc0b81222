"""Entropy-weighted token credit: AH-GRPO, SA-AH-GRPO and EGSPO.

Each multiplies the row's advantage by a weight w_t >= 0 of the sampler's
token entropies (`_kit.READS`, ``token_entropies``: the behaviour policy's,
which is the current policy's at a batch's first optimiser step, the
papers' sg(ent)): A_t = w_t * A, the paper's w_t * L_t for an objective
linear in A (`_kit`).
"""

import jax.numpy as jnp

from grpo_jax.credit import _kit
from grpo_jax.credit._kit import CREDIT, Credited

AH_NORMALIZE = ("sum", "mean")
EGSPO_GATES = ("quantile", "threshold")


def horizon_weights(entropies, mask, *, alpha: float, normalize: str):
  """[N, T] w_t = exp(-alpha C_t), C_t = sum_{k<t} sg(ent_k) m_k (the
  exclusive cumulative entropy: the first token weighs 1, padding adds
  nothing); ``normalize="mean"`` divides C_t by the count of earlier
  tokens (1 for the first, whose C is 0)."""
  ent = _kit.masked_entropies(entropies, mask)
  before = jnp.cumsum(ent, axis=-1) - ent
  if normalize == "mean":
    count = jnp.cumsum(_kit.real(mask).astype(jnp.float32), axis=-1)
    before = before / jnp.maximum(count - _kit.real(mask), 1.0)
  return jnp.exp(-alpha * before)


def _adaptive_horizon(advantages, mask, entropies, *, alpha, normalize,
                      negative_only):
  adv = _kit.as_tokens(advantages, mask)
  weights = horizon_weights(entropies, mask, alpha=alpha, normalize=normalize)
  if negative_only:
    weights = jnp.where(adv < 0, weights, 1.0)
  real = _kit.real(mask)
  return Credited(
      advantages=jnp.where(real, weights * adv, 0.0),
      measures={"weight_mean": _kit.mean(weights, real),
                "discounted_fraction": _kit.fraction(weights < 1.0, real)})


def _check_horizon(alpha=0.5, normalize="sum"):
  _kit.check_real("alpha", alpha, low=0.0)
  _kit.check_choice("normalize", normalize, AH_NORMALIZE)


@CREDIT.register(
    reads=("token_entropies",), check=_check_horizon, linear=True,
    neutral={"alpha": 0.0}, paper="AH-GRPO (seed 000 para. 20; reconstruction)",
    examples=({}, {"alpha": 0.2, "normalize": "mean"}))
def ah_grpo(advantages, mask, *, token_entropies, alpha: float = 0.5,
            normalize: str = "sum"):
  """AH-GRPO, adaptive horizon: A_t = exp(-alpha C_t) A.

  C_t = sum_{k<t} sg(ent_k) m_k, the exclusive cumulative entropy (the
  first token weighs 1; padding adds nothing): the effective horizon
  shrinks where the model is uncertain. alpha = 0 is GRPO. **Reconstruction**
  (seed 000 para. 20, no code found; VARIANTS.md 3.1): the abstract's
  alpha = 0.5. ``normalize="mean"`` divides C_t by the number of earlier
  tokens (a running mean; VARIANTS' option, taken over the same exclusive
  prefix so the first token still weighs 1): with ~1 nat a token the sum
  drives the weights to 0 within tens of tokens.

  Args:
    advantages: [N] (or [N, T]).
    mask: [N, T] loss mask.
    token_entropies: [N, T] sampler entropies (`_kit.READS`).
    alpha: >= 0.
    normalize: "sum" (the abstract's cumulative sum) or "mean".

  Returns:
    `Credited`; measures weight_mean and discounted_fraction (tokens with
    w < 1) over the loss tokens.
  """
  return _adaptive_horizon(advantages, mask, token_entropies, alpha=alpha,
                           normalize=normalize, negative_only=False)


@CREDIT.register(
    reads=("token_entropies",), check=_check_horizon, linear=True,
    neutral={"alpha": 0.0},
    paper="SA-AH-GRPO (seed 000 para. 20; reconstruction)",
    examples=({}, {"alpha": 1.0, "normalize": "mean"}))
def sa_ah_grpo(advantages, mask, *, token_entropies, alpha: float = 0.5,
               normalize: str = "sum"):
  """SA-AH-GRPO, sign-aware adaptive horizon: `ah_grpo`'s discount on the
  tokens with A < 0 only, A_t = A where A >= 0.

  **Reconstruction** (seed 000 para. 20, "applies this discounting only to
  negative-advantage rollouts"; VARIANTS.md 3.1). With [N] advantages the
  sign is the row's; with token advantages, each token's.
  """
  return _adaptive_horizon(advantages, mask, token_entropies, alpha=alpha,
                           normalize=normalize, negative_only=True)


def _check_gate(gate="quantile", quantile=0.8, threshold=1.0, beta_low=0.5):
  _kit.check_choice("gate", gate, EGSPO_GATES)
  _kit.check_real("quantile", quantile, low=0.0, high=1.0, low_open=True,
                  high_open=True)
  _kit.check_real("threshold", threshold, low=0.0)
  _kit.check_real("beta_low", beta_low, low=0.0, high=1.0)


def gate_threshold(entropies, mask, quantile: float):
  """tau: the k-th largest entropy of the batch's loss tokens, k =
  ceil((1 - quantile) n_valid) (so quantile 0.8 routes the top 20 % to the
  full update); +inf when there are no loss tokens."""
  real = _kit.real(mask).reshape(-1)
  ent = jnp.where(real, _kit.masked_entropies(entropies, mask).reshape(-1),
                  -jnp.inf)
  n = real.sum().astype(jnp.float32)
  # The small slack keeps (1 - 0.8) * 5 = 1.0000001 in float32 at k = 1.
  k = jnp.ceil((1.0 - quantile) * n - 1e-4).astype(jnp.int32)
  k = jnp.maximum(k, 1)
  ranked = jnp.sort(ent)[::-1]
  tau = ranked[jnp.minimum(k, ent.shape[0]) - 1]
  return jnp.where(n > 0, tau, jnp.inf)


@CREDIT.register(
    reads=("token_entropies",), check=_check_gate, linear=True,
    neutral={"beta_low": 1.0},
    paper="EGSPO (seed 002 para. 119; reconstruction)",
    examples=({}, {"gate": "threshold", "threshold": 0.5, "beta_low": 0.2},
              {"quantile": 0.5, "beta_low": 0.0}))
def egspo(advantages, mask, *, token_entropies, gate: str = "quantile",
          quantile: float = 0.8, threshold: float = 1.0,
          beta_low: float = 0.5):
  """EGSPO's entropy gate: A_t = g_t A, g_t = 1 if sg(ent_t) >= tau else
  beta_low.

  High-entropy tokens get the full update, low-entropy ones an attenuated
  one (both keep the advantage). tau is the top-(1 - quantile) cut of the
  step's loss-token entropies (``gate="quantile"``, `gate_threshold`) or a
  fixed `threshold` (``gate="threshold"``). **Reconstruction** (seed 002
  para. 119; no code found; VARIANTS.md 3.5): the gate's form is the
  abstract's, beta_low 0.5 a proposal; the SFT warm-up stage is not part
  of the rule.
  beta_low = 1 is GRPO.

  Args:
    advantages: [N] (or [N, T]).
    mask: [N, T] loss mask.
    token_entropies: [N, T] sampler entropies (`_kit.READS`).
    gate: "quantile" or "threshold", where tau comes from.
    quantile: in (0, 1), read with gate="quantile".
    threshold: a fixed tau >= 0, read with gate="threshold".
    beta_low: in [0, 1], the weight of the low-entropy tokens.

  Returns:
    `Credited`; measures gated_fraction (tokens attenuated), weight_mean
    and threshold (tau) over the loss tokens.
  """
  real = _kit.real(mask)
  ent = _kit.masked_entropies(token_entropies, mask)
  tau = (jnp.asarray(threshold, jnp.float32) if gate == "threshold"
         else gate_threshold(token_entropies, mask, quantile))
  high = ent >= tau
  weights = jnp.where(high, 1.0, beta_low)
  adv = _kit.as_tokens(advantages, mask)
  return Credited(
      advantages=jnp.where(real, weights * adv, 0.0),
      measures={"gated_fraction": _kit.fraction(~high, real),
                "weight_mean": _kit.mean(weights, real),
                "threshold": jnp.where(jnp.isfinite(tau), tau, 0.0)})
