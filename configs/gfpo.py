"""GFPO (arXiv 2508.09726): sample more, train on the shortest k of G'.

Each prompt samples G' completions; the member filter `gfpo`
(grpo_jax.strategies.members) keeps the k shortest (``score="length"``;
``"reward_per_token"`` keeps the k of highest R / L), and GRPO's mean and
std are taken over the kept k only (``filter.statistics="kept"``: the
estimator reads GroupData.members). The G' - k others get advantage 0 and
leave the loss. Filtering a group can leave its kept members all alike:
such a group teaches nothing (the VARIANTS.md 4.4 note). The filter and
the advantage follow TRL's GFPO trainer (EXACT-CODE).

Paper's setup: Phi-4-reasoning (14B) on math, G' = 16 sampled and k = 8
kept (the GRPO baseline's group of 8), DAPO's token-level loss
normalisation, long (up to 32k-token) completions. Scaled down to the
quickstart (configs/quickstart.py): SmolLM2-135M-Instruct on one-digit
arithmetic, 2 prompts x G' = 8 completions of up to 40 tokens, k = 4 kept
(the paper's k / G' = 1/2; the update sees the quickstart's 2 x 4 rows),
token-mean aggregation, on policy, no KL, 40 steps. ``:tiny`` samples
G' = 4 and keeps k = 2. Adaptive difficulty (k per prompt by the quantile
of its difficulty) is configs/gfpo_adaptive.py.

Command:
  python -m experiments.train --config=configs/gfpo.py --workdir=runs/gfpo

Expect: filter/kept_share 0.5 and filter/dropped_share 0.5 at every step
(k / G'); completion_length/mean (which describes all G' sampled) drifting
shorter than the quickstart's GRPO at similar accuracy, the sampling cost
twice GRPO's. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.rollout.num_generations = 8  # G'
  c.objective.kwargs.aggregation = "token_mean"
  c.filter.name = "gfpo"
  c = config_lib.finalize(c, arg)
  # k = G' / 2 as the paper's 8 of 16: 4 of 8 here, 2 of 4 at `:tiny`.
  c.filter.kwargs = dict(k=c.rollout.num_generations // 2, score="length")
  return c
