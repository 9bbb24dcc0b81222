"""Rollout-level replay buffer (seed 000 para. 23; reconstruction).

Individual rollouts of earlier steps, not whole groups, are kept in a
fixed-capacity buffer on the device (``TrainState.states["groups"]``,
checkpointed): prompt and prompt id, tokens, mask, the sampler's behaviour
log-probs, the advantage the row had when drawn, its reward and step. Each
step evicts the rows older than tau_max = 4 steps, draws R rows without
replacement with probability proportional to |A| (a row of A = 0 is never
drawn) and appends them to the P * G fresh rows. A replayed row keeps its
stored advantage (it is not re-estimated: its group is gone) and trains
through decoupled PPO with mu = its stored behaviour log-probs and pi_prox =
the trainer's recomputed old log-probs: per token
-min(pi_old / mu, 2) * min(r A, clip(r, 0.8, 1.2) A), r = pi / pi_old;
one token mean over fresh and replayed rows, no KL. The fresh rows of
nonzero advantage enter the buffer after the draw.

Paper's setup, as far as the abstract gives it: per-rollout storage, an age
limit, fresh rollouts concatenated with replayed ones, a priority by
|advantage|; the rest is a reconstruction (VARIANTS.md 4.6: tau_max = 4,
a = 1, decoupled PPO with C_is = 2 as for POPO). Scaled down to the
quickstart: 8 prompts x 8 completions plus R = 16 replayed rows (a fifth
of the batch) in 4 minibatches of 20 rows (so the clip and the proximal
ratio act), a buffer of 256 rows (the informative rows of the last 4-5
steps).

Command:
  python -m experiments.train --config=configs/replay.py --workdir=runs/replay

Expect: replay/rows_drawn at 16 once a step with signal has filled the
buffer (replay/buffer_fill), replay/mean_age of 1-3 steps, replay/evicted
above 0 from step 5 on, is_weight_mean a little off 1 (the replayed rows'
pi_old / mu); steps whose fresh groups all collapse still train on the
replayed rows.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.groups.name = "replay"
  c.groups.kwargs = dict(rows=16, tau_max=4, power=1.0, capacity=256)
  c.objective.name = "decoupled_ppo"
  c.objective.kwargs = dict(clip_low=0.2, clip_high=0.2, is_cap=2.0,
                            aggregation="token_mean")
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
