"""The entropy bonus: a regulariser on the current policy's entropy.

It registers in `regularisers.REGULARISERS` (the kind of every term added to
an objective's loss) and reads ``entropy``, which the trainer's forward
computes beside the log-probs (`logprobs.token_logprobs`, whose gradient
flows through both outputs).
"""

import jax.numpy as jnp

from grpo_jax import aggregation as agg
from grpo_jax import measures
from grpo_jax.objectives.regularisers import check_coefficient
from grpo_jax.objectives.regularisers import REGULARISERS


@REGULARISERS.register(
    reads=("entropy",), paper="verl actor entropy_coeff; TRL entropy_coef",
    examples=({"coef": 0.01}, {"coef": 0.001}))
def entropy_bonus(logp, mask, *, entropy, coef=0.0,
                  aggregation="seq_mean_token_mean", horizon=None):
  """-coef * aggregate(H): rewards a spread-out policy.

    L_H = -coef * aggregate_t(H_t),  H_t = -sum_v pi(v) log pi(v)

  with the gradient through H (the current policy's entropy at each
  completion position, at the sampling temperature). verl's actor loss
  ``pg_loss - entropy_coeff * agg_loss(entropy, mask, loss_agg_mode)``
  aggregates it like the policy loss, as here (the objective's
  aggregation, bound by `regularisers.make`); TRL's ``entropy_coef``
  subtracts the token mean whatever the loss type. Both default to 0 (off).

  Args:
    logp: [N, T] policy log-probs (unused: the entropy carries the gradient).
    mask: [N, T] loss tokens.
    entropy: [N, T] the policy's entropies, with gradient.
    coef: the coefficient (>= 0).
    aggregation, horizon: the objective's aggregation.

  Returns:
    (SumCount of -coef * H, {"entropy_bonus": Mean of the aggregated H}).
  """
  del logp
  check_coefficient("coef", coef)
  real = jnp.asarray(mask) > 0
  # Select, never multiply: padding may hold -inf or NaN.
  entropy = jnp.where(real, jnp.asarray(entropy, jnp.float32), 0.0)
  sc = agg.sum_and_count(entropy, mask, aggregation, horizon=horizon)
  return (agg.SumCount(-coef * sc.total, sc.count),
          {"entropy_bonus": measures.Mean(sc.total, sc.count)})
