"""DPPO, top-K TV (arXiv 2602.04879): a trust region on the divergence of the
whole next-token distribution's head from the sampler's.

Per token -A sg(min(pi / mu, C)) logp, masked once D_TV = 1/2 (sum_k |mu_k -
pi_k| + |mu_rest - pi_rest|), over the sampler's top-K ids plus the rest
mass, exceeds delta and the sampled token moved in its advantage's direction
(p > mu for A > 0, p < mu otherwise); mu is the sampler (the official
Stable-RL code's ``dppo_topk_tv``, measured against the rollout policy).
Token mean, no KL. The sampler records each position's top-K ids and
tempered log-probs ([N, T, K], ``rollout.record_topk``); the trainer gathers
the policy's log-probs at those K ids inside its chunked log-prob pass, so
no [N, T, V] array is made.

Paper's setup (Stable-RL / verl's example script): delta 0.15 (TV), several
minibatch updates per rollout batch, truncation C 10 (Stable-RL). K is not
pinned by the sources read; K = 20 here (the most log-probs vLLM returns per
position by default), 1/2500 of SmolLM2's vocabulary. Scaled down as
configs/dppo.py: 8 prompts x 8 completions in 4 minibatches, so the last
three optimiser steps of each batch see pi != mu.
``--config.objective.kwargs.divergence=kl`` is the top-K KL form (delta 0.05).
``:tiny`` sets delta to 0.005: the random tiny model's distributions over
its 128 ids are near uniform, and one optimiser step moves D_TV by about
0.01, so the paper's 0.15 would never bind there.

Command:
  python -m experiments.train --config=configs/dppo_topk.py --workdir=runs/dppo_topk

Expect: clip_fraction (masked tokens) small; ``topk_divergence`` (its mean
and max over tokens) grows over each batch's minibatches; accuracy close to
the binary form's (configs/dppo.py). The sampler pays one top-K per step.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "dppo_topk"
  c.objective.kwargs = dict(divergence="tv", delta_low=0.15, delta_high=0.15,
                            is_cap=10.0, aggregation="token_mean")
  c.rollout.record_topk = 20
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  c = config_lib.finalize(c, arg)
  if arg == config_lib.TINY_MODEL:
    c.objective.kwargs.delta_low = c.objective.kwargs.delta_high = 0.005
  return c
