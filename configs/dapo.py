"""DAPO (arXiv 2503.14476): clip-higher, token mean, dynamic sampling.

PPO clip with eps_low=0.2, eps_high=0.28; ``token_mean`` aggregation; no KL;
groups without reward variance are resampled (dynamic sampling); overlong
reward shaping in tokens.

Command:
  python -m experiments.train --config=configs/dapo.py --workdir=runs/dapo

Expect: fewer collapsed groups in the batch than GRPO (rollout rounds > 1 on
some steps), entropy that decays more slowly, accuracy at least GRPO's.
"""

from configs import common


def get_config(arg=None):
  c = common.get_base_config()
  c.objective.kwargs.clip_high = 0.28
  c.objective.aggregation = "token_mean"
  c.kl.beta = 0.0
  c.rollout.dynamic_sampling = True
  c.rewards.overlong.enabled = True
  # References: --config.rollout.max_new_tokens=... moves them too.
  max_new_tokens = c.rollout.get_ref("max_new_tokens")
  c.rewards.overlong.max_length = max_new_tokens
  c.rewards.overlong.cache_length = max_new_tokens // 4
  return common.finalize(c, arg)
