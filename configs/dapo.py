"""DAPO (arXiv 2503.14476): clip-higher, token mean, dynamic sampling.

PPO clip with eps_low=0.2, eps_high=0.28; ``token_mean`` aggregation; no KL;
groups whose accuracy does not vary are resampled (the dynamic_sampling
group strategy); overlong reward shaping in tokens (the overlong shaper).

Paper's setup: 512 prompts x 16 completions per rollout, mini-batches of
512 completions, "16 gradient updates for each rollout step", lr 1e-6.
Scaled down: 8 prompts x 8 completions in 4 minibatches of 16 rows, so
the last three optimiser steps of each batch are off policy and
clip-higher acts.

Command:
  python -m experiments.train --config=configs/dapo.py --workdir=runs/dapo

Expect: fewer collapsed groups in the batch than GRPO (rollout rounds > 1 on
some steps), ratios leaving 1 from the second minibatch on, entropy that
decays more slowly, accuracy at least GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.kwargs.clip_high = 0.28
  c.objective.kwargs.aggregation = "token_mean"
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  # Resample groups whose accuracy does not vary (3 rounds at most).
  c.groups.name = "dynamic_sampling"
  c.groups.kwargs = dict(max_rounds=3, signal_reward="accuracy")
  # References: --config.rollout.max_new_tokens=... moves them too.
  max_new_tokens = c.rollout.get_ref("max_new_tokens")
  c.rewards.shapers.overlong = dict(weight=1.0, max_length=max_new_tokens,
                                    cache_length=max_new_tokens // 4)
  return config_lib.finalize(c, arg)
