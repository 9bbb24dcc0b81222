"""T-SPMO (arXiv 2504.20834): token-specific prefix matching, credit only
where a group's completions branch.

Credit rule `credit.t_spmo`: within a group, token t of completion i gets
mean R over the members that share its prefix and its token at t, minus
mean R over the members that share its prefix (and are still going):
how much this choice raised the expected reward. Tokens after a unique
prefix get 0, and only the branch tokens (A != 0) train (loss_on
"nonzero"), the paper's token saving. A reconstruction from the abstract
(no code found); the estimator's advantages are not used (the paper's R).

Paper's setup (abstract): GRPO-style group sampling on a small budget,
training only the branch tokens. Followed: GRPO's sampling and ppo_clip
loss (each row's mean over its trained tokens, then over rows; KL 0.04)
at its scale (8 x 8, 96 tokens), 2 minibatches a batch so the second step is off policy.
``--config.credit.kwargs.loss_on=all`` keeps every token (with A = 0
off the branch points).

Command:
  python -m experiments.train --config=configs/t_spmo.py --workdir=runs/t_spmo

Expect: credit/t_spmo/branch_fraction small (a few tokens a completion:
the first tokens and the points where completions part), rollout/
loss_tokens likewise far below GRPO's; accuracy rising more slowly per
step than GRPO's. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.credit.name = "t_spmo"
  c.credit.kwargs = dict(signal="reward", loss_on="nonzero")
  c.train.num_minibatches = 2
  return config_lib.finalize(c, arg)
