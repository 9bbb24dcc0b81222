"""GPG, Group Policy Gradient (arXiv 2504.02546): REINFORCE on the group-
centred reward, rescaled by the batch's share of rewarded rows, no std, no
ratio, no KL.

Advantages `advantages.gpg`: A = (B / M) (R - mean_g R) / f_norm, B the rows
of the batch and M those with a nonzero reward (verl's
``compute_gpg_outcome_advantage``); objective `gpg`: -A logp with
``token_mean`` aggregation (verl's ``gpg`` loss).

Paper's setup: GRPO's group sampling without a reference model or a clip,
one update per batch. Scaled down to the quickstart (configs/quickstart.py):
SmolLM2-135M-Instruct on one-digit sums, 2 prompts x 4 completions of up to
40 tokens, 40 steps, no KL.

Command:
  python -m experiments.train --config=configs/gpg.py --workdir=runs/gpg

Expect: early, when few rows earn a reward (the format reward of 0.1 counts
as nonzero), B / M is large and so are the first updates; curves like
Dr. GRPO's after. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "gpg"
  c.advantage.kwargs = dict(f_norm=1.0)
  c.objective.name = "gpg"
  c.objective.kwargs = dict(aggregation="token_mean")
  return config_lib.finalize(c, arg)
