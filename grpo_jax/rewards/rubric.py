"""Rubric criteria: small programmatic checks of a completion's form, each a
verifier in [0, 1], for a rubric reward over several criteria (POW3R's
`pow3r` shaper weighs them by their contrast; a plain weighted sum is the
static rubric).

| name           | 1.0 when                                             |
|----------------|------------------------------------------------------|
| ``boxed_once`` | the completion holds exactly one ``\\boxed{...}``      |
| ``shows_work`` | an ``=`` comes before the first ``\\boxed{...}``       |
| ``concise``    | the completion has at most `CONCISE_WORDS` words      |
"""

from typing import Sequence

from grpo_jax.rewards.verifiers import VERIFIERS, boxed_answers, check_batch

# ``concise``'s limit: a worked one-line arithmetic answer fits in it.
CONCISE_WORDS = 30


@VERIFIERS.register(range=(0.0, 1.0))
def boxed_once(prompts: Sequence[str], completions: Sequence[str],
               answers: Sequence[str]) -> list:
  """1.0 where the completion holds exactly one complete ``\\boxed{...}``
  (one final answer, not several candidates), else 0.0."""
  check_batch(prompts, completions, answers)
  return [float(len(boxed_answers(c)) == 1) for c in completions]


@VERIFIERS.register(range=(0.0, 1.0))
def shows_work(prompts: Sequence[str], completions: Sequence[str],
               answers: Sequence[str]) -> list:
  """1.0 where an ``=`` (a written step) comes before the first
  ``\\boxed{`` (or anywhere, when there is no box), else 0.0."""
  check_batch(prompts, completions, answers)
  out = []
  for c in completions:
    box = c.find("\\boxed{")
    out.append(float("=" in (c if box < 0 else c[:box])))
  return out


@VERIFIERS.register(range=(0.0, 1.0))
def concise(prompts: Sequence[str], completions: Sequence[str],
            answers: Sequence[str]) -> list:
  """1.0 where the completion has at most `CONCISE_WORDS` whitespace-
  separated words, else 0.0 (a criterion of form, not a length penalty in
  tokens: the length shapers count tokens)."""
  check_batch(prompts, completions, answers)
  return [float(len(c.split()) <= CONCISE_WORDS) for c in completions]
