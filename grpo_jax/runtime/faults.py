"""What the training loop does when something goes wrong, and says so.

| fault                                | the run                                 | config                          |
|--------------------------------------|-----------------------------------------|---------------------------------|
| SIGTERM, or a first SIGINT           | finishes the step, saves, exits 0       |                                 |
| a second SIGINT                      | stops at once (the last checkpoint stays) |                               |
| K non-finite updates in a row        | stops with `NonFiniteUpdates`           | ``train.max_nonfinite_updates`` |
| a reward failing on every completion | a warning each step, then `RewardFailure` | ``rewards.max_failing_steps`` |

The checkpoint side (an unreadable checkpoint, an unwritable or full disk)
is in `checkpoint`, the reward side (deadlines, timeouts, dead workers) in
`rewards`. `Health` is the loop's memory of the last two rows; it is saved
with every checkpoint, so a resumed run counts on exactly where it stopped.
"""

import logging
import math
import signal
import threading
from typing import Mapping, NamedTuple, Optional, Tuple

import numpy as np


class NonFiniteUpdates(RuntimeError):
  """Too many optimiser updates in a row had a non-finite loss or gradient."""


class RewardFailure(RuntimeError):
  """A reward function failed on every completion for too many steps."""


# ------------------------------------------------------------- preemption


class StopSignals:
  """SIGTERM and a first SIGINT ask the loop to stop after the current step.

  A cluster preempting a job sends SIGTERM and waits a grace period; the
  loop finishes the step it is in, saves a checkpoint and returns. A second
  SIGINT (Ctrl-C twice) raises KeyboardInterrupt at once, leaving the last
  checkpoint as it is.

  A context manager: the previous handlers come back on exit. Outside the
  main thread (where Python cannot set handlers) it does nothing.

  On several processes `requested` is an all-gather: every process learns
  of a signal that reached any one of them at the same step, and jax's
  preemption sync point (a TPU maintenance event, for instance) counts too.
  Every process must call it at every step.
  """

  def __init__(self):
    self.received: Optional[str] = None  # the first signal's name
    self._previous = {}

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for signum in (signal.SIGTERM, signal.SIGINT):
        self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def __exit__(self, *exc_info):
    for signum, handler in self._previous.items():
      # None: a handler set outside Python (jax's own), which Python cannot
      # reinstall; the default ends the process on the signal again.
      signal.signal(signum, signal.SIG_DFL if handler is None else handler)
    self._previous = {}

  def _handle(self, signum, frame):
    del frame
    if signum == signal.SIGINT and self.received is not None:
      raise KeyboardInterrupt
    if self.received is None:
      self.received = signal.Signals(signum).name
      logging.warning("%s received: finishing this step, then saving a "
                      "checkpoint and stopping (Ctrl-C again stops at once).",
                      self.received)

  def requested(self, step: int) -> Optional[str]:
    """The signal that asks to stop after `step` (on any process), or None."""
    import jax  # pylint: disable=g-import-not-at-top
    if jax.process_count() == 1:
      return self.received
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    names = ("SIGTERM", "SIGINT", "preemption")
    mine = names.index(self.received) + 1 if self.received else 0
    try:  # called at every step, as jax asks
      if multihost_utils.reached_preemption_sync_point(step) and not mine:
        mine = len(names)
    except RuntimeError:  # jax's preemption service is off
      pass
    everyone = np.asarray(multihost_utils.process_allgather(
        np.asarray([mine], np.int32)))
    first = int(everyone[everyone > 0].min()) if everyone.any() else 0
    return names[first - 1] if first else None


# ----------------------------------------------------------------- health


class Health(NamedTuple):
  """What the loop remembers between steps to tell a storm from a blip.

  Attributes:
    nonfinite_streak: non-finite optimiser updates since the last finite one
      (minibatches without loss tokens neither count nor break it).
    last_finite_step: the last step with a finite update; -1 before any.
    failing_rewards: (name, steps) of each reward function that failed on
      every completion of the last `steps` steps in a row.
  """
  nonfinite_streak: int = 0
  last_finite_step: int = -1
  failing_rewards: Tuple[Tuple[str, int], ...] = ()

  def to_json(self) -> dict:
    return {"nonfinite_streak": self.nonfinite_streak,
            "last_finite_step": self.last_finite_step,
            "failing_rewards": dict(self.failing_rewards)}

  @classmethod
  def from_json(cls, d: Optional[Mapping]) -> "Health":
    if not d:  # a checkpoint written before faults were tracked
      return cls()
    return cls(int(d["nonfinite_streak"]), int(d["last_finite_step"]),
               tuple(sorted(d["failing_rewards"].items())))


def trailing_nonfinite(records) -> int:
  """How many of a step's last updates were non-finite, in a row (its
  updates' `measures` records in order; minibatches without loss tokens
  are skipped apart and neither count nor break the run)."""
  run = 0
  for r in reversed(records):
    if float(r["empty_minibatches"].value()):
      continue
    if not float(r["nonfinite_updates"].value()):
      break
    run += 1
  return run


def check_health(health: Health, step: int, measurements: Mapping[str, float],
                 *, reward_names, max_nonfinite_updates: int,
                 max_failing_steps: int) -> Health:
  """`health` after `step`; raises when the run should stop.

  Args:
    health: before the step.
    step: the step just taken.
    measurements: its measurements: ``optimizer_steps``,
      ``empty_minibatches``, ``nonfinite_updates`` and
      ``nonfinite_updates/trailing`` (`trailing_nonfinite`),
      ``reward_errors/<name>`` and ``reward/scored``, and every figure (to
      name the non-finite ones).
    reward_names: the verifiers' names.
    max_nonfinite_updates: stop after this many non-finite updates in a row;
      0 never stops.
    max_failing_steps: stop after a reward function failed on every
      completion of this many steps in a row; 0 never stops.

  Raises:
    NonFiniteUpdates, RewardFailure: with what happened and what to change.
  """
  counted = (measurements["optimizer_steps"]
             - measurements["empty_minibatches"])
  trailing = measurements["nonfinite_updates/trailing"]
  if counted and trailing == counted:
    streak = health.nonfinite_streak + int(trailing)
    last_finite = health.last_finite_step
  elif counted:
    streak, last_finite = int(trailing), step
  else:
    streak, last_finite = health.nonfinite_streak, health.last_finite_step
  if max_nonfinite_updates and streak >= max_nonfinite_updates:
    bad = sorted(name for name, value in measurements.items()
                 if isinstance(value, float) and not math.isfinite(value))
    where = (f"the last finite one was in step {last_finite}"
             if last_finite >= 0 else "none was finite since the run began")
    raise NonFiniteUpdates(
        f"{streak} optimiser updates in a row had a non-finite loss or "
        f"gradient (train.max_nonfinite_updates={max_nonfinite_updates}); "
        f"{where}. Non-finite in step {step}: {', '.join(bad) or 'none'}. "
        "Their updates were skipped, so the newest checkpoint is from before "
        "them. Lower optimizer.learning_rate or look at the rewards and the "
        "objective's options, then rerun the same command to resume from the "
        "newest checkpoint.")
  failing = dict(health.failing_rewards)
  scored = measurements.get("reward/scored", 0.0)
  for name in reward_names:
    errors = measurements.get(f"reward_errors/{name}", 0.0)
    if not scored or errors < scored:
      failing.pop(name, None)
      continue
    failing[name] = failing.get(name, 0) + 1
    message = (f"reward {name!r} failed on all {int(scored)} completions of "
               f"step {step} ({failing[name]} step(s) in a row; its first "
               "error is in the log above)")
    if max_failing_steps and failing[name] >= max_failing_steps:
      raise RewardFailure(
          f"{message}: stopping (rewards.max_failing_steps="
          f"{max_failing_steps}). Fix the function, or raise "
          "rewards.timeout_s if it timed out, then rerun the same command.")
    logging.warning("%s.", message)
  return Health(streak, last_finite, tuple(sorted(failing.items())))
