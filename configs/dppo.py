"""DPPO (arXiv 2602.04879): a divergence trust region instead of the ratio clip.

Per token -A sg(min(pi / mu, C)) logp, masked once the sampled token's
probability moved past delta in the advantage's direction (binary TV:
p - mu <= 0.15 for A > 0, >= -0.15 otherwise), mu the behaviour policy: the
sampler's own log-probs (anchor "behav", as the official Stable-RL code;
verl anchors on pi_old). Token mean, no KL.

Paper's setup (verl's example script): binary TV with delta 0.15, several
minibatch updates per rollout batch; the truncation C is 20 in verl's code
and 10 in Stable-RL's (10 here). Scaled down: 8 prompts x 8 completions in 4
minibatches, so the last three optimiser steps of each batch see p != mu.
``--config.objective.kwargs.divergence=kl`` is the binary-KL form (delta
0.05). The Top-K forms (the divergence over the sampler's top-K ids plus the
rest mass) are configs/dppo_topk.py.

Command:
  python -m experiments.train --config=configs/dppo.py --workdir=runs/dppo

Expect: clip_fraction (masked tokens) small, concentrated on confident
tokens; rare tokens move further than under the PPO clip; accuracy close to
GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "dppo"
  c.objective.kwargs = dict(divergence="tv", delta_low=0.15, delta_high=0.15,
                            is_cap=10.0, anchor="behav",
                            aggregation="token_mean")
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
