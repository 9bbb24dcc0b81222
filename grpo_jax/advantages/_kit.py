"""The estimators' shared kit: the registry, input checks, and the centring and
std helpers that keep a constant group at exactly 0 (never 0/0 = NaN)."""

import inspect
from typing import Any, Callable, NamedTuple, Optional, Tuple

import jax.numpy as jnp

from grpo_jax import groups as groups_lib
from grpo_jax import registry

class StateSpec(NamedTuple):
  """How a stateful estimator's state starts (metadata ``state``).

  Attributes:
    init: ``init(**options) -> state``, a NamedTuple of fixed-shape float32
      arrays; its keyword options (a tracker's capacity, say) are options of
      the estimator too. The estimator's function takes the state after its
      rewards and returns ``(advantages, new_state)``.
    offline: None, or ``offline(state, profile, indices, **options) ->
      (state, measures)``: the state set from an offline pass under the
      initial policy (SPO's offline_init), which the rollout calls once,
      at a fresh run's first step (step 0), before any prompt is selected;
      ``profile(indices, n) -> profiling.Profile`` samples n completions
      of each listed problem, `indices` are the task's training problems.
      Its keyword options are options of the estimator too; it returns
      `state` unchanged (and calls no profile) when they turn it off.
  """
  init: Callable
  offline: Optional[Callable] = None


class EstimatorMeta(NamedTuple):
  """What an estimator declares when it registers (`register` says more).
  A field given as a function of the options is resolved by
  `advantages.meta(name, **options)`."""
  input: str  # "PG" (sum_k w_k R_k, [P, G]) or "PGK" ([P, G, K])
  output: str  # "group" ([P, G] advantages) or "token" ([N, T])
  paper: str  # arXiv id (or a short reference)
  constant_group_zero: bool = True  # equal rewards give exactly 0
  # A group's advantages depend on its own rewards only (or a predicate).
  independent_groups: Any = True
  shift_invariant: bool = True  # a constant added to rewards changes nothing
  reads: Any = ()  # GroupData fields it takes (or a function of the options)
  state: Optional[StateSpec] = None  # a stateful estimator's state
  # The (lo, hi) its rewards must lie in (or a function); None: any.
  reward_range: Any = None
  reward_range_of: Any = "sum"  # "sum" or "columns": what must lie there
  min_reward_columns: int = 1  # the fewest reward columns of nonzero weight
  # The fewest members a group needs for a nonzero advantage (or a function
  # of the options): 2 where the baseline is the group's own rewards, 1
  # where it is not (a tracker, a greedy completion, the batch).
  min_group_size: Any = 2
  members: bool = False  # it honours GroupData.members (a filter's subset)
  # How a per-prompt table in its state takes prompt ids: "exact", "hash"
  # (or a function of the options); None: it keeps none.
  prompt_ids: Any = None
  check: Optional[Callable] = None  # check(**options): OptionError if bad


# A stateful estimator takes its state right after the rewards; neither is an
# option.
ESTIMATORS = registry.Registry("advantage estimator",
                               positional=("rewards", "state"),
                               meta=EstimatorMeta)


def register(*, input: str, output: str, paper: str,  # pylint: disable=redefined-builtin
             constant_group_zero: bool = True, independent_groups=True,
             shift_invariant: bool = True, reads: Tuple[str, ...] = (),
             state: Optional[StateSpec] = None, reward_range=None,
             reward_range_of="sum", min_reward_columns: int = 1,
             min_group_size=2, members: bool = False, prompt_ids=None,
             check=None, examples=({},)):
  """Registers an estimator with the metadata every estimator declares.

  Args:
    input: ``PG`` (gets sum_k w_k R_k, [P, G]) or ``PGK`` (gets the [P, G, K]
      rewards; its function takes ``weights`` too).
    output: ``group`` ([P, G] advantages) or ``token`` ([N, T]).
    paper: arXiv id (or a short reference).
    constant_group_zero: a group of equal rewards gets exactly 0.
    independent_groups: a group's advantages depend on its own rewards only;
      False where a batch statistic or a state (earlier batches) couples
      groups. A bool, or a predicate of the options (``lambda scale="group",
      **_: scale != "batch"``).
    shift_invariant: adding a constant to every reward (and, for a stateful
      estimator, to every reward its state has seen) leaves the advantages
      unchanged; False where absolute reward values matter.
    reads: `groups.GroupData` fields passed as keyword arguments (``valid``,
      ``weights``, ...); they are not config options. A tuple, or a
      function of the options giving one where an option decides what the
      estimator reads (SPO's ``rho="kl_adaptive"`` reads ``divergence``,
      which costs the rollout a log-prob pass); `all_reads` lists every
      field it may read.
    state: None for a stateless estimator; a `StateSpec` for a stateful one.
    reward_range: None (any reward), or the ``(lo, hi)`` its rewards must lie
      in, or a function of the options giving it (BNPO's ``r_min`` and
      ``r_max``). `train.validate` checks it against the reward functions'
      declared ranges before any compute (`advantages.check_reward_columns`).
    reward_range_of: what must lie in `reward_range`: ``sum`` (the weighted
      sum sum_k w_k R_k) or ``columns`` (each column R_k alone); or a
      function of the options giving one.
    min_reward_columns: the fewest reward columns of nonzero weight it needs
      (DVAO weighs two or more against each other).
    min_group_size: the fewest members (``rollout.num_generations``) a group
      needs for any advantage to be nonzero, or a function of the options
      giving it: 2 (the default) where the baseline is formed from the
      group's own rewards, so that a group of one always gets 0; 1 where
      it is not (a tracked value, a greedy completion, a batch statistic,
      an absolute anchor). `train.validate` refuses a smaller G
      (`rollout.checks.check_group_size`); the contract suite holds the
      value to what the estimator gives at G = 1.
    members: it honours `groups.GroupData.members` (a member filter's kept
      subset, GFPO's): its function takes ``members=None`` ([P, G] bool) and
      forms every statistic over the kept members only; a group with fewer
      than 2 kept, or kept rewards all equal, gets exactly 0. Only such an
      estimator may follow a filter whose statistics are over the kept
      members (`strategies.members`).
    prompt_ids: None, or how a per-prompt table in its state (``capacity``
      slots) takes `data.Example.index`: ``exact`` or ``hash`` (or a
      function of the options giving one); `rollout.checks.check_prompt_ids` holds
      it against the task's ids.
    check: None, or ``check(**options)`` raising `registry.OptionError`
      (naming the option) for an out-of-range option value, state options
      included; `advantages.check_options` runs it with every option, the
      estimator's defaults filled in (`option_defaults`: a rule across
      options, r_min < r_max, reads the values in use), so `make` and
      `train.validate` refuse such a value before any compute. Built from
      `check_real`, `check_int`, `check_choice` and `check_std_options`.
    examples: keyword options the contract suite runs the estimator with.
  """
  return ESTIMATORS.register(
      examples=examples, input=input, output=output, paper=paper,
      constant_group_zero=constant_group_zero,
      independent_groups=independent_groups, shift_invariant=shift_invariant,
      reads=reads if callable(reads) else tuple(reads), state=state, reward_range=reward_range,
      reward_range_of=reward_range_of, min_reward_columns=min_reward_columns,
      min_group_size=min_group_size,
      members=bool(members), prompt_ids=prompt_ids, check=check)


def all_reads(name: str) -> Tuple[str, ...]:
  """Every `groups.GroupData` field `name` may read, whatever its options:
  its ``reads``, or, where those depend on the options, the fields its
  function takes as keyword arguments."""
  meta = ESTIMATORS.entry(name).meta
  reads = meta.reads
  if callable(reads):
    params = inspect.signature(ESTIMATORS.get(name)).parameters
    reads = tuple(f for f in groups_lib.GroupData._fields if f in params)
  # `members` reaches an estimator that honours it, never as an option.
  extra = ("members",) if meta.members and "members" not in reads else ()
  return tuple(reads) + extra


def state_options(name: str) -> Tuple[str, ...]:
  """The keyword options of `name`'s state ``init`` (and of its
  ``offline`` initialisation, keyword-only); () when stateless."""
  spec = ESTIMATORS.entry(name).meta.state
  if spec is None:
    return ()
  params = inspect.signature(spec.init).parameters
  keys = tuple(key for key, p in params.items()
               if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
  if spec.offline is not None:
    keys += tuple(key for key, p in inspect.signature(
        spec.offline).parameters.items() if p.kind == p.KEYWORD_ONLY
                  and key not in keys)
  return keys


def option_defaults(name: str) -> dict:
  """The defaults of `name`'s keyword options: its function's (the group
  data it reads excluded) and its state's (`state_options`)."""
  fns = [ESTIMATORS.get(name)]
  spec = ESTIMATORS.entry(name).meta.state
  if spec is not None:
    fns += [spec.init] + ([spec.offline] if spec.offline else [])
  keys = set(ESTIMATORS.options(name, exclude=all_reads(name))
             + state_options(name))
  return {key: p.default for fn in fns
          for key, p in inspect.signature(fn).parameters.items()
          if key in keys and p.default is not p.empty}


# The range checks an estimator's ``check`` is made of; each raises
# `registry.OptionError` naming the option and the values to set.
check_choice = registry.check_choice
check_real = registry.check_real
check_int = registry.check_int


def check_std_options(*, eps, ddof, **_) -> None:
  """The std options most estimators share: `eps` (added to a std or a
  variance) finite and >= 0, so it never cancels a spread or flips its
  sign; `ddof` an integer >= 0 (its bound by the group size is
  `check_ddof`'s, at the call). The whole ``check`` of an estimator whose
  only options they are."""
  check_real("eps", eps, low=0.0)
  check_int("ddof", ddof, low=0)


def check_rewards(rewards, rank: int, letters: str) -> jnp.ndarray:
  """`rewards` as float32 after checking its rank and that groups are nonempty."""
  rewards = jnp.asarray(rewards)
  if rewards.ndim != rank:
    raise ValueError(
        f"rewards must be [{letters}] (rank {rank}); got shape {rewards.shape}.")
  if rewards.shape[1] == 0:
    raise ValueError(
        f"rewards must hold at least one completion per group (G >= 1); got "
        f"shape {rewards.shape}.")
  return rewards.astype(jnp.float32)


check_weights = groups_lib.check_weights
check_valid = groups_lib.check_valid


def check_ddof(ddof: int, size: int) -> None:
  # A sample of one is constant: its advantage is 0 whatever ddof says.
  if ddof < 0 or (size > 1 and ddof >= size):
    raise ValueError(
        f"ddof={ddof!r} must be >= 0 and smaller than the {size} rewards the "
        "std is taken over; use ddof=1 (unbiased) or ddof=0.")


def zero_where_constant(x, out, axis: Optional[int] = -1) -> jnp.ndarray:
  """`out` with exactly 0 where x is constant along `axis`."""
  # Rounding in a mean can leave a constant group at +-1e-8 instead of 0; the
  # exact comparison sets it to 0, so a signal-free group stays signal-free.
  constant = x.max(axis=axis, keepdims=True) == x.min(axis=axis, keepdims=True)
  return jnp.where(constant, 0.0, out)


def centered(x, axis: Optional[int]) -> jnp.ndarray:
  """x - mean(x) along `axis`, exactly 0 where x is constant along it."""
  return zero_where_constant(x, x - x.mean(axis=axis, keepdims=True), axis)


def check_lengths(lengths, shape: Tuple[int, int]) -> jnp.ndarray:
  """[P, G] float32 completion lengths in tokens; zeros when None."""
  if lengths is None:
    return jnp.zeros(shape, jnp.float32)
  lengths = jnp.asarray(lengths)
  if lengths.shape != tuple(shape):
    raise ValueError(
        f"lengths must be [P, G] = {tuple(shape)}; got shape {lengths.shape}.")
  return lengths.astype(jnp.float32)


def _safe_sqrt(var) -> jnp.ndarray:
  # sqrt has an infinite derivative at 0; keep gradients through it finite.
  return jnp.where(var > 0, jnp.sqrt(jnp.where(var > 0, var, 1.0)), 0.0)


def std(x, axis: int, ddof: int) -> jnp.ndarray:
  """The std along `axis` (keepdims) with `ddof`; 0 for a single value."""
  var = (((x - x.mean(axis=axis, keepdims=True))**2).sum(axis=axis,
                                                         keepdims=True)
         / max(x.shape[axis] - ddof, 1))
  return _safe_sqrt(var)


def batch_moments(x, valid, ddof: int, members=None
                  ) -> Tuple[jnp.ndarray, jnp.ndarray]:
  """(mean, std) [1, 1] over the entries of the valid groups of x [P, G].

  mean = sum_{p valid, g} x_pg / n, std^2 = sum (x_pg - mean)^2 / (n - ddof),
  n = G * #valid; filler groups (valid False) do not enter either, nor,
  where `members` [P, G] bool is given, the members outside it.
  """
  m = jnp.broadcast_to(valid[:, None], x.shape)
  if members is not None:
    m = m & jnp.asarray(members, bool)
  m = m.astype(jnp.float32)
  count = m.sum()
  mean = (x * m).sum() / jnp.maximum(count, 1.0)
  var = (((x - mean) * m)**2).sum() / jnp.maximum(count - ddof, 1.0)
  return mean.reshape(1, 1), _safe_sqrt(var).reshape(1, 1)


def divide_by_std(x, sd, eps: float) -> jnp.ndarray:
  # sd == 0 only where x is already exactly 0; dividing by 1 there keeps
  # eps=0 from producing 0/0.
  return x / (jnp.where(sd > 0, sd, 1.0) + eps)


def standardize_groups(x, *, eps: float, ddof: int) -> jnp.ndarray:
  """(x - mean_g x) / (std_g x + eps) along the last axis, groups of G."""
  check_ddof(ddof, x.shape[-1])
  return divide_by_std(centered(x, -1), std(x, -1, ddof), eps)


def check_members(members, shape) -> Optional[jnp.ndarray]:
  """[P, G] bool kept members (`groups.GroupData.members`); None stays None."""
  if members is None:
    return None
  members = jnp.asarray(members)
  if members.shape != tuple(shape):
    raise ValueError(f"members must be [P, G] = {tuple(shape)}; got shape "
                     f"{members.shape}.")
  return members.astype(bool)


def zero_fillers(advantages, valid) -> jnp.ndarray:
  """[P, G] advantages with the filler groups' (valid False) set to 0."""
  return jnp.where(valid[:, None], advantages, 0.0)
