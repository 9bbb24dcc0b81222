"""Shapers of what the rewards and the sampler say beyond length: the
sampler's confidence in its own completion (ConSteer-RL), rubric
criteria weighted by how much they currently separate a group (POW3R),
and the repetition of the completion's own n-grams."""

import math

import numpy as np

from grpo_jax.rewards.shapers import (SHAPERS, check_group_size,
                                      check_lengths, check_rows)

CONFIDENCE_AGGREGATIONS = ("geometric", "mean_prob")


def confidence(sampler_logp, mask, *, agg: str = "geometric") -> np.ndarray:
  """[N] the sampler's confidence in each completion, from its own
  log-probs of its tokens:

    geometric:  c = exp((1/n) sum_t logp_t)   (the geometric-mean probability)
    mean_prob:  c = (1/n) sum_t exp(logp_t)

  0 for an empty completion (n = 0)."""
  logp = np.asarray(sampler_logp, np.float64)
  mask = np.asarray(mask, np.float64)
  if logp.ndim != 2 or logp.shape != mask.shape:
    raise ValueError(f"sampler_logp and mask must both be [N, T]; got "
                     f"{logp.shape} and {mask.shape}.")
  # Padding may hold -inf or garbage: only sampled tokens count.
  logp = np.where(mask > 0, logp, 0.0)
  n = mask.sum(-1)
  if agg == "geometric":
    c = np.exp((logp * mask).sum(-1) / np.maximum(n, 1.0))
  else:
    c = (np.exp(logp) * mask).sum(-1) / np.maximum(n, 1.0)
  return np.where(n > 0, c, 0.0)


def _check_consteer(*, lam=0.5, agg="geometric"):
  if agg not in CONFIDENCE_AGGREGATIONS:
    raise ValueError(f"agg={agg!r} is unknown; choose one of "
                     f"{', '.join(CONFIDENCE_AGGREGATIONS)}.")
  if not 0 <= lam < math.inf:
    raise ValueError(f"lam={lam!r} must be a finite number >= 0.")


@SHAPERS.register(
    "consteer", paper="ConSteer-RL (seed 000 para. 11), reconstruction",
    reads=("correct", "sampler_logp", "mask"),
    range=lambda *, lam=0.5, agg="geometric": (-lam, lam),
    check=_check_consteer,
    examples=({}, {"lam": 1.0, "agg": "mean_prob"}))
def consteer(lengths, *, correct, sampler_logp, mask, lam: float = 0.5,
             agg: str = "geometric") -> np.ndarray:
  """Confidence-steered reward: reinforce confident correct answers,
  punish confident errors.

    column = lam c       if correct
           = -lam c      otherwise,       c = `confidence` in [0, 1]

  so R' = R + column. The log-probs are the sampler's own, recorded at
  rollout (at its temperature), never recomputed. **Reconstruction**
  (VARIANTS.md 5.1): the seed (000 para. 11) says "aggregating per-token
  probabilities into a scalar confidence score ... penalizes overconfident
  errors while reinforcing correct and confident reasoning"; the
  aggregation and the +-lam form are proposed, lam = 0.5 invented.

  Args:
    lengths: [N] (unused: the mask gives n).
    correct: [N] 1 where the answer is right.
    sampler_logp: [N, T] the sampler's log-probs of its tokens.
    mask: [N, T] 1 on sampled tokens.
    lam: the steering weight.
    agg: ``geometric`` or ``mean_prob`` (`confidence`).

  Returns:
    [N] float32 in [-lam, lam].
  """
  _check_consteer(lam=lam, agg=agg)
  c = confidence(sampler_logp, mask, agg=agg)
  ok = check_rows("correct", correct, c.shape[0]) >= 0.5
  del lengths
  return (lam * np.where(ok, c, -c)).astype(np.float32)


# ----------------------------------------------------------------- POW3R


def pow3r_weights(scores, human_weights, categories, *, temp: float = 0.5
                  ) -> np.ndarray:
  """[P, C] POW3R's contrast-adapted criterion weights.

    sigma_pc = std_g s_pgc  (ddof=0)
    w_pc = H_k h_c e^{sigma_pc / temp} / sum_{c' in k} h_c' e^{sigma_pc' / temp}

  for c in category k, H_k = sum_{c in k} h_c: each category keeps its
  human mass and redistributes it towards the criteria that separate the
  group's outputs now.

  Args:
    scores: [P, G, C] criterion scores in [0, 1].
    human_weights: [C] h >= 0.
    categories: [C] int category of each criterion.
    temp: the contrast temperature (large: the static rubric).
  """
  s = np.asarray(scores, np.float64)
  h = np.asarray(human_weights, np.float64)
  cat = np.asarray(categories)
  sigma = s.std(axis=1)
  w = np.zeros_like(sigma)
  for k in np.unique(cat):
    members = cat == k
    # Shifted by the category's largest contrast: no overflow at small temp.
    logits = (sigma[:, members] - sigma[:, members].max(-1, keepdims=True)
              ) / temp
    e = h[members] * np.exp(logits)
    total = e.sum(-1, keepdims=True)
    w[:, members] = np.where(total > 0, h[members].sum() * e
                             / np.where(total > 0, total, 1.0), 0.0)
  return w


def _check_pow3r(*, categories=(), temp=0.5):
  if not all(isinstance(k, int) for k in categories):
    raise ValueError(f"categories={tuple(categories)!r} must be integers, "
                     "one per reward function (rewards.functions).")
  if not 0 < temp < math.inf:
    raise ValueError(f"temp={temp!r} must be a finite number > 0.")


def _check_rubric(*, functions, weights, ranges, categories=(), temp=0.5):
  """(field, problem, fix) unless the verifiers form POW3R's rubric: one
  category each, weights >= 0 summing to 1 (so the column lies in [-1, 1]
  and verifiers + column is the paper's R), scores in [0, 1]."""
  del temp
  if len(tuple(categories)) != len(functions):
    return ("rewards.shapers.pow3r.categories",
            f"gives {len(tuple(categories))} categories for "
            f"{len(functions)} reward functions (the rubric's criteria)",
            "give one integer category per entry of rewards.functions")
  if any(w < 0 for w in weights) or abs(sum(weights) - 1.0) > 1e-6:
    return ("rewards.weights", f"{tuple(weights)!r} are POW3R's human "
            "criterion weights and must be >= 0 and sum to 1",
            "normalise them")
  for name, span in zip(functions, ranges):
    if span is None or span[0] < 0 or span[1] > 1:
      return ("rewards.functions", f"criterion {name!r} is not scored in "
              "[0, 1]", "use criteria scored in [0, 1]")
  return None


@SHAPERS.register(
    "pow3r", paper="POW3R (seed 000 para. 58), reconstruction",
    reads=("verified", "verifier_weights", "group_size"), range=(-1.0, 1.0),
    check=_check_pow3r, check_config=_check_rubric,
    examples=({"categories": (0, 1, 1)},
              {"categories": (0, 0, 0), "temp": 0.05}))
def pow3r(lengths, *, verified, verifier_weights, group_size: int,
          categories=(), temp: float = 0.5) -> np.ndarray:
  """POW3R: the rubric's criteria (the verifiers' columns s, in [0, 1])
  reweighted by their contrast within each group, human weights h (the
  verifiers' weights) and category masses kept:

    column = sum_c (w_pc - h_c) s_pgc,   w = `pow3r_weights`

  so verifiers + column = sum_c w_pc s_pgc, the paper's R = sum_c w s /
  sum_c w times sum_c h (= R when the weights sum to 1, as `config`
  requires). Report: the column is 0 where no criterion's contrast differs
  within a category. **Reconstruction** (VARIANTS.md 5.5): the seed (000
  para. 58) gives the idea (human weights and category balance preserved,
  rollout-level contrast emphasised); the softmax form and temp = 0.5 are
  proposed. Every criterion applies to every prompt here (crit_valid all
  true).

  Args:
    lengths: [N] (unused).
    verified: [N, C] the criteria scores, prompt major.
    verifier_weights: [C] human weights h >= 0.
    group_size: G.
    categories: [C] int category of each criterion.
    temp: contrast temperature.

  Returns:
    [N] float32 in [-sum h, sum h].
  """
  _check_pow3r(categories=categories, temp=temp)
  s = np.asarray(verified, np.float64)
  if s.ndim != 2:
    raise ValueError(f"verified must be [N, C]; got shape {s.shape}.")
  n, c = s.shape
  h = np.asarray(verifier_weights, np.float64)
  if h.shape != (c,) or len(tuple(categories)) != c:
    raise ValueError(
        f"verifier_weights {h.shape} and categories ({len(tuple(categories))}"
        f") must give one entry per criterion (C={c}).")
  if np.any(h < 0):
    raise ValueError(f"verifier_weights={h.tolist()} must be >= 0 (human "
                     "criterion weights).")
  g = check_group_size(group_size, n)
  del lengths
  scores = s.reshape(-1, g, c)
  w = pow3r_weights(scores, h, categories, temp=temp)
  column = ((w - h)[:, None, :] * scores).sum(-1)
  return column.reshape(n).astype(np.float32)


# ---------------------------------------------------- n-gram repetition


def _check_repetition(*, ngram_size=3, max_penalty=-1.0):
  if isinstance(ngram_size, bool) or not isinstance(ngram_size, int) or (
      ngram_size < 1):
    raise ValueError(f"ngram_size={ngram_size!r} must be an integer >= 1 "
                     "(tokens per n-gram).")
  if not -math.inf < max_penalty <= 0:
    raise ValueError(f"max_penalty={max_penalty!r} must be a finite number "
                     "<= 0 (the penalty of a fully repetitive completion).")


def repeated_share(ids, ngram_size: int) -> float:
  """1 - #distinct / #all n-grams of the token ids `ids` (0 with fewer than
  `ngram_size` tokens)."""
  ids = np.asarray(ids)
  if ids.shape[0] < ngram_size:
    return 0.0
  grams = np.lib.stride_tricks.sliding_window_view(ids, ngram_size)
  return 1.0 - np.unique(grams, axis=0).shape[0] / grams.shape[0]


@SHAPERS.register(
    "repetition_penalty",
    paper="arXiv 2502.03373 App. C.2 (TRL get_repetition_penalty_reward)",
    reads=("tokens",),
    range=lambda *, ngram_size=3, max_penalty=-1.0: (max_penalty, 0.0),
    check=_check_repetition,
    examples=({}, {"ngram_size": 1, "max_penalty": -0.5}))
def repetition_penalty(lengths, *, tokens, ngram_size: int = 3,
                       max_penalty: float = -1.0) -> np.ndarray:
  """The n-gram repetition penalty of the completion's own tokens:

    column = max_penalty (1 - #distinct n-grams / #n-grams)

  0 for a completion without a repeated n-gram or with fewer than
  `ngram_size` tokens, max_penalty in the limit of one n-gram repeated.
  Yeo et al. (arXiv 2502.03373, appendix C.2), with TRL's semantics
  (``trl.rewards.get_repetition_penalty_reward``: n-grams of token ids,
  defaults 3 and -1.0); every row is penalised (the authors' code adds it
  to wrong answers only). The n-grams are over the sampled tokens (the
  first ``lengths`` of each row, an end token included).

  Args:
    lengths: [N] completion lengths in tokens.
    tokens: [N, T] the sampled token ids.
    ngram_size: tokens per n-gram, >= 1.
    max_penalty: <= 0.

  Returns:
    [N] float32 in [max_penalty, 0].
  """
  _check_repetition(ngram_size=ngram_size, max_penalty=max_penalty)
  lengths = check_lengths(lengths)
  tokens = np.asarray(tokens)
  if tokens.ndim != 2 or tokens.shape[0] != lengths.shape[0]:
    raise ValueError(f"tokens must be [N, T] with N={lengths.shape[0]}; got "
                     f"shape {tokens.shape}.")
  share = [repeated_share(row[:n], ngram_size)
           for row, n in zip(tokens, lengths)]
  return (max_penalty * np.asarray(share, np.float64)).astype(np.float32)
