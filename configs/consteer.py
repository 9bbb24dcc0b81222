"""ConSteer-RL (seed 000 para. 11; reconstruction): reward confident
correct answers, punish confident errors.

Reward: R' = R + lam c (correct) or R - lam c (wrong), c the sampler's
geometric-mean token probability of its own completion (from the log-probs
it recorded while sampling, at its temperature), lam = 0.5 (the `consteer`
shaper).

Paper's setup: not known beyond the abstract (VARIANTS.md 5.1 proposes the
form and lam). Scaled down to the quickstart (SmolLM2-135M-Instruct,
one-digit sums, 2 prompts x 4 completions of up to 40 tokens, 40 steps,
accuracy and format rewards as GRPO's).

Command:
  python -m experiments.train --config=configs/consteer.py --workdir=runs/consteer

Expect: shaping/consteer/mean rising as wrong answers become less
confident and right ones more. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.rewards.shapers.consteer = dict(weight=1.0, lam=0.5, agg="geometric")
  return config_lib.finalize(c, arg)
