"""Token credit from the other members of a group: T-SPMO and GTPO.

Both compare the tokens of a group's G completions position by position
(rows are prompt major: group p is rows p*G .. p*G + G - 1, `_kit.READS`),
over [P, G, G, T] pairs: O(G^2 T), no hashing, fixed shapes. Masks are
right-padded (each row's loss tokens are a prefix); the rows of filler
groups (all 0) get 0.
"""

import jax.numpy as jnp

from grpo_jax.credit import _kit
from grpo_jax.credit._kit import CREDIT, Credited

T_SPMO_SIGNALS = ("reward", "advantage")
T_SPMO_LOSS_ON = ("nonzero", "all")


def _pair_equal(tokens, real):
  """[P, G, G, T] bool: member i and member j both have a token at t and
  it is the same one."""
  present = real[:, :, None, :] & real[:, None, :, :]
  return (tokens[:, :, None, :] == tokens[:, None, :, :]) & present


def _exclusive_all(x):
  """all(x[..., :t]) along the last axis: True at t = 0."""
  run = jnp.cumprod(x.astype(jnp.int32), axis=-1)
  ones = jnp.ones(x.shape[:-1] + (1,), jnp.int32)
  return jnp.concatenate([ones, run[..., :-1]], axis=-1) > 0


def prefix_credit(tokens, mask, values, num_generations: int):
  """[N, T] mean_{S+} v - mean_S v of T-SPMO (see `t_spmo`): S(i, t) the
  members j that share y_i[:t] and have a token at t, S+ those of them whose
  token at t is y_i[t]; `values` [N]. Each mean is taken of v_j - v_i
  (i is in S+), so that equal values give exactly 0."""
  g = num_generations
  real = _kit.grouped(_kit.real(mask), g)
  y = _kit.grouped(tokens, g)
  v = _kit.grouped(jnp.asarray(values, jnp.float32), g)  # [P, G]
  same = _pair_equal(y, real)  # [P, i, j, T]
  shared = _exclusive_all(same)  # y_i[:t] == y_j[:t]
  in_s = shared & real[:, None, :, :]
  in_plus = in_s & same
  d = (v[:, None, :] - v[:, :, None])[..., None]  # [P, i, j, 1]: v_j - v_i
  mean_over = lambda sel: (jnp.where(sel, d, 0.0).sum(axis=2)
                           / jnp.maximum(sel.sum(axis=2), 1))
  credit = jnp.where(real, mean_over(in_plus) - mean_over(in_s), 0.0)
  return credit.reshape(tokens.shape)


def _check_t_spmo(signal="reward", loss_on="nonzero"):
  _kit.check_choice("signal", signal, T_SPMO_SIGNALS)
  _kit.check_choice("loss_on", loss_on, T_SPMO_LOSS_ON)


@CREDIT.register(
    reads=("tokens", "rewards", "num_generations"), check=_check_t_spmo,
    linear=False, row_advantages=True,
    paper="T-SPMO, arXiv 2504.20834 (seed 002 para. 18; reconstruction)",
    examples=({}, {"loss_on": "all"}, {"signal": "advantage"}))
def t_spmo(advantages, mask, *, tokens, rewards, num_generations: int,
           signal: str = "reward", loss_on: str = "nonzero"):
  """T-SPMO, token-specific prefix matching: each token's credit is how much
  choosing it raised the group's expected reward after its prefix.

    A[i, t] = mean_{j in S+(i,t)} R_j - mean_{j in S(i,t)} R_j,
    S(i, t)  = {j : y_j[:t] = y_i[:t] and j has a token at t},
    S+(i, t) = {j in S(i, t) : y_j[t] = y_i[t]}.

  A unique prefix, all-equal rewards and G = 1 give 0: only branch points
  carry credit. **Reconstruction** (arXiv 2504.20834 from its abstract; no
  code found; VARIANTS.md 3.2). The estimator's advantages are not used
  with ``signal="reward"`` (the paper's R); ``signal="advantage"`` puts
  each row's advantage in R's place (a group-level estimator's). With
  ``loss_on="nonzero"`` (the paper's saving: it trains on the branch tokens
  only) the loss mask narrows to the tokens with A != 0; ``"all"`` keeps
  every token, the others with A = 0.

  Args:
    advantages: [N] (read with signal="advantage").
    mask: [N, T] loss mask.
    tokens: [N, T] completion tokens.
    rewards: [N] the rows' weighted total rewards.
    num_generations: G.
    signal: "reward" or "advantage".
    loss_on: "nonzero" or "all".

  Returns:
    `Credited`; measures branch_fraction (loss tokens with A != 0) and
    abs_mean (|A| over the loss tokens).
  """
  values = (jnp.asarray(rewards, jnp.float32) if signal == "reward"
            else _kit.row_advantages(advantages, "t_spmo"))
  credit = prefix_credit(tokens, mask, values, num_generations)
  real = _kit.real(mask)
  branch = real & (credit != 0)
  narrowed = (jnp.where(branch, jnp.asarray(mask, jnp.float32), 0.0)
              if loss_on == "nonzero" else None)
  return Credited(
      advantages=credit, mask=narrowed,
      measures={"branch_fraction": _kit.fraction(branch, real),
                "abs_mean": _kit.mean(jnp.abs(credit), real)})


def _right_aligned(x, lengths):
  """x[..., n - 1 - k] at k < n (the row read from its last token back);
  the same map takes a right-aligned array back."""
  t = x.shape[-1]
  index = lengths[..., None] - 1 - _positions(t, lengths.ndim + 1)
  return jnp.take_along_axis(x, jnp.clip(index, 0, t - 1), axis=-1)


def _leading_conflicts(y, real, positive, negative):
  """[P, G, T] bool: y_i[t] also stands at t in a member with A > 0 and in
  one with A < 0 (i itself counts), over the leading run only; rows with
  A = 0 have none."""
  same = _pair_equal(y, real)  # [P, i, j, T]
  in_pos = (same & positive[:, None, :, None]).any(axis=2)
  in_neg = (same & negative[:, None, :, None]).any(axis=2)
  raw = in_pos & in_neg & real
  run = jnp.cumprod(raw.astype(jnp.int32), axis=-1) > 0
  return run & (positive | negative)[:, :, None]


def conflict_masks(tokens, mask, advantages, num_generations: int):
  """(forward, backward) [N, T] bool conflict masks of GTPO: forward with
  the completions left-aligned (the leading run), backward right-aligned
  (the trailing run, each completion read from its last token)."""
  g = num_generations
  real = _kit.grouped(_kit.real(mask), g)
  y = _kit.grouped(tokens, g)
  a = _kit.grouped(advantages, g)
  positive, negative = a > 0, a < 0
  forward = _leading_conflicts(y, real, positive, negative)
  lengths = real.sum(axis=-1)
  back = lambda x: _right_aligned(x, lengths)
  run = _leading_conflicts(back(y), back(real) & real_prefix(lengths, real),
                           positive, negative)
  backward = back(run) & real
  return forward.reshape(tokens.shape), backward.reshape(tokens.shape)


def real_prefix(lengths, like):
  """[..., T] bool: k < n (the positions a right-aligned row holds)."""
  return _positions(like.shape[-1], lengths.ndim + 1) < lengths[..., None]


def _positions(t: int, ndim: int):
  """0 .. t-1 along the last of `ndim` axes (explicit ranks)."""
  return jnp.arange(t).reshape((1,) * (ndim - 1) + (t,))


def _check_gtpo(entropy_threshold=0.7, entropy_coef=0.1, conflict_weight=2.0,
                normalize_by_conflicts=False):
  _kit.check_real("entropy_threshold", entropy_threshold, low=0.0,
                  low_open=True)
  _kit.check_real("entropy_coef", entropy_coef, low=0.0)
  _kit.check_real("conflict_weight", conflict_weight, low=0.0)
  if not isinstance(normalize_by_conflicts, bool):
    raise _kit.OptionError(
        "normalize_by_conflicts", "normalize_by_conflicts must be True or "
        f"False; got {normalize_by_conflicts!r}.")


@CREDIT.register(
    reads=("tokens", "token_entropies", "num_generations"),
    check=_check_gtpo, linear=False, row_advantages=True,
    paper="GTPO (seed 002 para. 20; the authors' code)",
    examples=({}, {"normalize_by_conflicts": True},
              {"entropy_threshold": 5.0, "entropy_coef": 0.0}))
def gtpo(advantages, mask, *, tokens, token_entropies, num_generations: int,
         entropy_threshold: float = 0.7, entropy_coef: float = 0.1,
         conflict_weight: float = 2.0, normalize_by_conflicts: bool = False):
  """GTPO: conflict tokens protected from negative updates and amplified in
  positive ones, and completions of high entropy filtered out.

  * Conflicts. y_i[t] is a forward conflict if the same token stands at t
    in a member with A > 0 and in one with A < 0, and every earlier token
    of i is one too (the leading run); backward conflicts are the same with
    the completions right-aligned (the trailing run). Rows with A = 0 take
    no part.
  * delta = delta_fwd * delta_bwd, each 1 off a conflict and, on one,
    `conflict_weight` (W_RAW = 2) in a row with A > 0, 0 in a row with
    A < 0: a token conflicting both ways in a positive row weighs 4.
  * Entropy filter. H_i = the masked mean of sg(ent) over row i;
    A_i' = 0 if H_i > tau_H (`entropy_threshold`), else
    A_i - gamma H_i (`entropy_coef`), rows with A = 0 included (the code's).
  * A[i, t] = delta[i, t] A_i'.

  The loss of the paper, mean_i -(1/n_i) sum_t delta A' r, is an objective
  with this A and ``aggregation="seq_mean_token_mean"``. From the authors'
  code (winstonsmith1897/GTPO, ``build_conflict_mask``, ENT_THRESHOLD 0.7,
  ENT_SCALE 0.1, W_RAW 2; VARIANTS.md 3.3); the paper's "provable
  threshold" was not recovered, 0.7 is the code's. The code takes H from
  the current policy's untempered logits; here it is the sampler's
  tempered entropy (the same at the first optimiser step and temperature
  1). ``normalize_by_conflicts=True`` is the code's extra, not in the
  paper: each row divided by max(1, its conflict tokens).

  Args:
    advantages: [N] row advantages (the signs pick the conflicts).
    mask: [N, T] loss mask, right-padded.
    tokens: [N, T] completion tokens.
    token_entropies: [N, T] sampler entropies (`_kit.READS`).
    num_generations: G.
    entropy_threshold: tau_H > 0.
    entropy_coef: gamma >= 0.
    conflict_weight: W_RAW >= 0.
    normalize_by_conflicts: the code's per-row division.

  Returns:
    `Credited`; measures conflict_fraction (loss tokens in a conflict),
    protected_fraction (loss tokens with delta 0), weight_mean (delta),
    filtered_fraction (rows with loss tokens zeroed by the filter) and
    entropy_mean (H over those rows).
  """
  adv = _kit.row_advantages(advantages, "gtpo")
  real = _kit.real(mask)
  forward, backward = conflict_masks(tokens, mask, adv, num_generations)
  positive = (adv > 0)[:, None]
  delta = lambda conflict: jnp.where(
      conflict, jnp.where(positive, conflict_weight, 0.0), 1.0)
  weights = delta(forward) * delta(backward)
  lengths = real.sum(axis=-1)
  entropy = (_kit.masked_entropies(token_entropies, mask).sum(axis=-1)
             / jnp.maximum(lengths, 1))
  kept = entropy <= entropy_threshold
  shaped = jnp.where(kept, adv - entropy_coef * entropy, 0.0)
  conflicts = (forward | backward) & real
  if normalize_by_conflicts:
    shaped = shaped / jnp.maximum(conflicts.sum(axis=-1), 1)
  rows = lengths > 0
  return Credited(
      advantages=jnp.where(real, weights * shaped[:, None], 0.0),
      measures={"conflict_fraction": _kit.fraction(conflicts, real),
                "protected_fraction": _kit.fraction(weights == 0, real),
                "weight_mean": _kit.mean(weights, real),
                "filtered_fraction": _kit.fraction(~kept, rows),
                "entropy_mean": _kit.mean(entropy, rows)})
