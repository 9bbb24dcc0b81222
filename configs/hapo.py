"""HAPO (Heterogeneous Adaptive Policy Optimization): entropy-aware tokens at
every stage of DAPO.

* sampler: token t is drawn at T (1 + 0.05 clip(h_hat_t, -1, 1)), h_hat its
  entropy normalised by the previous step's batch (pivot: the 0.8 quantile
  of the log-entropies), and the trainer scores each token at its own
  temperature (``rollout.temperature_tau``, grpo_jax.sampling.entropy_norm);
* advantage: the group's mean and std over tokens (each completion weighted
  by its length), GRPO's where any |A| >= 5 (``hapo_token_mean``);
* loss: the clip band widened below on low-entropy tokens and above on
  high-entropy ones, the advantage damped or amplified by (1 + h_hat) by
  whether the ratio left a neutral zone, PPO's dual clip c = 10, token mean
  (``hapo``). h_hat is computed once per batch by the rollout, over all of
  its loss tokens (the authors recompute it per micro-batch).

Paper's setup (the authors' ``recipe/qwen2.5_math_1.5b.sh``, a DAPO recipe):
512 prompts x 16 completions, minibatches of 32 prompts (16 optimiser steps
per rollout), band 0.2 / 0.2, c = 10, alpha = beta = 1, tau = 0.05, pivot
0.8, temperature 1, dynamic sampling on accuracy, the overlong buffer, no
KL, lr 1e-6. Scaled down: 8 prompts x 8 completions in 4 minibatches
(DAPO's config here), so the last three optimiser steps of each batch are
off policy and the neutral zone and the adaptive bands act; dynamic
sampling of 3 rounds at most; the overlong shaper over the last quarter of
rollout.max_new_tokens.

Command:
  python -m experiments.train --config=configs/hapo.py --workdir=runs/hapo

Expect: sampler/adapted_share near 1 from the second step on (every
token's temperature moves, by at most 5%); redistributed (the share of
tokens whose advantage the entropy damped or amplified) well above 0, most
of it low-entropy tokens near ratio 1; entropy that decays more slowly than
DAPO's, accuracy at least DAPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.rollout.temperature_tau = 0.05
  c.rollout.entropy_pivot = 0.8
  c.advantage.name = "hapo_token_mean"
  c.advantage.kwargs = dict(eps=1e-6, fallback_threshold=5.0)
  c.objective.name = "hapo"
  c.objective.kwargs = dict(clip_low=0.2, clip_high=0.2, clip_alpha=1.0,
                            adv_beta=1.0, dual_clip=10.0,
                            aggregation="token_mean")
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  # DAPO's dynamic sampling and overlong shaping, as the authors' recipe.
  c.groups.name = "dynamic_sampling"
  c.groups.kwargs = dict(max_rounds=3, signal_reward="accuracy")
  max_new_tokens = c.rollout.get_ref("max_new_tokens")
  c.rewards.shapers.overlong = dict(weight=1.0, max_length=max_new_tokens,
                                    cache_length=max_new_tokens // 4)
  return config_lib.finalize(c, arg)
