"""NGRPO (arXiv 2509.18851): GRPO over each group plus a virtual member of
the maximum reward, with an asymmetric clip.

Advantages `advantages.ngrpo`: A = (R - mu') / (sigma' + eps), mu' and
sigma' (ddof=1) over the G rewards and one virtual reward r_max, so an
all-wrong group gets a negative advantage instead of 0, every mixed group
is shifted down, and an all-correct group (at r_max) gets 0. The
asymmetric clip (clip_low 0.16, clip_high 0.24:
looser for positive, stricter for negative advantages) is plain
``ppo_clip`` with ``token_mean`` aggregation; no KL.

Paper's setup (the authors' train_scripts/train_qwen2.5-math-7b_ngrpo.sh):
Qwen2.5-Math-7B on MATH, 1024 prompts x 8 completions per rollout in
mini-batches of 256 prompts (4 optimiser steps per batch, so the clip
acts), lr 1e-6, max_reward 1, add_max_reward_num 1, no KL, and all-correct
groups filtered out. Scaled down to the quickstart (configs/quickstart.py):
SmolLM2-135M-Instruct on one-digit sums, 2 prompts x 4 completions of up
to 40 tokens, 40 steps, no KL, and 4 minibatches per batch as in the paper.
The reward is the paper's binary correctness alone (its MATH verifier
gives 1 or 0), so r_max = 1: with the quickstart's 0.1 format bonus r_max
would be 1.1, which the model rarely reaches, and a constant group's
z-score against the virtual member does not depend on the gap, so a
group all correct without the format got -0.447 on every member, the
same as an all-wrong group (seen at two steps of the 40-step comparison
run). Validation fails if the rewards can exceed r_max. The all-correct
filter is left out: such groups (at r_max) get advantage 0 anyway, so it
changes only which groups fill the batch.

Command:
  python -m experiments.train --config=configs/ngrpo.py --workdir=runs/ngrpo

Expect: a nonzero advantage/abs_mean on steps whose groups all fail (GRPO's
is 0 there), a negative mean advantage (a positive loss), and ratios
leaving 1 from the second minibatch on. Measured before the binary reward
(r_max 1.1), the 40-step comparison run fell from 0.420 to 0.195
held-out greedy: at this model's sampled accuracy about half the groups
fail entirely, each such group pushes its completions down at full step
(the gradient is clipped to norm 1 every step), and a minibatch here is 2
completions of one prompt, so most of the 4 optimiser steps a batch only
push down (docs/comparisons.md, "NGRPO and RiskPO at the quickstart's scale"). Not
measured with the binary reward yet.
"""

from grpo_jax import config as config_lib
from grpo_jax import rewards


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.rewards.functions = ("accuracy",)  # the paper's binary reward
  c.rewards.weights = (1.0,)
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
