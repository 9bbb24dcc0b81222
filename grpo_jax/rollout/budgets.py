"""The draw of a step under a budget strategy (config.budget;
`strategies.allocation`): groups of different sizes in the step's fixed N
rows, a draw stage of `rollout.generate` beside the plain [P, G] one.

The strategy decides each prompt's group size (between sampling calls, on
the host) and calls ``draw``, which samples the ragged rows
(`sampling.sample` with ``row_prompt``: each prompt is prefilled once and
each row continues its own prompt; padding rows end before their first
token) and scores the real ones. `draw` hands `rollout.generate` the rows
as an `episodes.Drawn`: the estimator sees a [P, G_max] view of them
(`ragged.scatter_view`) with `GroupData.members` marking the slots a row
fills, so it must honour members (grpo, dr_grpo, rloo: the statistics over
the real members only); its advantages are gathered back to the rows
(`ragged.gather_rows`), and credit, rows, assembly and the update run on
the N rows as for any step, each row with its own prompt (the update's
shared-prompt forward is off, `train.build`). Padding rows have an empty
loss mask, advantage 0, and enter no statistic.

What a budget draw does not carry (train.validate refuses each, naming the
field): group strategies other than ``all_groups``, member filters, reward
shapers, per-member temperatures, ReMax's greedy row, answer ids, segment
fields, SPO's revisits, HAPO's adaptive temperatures and entropy_hat, the
sampler's top-K, credit rules that read G (``num_generations``: groups
in equal blocks of rows). Each needs the field it reads computed for
ragged rows (`rollout.fields`).
"""


import jax
import numpy as np

from grpo_jax import groups as groups_lib
from grpo_jax.data import profiling
from grpo_jax import rewards as rewards_lib
from grpo_jax.rollout import episodes as episodes_lib
from grpo_jax.rollout import fields as rollout_fields
from grpo_jax.rollout import measures as rollout_measures
from grpo_jax.rollout import rounds
from grpo_jax import sampling
from grpo_jax.runtime import sharding
from grpo_jax.strategies import ragged

# Folded into the step's key for the profiling pass (sGPO, at its first
# step); draw r samples with fold_in(key, r).
_PROFILE_KEY = 0x9F0


def _score_rows(pipeline, examples, group) -> tuple:
  """Verifier rewards [R, K_v] and error counts [K_v] of the real rows
  (group >= 0; padding rows get 0 and are not scored); each process scores
  the real rows of its own block of rows, then the blocks are gathered."""
  def score(out):
    block = sharding.process_rows(group.size)
    local = np.arange(group.size)[block]
    real = local[group[local] >= 0]
    k = len(pipeline.verifiers)
    rewards = np.zeros((local.size, k), np.float32)
    errors = np.zeros((1, k), np.int64)
    if real.size:
      texts = rounds.decode_completions(
          pipeline.tokenizer, out.tokens[real], out.lengths[real])
      owners = [examples[g] for g in group[real]]
      result = rewards_lib.score(
          pipeline.verifiers, [e.question for e in owners], texts,
          [e.answer for e in owners], **pipeline.scoring._asdict())
      rewards[real - block.start] = np.asarray(result.per_function,
                                               np.float32)
      errors[0] = [result.num_errors[name] for name in pipeline.verifiers]
    return (sharding.gather_process_blocks(rewards),
            sharding.gather_process_blocks(errors).sum(axis=0))
  return score


def sample_rows(params, examples, sizes, num_rows: int, key, *,
                pipeline) -> ragged.Rows:
  """``sizes[p]`` completions of each of the P `examples` in one sampler
  call of `num_rows` rows (prompt-major, padding last), scored.

  Raises:
    ValueError: the sizes sum to more than `num_rows`.
  """
  s = pipeline.sampler
  layout = ragged.ragged_rows(np.asarray(sizes, np.int64), num_rows)
  prompt_ids = rounds.encode_prompts(
      pipeline.tokenizer, examples, format_prompt=pipeline.format_prompt,
      system_prompt=s.system_prompt)
  prompt_tokens, prompt_mask = sampling.pad_prompts(
      prompt_ids, buckets=s.prompt_buckets, pad_id=s.pad_id)
  out = sharding.to_host(sampling.sample(
      params, pipeline.model_config, prompt_tokens, prompt_mask, key,
      num_samples=1, max_new_tokens=s.max_new_tokens,
      temperature=np.full(num_rows, s.temperature, np.float32),
      top_k=s.top_k or None, top_p=s.top_p if s.top_p < 1.0 else None,
      eos_ids=s.eos_ids, pad_id=s.pad_id, row_prompt=layout.group,
      slots=s.slots or None))
  group = np.asarray(layout.group)
  verified, errors = _score_rows(pipeline, examples, group)(out)
  real = group >= 0
  owner = np.maximum(group, 0)
  index = np.asarray([e.index for e in examples], np.int32)
  mask = np.asarray(out.mask, np.float32)
  return ragged.Rows(
      group=group, prompt_index=np.where(real, index[owner], -1).astype(
          np.int32),
      prompt_ids=ragged.id_lists([prompt_ids[i] for i in owner]),
      tokens=np.asarray(out.tokens), mask=mask,
      sampler_logp=np.asarray(out.tempered_logprobs, np.float32),
      token_entropies=np.asarray(out.entropies, np.float32),
      lengths=np.asarray(out.lengths), truncated=np.asarray(out.truncated),
      entropies=rollout_fields.row_mean(out.entropies, mask),
      rewards=verified, total=(verified * pipeline.weights).sum(-1),
      columns=pipeline.columns, errors=np.asarray(errors),
      scored=int(real.sum()))


def profile_fn(params, key, pipeline):
  """``profile(indices, n, signal_reward) -> profiling.Profile``: n
  completions of each listed problem under `params`, a completion solved
  where its `signal_reward` column ("" = the first) is > 0. Each sampler
  call holds `profile_batch(N, n)` problems (at most the step's N rows;
  the last call padded, so it compiles once)."""
  def profile(indices, num_samples, signal_reward=""):
    num_rows = pipeline.num_prompts * pipeline.sampler.num_generations
    sub = pipeline._replace(sampler=pipeline.sampler._replace(
        num_generations=int(num_samples), member_temperatures=()))
    column = pipeline.columns.index(signal_reward or pipeline.columns[0])

    def solve(batch_indices, b):
      examples = [pipeline.task.example(int(i)) for i in batch_indices]
      rnd = rounds.sample_round(params, examples,
                                     jax.random.fold_in(key, b),
                                     pipeline=sub)
      return rnd.rewards[..., column] > 0
    return profiling.profile_problems(solve, indices,
                                      num_samples=int(num_samples),
                                      batch_size=profile_batch(
                                          num_rows, int(num_samples)))
  return profile


def profile_batch(num_rows: int, num_samples: int) -> int:
  """Problems per profiling call: max(1, N // n), so a call samples at
  most the step's N rows (n rows when n > N)."""
  return max(1, num_rows // num_samples)


def draw(params, step: int, key, states, *, pipeline):
  """The draw stage under the active budget stage ``budget``: the N rows
  its strategy draws, as `rollout.generate` takes them
  (`episodes.Drawn`), and the states with the budget's new one."""
  c, states = pipeline.components, dict(states)
  p = pipeline.num_prompts

  def select():
    return c["select"].select(pipeline.task, step, 0, p, **{
        name: states[name] for name in c["select"].reads})

  drawn = []  # every draw's rows, as sampled and scored

  def draw_rows(examples, sizes, rows, r):
    drawn.append(sample_rows(params, examples, sizes, rows,
                             jax.random.fold_in(key, r), pipeline=pipeline))
    return drawn[-1]

  plan, states["budget"] = c["budget"].apply(
      states["budget"], draw=draw_rows, select=select, task=pipeline.task,
      profile=profile_fn(params, jax.random.fold_in(key, _PROFILE_KEY),
                         pipeline), step=step)
  rows = plan.rows
  group = np.asarray(rows.group)
  real = group >= 0
  width = c["budget"].width
  view = lambda x: ragged.scatter_view(x, group, p, width)[0]
  rewards, members = ragged.scatter_view(rows.rewards, group, p, width)
  prompt_index = np.full(p, -1, np.int32)
  prompt_index[group[real]] = rows.prompt_index[real]
  groups = groups_lib.GroupData(
      rewards=rewards, weights=pipeline.weights,
      valid=members.any(axis=1), lengths=view(rows.lengths.astype(np.int32)),
      sequence_logprobs=view((rows.sampler_logp * rows.mask).sum(-1)),
      entropies=view(rows.entropies), prompt_index=prompt_index,
      members=members)
  per_reward = c["advantage"].input == "PGK"
  return episodes_lib.Drawn(
      groups=groups, group=group, prompt_ids=list(rows.prompt_ids),
      field=lambda name: getattr(rows, name, None),
      loss_mask=rows.mask * real[:, None], kept_rows=None, replayed=None,
      selected=None, measures=plan.measures,
      describe=lambda adv, batch: describe_rows(
          rows, adv, batch, pipeline, num_prompts=p, sampled=drawn,
          per_reward=per_reward)), states


def describe_rows(rows: ragged.Rows, adv, batch, pipeline, *,
                  num_prompts: int, sampled=(), per_reward: bool = False
                  ) -> dict:
  """The step's measurements, `rollout.measures.describe`'s names defined
  alike.

  Rewards, lengths, truncation and ``advantage/collapse_rate`` describe
  every row sampled and scored this step (`sampled`: each draw's rows, the
  step's prompt p being group p in every draw; Pilot-Commit's skipped
  pilots included), as the fixed path describes its plain sample; a row
  mean weights a prompt by the rows it drew. The advantage figures and
  ``rollout/nonzero_gradient_share``
  (`rollout.measures.nonzero_gradient_share`)
  are over the trained real rows of `rows`; ``budget/reward/*`` and
  ``budget/collapse_rate`` are those rows' and groups' view, and
  ``rollout/groups_with_signal`` is the share of the step's P prompts whose
  trained rows have signal, as on the fixed path (the batch's groups that
  train and have signal)."""
  group = np.asarray(rows.group)
  real = group >= 0
  weights = np.asarray(pipeline.weights)
  every = ragged.join_rows(list(sampled), sum(
      np.asarray(d.group).size for d in sampled)) if sampled else rows
  every_group = np.asarray(every.group)
  every_real = every_group >= 0

  def over(x, where):
    return float(np.asarray(x)[where].sum() / max(int(where.sum()), 1))

  def signal(part):
    """([P] groups with signal, [P] groups drawn) of `part`'s rows."""
    part_group = np.asarray(part.group)
    sizes = ragged.group_sizes(part_group, num_prompts)
    view, members = ragged.scatter_view(part.rewards, part_group,
                                        num_prompts, max(int(sizes.max()), 1))
    return np.asarray(groups_lib.has_signal(
        view, weights, per_reward=per_reward, members=members)), sizes > 0

  def collapse(part):  # as groups_lib.collapse_rate, over drawn groups
    has, drawn = signal(part)
    return float((drawn & ~has).sum() / max(int(drawn.sum()), 1))

  # |A| of each row; token advantages as the mean over its sampled tokens
  # (in the batch's input mask: rows.mask).
  row_adv = rollout_measures.row_abs_mean(adv, batch)
  lengths = np.asarray(every.lengths)
  m = {
      "reward/total": over(every.total, every_real),
      "advantage/collapse_rate": collapse(every),
      "advantage/abs_mean": over(row_adv, real),
      "completion_length/mean": over(lengths, every_real),
      "completion_length/max": float(lengths[every_real].max(initial=0)),
      "truncation_rate": over(every.truncated, every_real),
      "rollout/rounds": 1.0,
      # Over all P prompts: one without trained rows has no signal.
      "rollout/groups_with_signal": float(signal(rows)[0].mean()),
      "rollout/loss_tokens": float(np.asarray(batch.completion_mask).sum()),
      "rollout/nonzero_gradient_share":
          rollout_measures.nonzero_gradient_share(row_adv, real),
      "reward/scored": float(every.scored),
      "budget/reward/total": over(rows.total, real),
      "budget/collapse_rate": collapse(rows),
  }
  for k, name in enumerate(rows.columns):
    m[f"reward/{name}"] = over(np.asarray(every.rewards)[:, k], every_real)
    m[f"budget/reward/{name}"] = over(np.asarray(rows.rewards)[:, k], real)
  for k, name in enumerate(rows.columns[:len(every.errors)]):
    m[f"reward_errors/{name}"] = float(every.errors[k])
  if batch.old_logp is not None:
    m["logprob/sampler_trainer_max_abs_diff"] = (
        rollout_measures.sampler_trainer_gap(batch))
  if "accuracy" in rows.columns:
    m["accuracy"] = m["reward/accuracy"]
  return m


# ------------------------------------------------------------ the config

# The GroupData fields the view fills (an estimator reading another one
# cannot run on ragged groups).
VIEW_FIELDS = ("valid", "lengths", "sequence_logprobs", "entropies",
               "prompt_index", "members")


def check_config(c) -> None:
  """ValueError ``config.<field>: problem; fix.`` unless `c`'s budget stage
  (config.budget) can run: its options fit the N rows, and every other
  stage is one this path carries (see the module doc). Called by
  `train.validate` before any compute."""
  from grpo_jax import advantages, strategies  # pylint: disable=g-import-not-at-top
  from grpo_jax.rollout import path_checks  # pylint: disable=g-import-not-at-top
  fail = path_checks.fail

  b, r = c.budget, c.rollout
  if b.name not in strategies.BUDGETS:
    fail("budget.name", f"{b.name!r} is unknown",
         f"choose one of {', '.join(strategies.BUDGETS.names())}")
  try:
    budget = strategies.make_budget(
        b.name, num_prompts=int(r.num_prompts),
        num_rows=int(r.num_prompts * r.num_generations), **b.kwargs)
  except ValueError as e:  # "n_min=5 ...": name the option's field
    option = str(e).split("=")[0]
    field = ("budget.kwargs." + option if option in strategies.BUDGETS.options(
        b.name) else "budget.kwargs")
    fail(field, str(e).rstrip("."), f"see --config.{field}")
  if not budget.active:
    return
  why = f"budget.name={b.name!r} draws groups of different sizes"
  if not advantages.meta(c.advantage.name).members:
    fail("advantage.name", f"estimator {c.advantage.name!r} cannot take "
         f"ragged groups ({why}; the estimator must honour "
         "GroupData.members)", "choose one that does: " + ", ".join(
             n for n in advantages.names() if advantages.meta(n).members))
  path_checks.check_estimator_reads(c, why, VIEW_FIELDS)
  plain = {"groups.name": (c.groups.name, "all_groups"),
           "select.name": (c.select.name, "uniform")
                          if budget.picks_prompts else None}
  for field, pair in plain.items():
    if pair is not None and pair[0] != pair[1]:
      fail(field, f"{pair[0]!r} cannot run with {why}"
           + (" and picks its own prompts" if field == "select.name" else ""),
           f"set --config.{field}={pair[1]}, or budget.name=fixed")
  # Credit rules of the row's own tokens run on its rows; those that read
  # G (equal groups in blocks of rows) cannot.
  path_checks.check_plain_stages(
      c, why, rows=False, credit_reads=("token_entropies", "tokens",
                                        "rewards"),
      fix=", or budget.name=fixed")
  signal = b.kwargs.get("signal_reward", "")
  columns = rewards_lib.column_names(c.rewards.functions)
  if signal and signal not in columns:
    fail("budget.kwargs.signal_reward", f"{signal!r} is not a configured "
         "reward", f"choose one of {', '.join(columns)}, or '' for "
         f"{columns[0]!r}")
  # budget.kwargs.capacity against the task's ids (any task, exact or
  # hashed): `checks.check_prompt_ids`, from
  # `rollout.checks.check_tracker_stages`.
  if c.data.task == "segments":
    fail("data.task", f"'segments' cannot look a problem up by its index "
         f"({why})", "use data.task='arithmetic', 'gsm8k' or 'jsonl'")
