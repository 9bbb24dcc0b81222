"""BAPO (arXiv 2510.18927): PPO's clip with bounds searched each optimiser step.

Absolute ratio bounds [c_low, c_high] start at [0.6, 1.2]; while the
positive-advantage tokens carry less than rho0 = 0.5 of the gradient
(P / (P + N), over the tokens the bounds let through), c_low rises in steps
of 0.05 up to 0.9 (dropping negative tokens), then c_high up to 3.0
(admitting positive ones). One search per optimiser step over the whole
minibatch (a pre-pass before its microbatches, so every microbatch and
device clips alike); dual clip 3, token mean, no KL.

Paper's setup (WooooDyy/BAPO's recipe and example script): GRPO advantages,
no KL or entropy term, 2 epochs over each rollout batch in 4 minibatches
(256 prompts, minibatches of 64: 8 optimiser steps per batch, the
"staleness 8" of its runs), lr 1e-6, 16 completions per prompt, token
mean. Followed: the 2 x 4 optimiser steps per batch and VARIANTS.md's
bounds ([0.6, 0.9], [1.2, 3.0], steps 0.05, rho0 0.5; the example script
uses [0.8, 0.95], [1.2, 2.0] with an upper step of 0.1 and the recipe's
clipped-value statistic: ``balance="ratio_value"``). Scaled down: 8 prompts
x 8 completions, so each optimiser step sees 16 rows, the last seven of
each batch off policy.

Command:
  python -m experiments.train --config=configs/bapo.py --workdir=runs/bapo

Expect: bapo_c_low and bapo_c_high above their starts on steps where the
negative tokens dominate (bapo_rho_start < 0.5), bapo_rho near 0.5 after
the search; entropy steadier than with ppo_clip; accuracy close to GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "bapo"
  c.objective.kwargs = dict(low_start=0.6, low_max=0.9, low_step=0.05,
                            high_start=1.2, high_max=3.0, high_step=0.05,
                            rho0=0.5, balance="share_grad", dual_clip=3.0,
                            aggregation="token_mean")
  c.kl.beta = 0.0
  c.train.num_iterations = 2
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
