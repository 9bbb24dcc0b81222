"""Decoupled PPO (Hilton et al., arXiv 2110.00641): clip around pi_old, weight by mu.

Per token -w min(r A, clip(r, 0.8, 1.2) A), r = pi / pi_old (the proximal
policy, the trainer's own pass before the batch's first step) and
w = min(pi_old / mu, 2), mu the behaviour policy: the sampler's log-probs.
Token mean, no KL.

Paper's setup: PPO whose clip is centred on a proximal policy while the
data comes from older behaviour policies; in LLM training (verl's rollout
correction, decoupled mode) mu is the inference engine and the weight is
truncated (threshold 2). Followed: that truncation and PPO's band. Scaled
down: 8 prompts x 8 completions in 4 minibatches. Here the sampler and the
trainer share the weights, so mu differs from pi_old only by numerics (and
rows the sampler scored at another precision): w stays near 1 and the
update is ppo_clip's; the weight matters for replayed or stale rows.

Command:
  python -m experiments.train --config=configs/decoupled_ppo.py --workdir=runs/decoupled_ppo

Expect: training as ppo_clip with token mean (DAPO's band aside);
logprob/sampler_trainer_max_abs_diff small, so the weights near 1.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.name = "decoupled_ppo"
  c.objective.kwargs = dict(clip_low=0.2, clip_high=0.2, is_cap=2.0,
                            aggregation="token_mean")
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
