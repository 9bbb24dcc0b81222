"""Reward calls in worker processes: a timeout per call, a deadline per batch.

`run` sends each call ``fn([prompt], [completion], [answer])`` to a shared
`pebble.ProcessPool` as its own task, so a call that hangs or kills its
worker costs that completion alone: past its timeout pebble kills the
worker, and a dead worker is replaced. Tasks run in a worker's main thread,
where math-verify's own (signal-based) timeout works.

The pool starts on first use, or ahead of it with `start`, and serves the
whole process (one per worker count); `close` stops it, and so does exit.
Workers start with "spawn": the parent runs JAX, which is multithreaded and
must never fork. A worker sets JAX to the CPU before any task and
initialises no backend of its own. As every spawned child does, it
re-imports the parent's ``__main__`` script, so a script that scores with
workers keeps its work under ``if __name__ == "__main__":``; a script that
starts the pool from code outside such a block stops with
`UnguardedScript` before any worker starts (a worker would run the
script's training again, and every reward would fail).

A function is pickled once per `run` (`dumps`); the bytes go with each of
its tasks and the worker keeps the unpickled function by them. Its side
effects (a list it appends to) stay in its worker. Each call scores one
completion: a reward that needs the whole batch at once (a diversity
bonus, one batched judge request) runs in the training process
(``rewards.workers=0``).

A pool that breaks (its workers died with no task on them) is restarted;
one that breaks again before any task finished stops the scoring with
`WorkerPoolFailure`, since no reward can be computed (counted as failing
rewards, it would stop a run only ``rewards.max_failing_steps`` steps
later, and never a shorter run).

A worker leaves on SIGTERM from the pool alone (a timeout, `close`): a
preemption notice sent to every process of a job must not cost the
trainer's last step the rewards its workers were computing.
"""

import ast
import atexit
import collections
import concurrent.futures
import functools
import importlib.machinery
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import cloudpickle
import pebble

from grpo_jax.rewards.verifiers import as_rewards


class Outcome(NamedTuple):
  """One call's reward, or why it has none (`reward` is then 0)."""
  reward: float
  error: str  # "" when the call returned a valid reward


_POOLS: Dict[int, pebble.ProcessPool] = {}  # by worker count
_LOCK = threading.Lock()
_FUNCTIONS: Dict[bytes, Callable] = {}  # in a worker: payload -> function
_MAX_CACHED = 32  # a notebook redefines its functions: keep the cache bounded


def _importable(module_name: str) -> bool:
  """Whether a fresh process imports `module_name` as the module loaded here
  (not so for a config file ml_collections loaded as ``config``): the file
  a search of the import path finds, bypassing ``sys.modules``."""
  file = getattr(sys.modules.get(module_name), "__file__", None)
  if file is None:  # built in
    return True
  parent = module_name.rpartition(".")[0]
  try:
    spec = importlib.machinery.PathFinder.find_spec(
        module_name,
        getattr(sys.modules.get(parent), "__path__", None) if parent else None)
  except (ImportError, ValueError):
    return False
  return spec is not None and spec.origin == file


def dumps(fn: Callable) -> bytes:
  """`fn` pickled for a worker: by reference where a worker can import it (a
  module-level function, a partial of one), else by value (a function of
  ``__main__``, a notebook, a test or a config file, a lambda, a closure)."""
  inner = fn
  while isinstance(inner, functools.partial):
    inner = inner.func
  name = getattr(inner, "__module__", None)
  if name and name != "__main__" and not _importable(name):
    cloudpickle.register_pickle_by_value(sys.modules[name])
  return cloudpickle.dumps(fn)


def _exit_on_sigterm_from(parent: int) -> None:
  while True:
    if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
      os._exit(signal.SIGTERM)


def _ignore_signal(signum, frame) -> None:
  del signum, frame


def _init_worker() -> None:
  # A reward that uses jax computes on the CPU: the accelerator belongs to
  # the trainer (a TPU opens in one process only).
  os.environ["JAX_PLATFORMS"] = "cpu"
  if "jax" in sys.modules:
    sys.modules["jax"].config.update("jax_platforms", "cpu")
  # SIGTERM waits, blocked, for a thread that ends the worker only when the
  # pool (the parent) sent it; a job-wide SIGTERM is the trainer's to act on.
  signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
  # A thread started before this one (pebble's, a library's) still takes
  # SIGTERM: pebble's handler would end the worker whoever sent it, so the
  # handler does nothing. (Should the pool's own SIGTERM land there, pebble
  # kills the worker a few seconds later.)
  signal.signal(signal.SIGTERM, _ignore_signal)
  threading.Thread(target=_exit_on_sigterm_from, args=(os.getppid(),),
                   daemon=True).start()


def _call(payload: bytes, args: Tuple[str, str, str]) -> Outcome:
  """In a worker: one completion's reward. Failures are returned as text,
  not raised: an exception pickle cannot rebuild would break the pool."""
  try:
    fn = _FUNCTIONS.get(payload)
    if fn is None:
      if len(_FUNCTIONS) >= _MAX_CACHED:
        _FUNCTIONS.clear()
      fn = _FUNCTIONS[payload] = pickle.loads(payload)
    prompt, completion, answer = args
    return Outcome(float(as_rewards(fn([prompt], [completion], [answer]),
                                    1)[0]), "")
  except BaseException as error:  # pylint: disable=broad-except
    return Outcome(0.0, repr(error))


class WorkerPoolFailure(RuntimeError):
  """The pool's workers die as they start: restarted, it broke again before
  any task finished, so no reward can be computed."""


class UnguardedScript(RuntimeError):
  """The pool was to start from a script's top-level code outside an
  ``if __name__ == "__main__":`` block, which each worker would run again."""


def _is_main_guard(node) -> bool:
  """Whether `node` is ``if __name__ == "__main__":`` (either order)."""
  if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
          and len(node.test.ops) == 1
          and isinstance(node.test.ops[0], ast.Eq)):
    return False
  sides = [node.test.left, node.test.comparators[0]]
  return (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
          and any(isinstance(s, ast.Constant) and s.value == "__main__"
                  for s in sides))


def _guarded_lines(tree) -> List[Tuple[int, int]]:
  """The line spans of the bodies of the module-level main guards (inside
  loops or ``try`` too, not inside functions or classes)."""
  spans, todo = [], list(tree.body)
  while todo:
    node = todo.pop()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
      continue
    if _is_main_guard(node):
      spans.append((node.body[0].lineno, node.body[-1].end_lineno))
    todo.extend(ast.iter_child_nodes(node))
  return spans


def unguarded_main_line() -> Optional[Tuple[str, int]]:
  """(script, line) when this thread runs the ``__main__`` script's
  top-level code at a line outside every ``if __name__ == "__main__":``
  block, which a spawned worker re-imports and so runs again; None
  otherwise (no script file, a guarded line, an interactive session, a
  script whose source cannot be read)."""
  main = sys.modules.get("__main__")
  path = getattr(main, "__file__", None)
  if not path:
    return None
  frame = sys._getframe()  # pylint: disable=protected-access
  while frame is not None and not (frame.f_code.co_name == "<module>"
                                   and frame.f_globals is vars(main)):
    frame = frame.f_back
  if frame is None:  # not called from the script's top level
    return None
  line = frame.f_lineno
  try:
    with open(path, "rb") as f:
      tree = ast.parse(f.read())
  except (OSError, SyntaxError, ValueError):
    return None
  if any(lo <= line <= hi for lo, hi in _guarded_lines(tree)):
    return None
  return path, line


def check_main_guarded() -> None:
  """`UnguardedScript` when the pool would start from a script's unguarded
  top-level code (`unguarded_main_line`): each worker would run the script
  again, its training too, and every reward would fail."""
  where = unguarded_main_line()
  if where is None:
    return
  path, line = where
  raise UnguardedScript(
      f"{path}, line {line}, starts the reward workers (rewards.workers) from "
      "the script's top-level code. Each worker process imports the script "
      "again and would run that code too (multiprocessing's spawn), so every "
      "reward would fail. Put the script's work under "
      "`if __name__ == \"__main__\":` (definitions of reward functions may "
      "stay above it), or name your reward function by reference on the "
      "command line (--config.rewards.functions=my_module:my_function), or "
      "set rewards.workers=0 to score in the training process.")


def pool(workers: int) -> pebble.ProcessPool:
  """The process's pool of `workers` workers, started on first use (and
  again after it broke); `UnguardedScript` instead when a script's
  unguarded top-level code is starting it (`check_main_guarded`)."""
  with _LOCK:
    current = _POOLS.get(workers)
    if current is None or not current.active:
      check_main_guarded()
      if current is not None:  # broken: stop what is left of it
        current.stop()
        current.join()
      current = _POOLS[workers] = pebble.ProcessPool(
          max_workers=workers, initializer=_init_worker,
          context=multiprocessing.get_context("spawn"))
    return current


def _ready() -> None:
  """A worker's warm-up task: math-verify (the built-in verifiers' import,
  seconds with sympy) loaded before the first completion needs it."""
  importlib.import_module("math_verify")


def start(workers: int) -> None:
  """Starts the pool of `workers` now and warms each worker up in the
  background, so that spawning them overlaps the trainer's model loading
  and first sampling instead of lengthening the first step's scoring."""
  current = pool(workers)
  for _ in range(workers):
    current.schedule(_ready)


def close() -> None:
  """Stops every pool and its workers; a later `run` starts a new one."""
  with _LOCK:
    pools = list(_POOLS.values())
    _POOLS.clear()
  for p in pools:
    p.stop()
    p.join()


atexit.register(close)


def _outcome(future, timeout_s: float) -> Outcome:
  try:
    return future.result()
  except concurrent.futures.TimeoutError:
    return Outcome(0.0, f"timed out after {timeout_s:g} s")
  except pebble.ProcessExpired as error:
    return Outcome(0.0, f"worker died (exit code {error.exitcode})")
  except Exception as error:  # pylint: disable=broad-except
    return Outcome(0.0, f"the worker pool failed ({error!r})")


def _next_call(queues, costly) -> Optional[int]:
  """The first call not started, of a function in `costly` only when no
  other is left; None when none is left."""
  heads = [(p in costly, q[0], p) for p, q in queues.items() if q]
  return queues[min(heads)[2]].popleft() if heads else None


def run(calls: Sequence[Tuple[bytes, Tuple[str, str, str]]], *, workers: int,
        timeout_s: float, deadline_s: float) -> List[Outcome]:
  """Each (payload from `dumps`, (prompt, completion, answer)) as one task.

  A task running longer than `timeout_s` is killed with its worker. When
  `deadline_s` has passed since the start, every unfinished task is
  cancelled (a running one killed with its worker) and fails. Tasks start in
  order, except that once a function's task has cost a worker (timed out or
  died) its remaining tasks wait until the others' have started, so that one
  hanging function cannot use up the deadline of the rest. At most
  `workers` tasks are handed to the pool at a time: a task pebble holds
  cannot be withdrawn without killing the worker that takes it.

  Args:
    calls: the tasks; calls of one function share one payload.
    workers: the pool's worker count (> 0).
    timeout_s: per task, from when a worker takes it.
    deadline_s: for all of `calls`.

  Returns:
    One `Outcome` per call, in order.

  Raises:
    WorkerPoolFailure: the pool broke, and again after its restart before
      any task finished (its workers cannot start): a failure of every
      reward, which counting would only report steps later.
    UnguardedScript: a script's top-level code is starting the pool.
  """
  end = time.monotonic() + deadline_s
  outcomes: List[Outcome] = [None] * len(calls)
  queues = {}  # payload -> the indices of its calls not yet started
  for i, (payload, _) in enumerate(calls):
    queues.setdefault(payload, collections.deque()).append(i)
  costly = set()  # payloads of which a call cost a worker
  running = {}  # future -> call index
  try:
    _drain(calls, outcomes, queues, costly, running, workers=workers,
           timeout_s=timeout_s, end=end)
  finally:  # a deadline, or an interrupt: nothing of this call runs on
    for future, i in running.items():
      if future.done() and outcomes[i] is None:  # finished at the deadline
        outcomes[i] = _outcome(future, timeout_s)
      else:
        future.cancel()
  late = Outcome(0.0, f"not finished by the batch's {deadline_s:g} s deadline")
  return [o or late for o in outcomes]


def _pool_broke(error) -> bool:
  """Whether a task's `error` is the pool's (pebble's BrokenProcessPool: its
  workers died with no task on them), not its own call's."""
  return error is not None and not isinstance(
      error, (concurrent.futures.TimeoutError, pebble.ProcessExpired))


def _check_pool_alive(broken: list, error) -> None:
  """`WorkerPoolFailure` once a second pool in a row broke (`broken`, those
  that did since a worker last finished a task): its workers die as they
  start, and a restart does not help."""
  if len(broken) < 2:
    return
  raise WorkerPoolFailure(
      f"the reward worker pool broke {len(broken)} times in a row, restarted "
      f"in between, before any worker finished a task (the last: "
      f"{error!r}): its worker processes die as they start, so no reward "
      "can be computed. Their own errors are in the log above: each worker "
      "imports the script that started training (multiprocessing's spawn), "
      "which must import cleanly in a fresh process. Set rewards.workers=0 "
      "to score in the training process.")


def _drain(calls, outcomes, queues, costly, running, *, workers, timeout_s,
           end) -> None:
  """`run`'s loop: keeps `workers` tasks in the pool until none is left or
  the deadline `end` passes; fills `outcomes`, leaves the unfinished in
  `running`. A broken pool is restarted, but not a second time in a row
  (`WorkerPoolFailure`)."""
  pools = {}  # future -> the pool it runs in
  broken = []  # pools that broke since a worker last finished a task
  while True:
    while len(running) < workers and time.monotonic() < end:
      i = _next_call(queues, costly)
      if i is None:
        break
      current = pool(workers)  # its own errors (UnguardedScript) stop the run
      try:
        future = current.schedule(_call, args=calls[i], timeout=timeout_s)
      except RuntimeError as error:  # the pool broke; the next run restarts it
        outcomes[i] = Outcome(0.0, f"the worker pool failed ({error!r})")
        if not any(p is current for p in broken):
          broken.append(current)
        _check_pool_alive(broken, error)
        continue
      running[future], pools[future] = i, current
    if not running:
      break
    done, _ = concurrent.futures.wait(
        running, timeout=max(end - time.monotonic(), 0.0),
        return_when=concurrent.futures.FIRST_COMPLETED)
    if not done:
      break
    for future in done:
      i, current = running.pop(future), pools.pop(future)
      outcomes[i] = _outcome(future, timeout_s)
      error = future.exception()
      if error is not None:  # raised by the pool, not the call
        costly.add(calls[i][0])
      if not _pool_broke(error):
        broken.clear()
      elif not any(p is current for p in broken):
        broken.append(current)
      _check_pool_alive(broken, error)
