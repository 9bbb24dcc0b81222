"""Reference solutions as completion rows (EDGE-GRPO's guided error
correction, `strategies.groups.guided_correction`), and as hints in a
prompt (GHPO, `strategies.resampled.ghpo`: `hint_examples`).

`solution_text` writes a prompt's reference solution in the answer format
the verifiers read; `reference_rows` tokenises one per prompt of a round as
a completion of T tokens (ending with the end id where it fits), scores it
with the verifiers, and computes its log-probs and entropies with the
trainer's forward pass under the current policy: no sampler drew it, so
the trainer's log-probs stand in for the sampler's.
"""

from typing import Callable, Sequence

import numpy as np

from grpo_jax import data
from grpo_jax import sampling
from grpo_jax.strategies import hints
from grpo_jax.strategies.groups import References


def solution_text(task, example: data.Example) -> str:
  """The reference solution of `example`: its stored worked solution
  (``Example.solution``; GSM8K's), else the task's own (`task.solution`,
  the arithmetic task's one-line working), else the answer alone; each
  ending with ``\\boxed{answer}``, the format the verifiers parse."""
  if example.solution:
    return example.solution
  solve = getattr(task, "solution", None)
  if solve is not None:
    return solve(example)
  return f"The answer is \\boxed{{{example.answer}}}."


def worked_solution(task, example: data.Example) -> str:
  """`example`'s worked solution: its stored one (``Example.solution``,
  GSM8K's), else the task's own (`task.solution`, the arithmetic task's
  one-line working); "" when the task gives none (GHPO then has nothing to
  hint from)."""
  if example.solution:
    return example.solution
  solve = getattr(task, "solution", None)
  return solve(example) if solve is not None else ""


def hint_examples(examples: Sequence[data.Example], omegas, *, task,
                  tokenizer, hint_text: str = hints.HINT_TEXT) -> list:
  """GHPO's hinted prompts (`strategies.hints.hint_question`): each
  example whose omega > 0 with its question followed by `hint_text` and
  the first round(omega * n) of the n tokens of its worked solution
  (`worked_solution`, tokenised by the policy's tokenizer, decoded back);
  omega 0 leaves it as it is.

  Raises:
    ValueError: an example to hint has no worked solution (the task gives
      none; train.validate refuses such tasks for GHPO up front).
  """
  omegas = np.asarray(omegas, np.float64)
  if omegas.shape != (len(examples),):
    raise ValueError(f"omegas must be one per example [{len(examples)}]; "
                     f"got shape {omegas.shape}.")
  decode = lambda ids: tokenizer.decode(list(ids), skip_special_tokens=True)
  out = []
  for example, omega in zip(examples, omegas):
    if omega == 0:
      out.append(example)
      continue
    solution = worked_solution(task, example)
    tokens = (tokenizer.encode(solution, add_special_tokens=False)
              if solution else None)
    out.append(example._replace(question=hints.hint_question(
        example.question, tokens, float(omega), decode=decode,
        hint_text=hint_text)))
  return out


def encode_completions(tokenizer, texts: Sequence[str], *, num_tokens: int,
                       eos_id: int, pad_id: int):
  """(tokens [R, T] int32, mask [R, T] float32, lengths [R] int32,
  truncated [R] bool) of `texts` as completions: their ids then `eos_id`,
  cut at T = `num_tokens` (truncated when the end id did not fit)."""
  rows = len(texts)
  tokens = np.full((rows, num_tokens), pad_id, np.int32)
  mask = np.zeros((rows, num_tokens), np.float32)
  lengths = np.zeros((rows,), np.int32)
  truncated = np.zeros((rows,), bool)
  for i, text in enumerate(texts):
    ids = list(tokenizer.encode(text, add_special_tokens=False)) + [eos_id]
    truncated[i] = len(ids) > num_tokens
    ids = ids[:num_tokens]
    tokens[i, :len(ids)] = ids
    mask[i, :len(ids)] = 1.0
    lengths[i] = len(ids)
  return tokens, mask, lengths, truncated


def reference_rows(rnd, examples, *, tokenizer, task, num_tokens: int,
                   eos_id: int, pad_id: int, prompt_buckets,
                   score: Callable, logprobs: Callable,
                   num_columns: int) -> References:
  """The `References` of round `rnd`'s P prompts.

  Args:
    rnd: the `rollout.Round` (its ``prompt_ids``).
    examples: its P `data.Example`s.
    tokenizer: the policy's.
    task: the task (`solution_text`).
    num_tokens: T, the completion width.
    eos_id, pad_id: the end id appended, the id under padding.
    prompt_buckets: as the sampler's.
    score: ``score(examples, tokens [P, T], lengths [P]) -> (rewards
      [P, K_v], errors [K_v])``, the verifiers (`rollout._score`).
    logprobs: ``logprobs(tokens [P, S], input_mask, completion_start) ->
      (logp [P, T], entropy [P, T])`` under the current policy.
    num_columns: K, the reward columns (the verifiers' alone: configs that
      correct errors take no shapers).
  """
  tokens, mask, lengths, truncated = encode_completions(
      tokenizer, [solution_text(task, e) for e in examples],
      num_tokens=num_tokens, eos_id=eos_id, pad_id=pad_id)
  verified, errors = score(examples, tokens, lengths)
  verified = np.asarray(verified, np.float32)
  if verified.shape[-1] != num_columns:
    raise ValueError(
        f"reference rows are scored by the {verified.shape[-1]} verifiers, "
        f"but the rewards have {num_columns} columns; guided correction "
        "takes no reward shapers (config.rewards.shapers).")
  prompt_tokens, prompt_mask = sampling.pad_prompts(
      rnd.prompt_ids, buckets=prompt_buckets, pad_id=pad_id)
  logp, entropy = logprobs(
      np.concatenate([prompt_tokens, tokens], 1).astype(np.int32),
      np.concatenate([prompt_mask.astype(np.float32), mask], 1),
      prompt_tokens.shape[1])
  logp = np.asarray(logp, np.float32) * mask
  entropy = np.asarray(entropy, np.float32) * mask
  return References(
      tokens=tokens, mask=mask, lengths=lengths, truncated=truncated,
      logp=logp, token_entropies=entropy,
      entropies=entropy.sum(-1) / np.maximum(mask.sum(-1), 1.0),
      rewards=verified, errors=np.asarray(errors))
