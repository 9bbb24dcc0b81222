"""SAPO (arXiv 2511.20347): soft sigmoid gate instead of a hard clip.

Per token -f(r) A with f(r) = sigmoid(tau (r - 1)) * 4 / tau, tau = 1.0 for
A > 0 and 1.05 for A < 0.

Paper's setup: its claim concerns off-policy updates (a rollout batch
split into several minibatches), where the gate, unlike a clip, scales
rather than zeroes far-off-policy tokens; the minibatch count here is this
repository's choice, not the paper's. Scaled down: 8 prompts x 8
completions in 4 minibatches.

Command:
  python -m experiments.train --config=configs/sapo.py --workdir=runs/sapo

Expect: smooth ratio statistics (no hard clip boundary), accuracy close to
GRPO's.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "sapo"
  c.objective.kwargs = dict(tau_pos=1.0, tau_neg=1.05,
                            aggregation="token_mean")
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
