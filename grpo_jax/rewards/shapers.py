"""Reward shapers: functions of what the sampler and the verifiers know
(token counts, the sampler's log-probs, correctness, the step, a per-prompt
history) that add one reward column.

A shaper maps lengths [N] (int token counts), the arrays it reads (metadata
``reads``, passed as keywords) and its keyword options to a column [N]
float32, and registers in `SHAPERS` with the range of its values (``range=
(lo, hi)``, or a function of its options giving it). Its column is named
after it and weighted like any reward (``rewards.shapers.<name>.weight`` in
a config). Rows are prompt major (row p*G + g), so a shaper that reads
``group_size`` can form group statistics.

What a shaper may read (`READS`), all per row [N] unless noted:

  correct          1.0 where the ``accuracy`` verifier scored >= 0.5
  formatted        1.0 where the ``format`` verifier scored >= 0.5
  verified         [N, K_v] every verifier's column, in config order
  verifier_weights [K_v] their weights
  sampler_logp     [N, T] the sampler's own log-probs of its tokens
  mask             [N, T] 1.0 on sampled tokens
  tokens           [N, T] int the sampled token ids (valid where mask is 1)
  group_size       G, the rows of one prompt
  step             the training step
  prompt_index     `data.Example.index` of each row's prompt
  state            the shaper's state (a stateful shaper, ``state=``)

Most shapers here give the *change* to the verifiers' weighted sum: with
``accuracy`` weighted 1 (and nothing else), verifiers plus column is the
paper's reward. A stateful shaper declares ``state=StateSpec(init,
update)``: ``init(**options)`` makes a NamedTuple of fixed-shape float32
arrays (kept in ``TrainState.states["shape"]`` and checkpointed), the
column reads it as ``state``, and ``update(state, lengths, **reads,
**options)`` folds a step's rows in once, after the step's rounds are drawn.
A shaper whose prompt must say something (LCPO's target length) declares
``instruction=fn(prompt_index, **options) -> str``, appended to the
question. A rule spanning the config (POW3R's rubric weights) is
``check_config=fn(*, functions, weights, ranges, **options)``, returning
None or (field, problem, fix) for `train.validate`.

| name           | column                                        | paper            |
|----------------|-----------------------------------------------|------------------|
| ``overlong``   | 0, then a ramp to -1 over the last cache_length | arXiv 2503.14476 |
| ``lcpo``       | L1's length-target reward minus correctness   | arXiv 2503.04697 |
| ``grpo_lead``  | GRPO-LEAD's length-shaped reward minus correctness | seed 002 para. 42 |
| ``hapo_length``| HAPO's cosine length reward vs. the history   | seed 002 para. 115 |
| ``length_budget`` | clip(1 - n / B_t, 0, 1), B_t a schedule    | seed 002 para. 17 (reconstruction) |
| ``consteer``   | +-lam * confidence (ConSteer-RL)              | seed 000 para. 11 (reconstruction) |
| ``pow3r``      | contrast-adapted rubric minus the static one  | seed 000 para. 58 (reconstruction) |
| ``cosine_length`` | cosine length reward minus correctness    | arXiv 2502.03373 |
| ``repetition_penalty`` | max_penalty x the share of repeated n-grams | arXiv 2502.03373 App. C.2 |
"""

import functools
import inspect
from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from grpo_jax import registry

READS = ("correct", "formatted", "verified", "verifier_weights",
         "sampler_logp", "mask", "tokens", "group_size", "step",
         "prompt_index", "state")
# The verifier each correctness read comes from.
READ_VERIFIERS = {"correct": "accuracy", "formatted": "format"}


class StateSpec(NamedTuple):
  """A stateful shaper's state (metadata ``state``).

  Attributes:
    init: ``init(**options) -> state``, a NamedTuple of fixed-shape float32
      arrays; its options (a table's ``capacity``) are the shaper's too.
    update: ``update(state, lengths, **reads, **options) -> state``: a
      step's rows folded in once, after all of the step's rounds.
  """
  init: Callable
  update: Callable


class ShaperMeta(NamedTuple):
  """What a shaper declares when it registers (`SHAPERS`; the module
  docstring says more). The fields given as functions take its options."""
  reads: Tuple[str, ...] = ()  # what it reads (`READS`), as keywords
  # The (lo, hi) of its column, or a function of its options giving it;
  # None: undeclared.
  range: Any = None
  check: Optional[Callable] = None  # check(**options): ValueError if bad
  state: Optional[StateSpec] = None  # a stateful shaper's state
  # ``fn(prompt_index, **options) -> str`` appended to the question (LCPO's
  # target length); None: the prompt says nothing.
  instruction: Optional[Callable] = None
  # ``fn(*, functions, weights, ranges, **options)`` -> None or (field,
  # problem, fix): a rule spanning the config (POW3R's rubric weights).
  check_config: Optional[Callable] = None
  # How its per-prompt table takes prompt ids (or a function of the
  # options); None: it keeps none.
  prompt_ids: Any = None
  paper: str = ""  # arXiv id (or a short reference)


SHAPERS = registry.Registry("reward shaper", positional=("lengths",),
                            meta=ShaperMeta)


class Shaper(NamedTuple):
  """A shaper with its options bound (`make_shaper`).

  ``shaper(lengths, **reads)`` is its column [N]; ``init()`` its state
  (``()`` when stateless); ``update(state, lengths, **reads)`` the state
  after a step (the state itself when stateless); ``instruction(index)``
  the text its prompt needs ("" when none).
  """
  name: str
  reads: Tuple[str, ...]
  fn: Callable
  init: Callable[[], Any]
  update: Callable
  instruction: Callable[[int], str]
  range: Optional[Tuple[float, float]]

  def __call__(self, lengths, **reads) -> np.ndarray:
    return self.fn(lengths, **reads)

  @property
  def stateful(self) -> bool:
    return "state" in self.reads


def _split_options(name: str, options: Mapping[str, Any]):
  """(the function's options, the state init's options, reads, spec); a
  ValueError naming an option neither takes."""
  entry = SHAPERS.entry(name)
  spec = entry.meta.state
  reads = tuple(entry.meta.reads)
  state_keys = (tuple(inspect.signature(spec.init).parameters)
                if spec is not None else ())
  SHAPERS.check_options(name, options, extra=state_keys, exclude=reads)
  fn_keys = SHAPERS.options(name, exclude=reads)
  return ({k: v for k, v in options.items() if k in fn_keys},
          {k: v for k, v in options.items() if k in state_keys}, reads, spec)


def shaper_range(name: str, **options) -> Optional[Tuple[float, float]]:
  """The declared ``(lo, hi)`` of shaper `name`'s column with `options`;
  None where it declares none."""
  declared = SHAPERS.entry(name).meta.range
  if callable(declared):
    fn_options, _, _, _ = _split_options(name, options)
    return tuple(declared(**fn_options))
  return declared


def make_shaper(name: str, **options) -> Shaper:
  """The `Shaper` `name` with `options` bound; an unknown option is a
  ValueError naming it, and the shaper's own checks run once here (on no
  rows) so that a bad value fails before any compute."""
  entry = SHAPERS.entry(name)
  fn_options, state_options, reads, spec = _split_options(name, options)
  fn = functools.partial(entry.fn, **fn_options)
  check = entry.meta.check
  if check is not None:
    check(**fn_options)
  if spec is None:
    init = lambda: ()
    update = lambda state, lengths, **arrays: state
  else:
    init = functools.partial(spec.init, **state_options)
    init()  # its checks (a capacity >= 1), before any compute
    update = functools.partial(spec.update, **fn_options)
  text = entry.meta.instruction
  instruction = (functools.partial(text, **fn_options) if text is not None
                 else lambda index: "")
  declared = entry.meta.range
  span = tuple(declared(**fn_options)) if callable(declared) else declared
  return Shaper(name, reads, fn, init, update, instruction, span)


def check_lengths(lengths) -> np.ndarray:
  """`lengths` as an [N] int array; a ValueError for another rank or for
  non-integer (character) lengths."""
  lengths = np.asarray(lengths)
  if lengths.ndim != 1:
    raise ValueError(
        f"lengths must be [N] (rank 1); got shape {lengths.shape}.")
  if lengths.size and not np.issubdtype(lengths.dtype, np.integer):
    raise ValueError(
        f"lengths must be integer token counts; got dtype {lengths.dtype}. "
        "Pass mask.sum(-1).astype(int), not string lengths.")
  return lengths


def check_rows(name: str, values, n: int, *, dtype=np.float64) -> np.ndarray:
  """`values` as an [N] array of `dtype`; a ValueError naming `name`."""
  values = np.asarray(values, dtype)
  if values.shape != (n,):
    raise ValueError(f"{name} must be [N] with N={n}; got shape "
                     f"{values.shape}.")
  return values


def check_group_size(group_size, n: int) -> int:
  if group_size is None or group_size < 1 or n % group_size:
    raise ValueError(f"group_size={group_size!r} must divide the N={n} rows "
                     "(prompt major, G rows per prompt).")
  return int(group_size)


@SHAPERS.register(
    "overlong", paper="arXiv 2503.14476", range=(-1.0, 0.0),
    examples=({"max_length": 8, "cache_length": 2},
              {"max_length": 8, "cache_length": 0}))
def overlong_penalty(lengths, *, max_length: int, cache_length: int
                     ) -> np.ndarray:
  """DAPO's soft overlong punishment, in tokens.

  R(L) = 0                          if L <= max_length - cache_length
       = (max_length - cache_length - L) / cache_length
                                    if max_length - cache_length < L <= max_length
       = -1                         if L > max_length

  arXiv 2503.14476 (eq. 13). Lengths are TOKEN counts of the completion (the
  sum of its mask), never characters.

  Args:
    lengths: [N] completion lengths in tokens (any integer array-like).
    max_length: L_max, the length at which the penalty reaches -1.
    cache_length: L_cache, the width of the linear ramp; 0 gives a hard cut.

  Returns:
    [N] float32 penalties in [-1, 0].
  """
  if max_length <= 0:
    raise ValueError(f"max_length must be positive; got {max_length!r}.")
  if not 0 <= cache_length <= max_length:
    raise ValueError(
        f"cache_length must be in [0, max_length={max_length}]; got "
        f"{cache_length!r}.")
  lengths = check_lengths(lengths).astype(np.float64)
  start = max_length - cache_length
  ramp = (start - lengths) / max(cache_length, 1)
  penalty = np.where(lengths <= start, 0.0,
                     np.where(lengths <= max_length, ramp, -1.0))
  return penalty.astype(np.float32)
