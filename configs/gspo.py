"""GSPO (arXiv 2507.18071): sequence-level ratio, the geometric mean of tokens.

s_i = exp(mean_t (logp - old_logp)); clip band (1 - 3e-4, 1 + 4e-4); no KL.

Paper's setup: "we partition each batch of rollout data into four
minibatches for gradient updates". Scaled down: 8 prompts x 8 completions
in 4 minibatches of 16 rows; the narrow band binds from the second
minibatch on.

Command:
  python -m experiments.train --config=configs/gspo.py --workdir=runs/gspo

Expect: a clip fraction far higher than GRPO's (well above 0.1 of the
tokens off policy) with stable training; accuracy close to GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "gspo"
  c.objective.kwargs = dict(clip_low=3e-4, clip_high=4e-4)
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
