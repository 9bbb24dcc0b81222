"""Row strategies: which rows of the batch train."""

import numpy as np

from grpo_jax.strategies._kit import ROW_STRATEGIES


@ROW_STRATEGIES.register(examples=({},))
def all_rows(loss_mask):
  """Every sampled token trains."""
  return loss_mask


@ROW_STRATEGIES.register(reads=("truncated",), paper="2503.14476",
                         examples=({},))
def mask_truncated(loss_mask, *, truncated):
  """Completions cut off at the token limit leave the loss, mask and
  denominator both (DAPO's overlong filtering).

  Args:
    loss_mask: [N, T] the tokens that train.
    truncated: [N] bool, rows that hit max_new_tokens without an end id.
  """
  return loss_mask * ~np.asarray(truncated, bool)[:, None]
