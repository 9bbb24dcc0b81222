"""A profiling pass: n completions of each of a list of problems under a
fixed policy, and how many were solved (sGPO's offline success rates,
VARIANTS.md 4.1; SPO's offline tracker initialisation, 1.4).

`profile_problems` is pure given its ``solve`` function (which samples and
scores one batch of problems): it walks the problems in batches of a fixed
size, the last one padded by repeating its first problem (the padding's
results are dropped), so the sampler compiles once. The rollout binds
``solve`` to its sampler and verifiers (`rollout.budgets.profile_fn`).
"""

from typing import Callable, NamedTuple

import numpy as np


class Profile(NamedTuple):
  """The pass's counts, one entry per problem profiled.

  Attributes:
    index: [Q] int64, the problems' `data.Example.index`.
    successes: [Q] float32, solved completions.
    trials: [Q] float32, completions drawn (n each).
  """
  index: np.ndarray
  successes: np.ndarray
  trials: np.ndarray

  @property
  def rates(self) -> np.ndarray:
    """[Q] float64 success rates successes / trials."""
    return (np.asarray(self.successes, np.float64)
            / np.maximum(np.asarray(self.trials, np.float64), 1.0))


def profile_problems(solve: Callable, indices, *, num_samples: int,
                     batch_size: int) -> Profile:
  """n = `num_samples` completions of every problem of `indices`.

  Args:
    solve: ``solve(batch_indices [B], batch_number) -> [B, n]`` bool or
      {0, 1}: whether each completion solved its problem (B = batch_size;
      the batch number keys its sampling).
    indices: [Q] problem indices.
    num_samples: n >= 1.
    batch_size: B >= 1, problems per call.

  Returns:
    `Profile` of the Q problems, in the order given.
  """
  indices = np.asarray(indices, np.int64)
  if indices.ndim != 1 or indices.size == 0:
    raise ValueError(f"indices must be a nonempty [Q] vector; got shape "
                     f"{indices.shape}.")
  if num_samples < 1 or batch_size < 1:
    raise ValueError(f"num_samples={num_samples!r} and batch_size="
                     f"{batch_size!r} must be >= 1.")
  successes = np.zeros(indices.size, np.float32)
  for b, start in enumerate(range(0, indices.size, batch_size)):
    chunk = indices[start:start + batch_size]
    padded = np.concatenate([chunk, np.full(batch_size - chunk.size,
                                            chunk[0])])
    solved = np.asarray(solve(padded, b), np.float32)
    if solved.shape != (batch_size, num_samples):
      raise ValueError(f"solve returned shape {solved.shape}; expected "
                       f"{(batch_size, num_samples)}.")
    successes[start:start + chunk.size] = solved[:chunk.size].sum(-1)
  return Profile(index=indices, successes=successes,
                 trials=np.full(indices.size, num_samples, np.float32))
