"""Rewards: verifiers score the text, shapers add columns from token counts,
correctness, the sampler's log-probs, the step and per-prompt history.

Verifiers (`VERIFIERS`, ``rewards.functions`` in a config) are plain callables
over a batch of N completions,

  fn(prompts: Sequence[str], completions: Sequence[str],
     answers: Sequence[str]) -> list[float]     (N floats)

and `score` runs several of them with weights (in training each completion
in a worker process, `workers`): a function that raises, hangs past its
timeout or kills its worker on one completion costs that completion its
reward (0), is counted, and never stops a run. Shapers (`SHAPERS`) act on
token counts, which only the sampler knows exactly, and what else they read
(`shapers.READS`): `overlong_penalty` (DAPO, arXiv 2503.14476), `lcpo`,
`grpo_lead`, `hapo_length` (per-prompt state), `length_budget`, `consteer`,
`pow3r`, `cosine_length`, `repetition_penalty`; the shape stage that runs
them is `shaping`.

| name          | kind     | value                                               |
|---------------|----------|-----------------------------------------------------|
| ``accuracy``  | verifier | 1 if math-verify finds the reference answer, else 0 |
| ``format``    | verifier | 1 if the completion ends with ``\\boxed{...}``       |
| ``graded_accuracy`` | verifier | 1 / (1 + distance of its last number to the answer) |
| ``boxed_once``, ``shows_work``, ``concise`` | verifier | rubric criteria (`rubric`) |
| ``reasoning_gym`` | verifier | a reasoning_gym generator's score (`gym_scoring`) |
| ``overlong``  | shaper   | 0, then a ramp to -1 near the length limit          |
| ``lcpo``      | shaper   | L1's target-length reward (target in the prompt)    |
| ``grpo_lead`` | shaper   | exp(-alpha z) for correct, -1 for wrong answers     |
| ``hapo_length`` | shaper | cosine length reward vs. the prompt's history       |
| ``length_budget`` | shaper | clip(1 - n / B_t, 0, 1), B_t tightening         |
| ``consteer``  | shaper   | +-lam x the sampler's confidence                    |
| ``pow3r``     | shaper   | rubric criteria reweighted by their contrast        |
| ``cosine_length`` | shaper | cosine in the length, by correctness (Yeo et al.) |
| ``repetition_penalty`` | shaper | max_penalty x share of repeated n-grams    |

A new one is a function in `verifiers.py` or `shapers.py` under the
registry's decorator, with the range of its values (``range=(lo, hi)``):
`column_ranges` reads them for `train.validate`, which holds them against
the advantage estimator's domain. A reward function of one's own needs no
registering: ``rewards.functions`` takes it by reference as well,
``my_pkg.my_mod:fn`` or ``path/to/file.py:fn`` (`references`).
"""

from grpo_jax.rewards.scoring import (SCORE_MODES, ScoreOptions, ScoreResult,
                                      group_advantages, score)
from grpo_jax.rewards import gym_scoring, references, rubric
from grpo_jax.rewards.length_shapers import (cosine_length, grpo_lead,
                                             hapo_length, lcpo, lead_reweight,
                                             length_budget)
from grpo_jax.rewards.shaping import (ShapeStage, check_shapers,
                                      make_shape_stage)
from grpo_jax.rewards.shapers import (SHAPERS, Shaper, make_shaper,
                                      overlong_penalty, shaper_range)
from grpo_jax.rewards.signal_shapers import (consteer, pow3r,
                                             repetition_penalty)
from grpo_jax.rewards.verifiers import (ANSWER_INSTRUCTION, VERIFIERS,
                                        RewardFn, accuracy, answer_is_correct,
                                        format_reward, math_answer)

__all__ = [
    "ANSWER_INSTRUCTION", "RewardFn", "SCORE_MODES", "SHAPERS", "ScoreOptions",
    "ScoreResult", "ShapeStage", "Shaper", "VERIFIERS", "accuracy",
    "answer_is_correct", "check_shapers", "column_names", "column_ranges", "consteer",
    "cosine_length", "repetition_penalty",
    "format_reward", "get", "group_advantages", "gym_scoring", "grpo_lead",
    "hapo_length",
    "lcpo", "lead_reweight", "length_budget", "make_shape_stage",
    "make_shaper", "math_answer", "names", "overlong_penalty", "pow3r",
    "references", "rubric", "score", "shaper_range"]

# The registered reward functions (verifiers) by name; `get` takes a
# ``rewards.functions`` entry, a name or a reference (`references`).
names = VERIFIERS.names
get = references.get
# The reward columns of ``rewards.functions`` (a reference's is its
# function's name).
column_names = references.columns


def column_ranges(functions, shapers=()) -> tuple:
  """The declared ``(lo, hi)`` of each reward column, None where a reward
  declares none: the reward functions' (`references.declared_range`), then
  the shapers' (`shapers`: names, or name -> options, which a range may
  depend on)."""
  options = lambda n: ({k: v for k, v in shapers[n].items() if k != "weight"}
                       if hasattr(shapers, "items") else {})
  return (tuple(references.declared_range(n) for n in functions)
          + tuple(shaper_range(n, **options(n)) for n in shapers))
