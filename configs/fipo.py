"""FIPO (seed 002 para. 78; ms-swift's port of qwenpilot/FIPO): DAPO's loss,
each token weighed by the discounted future log-ratio of its completion.

Per token f_t * (-min(r A, clip(r, 0.8, 1.28) A)), f_t = clip(exp(sum_{k>=t}
gamma^(k-t) (logp_k - old_logp_k)), 1, 1.2) (detached), gamma = 2^(-1/32);
an A < 0 token with r > 4 keeps f in [0.8, 1]. Token mean, no KL. f is the
`fipo` correction (`objectives.influence`), so any token-level objective
can take it; FIPO pairs it with PPO's clip.

Paper's setup (ms-swift's arguments): DAPO's clip-higher PPO loss and token
mean, several minibatch updates per rollout batch (on the first f = 1: it
acts only off policy), half-life 32 tokens, clip range 0.2 high-only,
safety threshold 4. Scaled down: 8 prompts x 8 completions in 4 minibatches,
so the last three optimiser steps of each batch see r != 1; completions
are shorter than the half-life, so each token's future is its whole tail.

Command:
  python -m experiments.train --config=configs/fipo.py --workdir=runs/fipo

Expect: correction/fipo/weight_mean a little above 1 from the second
minibatch on (exactly 1 on the first), truncated_fraction the share of
tokens whose future moved by more than log 1.2; accuracy close to DAPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "ppo_clip"
  c.objective.kwargs = dict(clip_low=0.2, clip_high=0.28,
                            aggregation="token_mean")
  c.corrections = {"fipo": dict(half_life=32.0, clip_range=0.2,
                                clip_high_only=True, safety=4.0)}
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
