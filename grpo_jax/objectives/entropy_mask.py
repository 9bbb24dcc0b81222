"""The top-entropy token mask, a correction (`corrections.CORRECTIONS`):
only the share of tokens with the highest entropy (the forking tokens)
trains. Its threshold is a quantile over the whole minibatch, which the
trainer computes in a pre-pass (`top_entropy_threshold`)."""

import numbers

import jax
import jax.numpy as jnp

from grpo_jax.objectives import corrections


def masked_quantile(values, mask, q):
  """The q-quantile of `values` over the entries with mask > 0, linearly
  interpolated between order statistics (``torch.quantile``'s and
  ``jnp.quantile``'s default); +inf when no entry is real."""
  values = jnp.asarray(values, jnp.float32).ravel()
  real = jnp.asarray(mask).ravel() > 0
  k = real.sum()
  ordered = jnp.sort(jnp.where(real, values, jnp.inf))
  position = q * jnp.maximum(k - 1, 0).astype(jnp.float32)
  below = jnp.floor(position).astype(jnp.int32)
  above = jnp.minimum(below + 1, jnp.maximum(k - 1, 0))
  low, high = ordered[below], ordered[above]
  value = low + (position - below) * jnp.where(above > below, high - low, 0.0)
  return jnp.where(k > 0, value, jnp.inf)


def _check_rho(rho):
  corrections.check_number("rho", rho, low=0.0)
  if isinstance(rho, numbers.Real) and rho > 1.0:
    raise ValueError(f"rho must be in [0, 1]; got {rho!r}.")


def top_entropy_threshold(mask, *, entropy, rho=0.2):
  """{"entropy_threshold": the (1 - rho)-quantile of `entropy` over the
  real tokens of `mask`}: `top_entropy`'s statistic of a whole minibatch,
  computed once and fixed for its microbatches."""
  _check_rho(rho)
  return {"entropy_threshold": masked_quantile(
      jax.lax.stop_gradient(entropy), mask, 1.0 - rho)}


@corrections.register(
    level="token", reads=("entropy",), statistic="entropy",
    paper="Beyond the 80/20 rule, arXiv 2506.01939; TRL "
    "top_entropy_quantile",
    prepass=top_entropy_threshold, provides=("entropy_threshold",),
    examples=({}, {"rho": 0.5}, {"rho": 1.0}))
def top_entropy(mask, *, entropy, rho=0.2, entropy_threshold=None):
  """Trains only the top-rho share of tokens by entropy (the forking tokens).

    tau = the (1 - rho)-quantile of H over the minibatch's real tokens
    w_t = 1 if H_t >= tau else 0

  H is the current policy's entropy at each position (the trainer's forward
  computes it, at the sampling temperature). Wang et al., arXiv 2506.01939:
  rho = 0.2. TRL ``top_entropy_quantile`` (the same threshold, linear
  quantile; 1.0 keeps every token, 0.0 only the highest). The quantile is
  over the whole minibatch: with several microbatches the trainer computes
  it first (`top_entropy_threshold`) and passes it as `entropy_threshold`.

  Args:
    mask: [N, T] loss tokens.
    entropy: [N, T] the current policy's entropies (detached here).
    rho: the share of tokens kept, in [0, 1].
    entropy_threshold: tau from the minibatch's pre-pass, or None (then
      the quantile of these rows).

  Returns:
    TokenWeights (statistic: H).
  """
  _check_rho(rho)
  real, a = corrections.real_arrays(mask, entropy=entropy)
  if entropy_threshold is None:
    entropy_threshold = top_entropy_threshold(mask, entropy=a["entropy"],
                                              rho=rho)["entropy_threshold"]
  keep = real & (a["entropy"] >= entropy_threshold)
  return corrections.TokenWeights(keep.astype(jnp.float32),
                                  jnp.zeros_like(real), a["entropy"])
