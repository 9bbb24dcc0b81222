"""Per-token estimators of KL(policy || reference) from sampled tokens.

With d = ref_logp - logp for tokens sampled from the policy (Schulman's
"Approximating KL divergence" estimators):

| name | value            | notes                                            |
|------|------------------|--------------------------------------------------|
| k1   | -d               | unbiased value, high variance, can be negative   |
| k2   | d^2 / 2          | its gradient -d * grad(d) = k1 * grad(logp) is   |
|      |                  | the unbiased KL gradient on policy               |
| k3   | exp(d) - d - 1   | unbiased value, >= 0; DeepSeekMath (arXiv 2402.03300) |

Each returns [N, T] per-token terms in float32; mask and reduce them with
`grpo_jax.aggregation.aggregate` and add ``beta * aggregate(kl)`` to the loss.
"""

import jax.numpy as jnp

from grpo_jax import aggregation
from grpo_jax import registry

KL_ESTIMATORS = registry.Registry("KL estimator",
                                  positional=("logp", "ref_logp"))

# exp(20) ~ 4.9e8: large enough for any real log-ratio, small enough that
# exp never overflows float32 and its gradient stays finite.
LOG_RATIO_CLAMP = 20.0


def _log_ratio(logp, ref_logp) -> jnp.ndarray:
  """d = ref_logp - logp in float32, after checking both are [N, T]."""
  aggregation.check_token_arrays(logp=logp, ref_logp=ref_logp)
  return (jnp.asarray(ref_logp, jnp.float32) -
          jnp.asarray(logp, jnp.float32))


@KL_ESTIMATORS.register()
def k1(logp, ref_logp) -> jnp.ndarray:
  """k1 = logp - ref_logp, the plain log-ratio.

  Args:
    logp: [N, T] log-probs of the sampled tokens under the policy.
    ref_logp: [N, T] log-probs of the same tokens under the reference.

  Returns:
    [N, T] float32 per-token terms.
  """
  return -_log_ratio(logp, ref_logp)


@KL_ESTIMATORS.register()
def k2(logp, ref_logp) -> jnp.ndarray:
  """k2 = (ref_logp - logp)^2 / 2.

  Args:
    logp: [N, T] log-probs of the sampled tokens under the policy.
    ref_logp: [N, T] log-probs of the same tokens under the reference.

  Returns:
    [N, T] float32 per-token terms.
  """
  return 0.5 * _log_ratio(logp, ref_logp)**2


@KL_ESTIMATORS.register()
def k3(logp, ref_logp) -> jnp.ndarray:
  """k3 = exp(d) - d - 1 with d = ref_logp - logp clamped to [-20, 20].

  DeepSeekMath's estimator (arXiv 2402.03300). Outside the clamp the value is
  constant and the gradient 0.

  Args:
    logp: [N, T] log-probs of the sampled tokens under the policy.
    ref_logp: [N, T] log-probs of the same tokens under the reference.

  Returns:
    [N, T] float32 per-token terms, >= 0.
  """
  d = jnp.clip(_log_ratio(logp, ref_logp), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
  # expm1 keeps the value accurate (and >= 0) when d is near 0.
  return jnp.expm1(d) - d


names = KL_ESTIMATORS.names
get = KL_ESTIMATORS.get
