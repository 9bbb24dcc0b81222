"""RePO (arXiv 2506.09340; SihengLi99/RePO): replay each prompt's own earlier completions.

Every prompt keeps a FIFO cache of its last M completions (tokens, the
sampler's log-probs, total reward) on the device (``TrainState.states[
"groups"]``, checkpointed; one slot per ``data.Example.index``). Once a
prompt's cache holds ``min_cache_to_replay`` entries, each of its groups is
joined by k cached completions (``highest_k``: the k best rewards), retrieved
before the step's own completions are appended. A step's batch is P * (G + k)
rows (empty replay slots carry no loss), so the update compiles once.
Advantages ``split``: the G fresh and the k replayed are z-scored apart (the
authors' default; ``mixed`` z-scores their union). Loss, per token

  -min(pi_old / mu, 2) * min(r A, clip(r, 0.8, 1.2) A),  r = pi / pi_old,

with mu a replayed row's stored sampler log-probs (decoupled PPO), and

  L = agg(fresh rows) + c_off * agg(replayed rows),  c_off = 1,

each part a per-sequence token mean on its own; KL (beta 0.04, TRL's
default the authors train with) on the fresh rows only.

Paper's setup (scripts/train_replay_grpo.slurm): G = 8 fresh completions,
k = num_replays = 8, max_cache_size = min_cache_to_replay = 16 (two visits
of a prompt before it replays), highest_k, split, the TRL std eps 1e-4.
Scaled down to the quickstart (8 prompts x 8 completions of the 100-problem
arithmetic task, so a prompt comes back about every 12 steps):
max_cache_size = min_cache_to_replay = 8 (one earlier visit, else replay
would start only after ~25 of the 200 steps) and k = 4 (k / M = 1/2 as in
the paper's 8 / 16), so a step trains 8 x 12 = 96 rows in 4 minibatches of
24; a cache slot per problem id (capacity 128 >= the 100 ids, exact).

Divergences from the authors' trainer: the cache keeps the sampler's
log-probs as the replayed row's behaviour policy (theirs: a separate
old-policy pass; equal up to the sampler/trainer numerics), and the replayed
row's ratio is decoupled (clipped pi / pi_old, weighted by pi_old / mu
truncated at 2) instead of pi / mu clipped directly; the two agree when the
params have not moved since the batch was drawn, up to the truncation.

Command:
  python -m experiments.train --config=configs/repo.py --workdir=runs/repo

Expect: repo/replaying_groups 0 for the first ~12 steps, then rising toward
1 as problems come back; repo/mean_age about the revisit interval;
replayed/is_weight_mean away from 1 (the stored mu of older policies) while
is_weight_mean of the fresh rows stays at 1; accuracy at or above GRPO's at
the same step count, at ~1.5x the update's cost per step.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.groups.name = "repo"
  c.groups.kwargs = dict(capacity=128, prompt_ids="exact", max_cache_size=8,
                         min_cache_to_replay=8, num_replays=4,
                         strategy="highest_k", advantage_mode="split",
                         off_policy_coef=1.0)
  c.advantage.name = "grpo"
  c.advantage.kwargs = dict(scale="group", eps=1e-4, ddof=1)
  c.objective.name = "decoupled_ppo"
  c.objective.kwargs = dict(clip_low=0.2, clip_high=0.2, is_cap=2.0,
                            aggregation="seq_mean_token_mean")
  c.kl.beta = 0.04
  c.train.num_minibatches = 4
  c = config_lib.finalize(c, arg)
  if arg == config_lib.TINY_MODEL:
    # 2 prompts x (4 + 4) rows: a minibatch per group, so that each holds
    # fresh rows beside its replay slots (consecutive row slices).
    c.train.num_minibatches = 2
  return c
