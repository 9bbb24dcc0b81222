"""How many rows a step trains on: the one function the trainer, the
config checks and the planner call (`step_rows`).

A step samples P x G rows. A group strategy may add rows within the step's
fixed batch, declared in its registry metadata: ``extra_rows`` (K more rows
per group, RePO's replayed completions) or ``replay_rows`` (R rows with their
own prompts, the rollout-level replay buffer). The batch the update sees
has `StepRows.total` rows every step, so it compiles once.
"""

from typing import NamedTuple

from grpo_jax import strategies


class StepRows(NamedTuple):
  """The rows of one step's batch."""
  prompts: int  # P
  generations: int  # G, sampled per prompt
  extra_per_group: int  # K, beside each group's G (RePO)
  replayed: int  # R, with their own prompts (row replay)

  @property
  def sampled(self) -> int:
    """P * G, the rows sampled this step."""
    return self.prompts * self.generations

  @property
  def adds_rows(self) -> bool:
    """Whether the batch holds rows beyond the step's own sample."""
    return bool(self.extra_per_group or self.replayed)

  @property
  def total(self) -> int:
    """P * (G + K) + R, the rows the update trains on."""
    return self.prompts * (self.generations + self.extra_per_group) + (
        self.replayed)


def _declared(config, field: str) -> int:
  """A group strategy's metadata `field` (a function of its options, or
  None: 0)."""
  fn = getattr(strategies.GROUP_STRATEGIES.entry(config.groups.name).meta,
               field)
  return 0 if fn is None else int(fn(**dict(config.groups.kwargs)))


def step_rows(config) -> StepRows:
  """`StepRows` of a config (its group strategy's name must be known)."""
  return StepRows(prompts=int(config.rollout.num_prompts),
                  generations=int(config.rollout.num_generations),
                  extra_per_group=_declared(config, "extra_rows"),
                  replayed=_declared(config, "replay_rows"))
