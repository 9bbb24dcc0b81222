"""Prompt selection: which prompts a sampling round draws."""

import numpy as np

from grpo_jax.strategies._kit import SELECTIONS


@SELECTIONS.register(examples=({},))
def uniform(task, index, num_prompts):
  """The task's own order: ``task.train(index, num_prompts)``, a pure
  function of (seed, index), so every process and every resume agree."""
  return task.train(index, num_prompts)


def prioritized(task, index, num_prompts, *, priorities):
  """SPO's prioritised prompt draw (seed 002 para. 7, verl recipe/spo):
  `num_prompts` distinct training problems, drawn without replacement with
  probability proportional to ``priorities[x]``, x the problem's
  `data.Example.index`; a pure function of (task seed, index, priorities).

  ``priorities`` is `advantages.trackers.spo_priority(state)` of the SPO
  tracker, w_x = sqrt(p_x (1 - p_x)) + 0.05. Not registered yet: a
  selection is called without any stage's state (`_kit.Selection`), so it
  cannot read the estimator's tracker; see `_kit.make_selection`.

  Args:
    task: a task with ``train_indices()`` and ``example(index)``.
    index: the round's prompt index (``step * rounds_per_step + round``).
    num_prompts: P, at most the number of training problems.
    priorities: [capacity] weights >= 0 by problem index; capacity must
      cover the task's problems.

  Returns:
    The P `data.Example`s, in draw order.
  """
  candidates = task.train_indices()
  weights = np.asarray(priorities, np.float64)
  if weights.ndim != 1 or candidates.size and candidates.max() >= weights.size:
    raise ValueError(
        f"priorities must be [capacity] covering the task's problem indices "
        f"(up to {int(candidates.max()) if candidates.size else 0}); got "
        f"shape {weights.shape}.")
  if num_prompts > candidates.size:
    raise ValueError(
        f"num_prompts={num_prompts} exceeds the {candidates.size} training "
        "problems a draw without replacement can give.")
  weights = weights[candidates]
  rng = np.random.default_rng((getattr(task, "seed", 0), index))
  picked = rng.choice(candidates, size=num_prompts, replace=False,
                      p=weights / weights.sum())
  return [task.example(int(x)) for x in picked]
