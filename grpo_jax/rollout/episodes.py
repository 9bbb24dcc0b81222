"""A step's rows as the update trains on them: `Episodes`, the one row
layout every stage after the estimate reads (DESIGN.md, "Episodes").

Rows are prompt-major blocks: with one prompt id list per block of rows
(``len(prompt_ids)`` divides N), the rows of a block share that prompt and
the trainer runs it once per block; with one list per row, each row has its
own. Stages that add rows (RePO's replayed completions, the replay buffer's
stored rows: `added`) extend an `Episodes` within the step's declared row
budget (`layout.step_rows`).
"""

from typing import List, NamedTuple, Optional

import numpy as np


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
