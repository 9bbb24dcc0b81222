"""Group advantages rescaled or re-baselined by extra group data: NGRPO (a
virtual maximum-reward member), SEED-GRPO (semantic entropy of the group's
answers), LamPO / LambdaPO (pairwise gaps weighted by the policy's own
confidence), EDGE-GRPO (per-completion entropy) and GRPO-LEAD (the share
of the group that succeeds).

Each is pure and jittable and computes in float32. The group data an
estimator reads beyond the rewards (``answer_ids``, ``sequence_logprobs``,
``entropies``, ...) is named in its registration's ``reads`` and arrives as
keyword arguments. Filler groups (``valid`` False) get 0 (`advantages.make`
sets them) and enter no batch statistic.
"""

import math

import jax
import jax.numpy as jnp

from grpo_jax import registry
from grpo_jax.advantages import _kit


def _check_pg(argument: str, x, shape) -> jnp.ndarray:
  x = jnp.asarray(x)
  if x.shape != tuple(shape):
    raise ValueError(
        f"{argument} must be [P, G] = {tuple(shape)}; got shape {x.shape}.")
  return x


# --------------------------------------------------------------------- NGRPO


def _check_ngrpo(*, r_max, n_virtual, eps, ddof, **_) -> None:
  _kit.check_real("r_max", r_max, why="the largest reward the rewards "
                  "reach, 1.0 for accuracy")
  _kit.check_int("n_virtual", n_virtual, low=1, why="the paper's "
                 "add_max_reward_num, default 1")
  _kit.check_std_options(eps=eps, ddof=ddof)


def _ngrpo_domain(r_max: float = 1.0, **_):
  # The virtual member is the group's maximum only if no reward exceeds it.
  return (-math.inf, r_max)


@_kit.register(
    input="PG", output="group", paper="arXiv 2509.18851 (NGRPO)",
    # The virtual r_max member gives an all-equal group below r_max a
    # negative advantage, and absolute reward values matter.
    constant_group_zero=False, shift_invariant=False,
    reward_range=_ngrpo_domain, check=_check_ngrpo,
    examples=({}, {"r_max": 2.0, "n_virtual": 2}, {"ddof": 0}))
def ngrpo(rewards, *, r_max: float = 1.0, n_virtual: int = 1,
          eps: float = 1e-6, ddof: int = 1) -> jnp.ndarray:
  """NGRPO's advantage: GRPO over the group plus virtual maximum rewards.

    R' = [R_1, ..., R_G, r_max x m],  mu' = mean R',  sigma' = std R' (ddof)
    A_g = (R_g - mu') / (sigma' + eps)      (real members only)

  An all-wrong group gets A < 0 for every member (the negative signal
  GRPO's advantage loses); every mixed group is shifted down too; a group
  all at r_max gets 0. NGRPO (arXiv 2509.18851) pairs this with an
  asymmetric clip, which is ``ppo_clip`` with clip_low 0.16, clip_high
  0.24 (configs/ngrpo.py). Follows the authors' code
  (``compute_ngrpo_outcome_advantage``), except that a group of one gets 0,
  as for every estimator here (their code gives it mean 0, std 1: A = R).

  Args:
    rewards: [P, G] rewards, none above r_max.
    r_max: the virtual members' reward, the task's maximum.
    n_virtual: m, the number of virtual members (add_max_reward_num).
    eps: added to the std.
    ddof: delta degrees of freedom of the std over the G + m values.

  Returns:
    [P, G] float32 advantages.
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  _check_ngrpo(r_max=r_max, n_virtual=n_virtual, eps=eps, ddof=ddof)
  p, g = rewards.shape
  if g == 1:
    return jnp.zeros_like(rewards)
  virtual = jnp.full((p, n_virtual), r_max, jnp.float32)
  augmented = jnp.concatenate([rewards, virtual], axis=-1)
  return _kit.standardize_groups(augmented, eps=eps, ddof=ddof)[:, :g]


# ----------------------------------------------------------------- SEED-GRPO


def _check_seed(*, alpha, eps, ddof, **_) -> None:
  _kit.check_real("alpha", alpha, low=0.0, high=1.0, why="the factor 1 - "
                  "alpha SE / SE_max stays in [0, 1]; the default is 0.5")
  _kit.check_std_options(eps=eps, ddof=ddof)


def semantic_entropy(answer_ids) -> jnp.ndarray:
  """SE / SE_max of each group's answer classes, [P, 1] float32 in [0, 1].

  SE = -sum_c p_c log p_c, p_c = count_c / G, SE_max = log G; each -1 (no
  answer parsed) is a class of its own; 0 for a group of one. Only equality
  of ids matters, so any labelling of the classes gives the same value.
  """
  answer_ids = jnp.asarray(answer_ids)
  g = answer_ids.shape[-1]
  if g == 1:
    return jnp.zeros((answer_ids.shape[0], 1), jnp.float32)
  same = answer_ids[:, :, None] == answer_ids[:, None, :]  # [P, G, G]
  count = jnp.where(answer_ids >= 0, same.sum(-1), 1).astype(jnp.float32)
  # sum_c p_c log p_c = sum_g (1 / G) log p_{c(g)}: each member carries
  # 1 / count_c of its class's term, so no unique() is needed.
  entropy = -jnp.log(count / g).mean(axis=-1, keepdims=True)
  return entropy / math.log(g)


@_kit.register(
    input="PG", output="group",
    paper="arXiv 2505.12346 (SEED-GRPO; reconstruction)",
    reads=("answer_ids",), check=_check_seed,
    examples=({}, {"alpha": 1.0}, {"alpha": 0.0, "ddof": 0}))
def seed_grpo(rewards, *, alpha: float = 0.5, eps: float = 1e-6,
              ddof: int = 1, answer_ids=None) -> jnp.ndarray:
  """SEED-GRPO: GRPO's advantage damped by the group's semantic entropy.

    A' = z(R) (1 - alpha SE / SE_max),  SE = -sum_c p_c log p_c,
    p_c = count_c / G,  SE_max = log G

  over the answer-equivalence classes c of the group (`semantic_entropy`):
  a question whose answers disagree (high uncertainty) gets a smaller,
  more conservative update. SEED-GRPO (arXiv 2505.12346) gives the form of
  the modulation; no code was found and alpha is not known: a
  reconstruction (VARIANTS.md section 1.7), alpha=0.5 a proposal.

  Args:
    rewards: [P, G] rewards.
    alpha: in [0, 1]; 0 is GRPO, 1 zeroes a group of G distinct answers.
    eps: added to the std of z(R).
    ddof: delta degrees of freedom of that std.
    answer_ids: [P, G] int, each completion's answer class (equal ids, equal
      answers); -1 where none parsed, a class of its own.

  Returns:
    [P, G] float32 advantages; exactly 0 for groups of equal rewards.
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  _check_seed(alpha=alpha, eps=eps, ddof=ddof)
  if answer_ids is None:
    raise ValueError("seed_grpo needs answer_ids [P, G] (GroupData."
                     "answer_ids, which the rollout fills when the estimator "
                     "reads it).")
  answer_ids = _check_pg("answer_ids", answer_ids, rewards.shape)
  factor = 1.0 - alpha * semantic_entropy(answer_ids)
  return _kit.standardize_groups(rewards, eps=eps, ddof=ddof) * factor


# --------------------------------------------------------------------- LamPO

LAMPO_SCORES = ("mean", "sum")
LAMPO_SCALES = ("none", "std")


def _check_lampo(*, beta, score, scale, eps, ddof, **_) -> None:
  _kit.check_real("beta", beta, low=0.0, why="0 is RLOO; a negative beta "
                  "would amplify the pairs the policy already ranks right")
  _kit.check_choice("score", score, LAMPO_SCORES)
  _kit.check_choice("scale", scale, LAMPO_SCALES)
  _kit.check_std_options(eps=eps, ddof=ddof)


def sequence_scores(sequence_logprobs, lengths, score: str) -> jnp.ndarray:
  """[P, G] float32 s: the sum of each completion's log-probs, or (score=
  "mean") that sum over its length; 0 for an empty completion."""
  total = jnp.asarray(sequence_logprobs, jnp.float32)
  if score == "sum":
    return total
  return total / jnp.maximum(jnp.asarray(lengths, jnp.float32), 1.0)


@_kit.register(
    input="PG", output="group",
    paper="LamPO / LambdaPO (seed 000 para. 54, 59; reconstruction)",
    reads=("sequence_logprobs", "lengths"), check=_check_lampo,
    examples=({}, {"beta": 0.0}, {"beta": 3.0, "score": "sum"},
              {"scale": "std", "ddof": 0}))
def lampo(rewards, *, beta: float = 1.0, score: str = "mean",
          scale: str = "none", eps: float = 1e-6, ddof: int = 1,
          sequence_logprobs=None, lengths=None) -> jnp.ndarray:
  """LamPO / LambdaPO: pairwise reward gaps weighted by the policy's
  confidence in them (a LambdaRank / RankNet pair weight).

    A_i  = 1/(G-1) sum_{j != i} w_ij (R_i - R_j)
    w_ij = 2 sigmoid(-beta sgn(R_i - R_j) (s_i - s_j))

  s the sequence scores (mean token log-prob, detached; ``score="sum"``
  the sum): a pair the policy already ranks right (the better completion
  more likely) is attenuated, one it ranks wrong amplified, up to 2x.
  w_ij = w_ji, so sum_i A_i = 0; beta = 0 gives RLOO; tied pairs give 0.
  ``scale="std"`` divides by std_g R + eps. LamPO and LambdaPO (seeds 000
  para. 54 and 59) describe this modulation; no code was found, the pair
  weight is a reconstruction (VARIANTS.md section 1.8). Their auxiliary
  rewards (ROUGE-L, semantic density) are reward functions, not part of
  this estimator.

  Args:
    rewards: [P, G] rewards.
    beta: >= 0, the confidence temperature.
    score: ``mean`` (length-normalised) or ``sum`` sequence log-prob.
    scale: ``none`` or ``std``.
    eps, ddof: of the std, for ``scale="std"``.
    sequence_logprobs: [P, G] sum of each completion's sampled log-probs.
    lengths: [P, G] completion lengths (for ``score="mean"``); default
      all 0, which makes the mean the sum (the rollout always gives them).

  Returns:
    [P, G] float32 advantages; exactly 0 for groups of equal rewards.
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  _check_lampo(beta=beta, score=score, scale=scale, eps=eps, ddof=ddof)
  if sequence_logprobs is None:
    raise ValueError("lampo needs sequence_logprobs [P, G] (GroupData."
                     "sequence_logprobs, the sampler's summed log-probs).")
  sequence_logprobs = _check_pg("sequence_logprobs", sequence_logprobs,
                                rewards.shape)
  lengths = _kit.check_lengths(lengths, rewards.shape)
  g = rewards.shape[-1]
  if g == 1:
    return jnp.zeros_like(rewards)
  s = jax.lax.stop_gradient(sequence_scores(sequence_logprobs, lengths, score))
  gap = rewards[:, :, None] - rewards[:, None, :]  # [P, G(i), G(j)]
  confidence = jnp.sign(gap) * (s[:, :, None] - s[:, None, :])
  weight = 2.0 * jax.nn.sigmoid(-beta * confidence)
  advantages = (weight * gap).sum(axis=-1) / (g - 1)
  if scale == "std":
    _kit.check_ddof(ddof, g)
    advantages = _kit.divide_by_std(advantages, _kit.std(rewards, -1, ddof),
                                    eps)
  return advantages


# ----------------------------------------------------------------- EDGE-GRPO

EDGE_NORMALIZERS = ("batch", "group")


def _check_edge(*, normalizer, eps, ddof, min_entropy, **_) -> None:
  _kit.check_choice("normalizer", normalizer, EDGE_NORMALIZERS)
  _kit.check_std_options(eps=eps, ddof=ddof)
  _kit.check_real("min_entropy", min_entropy, low=0.0, low_open=True,
                  why="the floor H_i is clamped to before dividing; the "
                  "default is 1e-6")


@_kit.register(
    input="PG", output="group", paper="arXiv 2507.21848 (EDGE-GRPO)",
    reads=("entropies", "lengths", "valid"), check=_check_edge,
    # The batch mean entropy couples the groups.
    independent_groups=lambda normalizer="batch", **_: normalizer != "batch",
    examples=({}, {"normalizer": "group"}, {"eps": 1e-6, "ddof": 0}))
def edge_grpo(rewards, *, normalizer: str = "batch", eps: float = 1e-4,
              ddof: int = 1, min_entropy: float = 1e-6, entropies=None,
              lengths=None, valid=None) -> jnp.ndarray:
  """EDGE-GRPO's entropy-driven advantage: z(R) scaled by mean H / H_i.

    A'_i = z(R)_i * mean(H) / max(H_i, min_entropy)

  H_i the masked mean token entropy of completion i (detached), the mean
  over the batch's valid groups (``normalizer="batch"``) or over i's group
  (``"group"``): a confident (low-entropy) completion gets a larger |A|, so
  a confident error is penalised more. z(R) is GRPO's (ddof=1, eps=1e-4
  as the authors' TRL code). Follows EDGE-GRPO (arXiv 2507.21848, its
  ``_compute_loss`` with EDA) with three fixes: H is the masked mean (the
  code averages over padding too), it is detached (the code lets a
  gradient flow through it), and the mean is over the whole batch (the
  code's is over the gathered micro-batch). An empty completion (length 0)
  gets 0 and enters no mean. Its Guided Error Correction (a reference
  answer injected into wrong completions) is a data step, not part of it.

  Args:
    rewards: [P, G] rewards.
    normalizer: ``batch`` or ``group``: where mean(H) is taken.
    eps: added to the std of z(R).
    ddof: delta degrees of freedom of that std.
    min_entropy: the floor H_i is clamped to before dividing.
    entropies: [P, G] each completion's mean token entropy.
    lengths: [P, G] completion lengths; default all nonempty.
    valid: [P] bool, False for filler groups: they enter no mean.

  Returns:
    [P, G] float32 advantages; exactly 0 for groups of equal rewards.
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  _check_edge(normalizer=normalizer, eps=eps, ddof=ddof,
              min_entropy=min_entropy)
  if entropies is None:
    raise ValueError("edge_grpo needs entropies [P, G] (GroupData.entropies, "
                     "each completion's mean token entropy).")
  entropy = jax.lax.stop_gradient(jnp.asarray(
      _check_pg("entropies", entropies, rewards.shape), jnp.float32))
  valid = _kit.check_valid(valid, rewards.shape[0])
  nonempty = (jnp.ones(rewards.shape, bool) if lengths is None
              else _kit.check_lengths(lengths, rewards.shape) > 0)
  members = (nonempty & valid[:, None]).astype(jnp.float32)
  axis = None if normalizer == "batch" else -1
  mean_entropy = ((entropy * members).sum(axis=axis, keepdims=True)
                  / jnp.maximum(members.sum(axis=axis, keepdims=True), 1.0))
  scale = mean_entropy / jnp.maximum(entropy, min_entropy)
  z = _kit.standardize_groups(rewards, eps=eps, ddof=ddof)
  return jnp.where(members > 0, z * scale, 0.0)


# ------------------------------------------------------------------ GRPO-LEAD


def _check_lead(*, low, high, k, x0, eps, ddof, **_) -> None:
  for key, value in (("low", low), ("high", high)):
    _kit.check_real(key, value, low=0.0, why="the weight's range; the "
                    "paper's 0.4 and 1.5")
  if not low <= high:
    raise registry.OptionError(
        "high", f"low={low!r} and high={high!r} must satisfy low <= high "
        "(the weight's range; the paper's 0.4 and 1.5); set high >= low.")
  _kit.check_real("k", k, low=0.0, why="the logistic's steepness; the "
                  "paper's 10")
  _kit.check_real("x0", x0, why="the logistic's midpoint; the paper's 0.75")
  _kit.check_std_options(eps=eps, ddof=ddof)


def lead_weight(x, *, low: float = 0.4, high: float = 1.5, k: float = 10.0,
                x0: float = 0.75) -> jnp.ndarray:
  """w(x) = low + (high - low) / (1 + exp(k (x - x0))), in [low, high]."""
  return low + (high - low) * jax.nn.sigmoid(-k * (x - x0))


@_kit.register(
    input="PG", output="group", paper="GRPO-LEAD (seed 002 para. 42)",
    # R > 0 decides rho: absolute reward values matter.
    shift_invariant=False, check=_check_lead,
    examples=({}, {"k": 5.0, "x0": 0.5}, {"low": 1.0, "high": 1.0}))
def grpo_lead(rewards, *, low: float = 0.4, high: float = 1.5,
              k: float = 10.0, x0: float = 0.75, eps: float = 1e-6,
              ddof: int = 1) -> jnp.ndarray:
  """GRPO-LEAD's difficulty-aware advantage: GRPO's, reweighted by how many
  of the group succeed.

    A   = (R - mean_g R) / (std_g R + eps)        (`grpo`, ddof=1)
    rho = share of the group with R > 0
    A  <- A w(rho)       where A > 0
          A w(1 - rho)   otherwise,    w = `lead_weight`

  so on a hard prompt (rho small) a success is amplified (w near 1.5) and
  a failure damped, and on an easy one the reverse. GRPO-LEAD (seed 002
  para. 42; aeroplanepaper/GRPO-LEAD ``logistic_reweight`` and
  ``compute_grpo_outcome_advantage``), VARIANTS.md 5.3; its reward is the
  `grpo_lead` shaper (R > 0 exactly for the correct answers there).
  ``low == high == 1`` is `grpo`.

  Args:
    rewards: [P, G] the shaped rewards.
    low, high: the weight's range, 0 <= low <= high.
    k, x0: the logistic's steepness and midpoint.
    eps, ddof: `grpo`'s.

  Returns:
    [P, G] float32 advantages.
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  _check_lead(low=low, high=high, k=k, x0=x0, eps=eps, ddof=ddof)
  a = _kit.standardize_groups(rewards, eps=eps, ddof=ddof)
  rho = (rewards > 0).astype(jnp.float32).mean(axis=-1, keepdims=True)
  opts = dict(low=low, high=high, k=k, x0=x0)
  return jnp.where(a > 0, a * lead_weight(rho, **opts),
                   a * lead_weight(1.0 - rho, **opts))
