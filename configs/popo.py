"""POPO (seed 000 para. 30; reconstruction): signal-free groups replayed.

Each step's groups without reward variance (zero advantage: no gradient)
are replaced by effective groups of earlier steps, kept in a fixed-capacity
buffer on the device (``TrainState.states["groups"]``, checkpointed) and
drawn without replacement with probability proportional to
exp(-(step - step_j) / tau_rec) * q_j, q_j the stored group's reward std.
A replayed group keeps its prompt, completions and rewards (its advantages
the estimator's, recomputed from them), and its stored sampler log-probs are
the behaviour policy mu of decoupled PPO: per token
-min(pi_old / mu, 2) * min(r A, clip(r, 0.8, 1.2) A), r = pi / pi_old.
Token mean, no KL.

Paper's setup, as far as the abstract gives it: GRPO-style groups, an
effective-group buffer with a recency x quality priority, decoupled
importance sampling; the priority's form is a reconstruction (VARIANTS.md
4.7: tau_rec = 2 steps, q = reward std, decoupled PPO truncated at C_is =
2). Scaled down to the quickstart: 8 prompts x 8 completions in 4
minibatches (so the clip and the proximal ratio act), a buffer of 64 groups
(8 steps' worth; the recency weight exp(-age / 2) makes groups older than a
few steps rare draws anyway).

Command:
  python -m experiments.train --config=configs/popo.py --workdir=runs/popo

Expect: replay/refilled_groups close to advantage/collapse_rate once the
buffer has filled (replay/buffer_fill), replay/mean_age of 1-3 steps,
is_weight_mean a little off 1 (the replayed rows' pi_old / mu) and
replay/refilled_groups near replay/zero_variance_groups once the buffer
holds groups (each signal-free group refilled); the arithmetic task's early
steps, where most groups are all wrong, train on the replayed groups
instead of nothing.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.groups.name = "popo"
  c.groups.kwargs = dict(capacity=64, tau_rec=2.0, quality="std")
  c.objective.name = "decoupled_ppo"
  c.objective.kwargs = dict(clip_low=0.2, clip_high=0.2, is_cap=2.0,
                            aggregation="token_mean")
  c.kl.beta = 0.0
  c.train.num_minibatches = 4
  return config_lib.finalize(c, arg)
