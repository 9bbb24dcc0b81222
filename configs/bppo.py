"""BPPO (seed 000 para. 41): the shortest correct and shortest incorrect
completion of each group, on a prefix of their tokens.

GRPO's advantages over the FULL group (the member filter's statistics are
"all": the estimator sees every member), then the member filter `bppo`
(grpo_jax.strategies.members) keeps two rows per group, the shortest
correct (accuracy > 0) and the shortest incorrect one (ties to the lower
index), and trains only their first ``prefix_len`` sampled tokens; a group
without both kinds trains nothing. **Reconstruction** from the abstract
("the shortest correct completion and the shortest incorrect completion as
a compact update unit while preserving full-group advantage normalization
... updating only response prefixes"); its adaptive completion scheduling
is unspecified and left out.

Paper's setup: unknown beyond the abstract; VARIANTS.md 4.5 takes a
256-token prefix. Scaled down to the quickstart (configs/quickstart.py):
SmolLM2-135M-Instruct on one-digit arithmetic, 2 prompts x 4 completions
of up to 40 tokens, a 16-token prefix (``--config.filter.kwargs.
prefix_len=None --config.filter.kwargs.prefix_frac=0.5`` for half of each
row instead), token-mean aggregation, on policy, no KL, 40 steps.
``:tiny`` (8-token completions) trains a 4-token prefix.

Command:
  python -m experiments.train --config=configs/bppo.py --workdir=runs/bppo

Expect: filter/groups_kept equal to the share of groups with both a right
and a wrong answer, filter/kept_share = 2 / 4 of that, filter/prefix_cut
the share of the kept rows' tokens past 16; rollout/loss_tokens far below
GRPO's. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.objective.kwargs.aggregation = "token_mean"
  c.filter.name = "bppo"
  c.filter.kwargs = dict(correct_reward="accuracy", prefix_len=16,
                         prefix_frac=None)
  c = config_lib.finalize(c, arg)  # `:tiny` grades correct_reward
  # 16 of 40 tokens; half of `:tiny`'s 8, so that the prefix acts there.
  c.filter.kwargs.prefix_len = min(16, c.rollout.max_new_tokens // 2)
  return c
