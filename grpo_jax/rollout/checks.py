"""Config checks that cross two or more registered stages: what one stage
needs from another (the estimator from the task, the group size, the
rewards and the member filter; a selection or group strategy from the
estimator; corrections and a credit rule from the objective; the train
split from the rows a group strategy adds), each refused before any compute
with ``config.<field>: problem; fix.``.

`train.validate` is the single entry point and calls them in order;
`config` keeps the checks of single fields and `rollout.path_checks` those of the
step paths whose rows are not P x G groups. Apart because each reads
several registries' metadata (imported late: configs stay importable
without jax) and they grow with every stage.
"""

import functools
import inspect
from typing import Sequence

import ml_collections

from grpo_jax.config import errors as config_errors
from grpo_jax import data
from grpo_jax.data import prompt_ids

_fail = config_errors.fail
_check_choice = config_errors.check_choice
_check_component = config_errors.check_component


def check_sampling_stages(c, columns) -> None:
  """The select, groups, credit and rows stages: known names and each one's
  options (the group strategy's against the rollout's layout, the
  selection's against its rounds per step), and the reward column
  (`columns`) a group strategy reads its signal from."""
  from grpo_jax import credit, rollout, strategies  # pylint: disable=g-import-not-at-top
  for stage, known in (("select", strategies.SELECTIONS),
                       ("groups", strategies.GROUP_STRATEGIES),
                       ("credit", credit.CREDIT),
                       ("rows", strategies.ROW_STRATEGIES)):
    _check_choice(f"{stage}.name", c[stage].name, known.names())
  groups = _check_component(
      "groups.kwargs", functools.partial(strategies.make_group_strategy,
                                         layout=rollout.group_layout(c)),
      c.groups.name, c.groups.kwargs)
  _check_component("select.kwargs", strategies.make_selection, c.select.name,
                   dict(c.select.kwargs,
                        rounds_per_step=groups.rounds_per_step))
  # Option names and values, as config.credit.kwargs.<option>.
  credit.check_options(c.credit.name, dict(c.credit.kwargs),
                       field="config.credit.kwargs")
  _check_component("credit.kwargs", credit.make, c.credit.name,
                   c.credit.kwargs)
  _check_component("rows.kwargs", strategies.make_row_strategy, c.rows.name,
                   c.rows.kwargs)
  signal = c.groups.kwargs.get("signal_reward", "")
  if signal and signal not in columns:
    _fail("groups.kwargs.signal_reward", f"{signal!r} is not a configured "
          "reward", f"choose one of {', '.join(columns)}, or '' for "
          f"{columns[0]!r}")


def check_member_filter(c, advantages, columns) -> None:
  """The member filter's options against G' and the reward `columns`; one
  whose statistics are over the kept members needs an estimator that
  honours GroupData.members."""
  from grpo_jax import strategies  # pylint: disable=g-import-not-at-top
  r = c.rollout
  _check_choice("filter.name", c.filter.name,
                strategies.MEMBER_FILTERS.names())
  member_filter = _check_component(
      "filter.kwargs", functools.partial(
          strategies.make_member_filter, group_size=r.num_generations,
          columns=columns), c.filter.name, c.filter.kwargs)
  if (member_filter.statistics == "kept"
      and not advantages.meta(c.advantage.name).members):
    _fail("advantage.name", f"{c.advantage.name!r} does not honour the kept "
          f"members of filter {c.filter.name!r} (GroupData.members: its "
          "mean and std over the kept subset)", "choose one that does: "
          f"{', '.join(advantages.honouring_members())}")


def check_estimator_inputs(c, advantages, columns) -> None:
  """What the estimator reads against what the task and the reward
  `columns` give."""
  from grpo_jax import rewards  # pylint: disable=g-import-not-at-top
  # Group data only some tasks give: per-segment rewards (SD-GRPO).
  segment_reads = [f for f in advantages.meta(c.advantage.name).reads
                   if f.startswith("segment_")]
  if segment_reads and not data.TASKS.entry(c.data.task).meta.segments:
    with_segments = [n for n in data.TASKS.names()
                     if data.TASKS.entry(n).meta.segments]
    _fail("data.task", f"{c.data.task!r} gives no per-segment rewards, but "
          f"advantage estimator {c.advantage.name!r} reads GroupData."
          f"{segment_reads[0]}", "set --config.data.task="
          f"{' or '.join(with_segments)} (problems of several parts, one "
          "\\boxed{} answer each), or pick an estimator that reads no "
          "segments")
  # The estimator's needs (its reward domain, a number of reward columns)
  # against the rewards' declared ranges: here, not in the jitted step.
  try:
    advantages.check_reward_columns(
        c.advantage.name, dict(c.advantage.kwargs), columns=columns,
        weights=tuple(c.rewards.weights) + tuple(
            options["weight"] for options in c.rewards.shapers.values()),
        ranges=rewards.column_ranges(c.rewards.functions, c.rewards.shapers))
  except ValueError as e:
    raise config_errors.ConfigError(
        f"config.advantage: {str(e).rstrip('.')}.") from None


def _option_values(fns, kwargs) -> dict:
  """The keyword defaults of `fns`' signatures, overridden by `kwargs`."""
  values = {}
  for fn in fns:
    for key, p in inspect.signature(fn).parameters.items():
      if p.default is not inspect.Parameter.empty:
        values[key] = p.default
  values.update(kwargs)
  return values


def check_estimator_sizes(c, advantages) -> None:
  """Sizes an estimator's options must fit, before any compute: bundles of
  questions (``bundle_size``, RiskPO) split the P prompts; an offline
  initialisation (SPO's ``offline_init``) looks each training problem up by
  its index. (Option values alone: the estimator's ``check``, run by
  `advantages.make` in `train.validate`.)"""
  name = c.advantage.name
  spec = advantages.meta(name).state
  fns = [advantages.get(name)] + ([spec.init] if spec is not None else [])
  options = _option_values(fns, dict(c.advantage.kwargs))
  bundle = options.get("bundle_size")
  if bundle is not None and c.rollout.num_prompts % bundle:
    _fail("advantage.kwargs.bundle_size",
          f"{bundle} does not divide rollout.num_prompts="
          f"{c.rollout.num_prompts} (estimator {name!r} bundles the "
          "prompts of a batch)",
          "set a divisor of num_prompts, or change rollout.num_prompts")
  if spec is not None and spec.offline is not None:  # SPO's offline_init
    if options.get("offline_init") and c.data.task == "segments":
      _fail("data.task", "'segments' cannot look a problem up by its index "
            "(advantage.kwargs.offline_init profiles every training "
            "problem)", "use data.task='arithmetic', 'gsm8k' or 'jsonl', "
            "or offline_init=0")
  # A per-prompt table (``capacity``) against the task's ids: in
  # `check_tracker_stages` (`check_prompt_ids`).


def check_group_size(c, advantages) -> None:
  """G = ``rollout.num_generations`` against the fewest members the
  estimator needs for a nonzero advantage (metadata ``min_group_size``):
  below it every advantage of the run is 0, so nothing trains. Ragged
  groups (an active budget stage) and RePO's replay rows beside each group
  change the groups the estimator sees: their own checks hold them."""
  from grpo_jax import strategies  # pylint: disable=g-import-not-at-top
  from grpo_jax.rollout import layout  # pylint: disable=g-import-not-at-top
  g, name = c.rollout.num_generations, c.advantage.name
  needed = advantages.meta(name, **c.advantage.kwargs).min_group_size
  if (g >= needed or strategies.BUDGETS.entry(c.budget.name).meta.active
      or layout.step_rows(c).extra_per_group):
    return
  own_baseline = [n for n in advantages.names()
                  if advantages.meta(n).min_group_size <= g]
  _fail("rollout.num_generations", f"{g} gives groups of {g}, and estimator "
        f"{name!r} forms its baseline from a group's own rewards (it needs "
        f"{needed} or more): every advantage would be 0 for the whole run",
        f"set --config.rollout.num_generations={max(needed, 2)} or more, or "
        f"use an estimator with a baseline of its own: "
        f"{', '.join(own_baseline)}")


def _check_no_sampler_records(c, top_k: str, temperatures: str) -> None:
  """Rows a group strategy puts in without the sampler's records of them
  (`top_k`, `temperatures`: what such a row lacks, for the message)."""
  if c.rollout.get("record_topk", 0):
    _fail("rollout.record_topk", f"{top_k} (groups.name={c.groups.name!r})",
          "set rollout.record_topk=0")
  if c.rollout.get("temperature_tau", 0.0):
    _fail("rollout.temperature_tau",
          f"{temperatures} (groups.name={c.groups.name!r})",
          "set rollout.temperature_tau=0")


def check_tracker_stages(c, advantages) -> None:
  """What a selection that reads the estimator's state (SPO's prioritised
  draw) and a group strategy that injects reference rows (EDGE-GRPO's
  guided correction) need from the other stages, before any compute; the
  registries' metadata says which entries these are."""
  from grpo_jax import strategies  # pylint: disable=g-import-not-at-top
  select = strategies.SELECTIONS.entry(c.select.name).meta
  groups = strategies.GROUP_STRATEGIES.entry(c.groups.name).meta
  by_state = "advantage" in select.reads
  references = "reference" in groups.reads
  if by_state:
    state = advantages.make(c.advantage.name, **c.advantage.kwargs).init()
    needs = select.needs
    if not all(hasattr(state, field) for field in needs):
      _fail("select.name", f"{c.select.name!r} draws by the estimator's "
            f"per-prompt tracker ({', '.join(needs)}), which "
            f"advantage.name={c.advantage.name!r} does not keep",
            "set --config.advantage.name=spo, or select.name=uniform")
  if (by_state or references) and c.data.task == "segments":
    _fail("data.task", "'segments' cannot look a problem up by its index "
          f"(select {c.select.name!r}, groups {c.groups.name!r})",
          "use data.task='arithmetic', 'gsm8k' or 'jsonl'")
  meta = advantages.meta(c.advantage.name, **c.advantage.kwargs)
  if "divergence" in meta.reads and (meta.prompt_ids or "exact") != "exact":
    # The revisit memory keeps one response per slot (revisits.make).
    _fail("advantage.kwargs.prompt_ids", f"{meta.prompt_ids!r} lets ids "
          "share a slot, and the revisit memory that measures "
          f"{c.advantage.name!r}'s divergence would rescore another "
          "prompt's stored response under this one",
          "set prompt_ids='exact' (capacity above the task's largest id), "
          "or rho='constant'")
  # Per-prompt tables against the task's ids (exact or hashed, by each
  # entry's ``prompt_ids`` metadata), distinct ids where a stage keys on
  # them, and enough problems for a draw without replacement; any task.
  check_prompt_ids(c, by_id=[
      f"{stage} {name!r}" for stage, name, used in (
          ("select", c.select.name, by_state),
          ("groups", c.groups.name, references)) if used])
  if not references:
    return
  if c.rewards.shapers:
    _fail("rewards.shapers", "reference rows are scored by the verifiers "
          f"alone (groups.name={c.groups.name!r})",
          "remove the shapers, or use another group strategy")
  _check_no_sampler_records(c, "a reference row has no sampler top-K",
                            "a reference row has no sampling temperatures")
  reads = advantages.meta(c.advantage.name, **c.advantage.kwargs).reads
  stale = [f for f in reads if f == "answer_ids" or f.startswith("segment_")]
  if stale:
    _fail("groups.name", f"{c.groups.name!r} replaces rows, but estimator "
          f"{c.advantage.name!r} reads GroupData.{stale[0]}, which is not "
          "rebuilt for them", "choose another estimator or group strategy")


def check_resampled_stages(c, advantages) -> None:
  """A group strategy that hints from worked solutions (metadata
  ``solutions``: GHPO) needs a task that gives them; one that builds a
  group from rows of several rounds (``moves_rows``: AERO) needs rows that
  carry no member slot or group context. Keyed on registry metadata."""
  from grpo_jax import rewards  # pylint: disable=g-import-not-at-top
  from grpo_jax import strategies  # pylint: disable=g-import-not-at-top
  name = c.groups.name
  meta = strategies.GROUP_STRATEGIES.entry(name).meta
  if meta.solutions and not data.TASKS.entry(c.data.task).meta.solutions:
    with_solutions = [n for n in data.TASKS.names()
                      if data.TASKS.entry(n).meta.solutions]
    _fail("data.task", f"{c.data.task!r} gives no worked reference solution "
          f"(data.Example.solution), which groups.name={name!r} hints from",
          f"set --config.data.task={' or '.join(with_solutions)}, or use "
          "another group strategy")
  if "resample" in meta.reads and advantages.meta(
      c.advantage.name, **c.advantage.kwargs).state is not None:
    # (Stateful shapers fold in the plain round 0 alone: rollout.generate.)
    _fail("advantage.name", f"{c.advantage.name!r} keeps state that would "
          f"fold in the groups groups.name={name!r} draws again (hinted or "
          "rebuilt from extra draws), not the policy's plain sample",
          "use a stateless estimator (grpo), or another group strategy")
  if not meta.moves_rows:
    return
  g = c.rollout.num_generations
  max_group = c.groups.kwargs.get("max_group", 0)
  if g < 2 or (max_group and max_group <= g):
    _fail("groups.kwargs.max_group" if g >= 2 else "rollout.num_generations",
          f"groups.name={name!r} grows groups of G={g} up to max_group="
          f"{max_group or 'G x max_rounds'}, and needs G >= 2 and "
          "max_group > G", "set num_generations >= 2 and max_group > "
          "num_generations (or 0)")
  if len(c.rollout.member_temperatures):
    _fail("rollout.member_temperatures", f"groups.name={name!r} moves rows "
          "between member slots, and each slot samples at its own "
          "temperature", "set rollout.member_temperatures=()")
  reads = advantages.meta(c.advantage.name, **c.advantage.kwargs).reads
  if "answer_ids" in reads:
    _fail("advantage.name", f"{c.advantage.name!r} reads GroupData."
          f"answer_ids, numbered within one round's group, and "
          f"groups.name={name!r} joins rows of several rounds",
          "choose another estimator or group strategy")
  for shaper in c.rewards.shapers:
    if "group_size" in rewards.SHAPERS.entry(shaper).meta.reads:
      _fail(f"rewards.shapers.{shaper}", "forms statistics over each "
            f"round's group, and groups.name={name!r} joins rows of several "
            "rounds", "remove it, or use another group strategy")


def check_replay_stages(c, objective, advantages) -> None:
  """A group strategy that refills groups from a buffer of earlier steps
  (registry metadata ``replays``: POPO) trains them through an objective
  that weighs each row by its own behaviour log-probs, and rebuilds only
  the fields it stores."""
  from grpo_jax import strategies  # pylint: disable=g-import-not-at-top
  name = c.groups.name
  if not strategies.GROUP_STRATEGIES.entry(name).meta.replays:
    return
  if not objective.behaviour_weight:
    _fail("objective.name", f"{c.objective.name!r} does not weigh rows by "
          f"the behaviour policy's log-probs, which groups.name={name!r} "
          "replays from earlier steps (stale rows would train as on-policy)",
          "set --config.objective.name=decoupled_ppo (is_cap=2.0)")
  _check_no_sampler_records(c, "a replayed group keeps no sampler top-K",
                            "a replayed group keeps no per-token temperatures")
  meta = advantages.meta(c.advantage.name, **c.advantage.kwargs)
  stale = [f for f in meta.reads if f in ("answer_ids", "greedy_rewards",
                                          "divergence")
           or f.startswith("segment_")]
  if stale:
    _fail("advantage.name", f"{c.advantage.name!r} reads GroupData."
          f"{stale[0]}, which groups.name={name!r} does not store for a "
          "replayed group", "use grpo, dr_grpo or rloo")
  if meta.state is not None:
    _fail("advantage.name", f"{c.advantage.name!r} keeps state that would "
          "fold in a replayed group's rewards a second time "
          f"(groups.name={name!r})", "use a stateless estimator (grpo)")


def check_corrections(c, objective) -> None:
  """``corrections``: known names, each one's options (its own checks), and
  whether the objective's loss takes their weights."""
  from grpo_jax.objectives import corrections  # pylint: disable=g-import-not-at-top
  if not isinstance(c.corrections, (dict, ml_collections.ConfigDict)):
    _fail("corrections", f"{c.corrections!r} is not a mapping of names to "
          "options", "e.g. --config.corrections='{\"tis\": {}}'")
  known = corrections.names()
  records = []
  for name, options in c.corrections.items():
    field = f"corrections.{name}"
    if name not in known:
      _fail(field, f"correction {name!r} is unknown",
            f"choose from {', '.join(known)}")
    if not isinstance(options, (dict, ml_collections.ConfigDict)):
      _fail(field, f"{options!r} is not a mapping of options",
            f"give {{}} for the defaults, e.g. --config.corrections="
            f"'{{\"{name}\": {{}}}}'")
    records.append(_check_component(field, corrections.make, name,
                                    dict(options)))
  try:
    corrections.check_compatible(objective, records)
  except ValueError as e:
    _fail("corrections", str(e).rstrip("."),
          "drop it from --config.corrections or change "
          "--config.objective.name")


def check_credit(c, objective, advantages) -> None:
  """A token credit rule against the estimator (a rule that reads the
  rows' signs needs [N] advantages) and the objective (a sequence-level one
  averages token advantages over each row, undoing the rule)."""
  from grpo_jax import credit  # pylint: disable=g-import-not-at-top
  name = c.credit.name
  if credit.meta(name).identity:
    return
  output = advantages.ESTIMATORS.entry(c.advantage.name).meta.output
  if credit.meta(name).row_advantages and output == "token":
    _fail("credit.name", f"credit rule {name!r} needs one advantage per row, "
          f"but estimator {c.advantage.name!r} gives token advantages",
          "pick a group-level estimator (e.g. advantage.name=grpo) or "
          "credit.name=uniform")
  if objective.level == "sequence":
    _fail("credit.name", f"credit rule {name!r} gives each token its own "
          f"advantage, but objective {c.objective.name!r} is sequence-level "
          "and averages them over each row", "pick a token-level objective "
          "(e.g. objective.name=ppo_clip) or credit.name=uniform")


def check_objective_inputs(c, objective) -> None:
  """Sampler records the objective reads (top-K log-probs, per-token
  temperatures) against the rollout settings that record them."""
  from grpo_jax import objectives  # pylint: disable=g-import-not-at-top
  r = c.rollout
  if "sampler_topk_logp" in objective.reads and not r.record_topk:
    _fail("rollout.record_topk", f"is 0, but objective {c.objective.name!r} "
          "reads the sampler's top-K log-probs (sampler_topk_ids, "
          "sampler_topk_logp), which the run then does not record",
          "set --config.rollout.record_topk=K > 0 (e.g. 20), or use a "
          "binary form (objective.name=dppo)")
  requires = objectives.OBJECTIVES.entry(c.objective.name).meta.requires
  if "token_temperatures" in requires and not r.temperature_tau > 0:
    _fail("rollout.temperature_tau", f"is {r.temperature_tau!r}, but "
          f"objective {c.objective.name!r} needs the sampler's per-token "
          "temperatures (HAPO samples each token at an entropy-adaptive "
          "temperature), which the run then does not record",
          "set --config.rollout.temperature_tau=0.05 (HAPO's)")


def check_row_split(c) -> None:
  """The N rows of a step (with RePO's K extra rows per group and row
  replay's R stored rows) against the train split: minibatches,
  microbatches (whole for an objective that draws over the minibatch,
  Clip-Cov's) and log-prob batches."""
  from grpo_jax import objectives  # pylint: disable=g-import-not-at-top
  from grpo_jax.rollout import layout  # pylint: disable=g-import-not-at-top
  t = c.train
  step = layout.step_rows(c)
  extra, replayed, rows = step.extra_per_group, step.replayed, step.total
  if rows % t.num_minibatches:
    _fail("train.num_minibatches",
          f"{t.num_minibatches} does not divide the N={rows} rows of a step "
          f"(num_prompts * num_generations"
          + (f", + {extra} replay rows per group" if extra else "")
          + (f", + {replayed} replayed rows)" if replayed else ")"),
          "choose a divisor of N")
  minibatch = rows // t.num_minibatches
  micro = t.microbatch_size or minibatch
  if minibatch % micro:
    _fail("train.microbatch_size",
          f"{micro} does not divide the minibatch of {minibatch} rows",
          "choose a divisor of the minibatch, or 0 for no accumulation")
  # Clip-Cov's random draw keys each token by its place in the minibatch.
  whole = objectives.OBJECTIVES.entry(c.objective.name).meta.whole_minibatch
  if micro < minibatch and (whole(**dict(c.objective.kwargs))
                            if callable(whole) else whole):
    _fail("train.microbatch_size",
          f"{micro} splits the minibatch of {minibatch} rows, but objective "
          f"{c.objective.name!r} draws over the whole minibatch's tokens",
          "set --config.train.microbatch_size=0, or "
          "--config.objective.kwargs.clip_cov_rule=top")
  if t.logprob_batch_size and rows % t.logprob_batch_size:
    _fail("train.logprob_batch_size",
          f"{t.logprob_batch_size} does not divide the N={rows} rows",
          "choose a divisor of N, or 0 for all rows")


# ------------------------------------------ per-prompt tables and ids


def _tables(c) -> list:
  """The config's per-prompt tables, by the registries' ``prompt_ids``
  metadata (a mode, or a function of the entry's options giving one)."""
    
  def declared(meta, options):
    mode = meta.prompt_ids
    return mode(**options) if callable(mode) else mode

  def capacity(init, options):
    default = inspect.signature(init).parameters["capacity"].default
    return int(options.get("capacity", default))

  from grpo_jax import advantages  # pylint: disable=g-import-not-at-top
  from grpo_jax.rewards import shapers as shapers_lib  # pylint: disable=g-import-not-at-top
  tables = []
  name, options = c.advantage.name, dict(c.advantage.kwargs)
  entry = advantages.ESTIMATORS.entry(name)
  mode = declared(entry.meta, options)
  if mode:
    tables.append(prompt_ids.Table("advantage.kwargs.capacity",
                        capacity(entry.meta.state.init, options), mode,
                        f"estimator {name!r}"))
  for name, options in c.rewards.shapers.items():
    options = {k: v for k, v in dict(options).items() if k != "weight"}
    entry = shapers_lib.SHAPERS.entry(name)
    mode = declared(entry.meta, options)
    if mode:
      tables.append(prompt_ids.Table(f"rewards.shapers.{name}.capacity",
                          capacity(entry.meta.state.init, options), mode,
                          f"shaper {name!r}"))
  tables += _budget_tables(c, declared, capacity)
  return tables


def _budget_tables(c, declared, capacity) -> list:
  """The budget stage's table (Knapsack-RL's tracker, sGPO's profile); an
  unknown name or bad options are left to `budgets.check_config`,
  which names the field."""
  from grpo_jax.strategies import allocation  # pylint: disable=g-import-not-at-top
  budget = c.get("budget")
  if budget is None or budget.name not in allocation.BUDGETS:
    return []
  entry = allocation.BUDGETS.entry(budget.name)
  options = dict(budget.kwargs)
  try:
    mode = declared(entry.meta, options)
    if not mode:
      return []
    size = capacity(entry.meta.state, options)
  except (TypeError, ValueError):
    return []
  return [prompt_ids.Table("budget.kwargs.capacity", size, mode,
                f"budget {budget.name!r}")]


def check_prompt_ids(c, *, by_id: Sequence[str] = ()) -> None:
  """The prompt-id checks of `train.validate`, before any compute: each
  per-prompt table holds the task's training ids (or hashes them), the ids
  are distinct where a table or a lookup by id (`by_id`: the stages that
  look problems up, for the message) needs them, and a draw without
  replacement (``without_replacement`` selection metadata) has
  ``rollout.num_prompts`` problems to draw."""
  from grpo_jax import strategies  # pylint: disable=g-import-not-at-top
  tables = _tables(c)
  select = strategies.SELECTIONS.entry(c.select.name).meta
  draws = bool(select.without_replacement)
  users = [t.component for t in tables] + list(by_id)
  if not users and not draws:
    return
  try:
    ids = prompt_ids.id_space(c.data, seed=c.seed)
  except ValueError as e:  # a JSONL file's line, key or id: name the field
    field = "data.path" if c.data.task in ("jsonl", "hf") else "data.task"
    raise config_errors.ConfigError(f"config.{field}: {e}") from None
  if ids is None:
    return
  if users and ids.duplicates:
    shown = ", ".join(map(str, ids.duplicates[:5]))
    raise config_errors.ConfigError(
        f"config.data.path: {c.data.path} repeats the {prompt_ids.ID_KEY!r} field "
        f"({len(ids.duplicates)} ids, e.g. {shown}), but "
        f"{', '.join(users)} key per-prompt state on it; give every record "
        f"a distinct {prompt_ids.ID_KEY!r}, or drop the field (the record index is then "
        "the id).")
  for table in tables:
    prompt_ids.check_table(table, ids)
  if draws and c.rollout.num_prompts > ids.count:
    raise config_errors.ConfigError(
        f"config.rollout.num_prompts: {c.rollout.num_prompts} exceeds the "
        f"{ids.count} training problems {c.select.name!r} draws from "
        f"without replacement ({ids.source}); set rollout.num_prompts <= "
        f"{ids.count}.")


def check_objective_error(c, message: str) -> None:
  """An objective's ValueError (its options' values) as a config error at
  ``objective.kwargs.<option>``, the objective's default as the example;
  a mode that needs a horizon gets the constant normaliser's."""
  from grpo_jax import objectives  # pylint: disable=g-import-not-at-top
  if "needs horizon=" in message:
    _fail("objective.kwargs.horizon", message.rstrip("."),
          f"e.g. --config.objective.kwargs.horizon={c.rollout.max_new_tokens} "
          "(rollout.max_new_tokens) for a constant normaliser, or another "
          "objective.kwargs.aggregation")
  entry = objectives.OBJECTIVES.entry(c.objective.name)
  state = entry.meta.state
  fns = (entry.fn,) + (() if state is None else (state.init, state.update))
  config_errors.fail_option("objective.kwargs", message,
                            _option_values(fns, {}), owner=c.objective.name)


# --------------------------------------------------------- every stage


def check_stages(c) -> None:
  """The stages' options and what each needs of the others, in pipeline
  order, after `config.check_fields` (`train.validate` runs both)."""
  from grpo_jax import advantages, objectives, rewards, rollout  # pylint: disable=g-import-not-at-top
  from grpo_jax.rollout import budgets, replay, repo  # pylint: disable=g-import-not-at-top
  # The reward columns: the functions', then the shapers'.
  columns = (rewards.column_names(c.rewards.functions)
             + tuple(c.rewards.shapers))
  check_sampling_stages(c, columns)

  _check_choice("advantage.name", c.advantage.name, advantages.names())
  _check_component("advantage.kwargs", advantages.make, c.advantage.name,
                   c.advantage.kwargs)
  check_member_filter(c, advantages, columns)
  check_estimator_inputs(c, advantages, columns)
  check_estimator_sizes(c, advantages)
  check_tracker_stages(c, advantages)
  check_resampled_stages(c, advantages)
  budgets.check_config(c)  # the budget stage and what it carries
  check_group_size(c, advantages)

  _check_choice("objective.name", c.objective.name, objectives.names())
  # The objective checks its own options (names, then values).
  kwargs = dict(c.objective.kwargs)
  objectives.check_options(c.objective.name, kwargs, field="config.objective.kwargs")
  try:
    objective = objectives.make(c.objective.name, **kwargs)
  except ValueError as e:
    check_objective_error(c, str(e))
  check_corrections(c, objective)
  check_credit(c, objective, advantages)
  check_replay_stages(c, objective, advantages)
  repo.check_config(c, objective)  # RePO's G + K rows per group
  replay.check_config(c, objective)  # row replay's R stored rows
  check_objective_inputs(c, objective)
  if c.llds.coef > 0 and rollout.is_on_policy(c):
    _fail("llds.coef", f"{c.llds.coef!r} is set but each batch feeds one "
          "optimiser step, where logp = old_logp and the penalty is 0",
          "train off policy (e.g. --config.train.num_minibatches=4), or set "
          "llds.coef=0")

  check_row_split(c)
