"""The ``reasoning_gym`` reward: a reasoning_gym generator's own scorer on
the completion's final ``\\boxed{}`` answer (`data.gym`'s task).

The answer a reward function receives is the problem's reference
(`data.gym.reference`); the generator's entry is generated again from it,
and ``score_answer(answer, entry)`` gives 1 for a right answer, 0 for a
wrong or missing one, and partial credit where the generator's scorer
gives some (word sorting: the share of words in place). An evaluation
judges such a problem by the same scorer (`Reference`): correct at 1.
"""

from typing import NamedTuple, Optional, Sequence

from grpo_jax.config.errors import fail
from grpo_jax.data import gym
from grpo_jax.rewards.verifiers import VERIFIERS, boxed_answers, check_batch

# The rewards that parse Example.answer as math: a reasoning_gym reference
# is no math answer (and math-verify cannot judge a sorted word list).
MATH_ANSWER_REWARDS = ("accuracy", "all_segments", "segment_fraction")


class Reference(NamedTuple):
  """A reasoning_gym problem's reference as an evaluation's gold answer
  (`evaluation.parse_references`), judged by its generator's scorer."""
  text: str


def final_answer(completion: str) -> Optional[str]:
  """The content of the completion's last complete ``\\boxed{}``, stripped;
  None when it has none (a scorer's "no answer")."""
  boxes = boxed_answers(completion)
  return boxes[-1][1].strip() if boxes else None


def score_answer(answer: Optional[str], reference: str) -> float:
  """The generator's score of a final `answer` (None: none given) to the
  problem whose reference is `reference`, clipped to [0, 1] (the declared
  range)."""
  problems, item = gym.entry(reference)
  value = float(problems.score_answer(answer, item))
  return min(max(value, 0.0), 1.0)


def check_task(task: str, functions: Sequence[str]) -> None:
  """ValueError ``config.rewards.functions: ...`` unless the reasoning_gym
  reward and task come together and no math reward reads the task's
  references (`MATH_ANSWER_REWARDS`)."""
  gym_task, gym_reward = task == "reasoning_gym", "reasoning_gym" in functions
  if gym_reward and not gym_task:
    fail("rewards.functions", f"'reasoning_gym' scores data.task="
         f"'reasoning_gym' problems only, not data.task={task!r}'s",
         "set --config.data.task=reasoning_gym, or drop 'reasoning_gym'")
  math = [name for name in functions if name in MATH_ANSWER_REWARDS]
  if gym_task and (math or not gym_reward):
    why = (f"{math[0]!r} reads each answer as math, but this task's "
           "answers are references its generators' own scorers judge"
           if math else "no reward scores the problems")
    fail("rewards.functions", f"{tuple(functions)!r} with data.task="
         f"'reasoning_gym': {why}", "use the 'reasoning_gym' reward, e.g. "
         "rewards.functions=('reasoning_gym', 'format')")


def _example_answer() -> str:
  """The reference of the first basic_arithmetic problem at level 0."""
  size = 1
  entry = gym.problem_set("basic_arithmetic", 0, size)[0]
  return gym.reference("basic_arithmetic", 0, size, 0, str(entry["answer"]))


@VERIFIERS.register("reasoning_gym", range=(0.0, 1.0),
                    example_answer=_example_answer)
def reasoning_gym_score(prompts: Sequence[str], completions: Sequence[str],
                        answers: Sequence[str]) -> list:
  """The reasoning_gym generator's score of each completion's final
  ``\\boxed{}`` answer (module docstring).

  Args:
    prompts: N prompts (unused).
    completions: N completion texts.
    answers: N references of data.task='reasoning_gym' problems.

  Returns:
    N floats in [0, 1].
  """
  check_batch(prompts, completions, answers)
  return [score_answer(final_answer(c), a)
          for c, a in zip(completions, answers)]
