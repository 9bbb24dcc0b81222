"""AH-GRPO (seed list 000 para. 20): an adaptive horizon, each token's
policy gradient discounted by the entropy before it.

Credit rule `credit.ah_grpo`: A_t = exp(-alpha C_t) A with C_t the sum of
the sampler's token entropies before t (the first token weighs 1): where
the model was uncertain early, the later tokens count less. alpha = 0 is
GRPO. The rule is a reconstruction from the abstract (no code found).

Paper's setup: the abstract gives alpha = 0.5 (GRPO is alpha = 0) on a
GRPO trainer, and nothing else. Followed: alpha 0.5 on GRPO's setup
(configs/grpo.py: ppo_clip, each row's token mean then the mean over rows,
KL 0.04), at its scale of 8 prompts x 8 completions of 96 tokens, in 2
minibatches so the second optimiser step of each batch is off policy and
the discounted advantages meet ratios away from 1. ``--config.credit.kwargs.normalize=mean`` uses the running mean of
the entropies instead of the sum (the sum drives late tokens' weights
towards 0 at ~1 nat a token).

Command:
  python -m experiments.train --config=configs/ah_grpo.py --workdir=runs/ah_grpo

Expect: credit/ah_grpo/weight_mean well below 1 (falling as completions
grow), credit/ah_grpo/discounted_fraction near 1; accuracy close to GRPO's
with a steadier entropy. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.credit.name = "ah_grpo"
  c.credit.kwargs = dict(alpha=0.5, normalize="sum")
  c.train.num_minibatches = 2
  return config_lib.finalize(c, arg)
