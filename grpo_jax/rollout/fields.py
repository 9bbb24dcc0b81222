"""The arrays a step's stages read from its sampled rounds (`rollout.Round`)
beyond tokens and rewards; host numpy.

Of one round, as `rollout.sample_round` fills them for an estimator that
reads them: answer classes (`answer_ids`), SD-GRPO's segments
(`segments`), and each row's mean token entropy (`row_mean`). Of the step,
over the group strategy's picks (`strategies.Selected`): a field of the
picked groups (`gather`), the groups refilled from a buffer
(`replayed_groups`), a round as the shapers' state updates read it
(`shape_data`) and the arrays a credit rule reads (`credit_reads`).

The optional fields are registries by the name a stage reads:
`ROUND_FIELDS` (computed per round, `round_fields`) and `STEP_FIELDS`
(computed over the step's kept groups with a stage's state).

`rollout` and `rollout.measures` import this module; it imports neither.
"""

from typing import Any, Callable, NamedTuple

import numpy as np

from grpo_jax import strategies
from grpo_jax.rollout import revisits as revisits_lib
from grpo_jax.rewards import shaping as shaping_lib
from grpo_jax.rewards import verifiers as verifiers_lib


def decode_completions(tokenizer, tokens, lengths) -> list:
  """Texts of the completions, special tokens (end ids) dropped."""
  return [tokenizer.decode(list(row[:n]), skip_special_tokens=True)
          for row, n in zip(np.asarray(tokens), np.asarray(lengths))]


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


def credit_reads(names, field, pipeline) -> dict:
  """The arrays a credit rule reads (`credit.READS`) by name, [N, ...]:
  ``rewards`` is each row's weighted total, ``num_generations`` G, and the
  others the row fields of that name (`field(name)`, `episodes.Drawn`)."""
  derived = {
      "num_generations": lambda: pipeline.sampler.num_generations,
      "rewards": lambda: (field("rewards") * pipeline.weights).sum(-1)
                         .astype(np.float32),
  }
  return {name: derived[name]() if name in derived else field(name)
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


# --------------------------------------------- optional fields of a round


class RoundView(NamedTuple):
  """What an optional round field is computed from: the round's P
  `examples`, the sampler's output `out` (`rows` rows per prompt: its
  `members` G members, then any extra row), the reward columns `rewards`
  [P, rows, K], and the `pipeline` (`rollout.Pipeline`)."""
  pipeline: Any
  examples: list
  out: Any
  rewards: np.ndarray
  rows: int
  members: int


class RoundField(NamedTuple):
  """An optional array of a round, computed only when a stage reads it:
  ``compute(RoundView) -> {Round field: [P, G, ...]}``; with `greedy_row`
  the sampler adds one greedy row (temperature 0) after each prompt's G
  members, scored and never trained on."""
  compute: Callable
  greedy_row: bool = False


def _answer_ids(view: RoundView) -> dict:
  # A member's class is the first member with its answer, never a later
  # row: the greedy row changes no sampled member's id.
  texts = decode_completions(view.pipeline.tokenizer, view.out.tokens,
                             view.out.lengths)
  return {"answer_ids": answer_ids(texts, view.rows)[:, :view.members]}


def _greedy_rewards(view: RoundView) -> dict:
  return {"greedy_rewards": view.rewards[:, view.members]}


def _segments(view: RoundView) -> dict:
  return segments(view.pipeline, view.examples, view.out, view.rows)


_SEGMENTS = RoundField(_segments)
# By the name a stage reads (an estimator's ``reads``): answer classes
# (OPO-style grouping, SEED-GRPO), ReMax's greedy baseline, SD-GRPO's
# segments.
ROUND_FIELDS = {
    "answer_ids": RoundField(_answer_ids),
    "greedy_rewards": RoundField(_greedy_rewards, greedy_row=True),
    "segment_rewards": _SEGMENTS, "segment_valid": _SEGMENTS,
    "segment_ids": _SEGMENTS,
}


def round_fields(reads) -> list:
  """The `RoundField`s the names in `reads` need, each once."""
  wanted = []
  for name in reads:
    field = ROUND_FIELDS.get(name)
    if field is not None and field not in wanted:
      wanted.append(field)
  return wanted


# ----------------------------------------------- optional fields of a step

# GroupData arrays computed over the step's kept groups with a stage's
# state, by the name an estimator reads: name -> (the stage whose state it
# reads and updates, ``compute(params, selected, state, component, *,
# pipeline, gather) -> (array, state, measurements)``).
STEP_FIELDS = {"divergence": ("revisits", revisits_lib.step_divergence)}
