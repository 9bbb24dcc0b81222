"""LLDS (arXiv 2512.04220): GRPO plus a likelihood-preserving regulariser.

GRPO's objective (PPO clip 0.2, k3 KL at 0.04) plus
lambda * aggregate(g * 1[A >= 0] * max(0, sg(old_logp) - logp)), g = 1 where
the token's gate span lost likelihood since the rollout (the A-gate: the
span is the token's chunk, a maximal run of loss tokens). It pulls back the
tokens of non-negative advantage whose log-prob fell, and only where their
span's likelihood fell: Lazy Likelihood Displacement, the drift that the
paper finds precedes GRPO's collapse. It is 0 while logp = old_logp, so the
batch trains in several minibatches.

Paper's setup: Search-R1-style GRPO on Qwen2.5-3B and 7B, search-integrated
question answering (multi-turn, the search results masked out of the loss,
so a row has several chunks); the authors' code sets lambda = 0.2
(``NO_REDUCE_LAMBDA``) with the A-gate, their best, and normalises by the
token mean. Followed: lambda 0.2, the A-gate. Scaled down: SmolLM2 on
single-turn arithmetic, where a row is one chunk and the A-gate equals the
R-gate (``--config.llds.gate=response``); 8 prompts x 8 completions in 4
minibatches of 16 rows, so the last three optimiser steps of each batch see
old_logp != logp; the term is aggregated like GRPO's objective
(``seq_mean_token_mean``, theirs with ``token_mean``).

Command:
  python -m experiments.train --config=configs/llds.py --workdir=runs/llds

Expect: llds (the mean penalty) and llds_gated (the share of tokens in an
active gate) above 0 from the second minibatch on, and small; the
likelihood of rewarded completions falling less than under GRPO's four
minibatches without it; accuracy at least GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.llds.coef = 0.2
  c.llds.gate = "action"
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
