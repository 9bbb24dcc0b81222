"""GHPO's guided hints (VARIANTS.md 4.8; arXiv 2507.10628, EXACT-CODE from
hkgc-1/GHPO ``src/ghpo/ghpo_trainer.py``).

After `start_hint_step`, a group whose accuracy rewards are all <= 0 is
resampled from its prompt with the first omega of the reference solution
appended, omega rising through (0.25, 0.5, 0.75) while the group stays
all-wrong; a group with any success keeps the prompt it has. Training is
then GRPO on the final prompts: the hint is context, never a target.

Host-side functions (prompts are text): `hint_length`, `hint_question`,
`ghpo_escalate`, `ghpo_omega`.
"""

from typing import Callable, Optional, Sequence

import numpy as np

# The authors' hint_prompt, verbatim (leading space included).
HINT_TEXT = ("\n The following text is the beginning part of the answer, "
             "which you can refer to for solving the problem:\n")
OMEGAS = (0.25, 0.5, 0.75)


def hint_length(num_tokens: int, omega: float) -> int:
  """The solution tokens a hint keeps: round(omega * num_tokens), with
  Python's round, half to even (``round(2.5) = 2``), as the authors' code.

  The authors cut the solution in characters; grpo_jax cuts solution
  *tokens* (a hint never ends inside a token), with the same rounding.
  """
  if isinstance(num_tokens, bool) or not isinstance(num_tokens, (int,
                                                                 np.integer)) \
      or num_tokens < 0:
    raise ValueError(f"num_tokens={num_tokens!r} must be an integer >= 0.")
  if not 0.0 <= omega <= 1.0:
    raise ValueError(f"omega={omega!r} must lie in [0, 1].")
  return round(omega * int(num_tokens))


def hint_question(question: str, solution_tokens: Optional[Sequence[int]],
                  omega: float, *, decode: Callable[[Sequence[int]], str],
                  hint_text: str = HINT_TEXT) -> str:
  """The user turn of a hinted prompt:

    question + hint_text + decode(solution_tokens[: round(omega * n)])

  always built from the plain question (the levels do not stack), as the
  authors'. omega = 0 gives the plain question.

  Args:
    question: the plain question (the user turn, before the chat template).
    solution_tokens: the reference solution's tokens; None when the task
      gives no worked solution (an error: GHPO needs one).
    omega: the share of the solution shown.
    decode: token ids -> text (the tokenizer's decode).
  """
  if solution_tokens is None:
    raise ValueError(
        "GHPO needs a reference solution for every prompt, and this task "
        "gives none; use a task with worked solutions (the arithmetic task, "
        "GSM8K) or another group strategy.")
  if omega == 0:
    return question
  cut = hint_length(len(solution_tokens), omega)
  return question + hint_text + decode(list(solution_tokens[:cut]))


def check_omegas(omegas: Sequence[float]) -> tuple:
  """`omegas` as a tuple, strictly increasing within (0, 1]."""
  omegas = tuple(float(w) for w in omegas)
  if not omegas or any(not 0.0 < w <= 1.0 for w in omegas) or any(
      b <= a for a, b in zip(omegas, omegas[1:])):
    raise ValueError(f"omegas={omegas!r} must be a non-empty, strictly "
                     "increasing sequence within (0, 1].")
  return omegas


def ghpo_omega(levels, omegas: Sequence[float] = OMEGAS) -> np.ndarray:
  """[P] the hint share of each group at its level: 0 at level 0 (the plain
  prompt), omegas[l - 1] at level l."""
  table = np.concatenate([[0.0], check_omegas(omegas)])
  levels = np.asarray(levels, np.int64)
  if np.any((levels < 0) | (levels >= table.size)):
    raise ValueError(f"levels must lie in [0, {table.size - 1}]; got "
                     f"{levels!r}.")
  return table[levels]


def ghpo_escalate(levels, accuracy, *, step: int, start_hint_step: int = 0,
                  num_levels: int = len(OMEGAS), valid=None):
  """One round of GHPO's escalation.

    resample_p = step >= start_hint_step and all_g accuracy[p, g] <= 0
                 and level_p < num_levels
    level_p   += resample_p

  Args:
    levels: [P] int, each group's hint level so far (0 = plain prompt).
    accuracy: [P, G] the accuracy reward of the group's latest draw.
    step: the training step.
    start_hint_step: the first step that hints.
    num_levels: the number of hint levels (len(omegas)).
    valid: [P] bool, False for filler groups (never resampled).

  Returns:
    (new levels [P] int64, resample [P] bool: the groups to draw again at
    their new level with `hint_question`).
  """
  levels = np.asarray(levels, np.int64)
  acc = np.asarray(accuracy)
  if acc.ndim != 2 or levels.shape != acc.shape[:1]:
    raise ValueError(f"levels must be [P] and accuracy [P, G]; got "
                     f"{levels.shape}, {acc.shape}.")
  all_wrong = np.all(acc <= 0, axis=1)
  resample = all_wrong & (levels < num_levels) & (step >= start_hint_step)
  if valid is not None:
    resample &= np.asarray(valid, bool)
  return levels + resample, resample
