"""VESPO (arXiv 2602.10693): a Gamma-shaped soft weight on the sequence ratio.

Per token -sg(phi(W)) A logp with W the product of the row's token ratios
pi / mu and phi(W) = W^k e^{lam (1 - W)} (phi(1) = 1): k = 2, lam = 3 for
A >= 0 and k = 3, lam = 2 for A < 0 (TRL's defaults). mu is pi_old times the
sampler correction min(pi_old / sampler, 3) per token, folded into W as
TRL does (token_truncate, C_max 3). Token mean, no KL.

Paper's setup: off-policy training with stale and mismatched rollouts
(asynchronous updates, inference-engine mismatch). Scaled down: 8 prompts x
8 completions in 4 minibatches, so the last three optimiser steps of each
batch see W != 1.

Command:
  python -m experiments.train --config=configs/vespo.py --workdir=runs/vespo

Expect: clip_fraction (tokens whose weight phi is below 0.5) small but
nonzero from the second minibatch on; stable training; accuracy close to
GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "vespo"
  c.objective.kwargs = dict(k_pos=2.0, lambda_pos=3.0, k_neg=3.0,
                            lambda_neg=2.0, is_cap=3.0,
                            aggregation="token_mean")
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
