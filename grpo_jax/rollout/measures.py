"""A step's rollout measurements, on the host after its batch is assembled.

`describe` gives the plain P x G path's (`rollout.generate`): rewards,
lengths, truncation and collapse of the step's plain sample, the
advantages over the rows that train, reward errors, shaping, and the
sampler/trainer log-prob gap. `describe_fresh` gives it for a batch with
replayed rows (RePO's, the replay buffer's: `Batch.replayed`) on its fresh
rows. The budget path (`rollout.budgets.describe_rows`) defines the same
names alike with the pieces here: `row_abs_mean`,
`nonzero_gradient_share`, `sampler_trainer_gap`.

Imports `rollout.fields`, never `rollout` (which imports this module).
"""

import jax
import numpy as np

from grpo_jax.train import batch as batch_lib
from grpo_jax import groups as groups_lib
from grpo_jax.rollout import fields as rollout_fields
from grpo_jax import strategies


def nonzero_gradient_share(row_abs, trained) -> float:
  """The share of the trained rows (`trained` [N] bool: real, in a valid
  group, kept by any filter) whose advantage is not 0 (`row_abs` [N], the
  row's |advantage| or its tokens' mean); 0 when none trains."""
  trained = np.asarray(trained, bool)
  return float((np.asarray(row_abs)[trained] > 0).sum()
               / max(int(trained.sum()), 1))


def row_abs_mean(adv, batch) -> np.ndarray:
  """[N] |advantage| per row: [N] as is, [N, T] averaged over the batch's
  sampled tokens (the completion part of ``batch.input_mask``)."""
  adv = np.abs(np.asarray(adv))
  if adv.ndim == 1:
    return adv
  mask = np.asarray(batch.input_mask)[:, -adv.shape[1]:]
  return (adv * mask).sum(-1) / np.maximum(mask.sum(-1), 1.0)


def sampler_trainer_gap(batch, excluded=None) -> float:
  """``logprob/sampler_trainer_max_abs_diff``: max |old_logp -
  sampler_logp| over the batch's sampled tokens (`batch.sampler_mismatch`),
  the rows of `excluded` ([N] bool: sampled by an older policy) left out.
  Off policy only (on policy ``old_logp`` is None and the update measures
  it)."""
  sampled = np.asarray(batch.input_mask)[:, -batch.old_logp.shape[1]:]
  if excluded is not None:
    sampled = sampled * ~np.asarray(excluded, bool)[:, None]
  return float(batch_lib.sampler_mismatch(np.asarray(batch.old_logp),
                                          np.asarray(batch.sampler_logp),
                                          sampled))


def describe(selected: strategies.Selected, adv, batch, pipeline, *,
             estimator, members=None, kept_rows=None) -> dict:
  """The rollout's measurements (`pipeline`: the `rollout.Pipeline`).
  Rewards, lengths and collapse describe the step's plain sample (round
  0), so that they compare across configs with and without a group
  strategy that samples again (or injects reference rows: the round as
  sampled, `Round.sampled`). A member filter's kept members (`members`
  [P, G], the estimator's view; `kept_rows` [N], the rows that train)
  narrow collapse and the advantage figures to them.

  ``advantage/collapse_rate`` (the plain sample's groups without signal)
  and ``rollout/groups_with_signal`` (the batch's groups that train and
  have signal) are one test, `groups.has_signal` under the estimator's
  weights: on the plain path they add up to 1. A group strategy makes the
  batch another set of groups: dynamic sampling keeps groups whose own
  signal reward varies (DAPO's: the accuracy), and leaves fillers that do
  not train, so a plain sample whose shaped total varies in half its
  groups (collapse 0.5) may still give a batch without signal (0)."""
  first = selected.rounds[0].sampled or selected.rounds[0]
  g = pipeline.sampler.num_generations
  valid = np.asarray(selected.valid)
  weights = pipeline.weights
  per_reward = estimator.input == "PGK"
  picked = rollout_fields.gather(selected, "rewards")  # the batch's groups
  if members is None:
    collapse = groups_lib.collapse_rate(first.rewards, weights,
                                        per_reward=per_reward)
  else:  # the kept members of the step's groups, as the estimator saw
    members = np.asarray(members, bool)
    collapse = groups_lib.collapse_rate(picked, weights,
                                        per_reward=per_reward,
                                        members=members)
  batch_signal = valid & np.asarray(groups_lib.has_signal(
      picked, weights, per_reward=per_reward, members=members))
  # The rows that train: the valid groups' (fillers' advantages are 0 and
  # do not count), a filter's kept members only.
  trained = np.repeat(valid, g)
  if kept_rows is not None:
    trained = trained & np.asarray(kept_rows, bool)
  row_abs = row_abs_mean(adv, batch)
  m = {
      "reward/total": float((first.rewards * weights).sum(-1).mean()),
      # Groups without signal as the estimator sees them: advantages 0.
      "advantage/collapse_rate": float(collapse),
      # Token-level advantages as each row's mean over its tokens.
      "advantage/abs_mean": float(row_abs[trained].sum()
                                  / max(trained.sum(), 1)),
      # Rows that move the policy (`nonzero_gradient_share`; the budget
      # path's is defined alike).
      "rollout/nonzero_gradient_share": nonzero_gradient_share(row_abs,
                                                               trained),
      "completion_length/mean": float(first.lengths.mean()),
      "completion_length/max": float(first.lengths.max()),
      "truncation_rate": float(first.truncated.mean()),
      "rollout/rounds": float(len(selected.rounds)),
      # The batch's groups that train (fillers do not) and have signal.
      "rollout/groups_with_signal": float(batch_signal.mean()),
      "rollout/loss_tokens": float(np.asarray(batch.completion_mask).sum()),
  }
  for k, name in enumerate(first.columns):
    m[f"reward/{name}"] = float(first.rewards[..., k].mean())
  for k, name in enumerate(first.columns[:len(first.errors)]):
    m[f"reward_errors/{name}"] = float(
        sum(rnd.errors[k] for rnd in selected.rounds))
  # What each shaper's column did to the plain sample's rows.
  for k, name in enumerate(pipeline.shapers, start=len(pipeline.verifiers)):
    column = first.rewards[..., k]
    m[f"shaping/{name}/mean"] = float(column.mean())
    m[f"shaping/{name}/abs_mean"] = float(np.abs(column).mean())
    m[f"shaping/{name}/changed"] = float((column != 0).mean())
  # Every completion of every round, as the errors count: a function failed
  # on all of them when its errors equal this.
  m["reward/scored"] = float(sum(
      rnd.lengths.size + (0 if rnd.greedy_rewards is None
                          else rnd.greedy_rewards.shape[0])
      # A round with reference rows had one scored per prompt.
      + (0 if rnd.injected is None else rnd.injected.shape[0])
      for rnd in selected.rounds))
  if any(rnd.injected is not None for rnd in selected.rounds):
    # EDGE-GRPO's guided correction: the share of the batch's groups that
    # got a reference row.
    m["rollout/corrected_groups"] = float(np.mean([
        selected.rounds[r].injected is not None
        and selected.rounds[r].injected[i].any() for r, i in selected.picks]))
  if first.greedy_rewards is not None:
    m["reward/greedy_total"] = float((first.greedy_rewards * weights)
                                     .sum(-1).mean())
  if batch.old_logp is not None:  # on policy the update measures it
    # Rows refilled from a buffer were sampled by an older policy.
    m["logprob/sampler_trainer_max_abs_diff"] = sampler_trainer_gap(
        batch, np.repeat(rollout_fields.replayed_groups(selected), g))
  if "accuracy" in first.columns:
    m["accuracy"] = m["reward/accuracy"]
  return m


def describe_fresh(selected: strategies.Selected, adv, batch, pipeline, *,
                   estimator) -> dict:
  """`describe` of a batch with replayed rows beside the round's
  (``Batch.replayed`` [N], 1 on them: RePO's, the replay buffer's): the
  round's own measurements on its fresh rows (the plain sample), and
  ``rollout/loss_tokens`` over every row that trains."""
  fresh = np.flatnonzero(np.asarray(batch.replayed) == 0)
  fresh_batch = jax.tree.map(lambda x: np.asarray(x)[fresh], batch)
  m = describe(selected, np.asarray(adv)[fresh], fresh_batch, pipeline,
               estimator=estimator)
  m["rollout/loss_tokens"] = float(np.asarray(batch.completion_mask).sum())
  return m
