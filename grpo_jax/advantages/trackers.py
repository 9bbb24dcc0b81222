"""Estimators that track a value across steps: SPO's per-prompt Beta
tracker and RiskPO's tracked reward quantiles.

Each is a pure function ``fn(rewards, state, *, options, **reads) ->
(advantages, new_state)``, its state a NamedTuple of fixed-shape float32
arrays made by its ``*_init(...)``; the trainer keeps it in
``TrainState.states["advantage"]`` and checkpoints it. Filler groups
(``valid`` False) get 0 and never write to the state.
"""

import math
import numbers
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from grpo_jax.data import prompt_ids as prompt_ids_lib
from grpo_jax import registry
from grpo_jax.advantages import _kit

# ---------------------------------------------------------------------- SPO

SPO_RHO = ("constant", "kl_adaptive")


class SPOState(NamedTuple):
  """SPO's per-prompt Beta tracker, one slot per problem of the task.

  Attributes:
    alpha, beta: [capacity] float32 Beta parameters; slot x is the problem of
      `data.Example.index` x, and p_x = alpha / (alpha + beta) its tracked
      success rate.
  """
  alpha: jnp.ndarray
  beta: jnp.ndarray


def spo_prior(successes, samples, *, rho_min: float = 0.875):
  """(alpha_0, beta_0) from `samples` offline samples with `successes`:

    N_init = 1 / (1 - rho_min)
    alpha_0 = N_init (k + 0.5) / (n + 1)
    beta_0 = N_init (n - k + 0.5) / (n + 1)

  and alpha = beta = 0.5 when n = 0 (no offline samples: Jeffreys' prior).
  """
  k = jnp.asarray(successes, jnp.float32)
  n = jnp.asarray(samples, jnp.float32)
  n_init = 1.0 / (1.0 - rho_min)
  alpha = jnp.where(n > 0, n_init * (k + 0.5) / (n + 1.0), 0.5)
  beta = jnp.where(n > 0, n_init * (n - k + 0.5) / (n + 1.0), 0.5)
  return alpha, beta


def check_offline_init(offline_init, rho_min: float = 0.875) -> None:
  """`registry.OptionError` (a ValueError) unless `offline_init` (n offline
  samples per problem) is an integer >= 0 and, when > 0, N_init = 1 /
  (1 - rho_min) is finite."""
  if isinstance(offline_init, bool) or not isinstance(
      offline_init, (int, np.integer)) or offline_init < 0:
    raise registry.OptionError(
        "offline_init",
        f"offline_init={offline_init!r} must be an integer >= 0 (0: off, "
        "the prior alpha = beta = 0.5; n > 0: n samples of every training "
        "problem under the initial policy, 8 in the paper); set 0 or an "
        "integer n > 0.")
  if offline_init and not rho_min < 1.0:
    raise registry.OptionError(
        "offline_init",
        f"offline_init={offline_init!r} with rho_min={rho_min!r}: the "
        "prior's weight N_init = 1 / (1 - rho_min) is infinite; set "
        "rho_min < 1 or offline_init=0.")


def spo_offline_state(state: SPOState, index, successes, trials, *,
                      rho_min: float = 0.875, prompt_ids: str = "exact"
                      ) -> SPOState:
  """`state` with each profiled problem's slot at `spo_prior` of its
  offline counts; problems sharing a hashed slot pool their counts, and
  slots no problem reached keep their values.

  Args:
    state: the tracker before (`spo_init`).
    index: [Q] the problems' ids (`data.Example.index`).
    successes, trials: [Q] solved and drawn completions (`profiling.Profile`).
    rho_min: sets N_init = 1 / (1 - rho_min).
    prompt_ids: how ids take slots (`prompt_ids.slots`).
  """
  capacity = state.alpha.shape[0]
  slot, tracked = prompt_ids_lib.slots(np.asarray(index), capacity,
                                       prompt_ids)
  k = np.zeros(capacity, np.float64)
  n = np.zeros(capacity, np.float64)
  np.add.at(k, slot[tracked], np.asarray(successes, np.float64)[tracked])
  np.add.at(n, slot[tracked], np.asarray(trials, np.float64)[tracked])
  alpha, beta = spo_prior(k, n, rho_min=rho_min)
  seen = jnp.asarray(n > 0)
  return SPOState(alpha=jnp.where(seen, alpha, state.alpha),
                  beta=jnp.where(seen, beta, state.beta))


def spo_offline(state: SPOState, profile, indices, *, offline_init: int = 0,
                rho_min: float = 0.875, prompt_ids: str = "exact"):
  """SPO's offline initialisation (`_kit.StateSpec.offline`): n =
  `offline_init` completions of every training problem under the initial
  policy (``profile(indices, n)``, a completion solved where the first
  reward column is > 0: verl binarises its scores alike), then
  `spo_offline_state`. `state` unchanged, nothing sampled, when n = 0.

  Returns:
    (the tracker, measurements ``advantage/offline_problems`` and
    ``advantage/offline_success_mean``).
  """
  check_offline_init(offline_init, rho_min)
  if not offline_init:
    return state, {}
  prof = profile(np.asarray(indices), int(offline_init))
  state = spo_offline_state(state, prof.index, prof.successes, prof.trials,
                            rho_min=rho_min, prompt_ids=prompt_ids)
  return state, {"advantage/offline_problems": float(len(prof.index)),
                 "advantage/offline_success_mean": float(prof.rates.mean())}


def spo_init(*, capacity: int = 1024) -> SPOState:
  """Every slot at the n = 0 prior alpha = beta = 0.5 (`spo_prior`)."""
  prompt_ids_lib.check_capacity(capacity)
  half = jnp.full((capacity,), 0.5, jnp.float32)
  return SPOState(alpha=half, beta=half)


def spo_rho(divergence, *, rho_min: float = 0.875, rho_max: float = 0.96,
            d_half: float = 0.06):
  """The KL-adaptive forgetting factor rho = clip(2^(-D / D_half), rho_min,
  rho_max); D = 0 (a first visit) gives rho_max."""
  return jnp.clip(2.0**(-jnp.asarray(divergence, jnp.float32) / d_half),
                  rho_min, rho_max)


def spo_priority(state: SPOState, *, floor: float = 0.05):
  """[capacity] prompt-sampling weights w_x = sqrt(p_x (1 - p_x)) + floor."""
  p = state.alpha / (state.alpha + state.beta)
  return jnp.sqrt(jnp.clip(p * (1.0 - p), 0.0, None)) + floor


def _tracked(prompt_index, capacity: int):
  """[P] bool, prompts with a slot: index in [0, capacity)."""
  return (prompt_index >= 0) & (prompt_index < capacity)


def spo_values(state: SPOState, prompt_index, *, prior=(0.5, 0.5)):
  """[P] tracked success rates v_x = alpha / (alpha + beta); the prior's for
  untracked prompts (index -1, or outside the table)."""
  capacity = state.alpha.shape[0]
  tracked = _tracked(prompt_index, capacity)
  slot = jnp.clip(prompt_index, 0, capacity - 1)
  alpha = jnp.where(tracked, state.alpha[slot], prior[0])
  beta = jnp.where(tracked, state.beta[slot], prior[1])
  return alpha / (alpha + beta)


def spo_update(state: SPOState, rewards, prompt_index, rho, write
               ) -> SPOState:
  """alpha <- rho alpha + sum_g R, beta <- rho beta + sum_g (1 - R) at the
  slots of the prompts where `write` is True.

  Args:
    state: the tracker.
    rewards: [P, G] rewards in [0, 1].
    prompt_index: [P] int slots.
    rho: [P] forgetting factors.
    write: [P] bool: valid and tracked prompts.
  """
  capacity = state.alpha.shape[0]
  slot = jnp.where(write, prompt_index, capacity)  # out of range: dropped
  group_size = rewards.shape[1]
  hits = jnp.zeros((capacity,), jnp.float32).at[slot].add(
      rewards.sum(-1), mode="drop")
  misses = jnp.zeros((capacity,), jnp.float32).at[slot].add(
      group_size - rewards.sum(-1), mode="drop")
  # A prompt drawn twice in one batch forgets once (its first rho).
  decay = jnp.ones((capacity,), jnp.float32).at[slot].min(rho, mode="drop")
  return SPOState(alpha=decay * state.alpha + hits,
                  beta=decay * state.beta + misses)


def spo_advantages(rewards, values, valid, *, eps: float = 1e-8):
  """A = (A_raw - mean_B A_raw) / (std_B A_raw + eps), A_raw = R - v_x, the
  moments over the valid entries (ddof=1); A_raw itself when the batch holds
  a single entry (its std is undefined)."""
  raw = rewards - values[:, None]
  mean, sd = _kit.batch_moments(raw, valid, ddof=1)
  count = valid.sum() * rewards.shape[1]
  normalised = _kit.divide_by_std(raw - mean, sd, eps)
  return jnp.where(count > 1, normalised, raw)


def _check_number(key: str, value) -> None:
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise registry.OptionError(key, f"{key}={value!r} must be a real "
                               "number; set a number.")


def _check_spo_options(rho, rho_value, rho_min, rho_max, d_half) -> None:
  """`registry.OptionError` naming the first option out of range (each
  checked whatever `rho` is: a typo in an unused one is still a typo)."""
  _kit.check_choice("rho", rho, SPO_RHO)
  for key, value in (("rho_value", rho_value), ("rho_min", rho_min),
                     ("rho_max", rho_max), ("d_half", d_half)):
    _check_number(key, value)
  # NaN fails each comparison below.
  if not 0.0 < rho_value <= 1.0:
    raise registry.OptionError(
        "rho_value", f"rho_value={rho_value!r} must lie in (0, 1]; set the "
        "constant forgetting factor in (0, 1], such as the paper's 0.875.")
  if not 0.0 < rho_min <= rho_max <= 1.0:
    raise registry.OptionError(
        "rho_min" if not 0.0 < rho_min <= 1.0 else "rho_max",
        f"rho_min={rho_min!r} and rho_max={rho_max!r} must satisfy "
        "0 < rho_min <= rho_max <= 1 (the KL-adaptive rho's clip); set "
        "them so, such as the paper's 0.875 and 0.96.")
  if not d_half > 0.0:
    raise registry.OptionError(
        "d_half", f"d_half={d_half!r} must be > 0 (the divergence that "
        "halves the tracker's memory); set one such as the paper's 0.06.")


def check_spo(*, rho: str = "constant", rho_value: float = 0.875,
              rho_min: float = 0.875, rho_max: float = 0.96,
              d_half: float = 0.06, eps: float = 1e-8,
              prompt_ids: str = "exact", offline_init: int = 0,
              capacity: int = 1024) -> None:
  """SPO's option values, state options included (registry metadata
  ``check``): `train.validate` and `advantages.make` refuse a bad one
  before any compute, naming it (`registry.OptionError`)."""
  _check_spo_options(rho, rho_value, rho_min, rho_max, d_half)
  _check_number("eps", eps)
  if not 0.0 <= eps < math.inf:
    raise registry.OptionError("eps", f"eps={eps!r} must be finite and >= 0 "
                               "(added to the batch std); set one such as "
                               "1e-8.")
  prompt_ids_lib.check_mode(prompt_ids)
  check_offline_init(offline_init, rho_min)
  prompt_ids_lib.check_capacity(capacity)


def _spo_reads(rho="constant", **_):
  # The KL-adaptive rho reads each prompt's divergence, which the rollout
  # computes (a log-prob pass) only for an estimator that reads it.
  extra = ("divergence",) if rho == "kl_adaptive" else ()
  return ("valid", "prompt_index") + extra


@_kit.register(
    input="PG", output="group",
    paper="SPO, Single-stream Policy Optimization (seed 002 para. 7)",
    # A tracked baseline gives a constant group a nonzero advantage; the
    # batch normalisation and the table couple groups; the tracker counts
    # successes of rewards in [0, 1], so absolute values matter.
    constant_group_zero=False, independent_groups=False,
    shift_invariant=False, reward_range=(0.0, 1.0),
    min_group_size=1,  # the paper's single stream: G = 1
    reads=_spo_reads,
    state=_kit.StateSpec(init=spo_init, offline=spo_offline),
    prompt_ids=prompt_ids_lib.prompt_ids_option, check=check_spo,
    examples=({"capacity": 8}, {"capacity": 4, "rho_value": 0.5},
              {"capacity": 8, "rho": "kl_adaptive"},
              {"capacity": 2, "prompt_ids": "hash"},
              {"capacity": 8, "offline_init": 8}))
def spo(rewards, state: SPOState, *, rho: str = "constant",
        rho_value: float = 0.875, rho_min: float = 0.875,
        rho_max: float = 0.96, d_half: float = 0.06, eps: float = 1e-8,
        prompt_ids: str = "exact", offline_init: int = 0, valid=None,
        prompt_index=None, divergence=None):
  """Single-stream PO: a per-prompt Beta value tracker as the baseline,
  advantages normalised over the batch.

    v_x   = alpha_x / (alpha_x + beta_x)            (before this batch)
    A_raw = R - v_x
    A     = (A_raw - mean_B) / (std_B + eps)        (ddof=1; A_raw for a
                                                     batch of one entry)
    alpha_x <- rho alpha_x + sum_g R,  beta_x <- rho beta_x + sum_g (1 - R)
    rho     = rho_value                               (rho="constant")
            = clip(2^(-D_x / d_half), rho_min, rho_max) (rho="kl_adaptive")

  x is the prompt's `data.Example.index` (`GroupData.prompt_index`), its
  slot in fixed tables of `capacity` entries (`prompt_ids.slots`: the id
  itself, or with ``prompt_ids="hash"`` the id mod capacity); an untracked
  prompt (index -1, or outside an exact table) uses the prior alpha = beta
  = 0.5 and is never written. The paper draws one sample per prompt (G = 1); with G > 1 each
  member is a sample against the same v_x and the update adds the group's
  successes once, after one decay.

  SPO, "Single-stream Policy Optimization" (seed 002 para. 7; its arXiv
  id is not in the seed), after verl's ``recipe/spo`` (VARIANTS.md
  section 1.4). D_x (`GroupData.divergence`) is the masked token mean of
  |logp_then(y_prev) - logp_now(y_prev)|, y_prev the response stored at
  the prompt's previous visit (`grpo_jax.rollout.revisits`); a first visit has
  D = 0, so rho = rho_max. The rollout measures D before the step's
  update, against the log-probs stored before the previous visit's update;
  verl measures both after the update: the same number of updates apart,
  one step earlier. Prompt sampling by the tracker's priority is the
  ``prioritized`` selection (`strategies.select`).

  Offline initialisation (``offline_init`` = n > 0; `spo_offline`): at a
  fresh run's first step, before its prompts are drawn, n completions of
  every training problem under the initial policy set each slot to

    N_init = 1 / (1 - rho_min)
    alpha_x = N_init (k_x + 0.5) / (n + 1),  beta_x = N_init (n - k_x + 0.5) / (n + 1)

  (`spo_prior`), k_x the solved ones (verl: a separate pass of n = 8
  samples, ``offline_N``). No flag is stored: the pass runs at step 0, and
  a resumed run starts past it (checkpoints are written after a step), so
  `SPOState` and older checkpoints keep their shape.

  Args:
    rewards: [P, G] rewards in [0, 1] (binary in the paper).
    state: the `SPOState` from before this batch (`spo_init(capacity=)`).
    rho: the forgetting rule, ``constant`` or ``kl_adaptive`` (verl's
      ``rho.type="kl"``, its default).
    rho_value: the constant rho, in (0, 1].
    rho_min, rho_max: the KL-adaptive rho's clip (verl: ``clip_lower``
      0.875 and 0.96).
    d_half: the divergence that halves rho before the clip (0.06).
    eps: added to the batch std.
    prompt_ids: ``exact`` (slot = id; train.validate refuses a task whose
      ids reach past the table) or ``hash`` (slot = id mod capacity).
    offline_init: n offline samples per training problem the tracker
      starts from (0: the prior alpha = beta = 0.5); read by the rollout
      at step 0 (`spo_offline`), checked here.
    valid: [P] bool, False for filler groups: 0 and no write.
    prompt_index: [P] int, each prompt's id (-1: untracked).
    divergence: [P] float32 D_x >= 0, read with ``rho="kl_adaptive"``.

  Returns:
    ([P, G] float32 advantages, the updated `SPOState`).
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  _check_spo_options(rho, rho_value, rho_min, rho_max, d_half)
  check_offline_init(offline_init, rho_min)
  num_prompts = rewards.shape[0]
  valid = _kit.check_valid(valid, num_prompts)
  if prompt_index is None:
    raise ValueError("spo reads GroupData.prompt_index; pass prompt_index=.")
  prompt_index = jnp.asarray(prompt_index, jnp.int32)
  if prompt_index.shape != (num_prompts,):
    raise ValueError(f"prompt_index must be [P] with P={num_prompts}; got "
                     f"shape {prompt_index.shape}.")
  slot, tracked = prompt_ids_lib.slots(prompt_index, state.alpha.shape[0],
                                       prompt_ids, xp=jnp)
  prompt_index = jnp.where(tracked, slot, -1)  # ids -> slots, -1 untracked
  values = spo_values(state, prompt_index)
  advantages = spo_advantages(rewards, values, valid, eps=eps)
  write = valid & _tracked(prompt_index, state.alpha.shape[0])
  if rho == "kl_adaptive":
    if divergence is None:
      raise ValueError("spo with rho='kl_adaptive' reads GroupData."
                       "divergence; pass divergence=.")
    divergence = jnp.asarray(divergence, jnp.float32)
    if divergence.shape != (num_prompts,):
      raise ValueError(f"divergence must be [P] with P={num_prompts}; got "
                       f"shape {divergence.shape}.")
    rhos = spo_rho(divergence, rho_min=rho_min, rho_max=rho_max,
                   d_half=d_half)
  else:
    rhos = jnp.full((num_prompts,), rho_value, jnp.float32)
  new_state = spo_update(state, rewards, prompt_index, rhos, write)
  return _kit.zero_fillers(advantages, valid), new_state


# ------------------------------------------------------------------- RiskPO

RISKPO_QUANTILES = ("track", "batch")
RISKPO_CREDIT = ("uniform", "std")
RISKPO_RVAR_DENOMINATORS = ("levels", "quantiles")


class RiskPOState(NamedTuple):
  """RiskPO's tracked quantiles of the paper scores.

  Attributes:
    quantiles: [2] float32, q_alpha and q_beta.
    started: [] float32, 1 once a batch has set them (the first batch's
      empirical quantiles), else 0.
  """
  quantiles: jnp.ndarray
  started: jnp.ndarray


def riskpo_init() -> RiskPOState:
  return RiskPOState(quantiles=jnp.zeros((2,), jnp.float32),
                     started=jnp.zeros((), jnp.float32))


def masked_quantile(x, mask, levels):
  """[L] quantiles of the entries of x [M] where mask is True, linearly
  interpolated (``torch.quantile``'s default); 0 where none is."""
  count = mask.sum()
  ordered = jnp.sort(jnp.where(mask, x, jnp.inf))
  position = jnp.asarray(levels, jnp.float32) * jnp.maximum(count - 1, 0)
  low = jnp.floor(position).astype(jnp.int32)
  high = jnp.minimum(low + 1, jnp.maximum(count - 1, 0))
  frac = position - low
  lo_value = ordered[low]
  hi_value = jnp.where(frac > 0, ordered[high], lo_value)
  return jnp.where(count > 0, lo_value + frac * (hi_value - lo_value), 0.0)


def riskpo_papers(rewards, valid, bundle_size: int):
  """[P / B, G] paper scores S_bj = sum_{q in bundle b, valid} R[q, j]: the
  j-th completions of a bundle's B questions form paper j."""
  num_prompts, group_size = rewards.shape
  masked = jnp.where(valid[:, None], rewards, 0.0)
  return masked.reshape(num_prompts // bundle_size, bundle_size,
                        group_size).sum(1)


def riskpo_paper_advantages(papers, q_alpha, q_beta, *, alpha: float,
                            beta: float, w_mix: float, eps: float,
                            rvar_denominator: str = "levels"):
  """[Bn, G] a = (w a_C + a_R) / (w + 1) / (std_bundle(S) + eps):

    a_R = (clip(S, q_alpha, q_beta) - q_beta) / (beta - alpha + eps)
    a_C = -(q_alpha - S)^+ / (alpha + eps)

  q_alpha, q_beta broadcast against `papers` ([Bn, 1] or []); the std is
  over each bundle's G papers (ddof=1; 0 for one paper)."""
  width = {"levels": beta - alpha,
           "quantiles": q_beta - q_alpha}[rvar_denominator] + eps
  a_r = (jnp.clip(papers, q_alpha, q_beta) - q_beta) / width
  a_c = -jnp.maximum(q_alpha - papers, 0.0) / (alpha + eps)
  mixed = (w_mix * a_c + a_r) / (w_mix + 1.0)
  return _kit.divide_by_std(mixed, _kit.std(papers, -1, 1), eps)


def _track_quantiles(state: RiskPOState, papers, bundle_valid, levels, *,
                     lr_q: float):
  """(the quantiles this batch uses, the new state) over the valid papers:
  the batch's empirical ones on the first batch, the state's after; then
  one quantile-regression step q <- q + lr_q (level - mean(S < q))."""
  paper_valid = jnp.broadcast_to(bundle_valid[:, None], papers.shape)
  flat, flat_valid = papers.reshape(-1), paper_valid.reshape(-1)
  current = jnp.where(state.started > 0, state.quantiles,
                      masked_quantile(flat, flat_valid, levels))
  below = (flat[:, None] < current[None, :]).astype(jnp.float32)  # [M, 2]
  weight = flat_valid[:, None].astype(jnp.float32)
  share = (below * weight).sum(0) / jnp.maximum(weight.sum(), 1.0)
  # The first batch only sets the quantiles.
  stepped = jnp.where(state.started > 0, current + lr_q * (levels - share),
                      current)
  seen = bundle_valid.any()
  return current, RiskPOState(
      quantiles=jnp.where(seen, stepped, state.quantiles),
      started=jnp.where(seen, 1.0, state.started).astype(jnp.float32))


def _check_riskpo(*, bundle_size, quantiles, credit, alpha, beta, w_mix,
                  lr_q, rvar_denominator, eps, **_) -> None:
  """RiskPO's option values (registry metadata ``check``); that
  `bundle_size` divides P is the stage checks' (and the function's)."""
  _kit.check_int("bundle_size", bundle_size, low=1, why="questions per "
                 "bundle; the paper's 5")
  _kit.check_choice("quantiles", quantiles, RISKPO_QUANTILES)
  _kit.check_choice("credit", credit, RISKPO_CREDIT)
  _kit.check_choice("rvar_denominator", rvar_denominator,
                    RISKPO_RVAR_DENOMINATORS)
  for key, value in (("alpha", alpha), ("beta", beta)):
    _kit.check_real(key, value, low=0.0, high=1.0, low_open=True,
                    high_open=True, why="a quantile level of the paper "
                    "scores; the defaults are 0.2 and 0.9")
  if not alpha < beta:
    raise registry.OptionError(
        "beta", f"alpha={alpha!r} and beta={beta!r} must satisfy 0 < alpha "
        "< beta < 1 (the lower and upper quantile levels); set beta above "
        "alpha.")
  # w + 1 divides the mix: a negative weight flips the CVaR part's sign.
  _kit.check_real("w_mix", w_mix, low=0.0, why="the CVaR part's weight")
  _kit.check_real("lr_q", lr_q, low=0.0, why="the quantile tracker's step "
                  "size; 0 keeps the first batch's quantiles")
  _kit.check_real("eps", eps, low=0.0)


def _check_bundles(bundle_size, num_prompts) -> None:
  if num_prompts % bundle_size:
    raise registry.OptionError(
        "bundle_size", f"bundle_size={bundle_size} does not divide the "
        f"P={num_prompts} prompts of a batch; choose a divisor of "
        "rollout.num_prompts.")


def _riskpo_independent(quantiles="track", bundle_size=1, **_):
  return quantiles == "batch" and bundle_size == 1


@_kit.register(
    input="PG", output="group",
    paper="RiskPO, Risk-based Policy Optimization (seed 002 para. 3)",
    # Batch quantiles of a bundle's own papers give an all-equal bundle 0;
    # tracked quantiles (state) and bundles couple groups.
    constant_group_zero=_riskpo_independent,
    independent_groups=_riskpo_independent, reads=("valid",),
    # Tracked quantiles place a bundle's one paper among the batch's; a
    # bundle's own quantiles of one paper are that paper (a = 0).
    min_group_size=lambda quantiles="track", **_: (
        2 if quantiles == "batch" else 1),
    state=_kit.StateSpec(init=riskpo_init), check=_check_riskpo,
    examples=({}, {"quantiles": "batch"},
              {"quantiles": "batch", "credit": "uniform",
               "rvar_denominator": "quantiles"},
              {"lr_q": 0.5, "w_mix": 0.0}))
def riskpo(rewards, state: RiskPOState, *, bundle_size: int = 1,
           quantiles: str = "track", credit: str = "std", alpha: float = 0.2,
           beta: float = 0.9, w_mix: float = 1.5, lr_q: float = 0.1,
           rvar_denominator: str = "levels", eps: float = 1e-6, valid=None):
  """RiskPO's mixed value-at-risk advantage over bundles of questions.

    S_bj   = sum_{q in bundle b} R[q, j]              paper j of bundle b
    a_R    = (clip(S, q_alpha, q_beta) - q_beta) / (beta - alpha + eps)
    a_C    = -(q_alpha - S)^+ / (alpha + eps)
    a      = (w a_C + a_R) / (w + 1) / (std_bundle(S) + eps)   (ddof=1)
    A[q,j] = a_bj                  (credit="uniform")
           = a_bj / (std_q + eps)  (credit="std"; std_q <= 1e-3 -> 1)

  Every advantage is <= 0: q_beta is the baseline. The quantiles are the
  bundle's empirical ones (``quantiles="batch"``) or tracked over the
  valid papers of every step (``"track"``, the state): the first batch
  sets them to its empirical quantiles, and each later batch, after its
  advantages, takes one quantile-regression step
  q <- q + lr_q (level - mean(S < q)).

  RiskPO, Risk-based Policy Optimization (seed 002 para. 3; its arXiv id
  is not in the seed), after the authors'
  ``compute_grpo_bundle_rvar_outcome_advantage_quantile_tracking``
  (VARIANTS.md section 1.9).

  Args:
    rewards: [P, G] rewards.
    state: the `RiskPOState` from before this batch (`riskpo_init()`).
    bundle_size: B questions per bundle; must divide P (the paper: 5).
    quantiles: ``track`` (the default) or ``batch``.
    credit: ``std`` (the default) or ``uniform``.
    alpha, beta: the lower and upper quantile levels.
    w_mix: the CVaR part's weight.
    lr_q: the tracker's step size.
    rvar_denominator: ``levels`` (beta - alpha, the default) or
      ``quantiles`` (q_beta - q_alpha, the authors' batch estimator).
    eps: the epsilon of every division.
    valid: [P] bool, False for filler groups: 0, no part in a paper or in
      the tracked quantiles.

  Returns:
    ([P, G] float32 advantages, the updated `RiskPOState`).
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  num_prompts = rewards.shape[0]
  _check_riskpo(bundle_size=bundle_size, quantiles=quantiles, credit=credit,
                alpha=alpha, beta=beta, w_mix=w_mix, lr_q=lr_q,
                rvar_denominator=rvar_denominator, eps=eps)
  _check_bundles(bundle_size, num_prompts)
  valid = _kit.check_valid(valid, num_prompts)
  papers = riskpo_papers(rewards, valid, bundle_size)  # [Bn, G]
  bundle_valid = valid.reshape(-1, bundle_size).any(-1)  # [Bn]
  levels = jnp.asarray([alpha, beta], jnp.float32)
  current, new_state = _track_quantiles(state, papers, bundle_valid, levels,
                                        lr_q=lr_q)
  if quantiles == "batch":
    q = jnp.quantile(papers, levels, axis=-1).T  # [Bn, 2]
    q_alpha, q_beta = q[:, :1], q[:, 1:]
  else:
    q_alpha, q_beta = current[0], current[1]
  paper_adv = riskpo_paper_advantages(
      papers, q_alpha, q_beta, alpha=alpha, beta=beta, w_mix=w_mix, eps=eps,
      rvar_denominator=rvar_denominator)
  advantages = jnp.repeat(paper_adv, bundle_size, axis=0)  # [P, G]
  if credit == "std":
    question_std = _kit.std(rewards, -1, 1)
    question_std = jnp.where(question_std <= 1e-3, 1.0, question_std)
    advantages = advantages / (question_std + eps)
  return _kit.zero_fillers(advantages, valid), new_state
