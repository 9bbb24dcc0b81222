"""Reward shapers: functions of what the sampler knows (completion lengths in
tokens, ...) that add one reward column.

A shaper maps lengths [N] (int token counts) and its keyword options to a
column [N] float32, and registers in `SHAPERS` with the range of its values
(``range=(lo, hi)`` metadata, as a verifier); its column is named after it
and weighted like any reward (``rewards.shapers.<name>.weight`` in a config).

| name         | column                                          | paper            |
|--------------|-------------------------------------------------|------------------|
| ``overlong`` | 0, then a ramp to -1 over the last cache_length | arXiv 2503.14476 |
"""

import functools
from typing import Callable

import numpy as np

from grpo_jax import registry

SHAPERS = registry.Registry("reward shaper", positional=("lengths",))


def make_shaper(name: str, **options) -> Callable[..., np.ndarray]:
  """``lengths [N] -> column [N]`` of shaper `name` with `options` bound; an
  unknown option is a ValueError naming it."""
  SHAPERS.check_options(name, options)
  return functools.partial(SHAPERS.get(name), **options)


@SHAPERS.register(
    "overlong", paper="arXiv 2503.14476", range=(-1.0, 0.0),
    examples=({"max_length": 8, "cache_length": 2},
              {"max_length": 8, "cache_length": 0}))
def overlong_penalty(lengths, *, max_length: int, cache_length: int
                     ) -> np.ndarray:
  """DAPO's soft overlong punishment, in tokens.

  R(L) = 0                          if L <= max_length - cache_length
       = (max_length - cache_length - L) / cache_length
                                    if max_length - cache_length < L <= max_length
       = -1                         if L > max_length

  arXiv 2503.14476 (eq. 13). Lengths are TOKEN counts of the completion (the
  sum of its mask), never characters.

  Args:
    lengths: [N] completion lengths in tokens (any integer array-like).
    max_length: L_max, the length at which the penalty reaches -1.
    cache_length: L_cache, the width of the linear ramp; 0 gives a hard cut.

  Returns:
    [N] float32 penalties in [-1, 0].
  """
  if max_length <= 0:
    raise ValueError(f"max_length must be positive; got {max_length!r}.")
  if not 0 <= cache_length <= max_length:
    raise ValueError(
        f"cache_length must be in [0, max_length={max_length}]; got "
        f"{cache_length!r}.")
  lengths = np.asarray(lengths)
  if lengths.ndim != 1:
    raise ValueError(
        f"lengths must be [N] (rank 1); got shape {lengths.shape}.")
  if lengths.size and not np.issubdtype(lengths.dtype, np.integer):
    raise ValueError(
        f"lengths must be integer token counts; got dtype {lengths.dtype}. "
        "Pass mask.sum(-1).astype(int), not string lengths.")
  lengths = lengths.astype(np.float64)
  start = max_length - cache_length
  ramp = (start - lengths) / max(cache_length, 1)
  penalty = np.where(lengths <= start, 0.0,
                     np.where(lengths <= max_length, ramp, -1.0))
  return penalty.astype(np.float32)
