r"""The long-tailed workload of the sampler and step benchmarks.

Real rollouts end by EOS at lengths with a long tail: most answers short, a
few running to the limit. Here each of N rows gets a length drawn once from
a fixed seed (`draw_lengths`: 90% uniform in [1, 64], 10% the limit T), the
same draws on every side, and every side is made to end row n after exactly
``lengths[n]`` tokens by its own sampler:

* at token index ``lengths[n] - 1`` the row's logits keep only the end id
  (so the draw is that id), for a row of length T never;
* at every other token every end id is banned, so no row ends early by
  chance.

A length counts the end token (it enters the loss on every side but Tunix's,
whose learner drops it); a row of length T is cut at the limit, no end id.
Each side applies the rule where it draws:

* grpo_jax: `jax_hook`, `sampling.sample(..., logits_hook=...)`;
* transformers (and TRL, whose GRPOTrainer calls the model's ``generate``):
  `ForceLengths`, a ``LogitsProcessor`` passed to ``generate``;
* Tunix: `patch_tunix_sampler`, around its ``Sampler._sample`` (0.1.7 has no
  logits hook): the same `jax_hook` on the logits of each draw.

Each side's produced lengths are checked against the draws
(`check_lengths`) before a figure counts. The figure is useful tokens per
second: the tokens that enter the loss, the sum of the lengths.
"""

import functools
from typing import Callable, NamedTuple, Tuple

import numpy as np

WORKLOADS = ("fixed", "long_tail")
SHORT_MAX = 64  # short rows: uniform in [1, SHORT_MAX]
LONG_SHARE = 0.1  # this share of the rows runs to the limit
LONG_TAIL_TOKENS = 512  # the limit of the long-tailed workload
SEED = 0
# A banned logit: finite, so log-probs and entropies stay finite, yet its
# probability underflows to exactly 0 in float32.
BANNED = -1e9


def draw_lengths(num_rows: int, max_new_tokens: int, *, seed: int = SEED,
                 short_max: int = SHORT_MAX,
                 long_share: float = LONG_SHARE) -> np.ndarray:
  """[num_rows] int: round(long_share * num_rows) rows (at least one) of
  length `max_new_tokens` at places drawn from `seed`, the others uniform
  in [1, min(short_max, max_new_tokens)]."""
  if num_rows < 1 or max_new_tokens < 1:
    raise ValueError(f"need rows and tokens >= 1; got {num_rows}, "
                     f"{max_new_tokens}")
  rng = np.random.default_rng(seed)
  lengths = rng.integers(1, min(short_max, max_new_tokens) + 1, num_rows)
  num_long = max(1, round(long_share * num_rows))
  lengths[rng.permutation(num_rows)[:num_long]] = max_new_tokens
  return lengths.astype(np.int32)


def end_steps(lengths, max_new_tokens) -> np.ndarray:
  """The token index at which each row draws its end id; a row of the
  limit's length never does (its index is past the last step)."""
  lengths = np.asarray(lengths)
  return np.where(lengths < max_new_tokens, lengths - 1, max_new_tokens)


def jax_hook(lengths, max_new_tokens, end_id: int, banned_ids):
  """`sampling.sample`'s ``logits_hook``: ``(logits [B, V], rows [B], steps
  [B]) -> logits`` forcing `end_id` at each row's end step and banning
  every id of `banned_ids` elsewhere. One function per call: a static
  argument, so build it once per workload."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  end_at = jnp.asarray(end_steps(lengths, max_new_tokens), jnp.int32)
  banned = jnp.asarray(sorted(set(banned_ids) | {end_id}), jnp.int32)

  def hook(logits, rows, steps):
    ids = jnp.arange(logits.shape[-1])
    only_end = jnp.where(ids == end_id, 0.0, BANNED).astype(logits.dtype)
    logits = logits.at[:, banned].set(BANNED)
    return jnp.where((steps == end_at[rows])[:, None], only_end[None],
                     logits)
  return hook


class Workload(NamedTuple):
  """One batch's long-tailed lengths and what forces them."""
  lengths: np.ndarray  # [N] int32, the drawn lengths
  end_id: int  # the end id forced at each row's end
  banned_ids: Tuple[int, ...]  # every end id, banned elsewhere
  hook: Callable  # `jax_hook` of the above


def make_workload(num_rows, max_new_tokens, end_id, banned_ids, *,
                  seed=SEED) -> Workload:
  """The draws for `num_rows` rows, `end_id` forced at their ends, it and
  `banned_ids` (the model's other end ids) banned elsewhere."""
  lengths = draw_lengths(num_rows, max_new_tokens, seed=seed)
  end_id = int(end_id)
  banned = tuple(sorted({end_id, *(int(i) for i in banned_ids)}))
  return Workload(lengths, end_id, banned,
                  jax_hook(lengths, max_new_tokens, end_id, banned))


def hf_processor(lengths, max_new_tokens, end_id, banned_ids):
  """`ForceLengths` (built here so transformers is imported only when
  used)."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  class ForceLengths(transformers.LogitsProcessor):
    """The rule as a LogitsProcessor. transformers passes the ids so far,
    [B, prompt + t]: the token index is their width less the prompt's,
    which the caller sets (`prompt_length`) before each ``generate``."""

    def __init__(self):
      self.end_at = torch.as_tensor(end_steps(lengths, max_new_tokens))
      self.banned = torch.as_tensor(sorted(set(banned_ids) | {end_id}))
      self.prompt_length = None
      self.calls = 0

    def __call__(self, input_ids, scores):
      if self.prompt_length is None:
        raise RuntimeError("set ForceLengths.prompt_length before generate")
      if scores.shape[0] != self.end_at.shape[0]:
        raise ValueError(f"generate has {scores.shape[0]} rows; the draws "
                         f"are for {self.end_at.shape[0]}")
      self.calls += 1
      step = input_ids.shape[1] - self.prompt_length
      scores = scores.clone()
      scores[:, self.banned] = BANNED
      force = self.end_at == step
      scores[force] = BANNED
      scores[force, end_id] = 0.0
      return scores

  return ForceLengths()


def hf_generate_with(model, processor):
  """Makes `model.generate` (as TRL's GRPOTrainer calls it) pass
  `processor`, its prompt width set from each call's input ids; returns the
  list of each call's row count."""
  import transformers  # pylint: disable=g-import-not-at-top
  original = model.generate
  calls = []

  @functools.wraps(original)
  def generate(*args, **kwargs):
    input_ids = kwargs.get("input_ids", args[0] if args else None)
    processor.prompt_length = input_ids.shape[1]
    calls.append(input_ids.shape[0])
    processors = transformers.LogitsProcessorList(
        list(kwargs.pop("logits_processor", None) or []) + [processor])
    return original(*args, logits_processor=processors, **kwargs)
  model.generate = generate
  return calls


def hf_lengths(completion_ids, end_ids, max_new_tokens) -> np.ndarray:
  """Completion lengths from [B, <= T] generated ids: up to and with the
  first end id, else every token."""
  ids = np.asarray(completion_ids)
  is_end = np.isin(ids, list(end_ids))
  return np.where(is_end.any(1), is_end.argmax(1) + 1,
                  max_new_tokens).astype(np.int32)


def patch_tunix_sampler(hook, num_rows):
  """Tunix 0.1.7's `Sampler._sample` (called at the prefill and at every
  decode step with the logits of the draw, [B, L, V], the last position
  drawn from) gets `hook` applied to that position first; the drawn
  token's index is ``decoding_step + 1 - num_input_tokens``. Every
  Sampler in the process is patched; returns the list of each traced
  call's row count (the rows must be the draws' rows, in order)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from tunix.generate import sampler as tunix_sampler  # pylint: disable=g-import-not-at-top
  sampler_class = tunix_sampler.Sampler
  # Patched again (another batch): wrap Tunix's own method, not the patch.
  original = getattr(sampler_class, "_tunix_sample", sampler_class._sample)  # pylint: disable=protected-access
  sampler_class._tunix_sample = original  # pylint: disable=protected-access
  traced = []

  def _sample(self, logits, eos, cache, sampler_state):
    rows = logits.shape[0]
    traced.append(rows)
    if rows != num_rows:
      raise ValueError(f"Tunix samples {rows} rows at once; the draws are "
                       f"for {num_rows}")
    step = (sampler_state.decoding_step + 1
            - sampler_state.num_input_tokens)
    last = hook(logits[:, -1].astype(jnp.float32), jnp.arange(rows),
                jnp.full((rows,), step, jnp.int32))
    return original(self, last[:, None, :], eos, cache, sampler_state)

  sampler_class._sample = _sample  # pylint: disable=protected-access
  return traced


def tunix_lengths(tokens, max_new_tokens) -> np.ndarray:
  """Lengths (the end token counted) of Tunix's completions, which it
  returns cut before their first end id: a row shorter than the limit
  ended on one."""
  lengths = np.asarray([len(t) for t in tokens])
  return np.where(lengths < max_new_tokens, lengths + 1,
                  lengths).astype(np.int32)


def check_lengths(side: str, produced, lengths) -> None:
  """An AssertionError naming `side` and the first rows that differ,
  unless every produced length equals its draw."""
  produced, lengths = np.asarray(produced), np.asarray(lengths)
  if produced.shape != lengths.shape or not np.array_equal(produced,
                                                           lengths):
    wrong = (np.flatnonzero(produced != lengths)[:5]
             if produced.shape == lengths.shape else "all")
    raise AssertionError(
        f"{side}: completion lengths differ from the draws (rows {wrong}): "
        f"produced {produced.tolist()}, drawn {lengths.tolist()}")


def useful_tokens(lengths) -> int:
  """Tokens that enter the loss: every row's length."""
  return int(np.sum(lengths))
