"""BNPO (arXiv 2506.02864): the group-centred reward divided by a Beta
density of the group's success rate, the Beta fitted over the batch.

Advantages `advantages.bnpo`: p_q is prompt q's mean reward, (alpha, beta)
the batch's method-of-moments Beta fit (each at least 1), and A = (R - p_q)
/ Beta_pdf(p_q), capped at 1e6; no std. Rewards must lie in [r_min, r_max]
= [0, 1], which validation checks against the reward functions' declared
ranges. With two rewards it uses the paper's advantage decomposition: one
Beta per reward, A = (1/K) sum_k w_k A_k; ``decompose=False`` fits one Beta
to the weighted sum, which reaches 1.1 here, so it needs
--config.advantage.kwargs.r_max=1.1.

Paper's setup (the authors' recipe/bnpo/run.sh): Qwen2.5-Math-7B on MATH,
32 prompts x 16 completions, one update per batch, clip 0.2 / 0.28 with a
dual clip of 10, ``seq-mean-token-sum`` aggregation, lr 1e-6, no KL and no
entropy bonus. Scaled down to the quickstart (configs/quickstart.py):
SmolLM2-135M-Instruct on one-digit sums, 2 prompts x 4 completions of up to
40 tokens, 40 steps, lr 2e-5, with accuracy and the 0.1-weighted format
reward.

Command:
  python -m experiments.train --config=configs/bnpo.py --workdir=runs/bnpo

Expect: with two prompts a batch the Beta is fitted to two success rates:
uniform (alpha = beta = 1, BNPO = Dr. GRPO) when they agree, as when both
are 0; when they differ, a group whose rate is near the Beta's mode weighs
less than one far from it. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "bnpo"
  c.advantage.kwargs = dict(r_min=0.0, r_max=1.0, decompose=True,
                            max_weight=1e6)
  c.objective.kwargs = dict(clip_low=0.2, clip_high=0.28, dual_clip=10.0,
                            aggregation="seq_mean_token_sum")
  return config_lib.finalize(c, arg)
