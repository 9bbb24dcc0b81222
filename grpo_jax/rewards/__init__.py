"""Rewards: verifiers score the text, shapers add columns from token counts.

Verifiers (`VERIFIERS`, ``rewards.functions`` in a config) are plain callables
over a batch of N completions,

  fn(prompts: Sequence[str], completions: Sequence[str],
     answers: Sequence[str]) -> list[float]     (N floats)

and `score` runs several of them with weights (in training each completion
in a worker process, `workers`): a function that raises, hangs past its
timeout or kills its worker on one completion costs that completion its
reward (0), is counted, and never stops a run. Shapers (`SHAPERS`) act on
token counts, which only the sampler knows exactly: `overlong_penalty`
(DAPO, arXiv 2503.14476).

| name          | kind     | value                                               |
|---------------|----------|-----------------------------------------------------|
| ``accuracy``  | verifier | 1 if math-verify finds the reference answer, else 0 |
| ``format``    | verifier | 1 if the completion ends with ``\\boxed{...}``       |
| ``overlong``  | shaper   | 0, then a ramp to -1 near the length limit          |

A new one is a function in `verifiers.py` or `shapers.py` under the
registry's decorator, with the range of its values (``range=(lo, hi)``):
`column_ranges` reads them for `config.validate`, which holds them against
the advantage estimator's domain.
"""

from grpo_jax.rewards.scoring import (SCORE_MODES, ScoreOptions, ScoreResult,
                                      group_advantages, score)
from grpo_jax.rewards.shapers import SHAPERS, make_shaper, overlong_penalty
from grpo_jax.rewards.verifiers import (ANSWER_INSTRUCTION, VERIFIERS,
                                        RewardFn, accuracy, answer_is_correct,
                                        format_reward, math_answer)

__all__ = [
    "ANSWER_INSTRUCTION", "RewardFn", "SCORE_MODES", "SHAPERS", "ScoreOptions",
    "ScoreResult", "VERIFIERS", "accuracy", "answer_is_correct",
    "column_ranges", "format_reward", "get", "group_advantages",
    "make_shaper", "math_answer", "names", "overlong_penalty", "score"]

# The reward functions (verifiers) by name.
names = VERIFIERS.names
get = VERIFIERS.get


def column_ranges(functions, shapers=()) -> tuple:
  """The declared ``(lo, hi)`` of each reward column, None where a reward
  declares none: the reward functions' (`VERIFIERS`), then the shapers'."""
  return (tuple(VERIFIERS.entry(n).meta.get("range") for n in functions)
          + tuple(SHAPERS.entry(n).meta.get("range") for n in shapers))
