"""Advantage estimators: group data -> advantages [P, G] (or token-level [N, T]).

| name                             | input | advantage                                         | paper            |
|----------------------------------|-------|---------------------------------------------------|------------------|
| ``grpo``                         | PG    | (R - mean_g R) / (std R + eps)                    | arXiv 2402.03300 |
| ``dr_grpo``                      | PG    | R - mean_g R                                      | arXiv 2503.20783 |
| ``rloo``                         | PG    | R_j - mean_{k!=j} R_k = G/(G-1) (R_j - mean_g R)  | arXiv 2402.14740 |
| ``gdpo``                         | PGK   | batch-normalised sum_k w_k grpo(R_k)              | arXiv 2601.05242 |
| ``ebpo``                         | PG    | (R - S mu0 - (1-S) mean_g R) / sigma0, state      | arXiv 2602.05165 |
| ``avspo``                        | PG    | grpo; virtual rewards in collapsed groups, state  | arXiv 2605.21125 |
| ``dvao``                         | PGK   | sum_k c_k z_k, c_k = var_g(w_k R_k) / sum_j var_g | arXiv 2605.25604 |
| ``bnpo``                         | PGK   | (R - p) / Beta_pdf(p), Beta fitted over the batch | arXiv 2506.02864 |
| ``reinforce_plus_plus``          | PG    | R whitened over the batch's tokens                | arXiv 2501.03262 |
| ``reinforce_plus_plus_baseline`` | PG    | (R - mean_g R) whitened likewise                  | arXiv 2501.03262 |
| ``opo``                          | PG    | R - sum_g L_g R_g / sum_g L_g (length-weighted)   | arXiv 2505.23585 |
| ``pass_at_k``                    | PG    | best member (R_max - R_2nd) / std, others 0       | arXiv 2503.19595 |
| ``ngrpo``                        | PG    | grpo over R and m virtual r_max members           | arXiv 2509.18851 |
| ``seed_grpo``                    | PG    | grpo (1 - alpha SE/SE_max), SE of answer classes  | arXiv 2505.12346 |
| ``lampo``                        | PG    | sum_j w_ij (R_i - R_j)/(G-1), w_ij by logp gaps   | LamPO, LambdaPO  |
| ``edge_grpo``                    | PG    | grpo * mean(H) / H_i, H the mean token entropy    | arXiv 2507.21848 |
| ``grpo_lead``                    | PG    | grpo * w(rho) (A > 0) or w(1 - rho), rho = P(R>0) | GRPO-LEAD (002 42) |
| ``spo``                          | PG    | (R - v_x) normalised over the batch, v_x tracked  | SPO (002 para 7) |
| ``riskpo``                       | PG    | mixed RVaR + CVaR of bundle papers, quantiles     | RiskPO (002 p 3) |
| ``mdp_grpo``                     | PG    | clip(v((1-m) z + m (R - c)/s)), v prospect value  | MDP-GRPO (recon) |
| ``remax``                        | PG    | R - R_greedy, a greedy completion's reward        | arXiv 2310.10505 |
| ``gpg``                          | PG    | (B / #rows R != 0) (R - mean_g R) / f_norm        | arXiv 2504.02546 |
| ``sd_grpo``                      | PG    | token: z_g of each segment's reward, by seg_ids   | SD-GRPO (000 25) |
| ``hapo_token_mean``              | PG    | z-score, token-weighted mean/std; grpo at big A   | HAPO (002 109)   |

The pure functions (one per row, named as in it, and `multi_reward`,
`collapse_rate`) are the public API. A PG estimator sees R = sum_k w_k R_k
[P, G]; a PGK one the [P, G, K] rewards and the weights.

A step uses the record: ``est = make("grpo", scale="batch")`` binds the
options once (an unknown one is a ValueError) and

  state = est.init()                                   # () when stateless
  advantages, state = est.estimate(state, groups)      # groups: GroupData

where filler groups (``groups.valid`` False) get 0 and enter no batch
statistic. A new estimator is one function in a family file under
``@_kit.register(input=..., output=..., paper=..., examples=...)``; the
contract suite (tests/contracts/test_estimators.py) then runs it. Its
metadata (`_kit.EstimatorMeta`) also says which rewards it takes
(``reward_range``, ``min_reward_columns``): `check_reward_columns` holds a
config's reward columns to them before any compute; and the fewest members
a group needs for a nonzero advantage (``min_group_size``: 2 for a baseline
of the group's own rewards, 1 for remax, reinforce_plus_plus, spo, mdp_grpo
with its anchor and riskpo's tracked quantiles), which `train.validate`
holds ``rollout.num_generations`` to. One that takes options
declares ``check=``, their values' domains (`_kit.check_real`, ``check_int``,
``check_choice``, ``check_std_options``): `make` and `train.validate`
refuse a bad value with a `registry.OptionError` naming the option
(``config.advantage.kwargs.<option>: ...``); the contract suite holds a
bad value of each such estimator.

A stateful estimator (``ebpo``, ``avspo``, ``spo``, ``riskpo``) declares
its state with ``state=_kit.StateSpec(init=...)``: its function takes the state after the
rewards and returns ``(advantages, new_state)``, and ``init``'s keyword
options are options of the estimator too.
"""

import functools
import inspect
import math
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence, Tuple

import jax.numpy as jnp

from grpo_jax import groups as groups_lib
from grpo_jax.advantages import _kit
from grpo_jax.advantages._kit import ESTIMATORS
from grpo_jax.advantages.baselines import gpg, mdp_grpo, remax
from grpo_jax.advantages.batch_coupled import (bnpo, reinforce_plus_plus,
                                               reinforce_plus_plus_baseline)
from grpo_jax.advantages.group import (SCALES, dr_grpo, grpo, opo, pass_at_k,
                                       rloo)
from grpo_jax.advantages.multi_reward import (MULTI_REWARD_MODES, dvao, gdpo,
                                              multi_reward)
from grpo_jax.advantages.reshaped import (edge_grpo, grpo_lead, lampo, ngrpo,
                                          seed_grpo)
from grpo_jax.advantages.segments import sd_grpo
from grpo_jax.advantages.token_mean import hapo_token_mean
from grpo_jax.advantages.stateful import (AVSPOState, EBPOState, avspo,
                                          ebpo)
from grpo_jax.advantages.trackers import (RiskPOState, SPOState, riskpo,
                                          spo)
from grpo_jax.groups import GroupData, collapse_rate

__all__ = [
    "gpg", "mdp_grpo", "remax",
    "AVSPOState", "EBPOState", "avspo", "ebpo",
    "RiskPOState", "SPOState", "riskpo", "spo",
    "edge_grpo", "grpo_lead", "lampo", "ngrpo", "seed_grpo",
    "sd_grpo",
    "hapo_token_mean",
    "bnpo", "check_reward_columns", "dvao", "opo", "pass_at_k",
    "reinforce_plus_plus", "reinforce_plus_plus_baseline",
    "ESTIMATORS", "Estimator", "GroupData", "MULTI_REWARD_MODES", "SCALES",
    "check_options", "collapse_rate", "dr_grpo", "gdpo", "get", "grpo",
    "honouring_members", "make", "meta", "multi_reward", "names", "rloo"]

names = ESTIMATORS.names
get = ESTIMATORS.get


class Estimator(NamedTuple):
  """An advantage estimator with its options bound (optax style).

  Attributes:
    name: the registered name.
    input: ``PG`` or ``PGK`` (which rewards it reads; see the module doc).
    output: ``group`` ([P, G] advantages) or ``token`` ([N, T]).
    init: ``() -> state``; ``()`` for a stateless estimator, a NamedTuple
      of fixed-shape float32 arrays for a stateful one.
    estimate: ``(state, groups: GroupData) -> (advantages float32, state)``.
    reads: the `GroupData` fields it reads beyond the rewards.
    members: it honours `GroupData.members` (metadata ``members``); any
      other refuses group data that carries them.
    offline: None, or ``(state, profile, indices) -> (state, measures)``,
      its state's offline initialisation (`_kit.StateSpec.offline`) with
      the options bound; the rollout calls it at step 0.
  """
  name: str
  input: str
  output: str
  init: Callable[[], Any]
  estimate: Callable[[Any, GroupData], Tuple[jnp.ndarray, Any]]
  reads: Tuple[str, ...] = ()
  members: bool = False
  offline: Optional[Callable] = None


# The rewards an estimator is called with, by its metadata's ``input``.
_INPUTS = {
    "PG": lambda groups: groups_lib.weighted_sum(groups.rewards,
                                                 groups.weights),
    "PGK": lambda groups: groups.rewards,
}


def _zero_token_fillers(advantages, valid):
  rows = jnp.repeat(valid, advantages.shape[0] // valid.shape[0])
  return jnp.where(rows[:, None], advantages, 0.0)


# Filler groups (valid False) get 0, by the metadata's ``output``.
_ZERO_FILLERS = {
    "group": _kit.zero_fillers,
    "token": _zero_token_fillers,
}


def _zero_outside(advantages, members):
  """Members outside `members` [P, G] get 0: [P, G] or token rows [N, T]."""
  if advantages.ndim == members.ndim:
    return jnp.where(members, advantages, 0.0)
  return jnp.where(members.reshape(-1, 1), advantages, 0.0)


def honouring_members() -> Tuple[str, ...]:
  """The estimators that honour `GroupData.members` (metadata ``members``)."""
  return tuple(n for n in names() if ESTIMATORS.entry(n).meta.members)


def check_options(name: str, options: Mapping[str, Any], *,
                  field: str = "") -> None:
  """ValueError naming the first key of `options` that `name` does not take
  (the group data it reads, such as ``valid``, is not an option; a stateful
  estimator's state options, those of its ``init``, are), then its
  metadata ``check`` on their values, its defaults filled in (an
  `OptionError` naming the option, as ``<field>.<option>: ...``)."""
  ESTIMATORS.check_options(name, options, field=field,
                           extra=_kit.state_options(name),
                           exclude=_kit.all_reads(name))
  ESTIMATORS.check_values(name, {**_kit.option_defaults(name), **options},
                          field=field)


def meta(name: str, **options) -> _kit.EstimatorMeta:
  """`name`'s `_kit.EstimatorMeta`, its fields given as functions of the
  options resolved for `options` (``independent_groups`` of ``grpo`` is
  False for ``scale="batch"``); ``check`` stays a function, ``state`` is
  None or the `StateSpec` of a stateful estimator."""
  declared = ESTIMATORS.entry(name).meta
  return declared._replace(**{
      key: value(**options) for key, value in declared._asdict().items()
      if callable(value) and key != "check"})


def make(name: str, **options) -> Estimator:
  """The `Estimator` record of `name` with `options` bound.

  Args:
    name: a registered estimator (`names()`).
    **options: its keyword options; an unknown key is a ValueError naming
      it and the allowed ones.

  Returns:
    An `Estimator`; ``estimate`` is pure and jittable.
  """
  entry = ESTIMATORS.entry(name)
  check_options(name, options)
  fn = functools.partial(entry.fn, **_accepted(entry.fn, options))
  spec = entry.meta.state
  offline = None
  if spec is None:
    init = lambda: ()
    step = lambda rewards, state, **data: (fn(rewards, **data), state)
  else:
    init = functools.partial(spec.init, **_accepted(spec.init, options))
    step = fn
    if spec.offline is not None:
      offline = functools.partial(spec.offline,
                                  **_accepted(spec.offline, options))
  inputs = _INPUTS[entry.meta.input]
  zero_fillers = _ZERO_FILLERS[entry.meta.output]
  reads = meta(name, **options).reads
  honours = bool(entry.meta.members)

  def estimate(state, groups: GroupData):
    missing = [field for field in reads if getattr(groups, field) is None]
    if missing:
      raise ValueError(
          f"advantage estimator {name!r} reads GroupData.{missing[0]}, which "
          "these groups lack; build them with it (groups.from_rewards("
          f"..., {missing[0]}=...)) or pick an estimator that does not read it")
    data = {field: getattr(groups, field) for field in reads}
    if groups.members is not None:
      if not honours:
        raise ValueError(
            f"advantage estimator {name!r} does not honour GroupData.members "
            "(a member filter's kept subset); pick one that does: "
            f"{', '.join(honouring_members())}")
      data["members"] = groups.members
    advantages, state = step(inputs(groups), state, **data)
    advantages = zero_fillers(advantages, groups.valid)
    if groups.members is not None:
      advantages = _zero_outside(advantages, jnp.asarray(groups.members,
                                                         bool))
    return advantages, state

  return Estimator(name=name, input=entry.meta.input,
                   output=entry.meta.output, init=init, estimate=estimate,
                   reads=reads, members=honours, offline=offline)


def _accepted(fn: Callable, options: Mapping[str, Any]) -> dict:
  """The entries of `options` that `fn`'s signature names."""
  names = inspect.signature(fn).parameters
  return {key: value for key, value in options.items() if key in names}


def check_reward_columns(name: str, options: Mapping[str, Any], *,
                         columns: Sequence[str], weights: Sequence[float],
                         ranges: Sequence[Optional[Tuple[float, float]]]
                         ) -> None:
  """ValueError, before any compute, unless a config's reward columns fit
  estimator `name` with `options`: the columns of nonzero weight number at
  least its ``min_reward_columns``, and their declared ranges lie in its
  ``reward_range`` (each column's, or the weighted sum's, by its
  ``reward_range_of``). The message names the estimator, what it needs,
  what the rewards give and the fix.

  Args:
    name: a registered estimator.
    options: its options (``advantage.kwargs``).
    columns: the K reward column names (the functions', then the shapers').
    weights: [K] their weights.
    ranges: [K] their declared ``(lo, hi)``; None where a reward declares
      none.
  """
  info = meta(name, **options)
  used = [(c, w, r) for c, w, r in zip(columns, weights, ranges) if w != 0]
  if len(used) < info.min_reward_columns:
    raise ValueError(
        f"advantage estimator {name!r} needs at least "
        f"{info.min_reward_columns} reward columns of nonzero weight, "
        f"but the config gives {len(used)} "
        f"({', '.join(c for c, _, _ in used) or 'none'}); add a reward "
        "function (rewards.functions) or a shaper (rewards.shapers)")
  if info.reward_range is None:
    return
  lo, hi = info.reward_range
  what, change = _RANGE_OF[info.reward_range_of]
  needs = f"advantage estimator {name!r} needs {what} in [{lo:g}, {hi:g}]"
  undeclared = [c for c, _, r in used if r is None]
  if undeclared:
    raise ValueError(f"{needs}, but reward {undeclared[0]!r} declares no "
                     "range; declare range=(lo, hi) where it registers")
  if info.reward_range_of == "columns":
    reached = [(repr(c), r) for c, _, r in used]
  else:  # each term's ends in order: a negative weight swaps them
    reached = [(" + ".join(f"{w:g}*{c}" for c, w, _ in used),
                tuple(sum(ends) for ends in zip(*(
                    sorted((w * r[0], w * r[1])) for _, w, r in used))))]
  outside = [f"{label} reaches [{r[0]:g}, {r[1]:g}]" for label, r in reached
             if not _within(r, (lo, hi))]
  if not outside:
    return
  low, high = (min(r[0] for _, r in reached), max(r[1] for _, r in reached))
  options_of = set(ESTIMATORS.options(name))
  fix = (f"set --config.advantage.kwargs.r_min={low:g} and r_max={high:g}"
         if {"r_min", "r_max"} <= options_of
         else f"set --config.advantage.kwargs.r_max={high:g}"
         if "r_max" in options_of and lo == -math.inf  # NGRPO: no r_min
         else "rescale the rewards")
  raise ValueError(f"{needs}, but {'; '.join(outside)}; {fix}, or {change}")


# What must lie in an estimator's reward_range, and the other fix.
_RANGE_OF = {"columns": ("each reward column", "drop that reward"),
             "sum": ("the weighted reward", "change rewards.weights")}


def _within(inner: Tuple[float, float], outer: Tuple[float, float]) -> bool:
  # A relative slack: 1 + 0.1 may round just above an r_max of 1.1.
  # An infinite end (NGRPO's domain is (-inf, r_max]) sets no scale.
  slack = 1e-9 * max([1.0] + [abs(x) for x in outer if math.isfinite(x)])
  return inner[0] >= outer[0] - slack and inner[1] <= outer[1] + slack
