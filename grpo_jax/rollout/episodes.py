"""A step's rows: `Drawn`, as the draw stages hand them to the estimate,
and `Episodes`, as the update trains on them, the one row layout every
stage after the estimate reads (DESIGN.md, "Episodes").

Rows are prompt-major blocks: with one prompt id list per block of rows
(``len(prompt_ids)`` divides N), the rows of a block share that prompt and
the trainer runs it once per block; with one list per row, each row has its
own. Stages that add rows (RePO's replayed completions, the replay buffer's
stored rows: `added`) extend an `Episodes` within the step's declared row
budget (`layout.step_rows`).
"""

from typing import Any, Callable, List, NamedTuple, Optional

import numpy as np


class Drawn(NamedTuple):
  """A step's N rows as drawn, before the estimate: what either draw (the
  select and groups stages over [P, G] groups, `rollout.draw_groups`; a
  budget stage over groups of different sizes, `rollout.budgets.draw`)
  hands the rest of `rollout.generate`.

  Attributes:
    groups: the estimator's `GroupData`, a [P, W] view of the rows
      (``members`` marks the slots a row fills where groups differ).
    group: [N] int32, each row's group among the P (-1: a padding row,
      which trains on nothing).
    prompt_ids: token id lists, one per block of rows (as `Episodes`).
    field: ``field(name) -> [N, ...]`` host array of a per-row field
      (tokens, mask, sampler_logp, rewards, and what a stage reads), None
      where the draw did not compute it.
    loss_mask: [N, T] float32, the tokens that may train: real rows of
      valid groups, narrowed by a member filter.
    kept_rows: [N] bool, the rows a member filter kept (the others get
      advantage 0), or None.
    replayed: [N] float32, 1 on groups refilled from a buffer, or None.
    selected: the `strategies.Selected` of a [P, G] draw (the rounds that
      rows a group strategy adds are built from), None for a ragged one.
    describe: ``describe(advantages [N, ...], batch) -> dict``, the step's
      rollout measurements.
    measures: the draw's own measurements (filters', strategies').
  """
  groups: Any
  group: np.ndarray
  prompt_ids: List[list]
  field: Callable[[str], Optional[np.ndarray]]
  loss_mask: np.ndarray
  kept_rows: Optional[np.ndarray]
  replayed: Optional[np.ndarray]
  selected: Any
  describe: Callable[..., dict]
  measures: dict


class Episodes(NamedTuple):
  """N rows of one step, host arrays.

  Attributes:
    prompt_ids: token id lists, one per block of N / len(prompt_ids) rows.
    tokens: [N, T] int completion ids.
    sample_mask: [N, T] float32, 1 on the tokens the sampler drew.
    loss_mask: [N, T] float32, 1 on the tokens that train (a subset).
    advantages: [N] float32, or [N, T] for token-level advantages.
    sampler_logp: [N, T] float32, the behaviour log-probs of each token.
    replayed: [N] float32, 1 on rows not sampled this step; None when the
      step replays nothing.
  """
  prompt_ids: List[list]
  tokens: np.ndarray
  sample_mask: np.ndarray
  loss_mask: np.ndarray
  advantages: np.ndarray
  sampler_logp: np.ndarray
  replayed: Optional[np.ndarray] = None

  @property
  def num_rows(self) -> int:
    return int(np.shape(self.tokens)[0])
