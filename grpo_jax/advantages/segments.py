"""Segment-decomposed estimators over per-segment rewards: sd_grpo.

A multi-part problem's completion answers each part in its own ``\\boxed{}``
(`arithmetic.SegmentTask`); each answer (a segment) has its own verifiable reward
(`GroupData.segment_rewards` [P, G, S]) and owns the tokens that lead to it
(`GroupData.segment_ids` [P, G, T], `rewards.verifiers.segment_token_ids`).
The estimator's output is token level: [N, T] advantages, row p*G + g.
"""

import jax.numpy as jnp

from grpo_jax.advantages import _kit

SD_BLENDS = ("reward", "advantage")
SD_SCALES = ("group", "none")
# What a token of no segment (id -1) gets: z(R_hol) or 0.
SD_UNSEGMENTED = ("holistic", "zero")


def _check_sd(*, lam, blend_at, scale, unsegmented, eps, ddof, **_
              ) -> None:
  # The registry's ``check``: train.validate refuses a bad value at build.
  _kit.check_real("lam", lam, low=0.0, high=1.0, why="the weight of the "
                  "holistic reward in the blend; 0, the default, is "
                  "per-segment only")
  _kit.check_choice("blend_at", blend_at, SD_BLENDS)
  _kit.check_choice("scale", scale, SD_SCALES)
  _kit.check_choice("unsegmented", unsegmented, SD_UNSEGMENTED)
  _kit.check_std_options(eps=eps, ddof=ddof)


def masked_group_z(x, members, *, scale: str, eps: float, ddof: int
                   ) -> jnp.ndarray:
  """z over axis 1 (the G members) of x [P, G, S], over `members` only.

  (x - mean_m x) / (std_m x + eps), mean and std (ddof) over the members
  where `members` [P, G, S] is True; 0 for non-members, and exactly 0 where
  the members' values are all equal (one member included). ``scale="none"``
  skips the division (Dr. GRPO's centring).
  """
  m = members.astype(jnp.float32)
  count = m.sum(axis=1, keepdims=True)
  mean = (x * m).sum(axis=1, keepdims=True) / jnp.maximum(count, 1.0)
  centred = (x - mean) * m
  if scale == "group":
    var = (centred**2).sum(axis=1, keepdims=True) / jnp.maximum(
        count - ddof, 1.0)
    centred = _kit.divide_by_std(centred, _kit._safe_sqrt(var), eps)  # pylint: disable=protected-access
  # Rounding in the mean can leave equal members at +-1e-8: exact 0 there.
  high = jnp.where(members, x, -jnp.inf).max(axis=1, keepdims=True)
  low = jnp.where(members, x, jnp.inf).min(axis=1, keepdims=True)
  return jnp.where(members & (high > low), centred, 0.0)


def _as_pgt(segment_ids, shape) -> jnp.ndarray:
  """[P, G, T] int32 segment ids from [P, G, T] or rows [N, T]."""
  p, g = shape
  ids = jnp.asarray(segment_ids)
  if ids.ndim == 2 and ids.shape[0] == p * g:
    ids = ids.reshape(p, g, ids.shape[1])
  if ids.ndim != 3 or ids.shape[:2] != (p, g):
    raise ValueError(
        f"segment_ids must be [P, G, T] (or rows [N, T]) with P, G = {p}, "
        f"{g}; got shape {ids.shape}.")
  return ids.astype(jnp.int32)


@_kit.register(
    input="PG", output="token", paper="SD-GRPO (seed 000 ¶25)",
    reads=("segment_rewards", "segment_valid", "segment_ids"),
    # Segment rewards can vary where the holistic reward is constant.
    constant_group_zero=False, check=_check_sd,
    examples=({}, {"lam": 0.5}, {"lam": 0.5, "blend_at": "advantage"},
              {"scale": "none", "unsegmented": "zero"}, {"ddof": 0}))
def sd_grpo(rewards, *, lam: float = 0.0, blend_at: str = "reward",
            scale: str = "group", unsegmented: str = "holistic",
            eps: float = 1e-6, ddof: int = 1, segment_rewards=None,
            segment_valid=None, segment_ids=None) -> jnp.ndarray:
  """SD-GRPO's segment-decomposed token advantages.

    A[p, g, s]   = z over g of R~[p, :, s], over members whose segment s is
                   valid; 0 where it is not
    A_tok[i, t]  = A[p, g, seg_ids[i, t]]   (i = p*G + g)
                 = z(R_hol)[p, g] (or 0) where seg_ids[i, t] = -1

  with the blend of the holistic reward R_hol (the weighted sum of the
  reward columns, [P, G]) at ``blend_at``: ``reward`` (default) z-scores
  R~ = (1 - lam) R_seg + lam R_hol; ``advantage`` forms
  (1 - lam) z(R_seg) + lam z(R_hol). z is GRPO's (ddof 1, eps 1e-6), or
  only centred with ``scale="none"`` (Dr. GRPO). From the SD-GRPO abstract
  (seed list 000 ¶25: "z-normalizes verifiable per-segment rewards across
  the rollout group ... blending holistic and per-segment rewards further
  improves"); the blend's form is a reconstruction.

  Args:
    rewards: [P, G] holistic rewards R_hol.
    lam: the holistic reward's weight in the blend, in [0, 1].
    blend_at: ``reward`` or ``advantage`` (see above).
    scale: ``group`` (divide by the std) or ``none``.
    unsegmented: what tokens of no segment get: ``holistic`` (z(R_hol)) or
      ``zero``.
    eps: added to the std.
    ddof: delta degrees of freedom of the std.
    segment_rewards: [P, G, S] per-segment rewards R_seg.
    segment_valid: [P, G, S] bool, the segments each member has.
    segment_ids: [P, G, T] (or [N, T]) int32, each token's segment; -1 (or
      any id outside [0, S)) for none.

  Returns:
    [N, T] float32 token advantages; a group of one gets exactly 0.
  """
  rewards = _kit.check_rewards(rewards, 2, "P, G")
  _check_sd(lam=lam, blend_at=blend_at, scale=scale, unsegmented=unsegmented,
            eps=eps, ddof=ddof)
  p, g = rewards.shape
  _kit.check_ddof(ddof, g)
  if segment_rewards is None or segment_valid is None or segment_ids is None:
    raise ValueError(
        "sd_grpo needs segment_rewards, segment_valid [P, G, S] and "
        "segment_ids [P, G, T] (GroupData's segment fields).")
  seg = jnp.asarray(segment_rewards, jnp.float32)
  members = jnp.asarray(segment_valid).astype(bool)
  if seg.ndim != 3 or seg.shape[:2] != (p, g) or members.shape != seg.shape:
    raise ValueError(
        f"segment_rewards and segment_valid must both be [P, G, S] with P, "
        f"G = {p}, {g}; got shapes {seg.shape} and {members.shape}.")
  ids = _as_pgt(segment_ids, (p, g))
  z = lambda x, m: masked_group_z(x, m, scale=scale, eps=eps, ddof=ddof)
  holistic = z(rewards[:, :, None], jnp.ones((p, g, 1), bool))  # [P, G, 1]
  if blend_at == "reward":
    per_segment = z((1.0 - lam) * seg + lam * rewards[:, :, None], members)
  else:
    per_segment = jnp.where(
        members, (1.0 - lam) * z(seg, members) + lam * holistic, 0.0)
  num_segments = seg.shape[-1]
  inside = (ids >= 0) & (ids < num_segments)
  if num_segments:
    token = jnp.take_along_axis(
        per_segment, jnp.clip(ids, 0, num_segments - 1), axis=-1)
  else:  # no segment slots: every token is unsegmented
    token = jnp.zeros(ids.shape, jnp.float32)
  outside = holistic if unsegmented == "holistic" else jnp.zeros_like(
      holistic)
  return jnp.where(inside, token, outside).reshape(p * g, ids.shape[-1])
