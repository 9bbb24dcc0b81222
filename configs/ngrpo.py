"""NGRPO (arXiv 2509.18851): GRPO over each group plus a virtual member of
the maximum reward, with an asymmetric clip.

Advantages `advantages.ngrpo`: A = (R - mu') / (sigma' + eps), mu' and
sigma' (ddof=1) over the G rewards and one virtual reward r_max, so an
all-wrong group gets a negative advantage instead of 0 and every mixed
group is shifted down. The asymmetric clip (clip_low 0.16, clip_high 0.24:
looser for positive, stricter for negative advantages) is plain
``ppo_clip`` with ``token_mean`` aggregation; no KL.

Paper's setup (the authors' train_scripts/train_qwen2.5-math-7b_ngrpo.sh):
Qwen2.5-Math-7B on MATH, 1024 prompts x 8 completions per rollout in
mini-batches of 256 prompts (4 optimiser steps per batch, so the clip
acts), lr 1e-6, max_reward 1, add_max_reward_num 1, no KL, and all-correct
groups filtered out. Scaled down to the quickstart (configs/quickstart.py):
SmolLM2-135M-Instruct on one-digit sums, 2 prompts x 4 completions of up
to 40 tokens, 40 steps, no KL, and 4 minibatches per batch as in the paper.
r_max is 1.1, the largest weighted reward here (accuracy 1 plus 0.1 for
the format): validation fails if the rewards can exceed it. The
all-correct filter is left out: such groups (at r_max) get advantage 0
anyway, so it changes only which groups fill the batch.

Command:
  python -m experiments.train --config=configs/ngrpo.py --workdir=runs/ngrpo

Expect: a nonzero advantage/abs_mean on steps whose groups all fail (GRPO's
is 0 there), a negative mean advantage, ratios leaving 1 from the second
minibatch on, and the reward rising as in the quickstart. Not measured at
this scale yet.
"""

from grpo_jax import config as config_lib
from grpo_jax import rewards


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "ngrpo"
  # The largest weighted reward the configured columns reach.
  r_max = sum(w * hi for w, (_, hi) in zip(
      c.rewards.weights, rewards.column_ranges(c.rewards.functions)))
  c.advantage.kwargs = dict(r_max=round(r_max, 6), n_virtual=1, eps=1e-6,
                            ddof=1)
  c.objective.kwargs.clip_low = 0.16
  c.objective.kwargs.clip_high = 0.24
  c.objective.kwargs.aggregation = "token_mean"
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
