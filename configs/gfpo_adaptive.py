"""Adaptive Difficulty GFPO (arXiv 2508.09726): k per prompt by difficulty.

GFPO (configs/gfpo.py) with the kept count set per prompt: each prompt's
difficulty d = 1 - mean_g R over its G' samples (R the weighted total
reward: only its rank matters) is written into a window of the last 256
difficulties (the filter's state, TrainState.states["filter"],
checkpointed), the window's quartiles split difficulties into four
buckets, and a prompt keeps k_b members of its bucket b: easy prompts few,
hard ones many (`strategies.filters.gfpo_adaptive_k`). **Reconstruction**:
the paper uses a streaming quantile sketch over the whole run and its
exact table is not given; a fixed window and the table below stand in.

Paper's setup: G' = 16 and k in (4, 6, 8, 8) from the easiest to the
hardest quartile, otherwise as configs/gfpo.py. Scaled down to the
quickstart: G' = 8 and k in (2, 3, 4, 4) (the table times G' / 16, at
least 2), 2 prompts x 8 completions of up to 40 tokens, token mean, on
policy, no KL. ``:tiny`` samples G' = 4 and keeps (2, 2, 3, 3).

Command:
  python -m experiments.train --config=configs/gfpo_adaptive.py --workdir=runs/gfpo_adaptive

Expect: filter/k_mean between 2 and 4, higher while most problems are
failed; filter/dropped_share = 1 - k_mean / 8. Not measured at this scale
yet.
"""

from configs import gfpo


def get_config(arg=None):
  c = gfpo.get_config(arg)
  table = (2, 3, 4, 4) if c.rollout.num_generations >= 8 else (2, 2, 3, 3)
  c.filter.kwargs = dict(k=table, score="length", window=256)
  return c
