"""Group strategies: which groups a batch keeps, before the baseline forms."""

import numpy as np

from grpo_jax import groups as groups_lib
from grpo_jax.strategies._kit import GROUP_STRATEGIES
from grpo_jax.strategies._kit import Selected


@GROUP_STRATEGIES.register(rounds_per_step=lambda: 1, examples=({},))
def all_groups(draw, num_prompts):
  """Every group of one sampling round (GRPO)."""
  return Selected(rounds=[draw(0)],
                  picks=[(0, i) for i in range(num_prompts)],
                  valid=np.ones(num_prompts, bool))


def _keep_signal_first(rounds, signals, num_prompts):
  """Groups with signal first, in sampling order, then fillers without."""
  with_signal, without = [], []
  for r, signal in enumerate(signals):
    for i, ok in enumerate(signal):
      (with_signal if ok else without).append((r, i))
  chosen = with_signal[:num_prompts]
  picks = chosen + without[:num_prompts - len(chosen)]
  return Selected(rounds=rounds, picks=picks,
                  valid=np.arange(num_prompts) < len(chosen))


def _rounds(max_rounds=3, **_):
  if not isinstance(max_rounds, int) or max_rounds < 1:
    raise ValueError(f"max_rounds must be an integer >= 1; got {max_rounds!r}.")
  return max_rounds


@GROUP_STRATEGIES.register(
    rounds_per_step=_rounds, paper="2503.14476",
    examples=({}, {"max_rounds": 1}, {"signal_reward": "accuracy"}))
def dynamic_sampling(draw, num_prompts, *, max_rounds=3, signal_reward=""):
  """DAPO's dynamic sampling (arXiv 2503.14476): keep groups whose signal
  reward varies; sample new prompts, up to `max_rounds` rounds, until P
  groups have signal. Groups still lacking it stay as fillers (valid
  False: no loss, no batch statistic), so shapes never change.

  Args:
    draw: ``draw(r) -> Round``: samples and scores round r.
    num_prompts: P, the groups of the batch.
    max_rounds: the most rounds a step samples.
    signal_reward: the reward column whose variation counts as signal (DAPO:
      the accuracy, not the shaped total); "" = the first (the verifier).
  """
  rounds, signals = [], []
  for r in range(max_rounds):
    rounds.append(draw(r))
    column = rounds[-1].columns.index(signal_reward or rounds[-1].columns[0])
    signals.append(np.asarray(groups_lib.has_signal(
        rounds[-1].rewards[..., column])))
    if sum(s.sum() for s in signals) >= num_prompts:
      break
  return _keep_signal_first(rounds, signals, num_prompts)
