"""What the data strategies share: their registries and records.

Three stages of a step are strategies (DESIGN.md, "One training step"):

* select: which prompts a sampling round draws (`SELECTIONS`);
* groups: which groups the batch keeps before the baseline is formed; it
  may sample again (`GROUP_STRATEGIES`);
* rows: which rows (tokens) train (`ROW_STRATEGIES`).

Each is a pure function with keyword options, registered where it is
defined; `make_*` binds the options once into a record with ``init()`` (its
state, ``()`` when stateless) like every component.
"""

import functools
from typing import (Any, Callable, List, Mapping, NamedTuple, Optional,
                    Tuple)

import jax
import numpy as np

from grpo_jax import registry


class SelectionMeta(NamedTuple):
  """What a prompt selection declares when it registers (`SELECTIONS`)."""
  reads: Tuple[str, ...] = ()  # the stage states it takes (``advantage``)
  needs: Tuple[str, ...] = ()  # fields that state must have (SPO's alpha)
  check: Optional[Callable] = None  # check(**options): ValueError if bad
  without_replacement: bool = False  # it draws P distinct problems a round
  paper: str = ""  # arXiv id (or a short reference)


class GroupStrategyMeta(NamedTuple):
  """What a group strategy declares when it registers (`GROUP_STRATEGIES`).
  The fields given as functions take the strategy's options."""
  rounds_per_step: Callable  # (**options) -> the most rounds a step draws
  reads: Tuple[str, ...] = ()  # rollout helpers it takes (`GroupStrategy`)
  # ``state(layout, **options) -> initial state``: a stateful strategy's;
  # None when stateless.
  state: Optional[Callable] = None
  replays: bool = False  # it refills groups from earlier steps (POPO)
  # (**options) -> K extra rows per group (RePO's replays); None: none.
  extra_rows: Optional[Callable] = None
  # (**options) -> R stored rows joining the batch (row replay); None: none.
  replay_rows: Optional[Callable] = None
  # How its per-prompt table takes prompt ids (or a function of the
  # options); None: it keeps none.
  prompt_ids: Any = None
  solutions: bool = False  # it hints from the task's worked solutions
  moves_rows: bool = False  # it builds a group from rows of several rounds
  paper: str = ""  # arXiv id (or a short reference)


class RowStrategyMeta(NamedTuple):
  """What a row strategy declares when it registers (`ROW_STRATEGIES`)."""
  reads: Tuple[str, ...] = ()  # the round fields it takes (``truncated``)
  paper: str = ""  # arXiv id (or a short reference)


SELECTIONS = registry.Registry(
    "prompt selection", positional=("task", "index", "num_prompts"),
    meta=SelectionMeta)
GROUP_STRATEGIES = registry.Registry(
    "group strategy", positional=("draw", "num_prompts"),
    meta=GroupStrategyMeta)
ROW_STRATEGIES = registry.Registry("row strategy", positional=("loss_mask",),
                                   meta=RowStrategyMeta)


class Selected(NamedTuple):
  """The groups a group strategy keeps.

  Attributes:
    rounds: every sampling round drawn this step, in order.
    picks: P (round, group) pairs: the batch's groups, in batch order.
    valid: [P] bool; False for filler groups, which keep the batch's shape
      but carry no loss and enter no batch statistic.
    measurements: the strategy's own measurements (name -> float, e.g.
      ``ghpo/hinted_groups``), logged with the rollout's; None when none.
  """
  rounds: List[Any]
  picks: List[Tuple[int, int]]
  valid: np.ndarray
  # The strategy's own measurements (name -> float), joined to the step's.
  measurements: Optional[Mapping[str, float]] = None
  # Rows that join the batch beside the picked groups' own (RePO's
  # replayed completions, `strategies.repo.ReplayRows`); None when none.
  # Only a strategy declaring metadata ``extra_rows`` or ``replay_rows``
  # returns them; `grpo_jax.rollout.added` joins them to the batch.
  replay: Optional[Any] = None


class GroupLayout(NamedTuple):
  """What a stateful group strategy's fixed-size state is shaped by, from
  the config (not its options): G (``rollout.num_generations``), T
  (``rollout.max_new_tokens``), the widest prompt (the largest of
  ``data.prompt_buckets``) and the reward columns' weights [K]."""
  num_generations: int
  max_new_tokens: int
  prompt_len: int
  weights: Tuple[float, ...]


class Selection(NamedTuple):
  """A bound prompt selection: ``select(task, step, round, num_prompts,
  **states) -> examples``, `states` the other stages' states it reads by
  name (its metadata ``reads``, e.g. ``advantage``: SPO's tracker for the
  prioritised draw); stateless itself."""
  name: str
  init: Callable[[], Any]
  select: Callable
  reads: Tuple[str, ...] = ()


class GroupStrategy(NamedTuple):
  """A bound group strategy.

  Attributes:
    name: its registry name.
    rounds_per_step: the most sampling rounds a step may draw (the prompt
      index of round r of step s is ``s * rounds_per_step + r``).
    init: ``init() -> state``.
    apply: ``apply(state, draw, num_prompts, **helpers) -> (Selected,
      state)`` where ``draw(r)`` samples and scores round r (a
      `rollout.Round`) and `helpers` are the rollout's functions its
      metadata ``reads`` names:

      * ``reference(round) -> groups.References``: EDGE-GRPO's reference
        rows of a round's prompts;
      * ``examples(r) -> [Example]``: the P prompts round r's selection
        reads (``draw(r)`` is ``resample(r, examples(r))``);
      * ``resample(r, examples) -> Round``: P given examples (the step's
        own, or rewritten: GHPO's hinted questions) sampled, scored and
        shaped with round r's key ``fold_in(key, r)``; each r <
        rounds_per_step is drawn at most once, by `draw` or `resample`;
      * ``hint(examples, omegas [P]) -> [Example]``: GHPO's hinted
        questions (`references.hint_examples`; omega 0 = plain);
      * ``step``: the training step (an int, not a function);
      * ``key``: a PRNG key of the step for the strategy's own draws
        (POPO's refill), apart from every round's sampling key.

      A stateful strategy (metadata ``state``, see `make_group_strategy`)
      gets its state and the run's `GroupLayout` as keywords and returns
      its new state; a stateless one's state stays ``()``.
    reads: the helpers it takes.
  """
  name: str
  rounds_per_step: int
  init: Callable[[], Any]
  apply: Callable
  reads: Tuple[str, ...] = ()


class RowStrategy(NamedTuple):
  """A bound row strategy: ``apply(state, loss_mask [N, T], **reads) ->
  (loss_mask, state)``, reading the round fields its metadata names."""
  name: str
  reads: Tuple[str, ...]
  init: Callable[[], Any]
  apply: Callable


def make_selection(name: str, *, rounds_per_step: int = 1,
                   **options) -> Selection:
  """The `Selection` `name`; round r of step s reads prompt index
  ``s * rounds_per_step + r``, and the stage states its metadata ``reads``
  (keyword arguments, not options)."""
  meta = SELECTIONS.entry(name).meta
  reads = tuple(meta.reads)
  SELECTIONS.check_options(name, options, exclude=reads)
  if meta.check is not None:
    meta.check(**options)
  fn = functools.partial(SELECTIONS.get(name), **options)

  def select(task, step, round_index, num_prompts, **states):
    return fn(task, step * rounds_per_step + round_index, num_prompts,
              **states)
  return Selection(name, lambda: (), select, reads)


def make_group_strategy(name: str, layout: Optional[GroupLayout] = None,
                        **options) -> GroupStrategy:
  """The `GroupStrategy` `name` with `options` bound.

  A stateful entry (metadata ``state``: ``state(layout, **options) ->
  initial state``, fixed-size arrays) is called with ``state=`` and
  ``layout=`` and returns ``(Selected, state)``; it needs `layout` (a
  stateless one ignores it)."""
  entry = GROUP_STRATEGIES.entry(name)
  reads = tuple(entry.meta.reads)
  GROUP_STRATEGIES.check_options(name, options,
                                 exclude=reads + ("state", "layout"))
  fn = functools.partial(entry.fn, **options)
  rounds = entry.meta.rounds_per_step(**options)
  stateful = entry.meta.state
  if stateful is not None:
    if layout is None:
      raise ValueError(f"group strategy {name!r} keeps state shaped by the "
                       "run; pass layout= (a GroupLayout).")
    init = functools.partial(stateful, layout, **options)
    # Its option checks, before any compute; shapes only (a buffer is not
    # allocated at train.validate).
    jax.eval_shape(init)
  else:
    init = lambda: ()

  def apply(state, draw, num_prompts, **helpers):
    missing = [k for k in reads if k not in helpers]
    if missing:
      raise ValueError(f"group strategy {name!r} needs the rollout's "
                       f"{missing[0]!r} helper; pass {missing[0]}=.")
    given = {k: helpers[k] for k in reads}
    if stateful is not None:
      return fn(draw, num_prompts, state=state, layout=layout, **given)
    return fn(draw, num_prompts, **given), state
  return GroupStrategy(name, rounds, init, apply, reads)


def make_row_strategy(name: str, **options) -> RowStrategy:
  """The `RowStrategy` `name` with `options` bound."""
  entry = ROW_STRATEGIES.entry(name)
  reads = tuple(entry.meta.reads)
  ROW_STRATEGIES.check_options(name, options, exclude=reads)
  fn = functools.partial(entry.fn, **options)
  return RowStrategy(name, reads, lambda: (),
                     lambda state, loss_mask, **arrays: (
                         fn(loss_mask, **arrays), state))
