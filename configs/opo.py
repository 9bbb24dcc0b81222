"""OPO (arXiv 2505.23585): exact on-policy training with the optimal
baseline, the group's length-weighted mean reward; no std.

Advantages `advantages.opo`: A = R - sum_g L_g R_g / sum_g L_g, L the
completion lengths in tokens (the variance-minimising baseline when the
score function's squared norm grows with length).

Paper's setup (and verl's docs/algo/opo.md): GRPO-style group sampling,
one optimiser step per rollout batch (the minibatch is the whole batch), no
KL and no entropy term. Scaled down to the quickstart
(configs/quickstart.py), which is on policy too: SmolLM2-135M-Instruct on
one-digit sums, 2 prompts x 4 completions of up to 40 tokens, 40 steps, no
KL; ``token_mean`` aggregation, whose gradient is the sequence-level policy
gradient the baseline is derived for.

Command:
  python -m experiments.train --config=configs/opo.py --workdir=runs/opo

Expect: curves close to Dr. GRPO's; where a group's lengths differ the
baseline leans to its long completions, so a long wrong completion is
pushed down less and a short right one up more than with the plain mean.
Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "opo"
  c.advantage.kwargs = {}
  c.objective.kwargs.aggregation = "token_mean"
  return config_lib.finalize(c, arg)
