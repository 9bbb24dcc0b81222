"""The arrays a step's stages read from its sampled rounds (`rollout.Round`)
beyond tokens and rewards; host numpy.

Of one round, as `rollout.sample_round` fills them for an estimator that
reads them: answer classes (`answer_ids`), SD-GRPO's segments
(`segments`), and each row's mean token entropy (`row_mean`). Of the step,
over the group strategy's picks (`strategies.Selected`): a field of the
picked groups (`gather`), the groups refilled from a buffer
(`replayed_groups`), a round as the shapers' state updates read it
(`shape_data`) and the arrays a credit rule reads (`credit_reads`).

`rollout` and `rollout.measures` import this module; it imports neither.
"""

import numpy as np

from grpo_jax import strategies
from grpo_jax.rewards import shaping as shaping_lib
from grpo_jax.rewards import verifiers as verifiers_lib


def row_mean(values, mask) -> np.ndarray:
  """[N] mean of [N, T] values over each row's mask; 0 for an empty row."""
  values, mask = np.asarray(values, np.float32), np.asarray(mask, np.float32)
  return (values * mask).sum(-1) / np.maximum(mask.sum(-1), 1.0)


def answer_ids(texts, g: int) -> np.ndarray:
  """[P, g] int32 answer classes of each prompt's `g` completion `texts`
  (prompt-major; `verifiers.answer_classes`); in this process: parsing is
  quick next to the verifiers' work."""
  return np.asarray([verifiers_lib.answer_classes(texts[i:i + g])
                     for i in range(0, len(texts), g)], np.int32)


def segments(pipeline, examples, out, w: int) -> dict:
  """SD-GRPO's `rollout.SEGMENT_FIELDS` of the G members of each prompt (of
  `w` rows each), S the task's ``max_segments``: each box's reward
  (`verifiers.segment_scores`) and the tokens each segment owns
  (`verifiers.segment_token_ids`, by decoding prefixes, so any tokenizer
  works); in this process, like `answer_ids`. `pipeline`: the
  `rollout.Pipeline`; `out`: the sampler's output of the round."""
  s, g = pipeline.sampler, pipeline.sampler.num_generations
  num_segments = getattr(pipeline.task, "max_segments", 0)
  if not num_segments:
    raise ValueError(
        "the advantage estimator reads GroupData.segment_rewards, but the "
        "task has no segments; set --config.data.task=segments")
  tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
  rewards, valid, ids = [], [], []
  for row in range(len(examples) * w):
    if row % w >= g:
      continue  # ReMax's greedy row: scored, never trained on
    n = int(lengths[row])
    decode = lambda k, r=row: pipeline.tokenizer.decode(
        list(tokens[r, :k]), skip_special_tokens=True)
    r, v = verifiers_lib.segment_scores(
        decode(n), examples[row // w].answer, max_segments=num_segments,
        box_reward=getattr(pipeline.task, "box_reward", 0.0))
    rewards.append(r)
    valid.append(v)
    ids.append(verifiers_lib.segment_token_ids(
        decode, n, num_segments=int(v.sum()), max_tokens=s.max_new_tokens))
  grouped = lambda x, dtype: np.asarray(x, dtype).reshape(
      (len(examples), g) + np.shape(x)[1:])
  return {"segment_rewards": grouped(rewards, np.float32),
          "segment_valid": grouped(valid, bool),
          "segment_ids": grouped(ids, np.int32)}


def shape_data(rnd, pipeline, step: int) -> shaping_lib.RoundData:
  """A round's rows as the shapers' state updates read them (the greedy
  row, never trained on, left out)."""
  k, (p, g) = len(pipeline.verifiers), rnd.lengths.shape
  return shaping_lib.RoundData(
      lengths=rnd.lengths.reshape(-1),
      verified=rnd.rewards[..., :k].reshape(p * g, k),
      verifier_names=tuple(pipeline.verifiers),
      verifier_weights=pipeline.weights[:k], group_size=g, step=step,
      prompt_index=np.repeat(rnd.prompt_index, g))


def credit_reads(names, gather, rows, pipeline) -> dict:
  """The arrays a credit rule reads (`credit.READS`) by name, [N, ...]:
  ``rewards`` is each row's weighted total, ``num_generations`` G, and the
  others the Round fields of that name (`gather(field)` [P, G, ...] of
  the picked groups, `rows` flattens it to [N, ...])."""
  derived = {
      "num_generations": lambda: pipeline.sampler.num_generations,
      "rewards": lambda: rows((gather("rewards") * pipeline.weights).sum(-1)
                              .astype(np.float32)),
  }
  return {name: derived[name]() if name in derived else rows(gather(name))
          for name in names}


def replayed_groups(selected: strategies.Selected) -> np.ndarray:
  """[P] bool, the batch's groups refilled from a group buffer."""
  return np.asarray([selected.rounds[r].replayed is not None
                     and bool(selected.rounds[r].replayed[i])
                     for r, i in selected.picks], bool)


def gather(selected: strategies.Selected, field: str) -> np.ndarray:
  """[P, ...] of `field` over the picked (round, group) pairs."""
  return np.stack([getattr(selected.rounds[r], field)[i]
                   for r, i in selected.picks])
