"""REINFORCE++-baseline (arXiv 2501.03262): the group mean subtracted, then
the rewards whitened over every token of the batch.

Advantages `advantages.reinforce_plus_plus_baseline`: A = whiten(R -
mean_g R), mean and unbiased variance over the batch's tokens (verl's
``reinforce_plus_plus_baseline``). The whitening's shift leaves a group of
equal rewards with a small advantage (minus the token-weighted batch mean
over the batch std), not 0.

Paper's setup: the REINFORCE++ recipe (PPO's clipped surrogate, a KL
penalty, no critic) with several completions per prompt, for reasoning
tasks. Scaled down to the quickstart (configs/quickstart.py):
SmolLM2-135M-Instruct on one-digit sums, 2 prompts x 4 completions of up to
40 tokens, 40 steps, one update per batch, no KL; ``token_mean``
aggregation (verl's default).

Command:
  python -m experiments.train --config=configs/reinforce_plus_plus_baseline.py --workdir=runs/reinforce_plus_plus_baseline

Expect: curves close to GRPO's (the quickstart) with one std for the batch
instead of one per group, so a group with a small spread gets smaller
advantages than under GRPO. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "reinforce_plus_plus_baseline"
  c.advantage.kwargs = dict(eps=1e-8, ddof=1)
  c.objective.kwargs.aggregation = "token_mean"
  return config_lib.finalize(c, arg)
