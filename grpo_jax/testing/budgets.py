"""Fixtures of the budget-stage tests (`strategies.allocation`,
`rollout.budgets`): drawn rows made by hand and a six-problem task."""

import collections

import numpy as np

from grpo_jax.strategies import ragged

Example = collections.namedtuple("Example", "index question answer")


def fake_rows(examples, sizes, num_rows, solved):
  """`ragged.Rows` of `sizes` per prompt in `num_rows` rows, T = 2; row
  j of prompt p scores solved(p, j) in the one column ``accuracy``."""
  layout = ragged.ragged_rows(np.asarray(sizes, np.int64), num_rows)
  real = layout.valid
  reward = np.asarray([float(solved(g, m)) if g >= 0 else 0.0
                       for g, m in zip(layout.group, layout.member)],
                      np.float32)
  index = np.asarray([e.index for e in examples])
  owner = np.maximum(layout.group, 0)
  ones = np.ones((num_rows, 2), np.float32) * real[:, None]
  return ragged.Rows(
      group=layout.group, prompt_index=np.where(real, index[owner], -1),
      prompt_ids=ragged.id_lists([[1, 2, 3]] * num_rows),
      tokens=np.ones((num_rows, 2), np.int32), mask=ones,
      sampler_logp=-ones, token_entropies=ones,
      lengths=2 * real.astype(np.int32), truncated=np.zeros(num_rows, bool),
      entropies=real.astype(np.float32), rewards=reward[:, None],
      total=reward, columns=("accuracy",), errors=np.zeros(1),
      scored=int(real.sum()))


class Task:
  """Six training problems, ids 0 .. 5; problem i asks "i", answer "0"."""
  seed = 0

  def train_indices(self):
    return np.arange(6)

  def example(self, index):
    return Example(int(index), str(index), "0")
