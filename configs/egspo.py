"""EGSPO (seed list 002 para. 119): an entropy gate, high-entropy tokens
get the full PPO update and low-entropy ones an attenuated one.

Credit rule `credit.egspo`: A_t = A if the sampler's entropy at t is at
least tau, else beta_low A; tau is the top-20 % cut of the step's loss
tokens (quantile 0.8). With ppo_clip this is the gated PPO loss
g_t min(r A, clip(r) A). The gate's form is the abstract's; beta_low 0.5
and the quantile are a reconstruction (no code found). The paper's SFT
warm-up stage is not part of this config.

Paper's setup: PPO updates on both branches, nothing more in the abstract.
Followed: GRPO's setup (ppo_clip, each row's token mean then the mean
over rows, KL 0.04) at its scale (8 x 8, 96 tokens), 2 minibatches a batch so the second step is off policy.
``--config.credit.kwargs.gate=threshold --config.credit.kwargs.threshold=1.0``
gates at a fixed entropy instead.

Command:
  python -m experiments.train --config=configs/egspo.py --workdir=runs/egspo

Expect: credit/egspo/gated_fraction about 0.8 (the quantile), the
threshold following the entropy; accuracy close to GRPO's. Not measured at
this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.credit.name = "egspo"
  c.credit.kwargs = dict(gate="quantile", quantile=0.8, threshold=1.0,
                         beta_low=0.5)
  c.train.num_minibatches = 2
  return config_lib.finalize(c, arg)
