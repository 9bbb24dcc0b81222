"""Prompt selection: which prompts a sampling round draws."""

from grpo_jax.strategies._kit import SELECTIONS


@SELECTIONS.register(examples=({},))
def uniform(task, index, num_prompts):
  """The task's own order: ``task.train(index, num_prompts)``, a pure
  function of (seed, index), so every process and every resume agree."""
  return task.train(index, num_prompts)
