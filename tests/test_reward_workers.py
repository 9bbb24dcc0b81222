"""Tests for reward functions in worker processes (grpo_jax.rewards.workers):
per-completion timeouts, dead workers, the per-batch deadline, and the
config fields that set them.

The reward functions are defined inside the tests, so that they travel by
value: a spawned worker never imports this module. The pool is the shared
one of two workers; `_warm` waits for both before a timed call, since a
test that kills workers leaves their replacements starting.
"""

import collections
import functools
import importlib.util
import logging
import os
import signal
import sys
import time

import jax
import numpy as np
import pytest

from configs import grpo as grpo_config
from grpo_jax import train as train_lib
from grpo_jax import models
from grpo_jax import rewards
from grpo_jax.rollout import build as rollout_build
from grpo_jax import testing
from grpo_jax.rewards import workers

WORKERS = 2


def _length_reward(marker: str, action):
  """len(completion), and `action()` first when the completion holds
  `marker`."""
  def reward(prompts, completions, answers):
    if marker in completions[0]:
      action()
    return [float(len(c)) for c in completions]
  return reward


def _score(fns, completions, **options):
  n = len(completions)
  options = dict(dict(workers=WORKERS, timeout_s=30.0, deadline_s=60.0),
                 **options)
  return rewards.score({name: (fn, 1.0) for name, fn in fns.items()},
                       ["p"] * n, completions, ["8"] * n, **options)


def _warm():
  """Returns once every worker answers (a killed worker's replacement takes
  seconds to start)."""
  def pid(prompts, completions, answers):
    time.sleep(0.2)  # so that each worker takes one
    return [float(os.getpid())]

  for _ in range(100):
    result = _score({"pid": pid}, ["x"] * WORKERS)
    if len(set(result.per_function[:, 0].tolist())) == WORKERS:
      return
  pytest.fail(f"the {WORKERS} workers did not all answer in 100 tries")


def test_a_hanging_completion_costs_only_its_own_reward():
  _warm()
  hang = _length_reward("HANG", lambda: time.sleep(3600))
  start = time.monotonic()
  result = _score({"hang": hang}, ["a", "bb", "HANG", "dddd"], timeout_s=1.0)
  elapsed = time.monotonic() - start
  testing.assert_close(result.per_function[:, 0],
                       np.array([1, 2, 0, 4], np.float32))
  assert result.num_errors == {"hang": 1}
  assert result.first_error == {"hang": "timed out after 1 s"}
  assert elapsed < 1.0 + 4.0, elapsed  # the timeout, not the hour


@pytest.mark.parametrize("kill", ["exit", "sigkill"])
def test_a_completion_that_kills_its_worker_costs_only_itself(kill):
  _warm()
  die, code = {"exit": (lambda: os._exit(3), 3),
               "sigkill": (lambda: os.kill(os.getpid(), signal.SIGKILL),
                           -signal.SIGKILL)}[kill]
  fn = _length_reward("DIE", die)
  result = _score({"die": fn}, ["a", "DIE", "ccc"])
  testing.assert_close(result.per_function[:, 0],
                       np.array([1, 0, 3], np.float32))
  assert result.num_errors == {"die": 1}
  assert result.first_error == {"die": f"worker died (exit code {code})"}
  # The dead worker was replaced: the next call scores everything.
  again = _score({"die": fn}, ["a", "bb", "ccc"])
  testing.assert_close(again.per_function[:, 0],
                       np.array([1, 2, 3], np.float32))
  assert again.num_errors == {"die": 0}


def test_a_sigterm_from_outside_the_pool_does_not_stop_a_worker():
  # What a job-wide preemption notice (Slurm's scancel, a spot VM's
  # shutdown) does to every process; the trainer finishes its step.
  _warm()
  fn = _length_reward("TERM", lambda: os.kill(os.getpid(), signal.SIGTERM))
  result = _score({"term": fn}, ["a", "TERM", "ccc"])
  testing.assert_close(result.per_function[:, 0],
                       np.array([1, 4, 3], np.float32))
  assert result.num_errors == {"term": 0}


def test_a_function_from_a_config_file_runs_in_a_worker(tmp_path,
                                                         monkeypatch):
  # ml_collections loads --config=my_run.py as a module named "config",
  # which a worker cannot import by that name.
  path = tmp_path / "my_run.py"
  path.write_text("def length(prompts, completions, answers):\n"
                  "  return [2.0 * len(c) for c in completions]\n")
  spec = importlib.util.spec_from_file_location("config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  monkeypatch.setitem(sys.modules, "config", module)
  result = _score({"length": module.length}, ["a", "bb"])
  assert result.num_errors == {"length": 0}, result.first_error
  testing.assert_close(result.per_function[:, 0], np.array([2, 4], np.float32))


def test_the_deadline_cancels_every_unfinished_completion():
  _warm()
  slow = _length_reward("", lambda: time.sleep(1.0))  # every completion
  completions = ["a" * (i + 1) for i in range(8)]
  start = time.monotonic()
  result = _score({"slow": slow}, completions, timeout_s=5.0,
                  deadline_s=2.5)
  elapsed = time.monotonic() - start
  assert elapsed < 2.5 + 2.0, elapsed  # not the 4 s the 8 calls need
  got = result.per_function[:, 0]
  finished = got > 0
  # Two workers finish at most two 1 s calls each in 2.5 s.
  assert result.num_errors["slow"] == (~finished).sum() >= 4
  testing.assert_close(got[finished],
                       np.arange(1, 9, dtype=np.float32)[finished])
  assert "2.5 s deadline" in result.first_error["slow"]


def test_a_function_that_hangs_everywhere_costs_the_others_nothing():
  _warm()
  hang = _length_reward("", lambda: time.sleep(3600))  # every completion
  quick = _length_reward("", lambda: None)
  completions = ["a" * (i + 1) for i in range(4)]
  result = _score({"hang": hang, "quick": quick}, completions, timeout_s=1.0,
                  deadline_s=30.0)
  assert result.num_errors == {"hang": 4, "quick": 0}
  testing.assert_close(result.per_function,
                       np.stack([np.zeros(4), np.arange(1, 5)], axis=-1))


def test_a_function_that_cost_a_worker_waits_for_the_others():
  # Calls 0, 2 of "hang" and 1, 3 of "quick", interleaved as score sends them.
  queues = {b"hang": collections.deque([0, 2]),
            b"quick": collections.deque([1, 3])}
  next_call = workers._next_call  # pylint: disable=protected-access
  assert next_call(queues, set()) == 0
  costly = {b"hang"}  # call 0 timed out
  assert [next_call(queues, costly) for _ in range(4)] == [1, 3, 2, None]


def test_accuracy_through_the_pool_equals_in_process():
  completions = ["\\boxed{8}", "The answer is 9.", "3 + 5 = 8",
                 "$\\boxed{\\frac{1}{2}}$", "no answer here"]
  answers = ["8", "8", "8", "0.5", "3"]
  fns = {"accuracy": (rewards.accuracy, 1.0),
         # A partial of a module-level function travels by reference.
         "partial": (functools.partial(rewards.accuracy), 2.0)}
  prompts = ["p"] * len(completions)
  here = rewards.score(fns, prompts, completions, answers)
  pooled = rewards.score(fns, prompts, completions, answers, workers=WORKERS,
                         timeout_s=30.0, deadline_s=60.0)
  expected = np.array([1, 0, 1, 1, 0], np.float32)
  testing.assert_close(here.per_function,
                       np.stack([expected, expected], axis=-1))
  testing.assert_close(pooled.per_function, here.per_function)
  testing.assert_close(pooled.total, 3 * expected)
  assert pooled.num_errors == here.num_errors == {"accuracy": 0, "partial": 0}


def test_a_function_defined_in_the_test_runs_in_a_worker():
  offset = 0.5  # a closure over a local: not importable by a worker

  def pid_plus_offset(prompts, completions, answers):
    return [os.getpid() + offset for _ in completions]

  with rewards.VERIFIERS.scoped():
    rewards.VERIFIERS.register("pid")(pid_plus_offset)
    result = _score({"pid": rewards.get("pid")}, ["a", "b", "c"])
  assert result.num_errors == {"pid": 0}
  pids = result.per_function[:, 0].astype(np.float64) - offset
  assert np.all(pids == np.round(pids)) and os.getpid() not in pids


def test_workers_run_without_a_jax_backend():
  def backend_in_use(prompts, completions, answers):
    import sys  # pylint: disable=g-import-not-at-top
    bridge = sys.modules.get("jax._src.xla_bridge")
    backends = bool(getattr(bridge, "_backends", None))
    return [float(backends) + 2.0 * (os.environ["JAX_PLATFORMS"] != "cpu")]

  result = _score({"backend": backend_in_use}, ["a", "b"])
  assert result.num_errors == {"backend": 0}
  testing.assert_close(result.per_function[:, 0], np.zeros(2, np.float32))


@pytest.mark.parametrize("num_workers", [0, WORKERS])
def test_the_first_error_is_logged_once_per_function(num_workers, caplog):
  def fragile(prompts, completions, answers):
    if any(c.startswith("x") for c in completions):
      raise RuntimeError(f"bad {completions[0]}")
    return [1.0] * len(completions)

  fine = lambda p, c, a: [1.0] * len(c)
  with caplog.at_level(logging.WARNING):
    result = _score({"fragile": fragile, "fine": fine},
                    ["a", "x1", "b", "x2"], workers=num_workers)
  testing.assert_close(result.per_function,
                       np.array([[1, 1], [0, 1], [1, 1], [0, 1]], np.float32))
  assert result.num_errors == {"fragile": 2, "fine": 0}
  assert result.first_error == {"fragile": "RuntimeError('bad x1')",
                                "fine": ""}
  lines = [r.getMessage() for r in caplog.records
           if r.levelno >= logging.WARNING]
  assert len(lines) == 1, lines
  assert "'fragile'" in lines[0] and "2 of 4" in lines[0]
  assert "RuntimeError('bad x1')" in lines[0]


def test_wrong_counts_and_non_finite_values_fail_in_workers_too():
  result = _score({"two": lambda p, c, a: [1.0, 1.0],
                   "nan": lambda p, c, a: [float("nan")],
                   "ok": lambda p, c, a: np.ones(1)}, ["a", "b"])
  assert result.num_errors == {"two": 2, "nan": 2, "ok": 0}
  assert "expected (1,)" in result.first_error["two"]
  assert "non-finite" in result.first_error["nan"]
  testing.assert_close(result.per_function,
                       np.array([[0, 0, 1], [0, 0, 1]], np.float32))


def test_the_pool_is_shared_until_closed():
  def pid(prompts, completions, answers):
    return [float(os.getpid())]

  first = workers.pool(WORKERS)
  seen = set()
  for _ in range(3):
    seen |= set(_score({"pid": pid}, ["a"] * 4).per_function[:, 0].tolist())
  assert workers.pool(WORKERS) is first
  assert len(seen) <= WORKERS  # no worker was started per call
  workers.close()
  assert workers.pool(WORKERS) is not first


# An initializer that ends each worker as it starts, as a script that cannot
# be imported in a fresh process does (multiprocessing's spawn re-imports it).
_DIE_AS_IT_STARTS = functools.partial(os._exit, 3)


def test_a_pool_whose_workers_die_as_they_start_stops_the_scoring(
    monkeypatch):
  def one(prompts, completions, answers):
    return [1.0] * len(completions)

  workers.close()
  monkeypatch.setattr(workers, "_init_worker", _DIE_AS_IT_STARTS)
  try:
    with pytest.raises(workers.WorkerPoolFailure,
                       match=r"broke 2 times in a row.*rewards\.workers=0"):
      _score({"one": one}, ["a", "b", "c", "d"])
  finally:
    workers.close()  # the next pool starts its workers as usual


def test_a_pool_that_broke_once_is_restarted_and_costs_only_its_tasks():
  length = _length_reward("never", lambda: None)
  workers.close()
  broken = workers.pebble.ProcessPool(
      max_workers=WORKERS, initializer=_DIE_AS_IT_STARTS,
      context=workers.multiprocessing.get_context("spawn"))
  broken.schedule(time.sleep, args=(0,))  # starts it; its workers then die
  workers._POOLS[WORKERS] = broken  # pylint: disable=protected-access
  try:
    result = _score({"length": length}, ["a", "bb", "ccc", "dddd", "eeeee"])
  finally:
    workers.close()
  # The first WORKERS tasks went to the broken pool; the rest to its
  # replacement, which scored them.
  testing.assert_close(result.per_function[:, 0],
                       np.array([0, 0, 3, 4, 5], np.float32))
  assert result.num_errors == {"length": WORKERS}
  assert "the worker pool failed" in result.first_error["length"]


def test_start_warms_the_workers_up_before_the_first_call():
  def math_verify_loaded(prompts, completions, answers):
    return [float("math_verify" in sys.modules)]

  def first_call():
    (outcome,) = workers.run(
        [(workers.dumps(math_verify_loaded), ("p", "c", "a"))], workers=1,
        timeout_s=60.0, deadline_s=120.0)
    assert outcome.error == ""
    return outcome.reward

  workers.close()
  assert first_call() == 0.0  # a pool started by the call: not warmed up
  workers.close()
  workers.start(1)
  started = workers.pool(1)
  assert first_call() == 1.0
  assert workers.pool(1) is started  # the call used the started pool
  workers.close()


@pytest.mark.parametrize("field, value", [
    ("workers", -1), ("timeout_s", 0.0), ("deadline_s", -1.0)])
def test_invalid_reward_worker_fields_name_the_field(field, value):
  config = grpo_config.get_config("tiny")
  assert (config.rewards.workers, config.rewards.timeout_s,
          config.rewards.deadline_s) == (2, 30.0, 300.0)
  config.rewards[field] = value
  with pytest.raises(ValueError, match=rf"config\.rewards\.{field}:"):
    train_lib.validate(config)


def test_a_rollout_with_a_hanging_verifier_finishes_and_counts_it():
  model_config, params, tokenizer = models.load_model("tiny")
  config = grpo_config.get_config("tiny")
  config.rewards.functions, config.rewards.weights = ("hang",), (1.0,)
  config.rewards.timeout_s, config.rewards.deadline_s = 1.0, 3.0
  config.kl.beta = 0.0  # no reference pass to compile

  def hang(prompts, completions, answers):
    time.sleep(3600)

  with rewards.VERIFIERS.scoped():
    rewards.VERIFIERS.register("hang")(hang)
    train_lib.validate(config)
    generate = rollout_build.from_config(config, model_config, tokenizer)
    states = {name: c.init()
              for name, c in rollout_build.make_components(config).items()}
    _warm()
    start = time.monotonic()
    _, m, _ = generate(params, None, 0, jax.random.PRNGKey(0), states)
  n = config.rollout.num_prompts * config.rollout.num_generations
  assert m["reward/scored"] == n
  assert m["reward_errors/hang"] == n  # errors == scored: failed on all
  assert m["reward/hang"] == 0.0
  # The deadline, not the hour (sampling the tiny model included).
  assert time.monotonic() - start < 60
