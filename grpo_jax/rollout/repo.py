"""RePO's replayed rows as stages of `rollout.generate` (arXiv 2506.09340;
VARIANTS.md 4.9): each group's G fresh completions and K completions
replayed from its prompt's own cache, in one batch of a fixed P * (G + K)
rows (``extra_rows`` in the strategy's metadata, `layout.step_rows`).

The strategy draws the round and returns the replayed rows
(`strategies.repo.ReplayRows`, [P, K]); `rollout.added` runs this module's
stages for them:

  rows      group p's rows are p * (G + K) + j: its G fresh members
            (j < G), then its K replay slots; an empty slot (the cache not
            ready, or short) is a row with an empty loss mask and
            advantage 0. Rows of a block share their prompt, so the update's
            shared-prompt forward runs with group size G + K.
  estimate  the configured estimator (it must honour `GroupData.members`)
            on each row's total reward (one column, weight 1):
            ``split`` (the authors' default) estimates the fresh [P, G] and
            the replayed [P, K] (members = filled slots) apart, ``mixed``
            the union [P, G + K] (members = fresh + filled slots). With
            ``grpo`` this is `strategies.repo.repo_advantages`.
  mu        a replayed row's sampler log-probs are the stored ones (the
            behaviour policy when it was drawn), so decoupled PPO weighs it
            by min(pi_old / mu, C); train.validate requires an objective
            that weighs by the behaviour policy.
  loss      ``Batch.replayed`` marks the replay rows; the update
            (`update.make_loss_functions`, replay_coef = off_policy_coef)
            aggregates fresh and replayed rows apart, L = agg(fresh) +
            c_off * agg(replayed), and the regularisers (KL) read the fresh
            rows only.

Divergences from the authors' trainer (documented in configs/repo.py):
the cache stores the sampler's log-probs, not a separate old-policy pass
(equal up to the sampler/trainer numerics); the PPO ratio of a replayed row
is decoupled (pi / pi_old clipped, weighted by pi_old / mu truncated at
is_cap) rather than pi / mu clipped directly; the advantage's eps is the
estimator's (grpo: 1e-6; the authors' 1e-4 is ``advantage.kwargs.eps``).

Reward shapers are carried (the estimate reads totals over every column).
What a step with these rows does not carry yet (train.validate refuses
each, naming the field): member filters, non-identity credit rules, row
strategies that read round fields, per-member temperatures, the sampler's
top-K, HAPO's adaptive temperatures and entropy_hat, token-level or
per-reward estimators, and estimators reading fields a cache entry does
not keep.
"""

import inspect

import numpy as np

from grpo_jax import groups as groups_lib
from grpo_jax.rollout import layout
from grpo_jax import strategies


def extra_rows(config) -> int:
  """K, the rows each group gets beside its G members (0: none)."""
  return layout.step_rows(config).extra_per_group


def replay_coef(config):
  """c_off of the update's split loss (`update.make_loss_functions`), or
  None when the group strategy adds no replayed rows."""
  if not extra_rows(config):
    return None
  return float(dict(config.groups.kwargs).get("off_policy_coef", 1.0))


def _group_data(totals, members, sequence_logprobs, lengths, prompt_index):
  """The estimator's view: one reward column (the total, weight 1)."""
  p = totals.shape[0]
  return groups_lib.GroupData(
      rewards=np.asarray(totals, np.float32)[..., None],
      weights=np.ones((1,), np.float32),
      valid=members.any(axis=1) if members is not None else np.ones(p, bool),
      lengths=np.asarray(lengths, np.int32),
      sequence_logprobs=np.asarray(sequence_logprobs, np.float32),
      entropies=np.zeros(totals.shape, np.float32),
      prompt_index=np.asarray(prompt_index, np.int32), members=members)


def advantages(estimator, state, on_rewards, off_rewards, off_valid, *,
               mode: str, on_extra, off_extra, prompt_index):
  """(on [P, G], off [P, K], state): the estimator's advantages of the
  fresh and replayed rows, ``split`` (apart) or ``mixed`` (together);
  `on_extra`/`off_extra` are (sequence_logprobs, lengths) of each part."""
  off_valid = np.asarray(off_valid, bool)
  g = on_rewards.shape[1]
  if mode == "split":
    on, state = estimator.estimate(state, _group_data(
        on_rewards, None, *on_extra, prompt_index))
    off, state = estimator.estimate(state, _group_data(
        off_rewards, off_valid, *off_extra, prompt_index))
    on, off = np.asarray(on, np.float32), np.asarray(off, np.float32)
  else:
    members = np.concatenate([np.ones(on_rewards.shape, bool), off_valid], 1)
    both, state = estimator.estimate(state, _group_data(
        np.concatenate([on_rewards, off_rewards], 1), members,
        *[np.concatenate([a, b], 1) for a, b in zip(on_extra, off_extra)],
        prompt_index))
    both = np.asarray(both, np.float32)
    on, off = both[:, :g], both[:, g:]
  return on, np.where(off_valid, off, 0.0).astype(np.float32), state


def estimate(added, estimator, state, groups, rnd, weights):
  """(fresh [P, G], replayed [P, K], state): the estimator's advantages
  (`advantages`) on each row's total reward; `groups` (the fresh groups'
  full view) is not read: RePO's estimate reads one reward column."""
  del groups
  on_mask = np.asarray(rnd.mask, np.float32)
  off_mask = np.asarray(added.mask, np.float32)
  seq = lambda logp, mask: (np.asarray(logp) * mask).sum(-1)
  return advantages(
      estimator, state,
      (np.asarray(rnd.rewards, np.float32)
       * np.asarray(weights, np.float32)).sum(-1),
      added.rewards, added.valid, mode=added.advantage_mode,
      on_extra=(seq(rnd.sampler_logp, on_mask), rnd.lengths),
      off_extra=(seq(added.behaviour_logp, off_mask), off_mask.sum(-1)),
      prompt_index=rnd.prompt_index)


def join(added, episodes, added_adv):
  """`episodes` (P x G fresh rows) with each group's K replay slots after
  its G members: P * (G + K) rows, a block of G + K per prompt."""
  p, k = added.valid.shape
  g = episodes.num_rows // p
  w = g + k

  def rows(fresh, off):
    fresh = np.asarray(fresh)
    fresh = fresh.reshape((p, g) + fresh.shape[1:])
    return np.concatenate([fresh, np.asarray(off).astype(fresh.dtype)],
                          axis=1).reshape((p * w,) + fresh.shape[2:])
  off_mask = np.asarray(added.mask, np.float32)
  return episodes._replace(
      tokens=rows(episodes.tokens, added.tokens),
      sample_mask=rows(episodes.sample_mask, off_mask),
      loss_mask=rows(episodes.loss_mask, off_mask),
      advantages=rows(episodes.advantages, added_adv),
      sampler_logp=rows(episodes.sampler_logp, added.behaviour_logp),
      replayed=np.tile(np.arange(w) >= g, p).astype(np.float32))


def finish(added, state, rnd, fresh_adv, *, weights, step):
  """The strategy's state after the batch: unchanged (its cache took the
  fresh round when it drew)."""
  del added, rnd, fresh_adv, weights, step
  return state


def measures(added, added_adv, adv, state) -> dict:
  """``repo/*``: the replayed rows' mean |A| and total reward."""
  del adv, state
  valid = np.asarray(added.valid, bool)
  mean = lambda x: float(np.asarray(x)[valid].mean()) if valid.any() else 0.0
  return {"repo/advantage_abs_mean_replayed": mean(np.abs(added_adv)),
          "repo/replayed_reward_mean": mean(added.rewards)}


# ------------------------------------------------------------ the config

# The GroupData fields the step fills for a cache entry too.
VIEW_FIELDS = ("valid", "lengths", "sequence_logprobs", "prompt_index",
               "members")


def check_config(c, objective) -> None:
  """ValueError ``config.<field>: problem; fix.`` unless `c`'s group
  strategy, when it adds replay rows (``extra_rows``: ``repo``), can run:
  every other stage is one this path carries (see the module doc) and the
  per-prompt cache holds the task's ids. Called by `train.validate`
  before any compute (the strategy's own option checks ran before)."""
  from grpo_jax import advantages  # pylint: disable=g-import-not-at-top
  from grpo_jax.data import prompt_ids  # pylint: disable=g-import-not-at-top
  from grpo_jax.rollout import path_checks  # pylint: disable=g-import-not-at-top
  if not extra_rows(c):
    return
  name = c.groups.name
  why = f"groups.name={name!r} adds replayed rows to each group"
  fail = path_checks.fail
  path_checks.check_fixed_budget(c, why)
  meta = advantages.meta(c.advantage.name, **c.advantage.kwargs)
  if not meta.members or meta.output != "group" or meta.input != "PG":
    fail("advantage.name", f"estimator {c.advantage.name!r} cannot score "
         f"a group's replayed rows ({why}; it must take [P, G] total "
         "rewards, give one advantage per row and honour GroupData.members)",
         "use grpo (the authors'), dr_grpo or rloo")
  path_checks.check_estimator_reads(c, why, VIEW_FIELDS)
  # Reward shapers are carried: the estimate and the cache read totals
  # over every column.
  path_checks.check_plain_stages(c, why, shapers=False)
  if objective.prepass is not None:
    fail("objective.name", f"objective {c.objective.name!r} takes "
         "statistics over the whole minibatch, which would mix the fresh "
         f"and replayed parts the loss aggregates apart ({why})",
         "use decoupled_ppo")
  options = dict(c.groups.kwargs)
  state_fn = strategies.GROUP_STRATEGIES.entry(name).meta.state
  capacity = int(options.get("capacity", inspect.signature(
      state_fn).parameters["capacity"].default))
  table = prompt_ids.Table("groups.kwargs.capacity", capacity,
                           options.get("prompt_ids", "exact"),
                           f"group strategy {name!r}")
  ids = prompt_ids.id_space(c.data, seed=c.seed)
  if ids is not None:
    if ids.duplicates:
      fail("data.path", f"{c.data.path} repeats the {prompt_ids.ID_KEY!r} "
           f"field, but {why} from a cache per prompt id",
           f"give every record a distinct {prompt_ids.ID_KEY!r}")
    prompt_ids.check_table(table, ids)
