"""The shape stage: the configured shapers run on each sampling round and
add their columns after the verifiers'; a stateful shaper's state (HAPO's
per-prompt history) is updated once per step from every round drawn.

`make_shape_stage(config.rewards.shapers)` binds them once; its record is
the rollout's ``shape`` component (`rollout.STAGES`), its state a dict
name -> state in ``TrainState.states["shape"]`` (``()`` for a stateless
shaper), checkpointed like every component's. `check_shapers` holds the
shapers' reads and options against the rest of a config (`train.validate`).
"""

import logging
from typing import Any, Callable, Dict, Mapping, NamedTuple, Sequence, Tuple

import numpy as np

from grpo_jax import registry
from grpo_jax.config.errors import fail
from grpo_jax.rewards.shapers import (READ_VERIFIERS, SHAPERS, Shaper,
                                      make_shaper)
from grpo_jax.rewards import references


class ShapeStage(NamedTuple):
  """The bound shapers.

  Attributes:
    shapers: name -> (`Shaper`, weight), in config order (the columns').
    init: ``init() -> states``, name -> each shaper's state.
  """
  shapers: Mapping[str, Tuple[Shaper, float]]
  init: Callable[[], Dict[str, Any]]


def make_shape_stage(shapers_config: Mapping[str, Mapping[str, Any]]
                     ) -> ShapeStage:
  """The `ShapeStage` of ``rewards.shapers`` (name -> options and weight)."""
  shapers = {name: (make_shaper(name, **{k: v for k, v in options.items()
                                         if k != "weight"}),
                    float(options["weight"]))
             for name, options in shapers_config.items()}
  return ShapeStage(
      shapers=shapers,
      init=lambda: {name: s.init() for name, (s, _) in shapers.items()})


def with_instructions(examples, shapers: Mapping[str, Tuple[Any, float]]):
  """`examples` with each shaper's prompt instruction (`Shaper.instruction`
  of the example's index) appended to its question; unchanged when none."""
  texts = [fn.instruction for fn, _ in shapers.values()
           if isinstance(fn, Shaper)]
  if not texts:
    return examples
  out = []
  for e in examples:
    extra = " ".join(t for t in (text(e.index) for text in texts) if t)
    out.append(e._replace(question=f"{e.question} {extra}") if extra else e)
  return out


class RoundData(NamedTuple):
  """What a shaper may read of one round, rows prompt major (`READS`)."""
  lengths: np.ndarray  # [N] int
  verified: np.ndarray  # [N, K_v]
  verifier_names: Tuple[str, ...]
  verifier_weights: np.ndarray  # [K_v]
  group_size: int
  step: int
  prompt_index: np.ndarray  # [N] int
  sampler_logp: Any = None  # [N, T]
  mask: Any = None  # [N, T]
  tokens: Any = None  # [N, T] int


def _reads(shaper: Shaper, data: RoundData, state) -> dict:
  arrays = {}
  for read in shaper.reads:
    if read in READ_VERIFIERS:
      column = data.verifier_names.index(READ_VERIFIERS[read])
      arrays[read] = (np.asarray(data.verified)[:, column] >= 0.5
                      ).astype(np.float32)
    elif read == "state":
      arrays[read] = state
    else:
      arrays[read] = getattr(data, read)
  return arrays


def shape_columns(shapers: Mapping[str, Tuple[Any, float]],
                  states: Mapping[str, Any], data: RoundData
                  ) -> Tuple[np.ndarray, np.ndarray]:
  """([N, S] float32 columns, [S] failed rows) of the S shapers on one
  round. A plain callable (no reads) is called as ``fn(lengths)``. A
  shaper that raises costs the round its column (0 on every row) and a
  non-finite value costs its row (0): both counted, never fatal."""
  n = np.asarray(data.lengths).shape[0]
  columns, failed = [], []
  for name, (fn, _) in shapers.items():
    try:
      if isinstance(fn, Shaper):
        column = fn(np.asarray(data.lengths),
                    **_reads(fn, data, states.get(name, ())))
      else:
        column = fn(np.asarray(data.lengths))
      column = np.asarray(column, np.float32).reshape(n)
    except Exception as error:  # pylint: disable=broad-except
      logging.warning("reward shaper %r failed on the round (%r); its column "
                      "is 0 on all %d rows.", name, error, n)
      columns.append(np.zeros((n,), np.float32))
      failed.append(n)
      continue
    bad = ~np.isfinite(column)
    if bad.any():
      logging.warning("reward shaper %r gave %d non-finite values; they "
                      "count 0.", name, int(bad.sum()))
    columns.append(np.where(bad, 0.0, column).astype(np.float32))
    failed.append(int(bad.sum()))
  return (np.stack(columns, -1) if columns else np.zeros((n, 0), np.float32),
          np.asarray(failed, np.int64))


def update_states(shapers: Mapping[str, Tuple[Any, float]],
                  states: Mapping[str, Any], data: Sequence[RoundData]
                  ) -> Dict[str, Any]:
  """The stateful shapers' states after a step: each folds every row of
  every round drawn in at once (`StateSpec.update`)."""
  states = dict(states)
  if not data:
    return states
  joined = data[0]._replace(
      lengths=np.concatenate([d.lengths for d in data]),
      verified=np.concatenate([d.verified for d in data]),
      prompt_index=np.concatenate([d.prompt_index for d in data]),
      sampler_logp=None, mask=None, tokens=None)
  for name, (fn, _) in shapers.items():
    if isinstance(fn, Shaper) and fn.stateful:
      reads = _reads(fn, joined, states[name])
      del reads["state"]
      states[name] = fn.update(states[name], joined.lengths, **reads)
  return states


def check_shapers(shapers_config: Mapping[str, Mapping[str, Any]], *,
                  functions: Sequence[str], weights: Sequence[float],
                  max_new_tokens: int) -> None:
  """ValueError ``config.rewards.shapers.<name>...: problem; fix.`` unless
  every shaper fits the config: its weight is set, its options are its own
  and valid, the verifiers it reads are configured, a length limit fits
  the sampler, and POW3R's criteria are a rubric (weights summing to 1,
  one category each, scores in [0, 1]). A per-prompt table's size against
  the task's ids is `rollout.checks.check_prompt_ids`'s. `functions` are
  ``rewards.functions`` (names or references: read by their columns)."""
  columns = references.columns(functions)
  for name, options in shapers_config.items():
    field = f"rewards.shapers.{name}"
    if "weight" not in options:
      fail(field, "has no weight", f"set --config.{field}.weight=1.0")
    kwargs = {k: v for k, v in options.items() if k != "weight"}
    try:
      shaper = make_shaper(name, **kwargs)
    except registry.OptionError as e:  # it names the option
      fail(f"{field}.{e.key}", str(e).rstrip("."), f"see --config.{field}")
    except ValueError as e:
      fail(field, str(e).rstrip("."), f"see --config.{field}")
    for read, verifier in READ_VERIFIERS.items():
      if read in shaper.reads and verifier not in columns:
        fail("rewards.functions", f"shaper {name!r} reads {read!r}, which "
             f"comes from the {verifier!r} reward function, but it is not "
             "configured", f"add {verifier!r} to rewards.functions (weight "
             "0 keeps it out of the total)")
    if kwargs.get("max_length", 0) > max_new_tokens:
      fail(f"{field}.max_length", f"{kwargs['max_length']} exceeds "
           f"rollout.max_new_tokens={max_new_tokens}",
           "set max_length <= rollout.max_new_tokens")
    target = kwargs.get("target_range")
    if target is not None and target[1] > max_new_tokens:
      fail(f"{field}.target_range", f"{tuple(target)!r} reaches beyond "
           f"rollout.max_new_tokens={max_new_tokens} (a target the sampler "
           "cannot reach)", "set target lengths <= rollout.max_new_tokens")
    # Rules that span fields, the shaper's own (metadata ``check_config``).
    check_config = SHAPERS.entry(name).meta.check_config
    if check_config is not None:
      problem = check_config(
          functions=columns, weights=tuple(weights),
          ranges=tuple(references.declared_range(f) for f in functions),
          **kwargs)
      if problem:
        where, what, fix = problem
        fail(where or field, what, fix)

