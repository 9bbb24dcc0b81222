"""SA-AH-GRPO (seed list 000 para. 20): AH-GRPO's entropy discount on the
negative-advantage completions only.

Credit rule `credit.sa_ah_grpo`: A_t = exp(-alpha C_t) A where A < 0, A
unchanged where A >= 0 (C_t the sum of the sampler's token entropies
before t): a wrong completion is pushed down mostly on its early tokens,
a right one is pushed up on all of them. A reconstruction from the
abstract (no code found).

Paper's setup: alpha = 0.5 on a GRPO trainer, nothing else given.
Followed as configs/ah_grpo.py: GRPO's setup at its scale (8 x 8, 96
tokens), 2 minibatches a batch so the second step is off policy.

Command:
  python -m experiments.train --config=configs/sa_ah_grpo.py --workdir=runs/sa_ah_grpo

Expect: credit/sa_ah_grpo/discounted_fraction about the share of tokens in
negative rows (near half where groups carry signal); accuracy at least
GRPO's. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.credit.name = "sa_ah_grpo"
  c.credit.kwargs = dict(alpha=0.5, normalize="sum")
  c.train.num_minibatches = 2
  return config_lib.finalize(c, arg)
