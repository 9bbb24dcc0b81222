"""REINFORCE++ (arXiv 2501.03262): no group baseline; the rewards are
whitened over every token of the batch.

Advantages `advantages.reinforce_plus_plus`: A = (R - mean) / sqrt(var +
1e-8), mean and unbiased variance over the batch's tokens (each completion
counts once per token, as verl's ``masked_whiten``), the discount 1 (verl's
default), so the advantage is one per completion.

Paper's setup: PPO's clipped surrogate with these globally normalised
advantages in place of a critic, and a KL penalty to the reference. Scaled
down to the quickstart
(configs/quickstart.py): SmolLM2-135M-Instruct on one-digit sums, 2 prompts
x 4 completions of up to 40 tokens, 40 steps, one update per batch, no KL;
``token_mean`` aggregation (verl's default), matching the token-level
statistics.

Command:
  python -m experiments.train --config=configs/reinforce_plus_plus.py --workdir=runs/reinforce_plus_plus

Expect: every group trains, also one whose completions agree (it moves with
its offset from the batch mean); with 8 completions a batch the batch
statistics are noisy. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "reinforce_plus_plus"
  c.advantage.kwargs = dict(eps=1e-8, ddof=1)
  c.objective.kwargs.aggregation = "token_mean"
  return config_lib.finalize(c, arg)
