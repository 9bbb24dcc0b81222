"""The ``python`` tool: runs a code string in a sandboxed subprocess.

Every run gets a fresh temporary directory (its working directory, HOME and
TMPDIR, removed afterwards), an environment of its own (PATH, a UTF-8
locale, one BLAS thread; no proxies, no credentials, nothing of the
trainer's), the trainer's interpreter as ``python -I`` (its installed
packages, but no PYTHONPATH and no user site), and, set by a small
launcher before it execs the sandbox (never ``preexec_fn``, which is unsafe
in a process with threads), these limits: address space (`memory_mb`: an
allocation beyond it is a MemoryError), CPU seconds, the size of any file
written, no core dumps. The wall-time limit (`time_limit_s`) kills the
whole process group; its stdout and stderr are each kept to
`max_output_chars` (the rest is read and dropped, so a flood of output
neither blocks nor fills memory), the directory's path written ``.`` so
that a traceback reads the same in every run.

The isolation is the strongest that works here (`available`, probed once
per process), or the one named by `isolation`:

- ``bwrap`` (bubblewrap on PATH): new network, PID, IPC and UTS
  namespaces (and a user namespace where the kernel allows one), all
  capabilities dropped, the whole file system read-only but the working
  directory, a private /tmp, /dev and /proc. No network (only a loopback
  of its own), no writes outside its directory, and every process it
  starts dies with it.
- ``unshare`` (util-linux ``unshare``, unprivileged user namespaces): new
  user, network, PID and mount namespaces (a /proc of its own). No network,
  every process it starts dies with it; but the file system is the host's,
  writable wherever the user running it may write.
- ``none`` (neither works, e.g. macOS or a container that forbids user
  namespaces): the limits, the temporary directory and the clean
  environment only. The code can reach the network and write wherever the
  user may; a trusted model's code, or a container around the run, is then
  the safeguard. A process it starts that leaves the process group
  (``setsid``) can outlive the time limit, and under root the code may even
  raise its own limits.

In every mode the code can read what the user running it can read.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, NamedTuple

from grpo_jax import registry
from grpo_jax.tools.base import TOOLS, error

ISOLATIONS = ("bwrap", "unshare", "none")  # strongest first
FILE_SIZE_LIMIT = 64 << 20  # bytes of any one file the code writes
SCRIPT = "main.py"
# Runs first in the child: sets the limits, then execs the sandbox. Its
# arguments: address space bytes, CPU seconds, file size bytes, command...
_LAUNCHER = (
    "import os, resource, sys\n"
    "memory, cpu, fsize = map(int, sys.argv[1:4])\n"
    "for limit, value in ((resource.RLIMIT_AS, memory),"
    " (resource.RLIMIT_CPU, cpu), (resource.RLIMIT_FSIZE, fsize),"
    " (resource.RLIMIT_CORE, 0)):\n"
    "  resource.setrlimit(limit, (value, value))\n"
    "os.execvp(sys.argv[4], sys.argv[4:])\n")
_AVAILABLE: Dict[str, bool] = {}


class SandboxResult(NamedTuple):
  """One run: its output (each kept to the limit; `dropped` counts the
  characters left out of stdout and stderr together), its exit status (a
  negative one a signal's), whether the wall-time limit killed it, the
  isolation it ran under, and its wall time."""
  stdout: str
  stderr: str
  returncode: int
  timed_out: bool
  dropped: int
  isolation: str
  seconds: float


# The code runs on the base interpreter that a venv links to (isolated
# mode, `-I`, reads no venv anyway): a venv under /tmp, as CI's, is hidden
# by bwrap's private /tmp.
_INTERPRETER = os.path.realpath(sys.executable)


def isolation_prefix(isolation: str, workdir: str) -> List[str]:
  """The command that puts a process into `isolation`, run in `workdir`."""
  if isolation == "bwrap":
    return ["bwrap", "--unshare-all", "--die-with-parent", "--cap-drop",
            "ALL", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--bind", workdir, workdir, "--chdir",
            workdir, "--"]
  if isolation == "unshare":
    return ["unshare", "--user", "--map-root-user", "--net", "--pid",
            "--fork", "--kill-child", "--mount-proc", "--"]
  return []


def works(isolation: str) -> bool:
  """Whether `isolation` runs a command here (probed once per process)."""
  if isolation not in _AVAILABLE:
    ok = isolation == "none"
    if not ok and shutil.which(isolation):
      with tempfile.TemporaryDirectory() as workdir:
        try:
          ok = subprocess.run(
              isolation_prefix(isolation, workdir) + ["true"], cwd=workdir,
              stdin=subprocess.DEVNULL, capture_output=True,
              timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
          ok = False
    _AVAILABLE[isolation] = ok
  return _AVAILABLE[isolation]


def available() -> str:
  """The strongest isolation that works here."""
  return next(i for i in ISOLATIONS if works(i))


def _environment(workdir: str) -> Dict[str, str]:
  return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir,
          "TMPDIR": workdir, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
          "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
          "MKL_NUM_THREADS": "1"}


def _drain(stream, keep: int, out: list) -> None:
  """Reads `stream` to its end; `out` holds [the first `keep` bytes, the
  number of bytes dropped] so far (a reader left blocked by a process that
  outlived the run still gives what it read)."""
  kept, dropped = bytearray(), 0
  while True:
    chunk = stream.read1(1 << 16)
    if not chunk:
      break
    room = max(0, keep - len(kept))
    kept += chunk[:room]
    dropped += len(chunk) - len(chunk[:room])
    out[:] = [bytes(kept), dropped]


def _text(data: bytes, dropped_bytes: int, max_chars: int, workdir: str):
  """`data` decoded, the working directory's path written ``.`` (the same
  text in every run), cut to `max_chars`, and the characters dropped
  (bytes past the kept ones counted as characters)."""
  text = data.decode("utf-8", errors="replace").replace(workdir, ".")
  return text[:max_chars], max(0, len(text) - max_chars) + dropped_bytes


def _wait(process: subprocess.Popen, deadline: float) -> bool:
  """Waits for `process` to exit without reaping it (so its process group
  id cannot be reused before it is killed); True if the deadline passed."""
  if not hasattr(os, "waitid"):  # macOS: reaps it, a small race with reuse
    try:
      process.wait(timeout=max(0.0, deadline - time.monotonic()))
      return False
    except subprocess.TimeoutExpired:
      return True
  while True:
    state = os.waitid(os.P_PID, process.pid,
                      os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if state is not None:
      return False
    if time.monotonic() >= deadline:
      return True
    time.sleep(0.01)


def run_python(code: str, *, time_limit_s: float = 10.0,
               memory_mb: int = 512, max_output_chars: int = 4000,
               isolation: str = "auto") -> SandboxResult:
  """Runs `code` as a script in the sandbox (see the module docstring).

  Args:
    code: the Python source.
    time_limit_s: wall seconds before the process group is killed.
    memory_mb: the address-space limit of each process, in MiB.
    max_output_chars: characters of stdout, and of stderr, kept.
    isolation: one of `ISOLATIONS`, or "auto" (`available`).
  Raises:
    ValueError: if the named isolation does not work here.
  """
  isolation = available() if isolation == "auto" else isolation
  if not works(isolation):
    raise ValueError(f"isolation {isolation!r} does not work here; use "
                     f"'auto' or {available()!r}")
  workdir = tempfile.mkdtemp(prefix="grpo_jax_sandbox_")
  try:
    with open(os.path.join(workdir, SCRIPT), "w", encoding="utf-8") as f:
      f.write(code)
    command = ([sys.executable, "-I", "-S", "-c", _LAUNCHER,
                str(memory_mb << 20), str(int(time_limit_s) + 1),
                str(FILE_SIZE_LIMIT)] + isolation_prefix(isolation, workdir)
               + [_INTERPRETER, "-I", "-B", "-X", "utf8", SCRIPT])
    start = time.monotonic()
    process = subprocess.Popen(
        command, cwd=workdir, env=_environment(workdir),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True)
    keep = 4 * max_output_chars + 4  # UTF-8 bytes of that many characters
    outputs = [[b"", 0], [b"", 0]]
    readers = [threading.Thread(target=_drain, args=(s, keep, o), daemon=True)
               for s, o in zip((process.stdout, process.stderr), outputs)]
    for reader in readers:
      reader.start()
    try:
      timed_out = _wait(process, start + time_limit_s)
    finally:
      # The whole group: what it started in the background, too.
      try:
        os.killpg(process.pid, signal.SIGKILL)
      except (ProcessLookupError, PermissionError):
        pass
      returncode = process.wait()
    seconds = time.monotonic() - start
    for reader, stream in zip(readers, (process.stdout, process.stderr)):
      reader.join(timeout=1.0)
      # A process that left the group may hold the pipe open: then its
      # reader stays blocked (closing the pipe under it would block too).
      if not reader.is_alive():
        stream.close()
  finally:
    shutil.rmtree(workdir, ignore_errors=True)
  (out, out_dropped), (err, err_dropped) = [
      _text(data, dropped, max_output_chars, workdir)
      for data, dropped in outputs]
  return SandboxResult(out, err, returncode, timed_out,
                       out_dropped + err_dropped, isolation, seconds)


def observation(result: SandboxResult, time_limit_s: float) -> str:
  """The text the model reads: an error line first when the run failed,
  then stdout and stderr, and how much output was dropped."""
  parts = []
  if result.timed_out:
    parts.append(error(f"python: the time limit of {time_limit_s:g} s ran "
                       "out and the process was killed"))
  elif result.returncode < 0:
    name = signal.Signals(-result.returncode).name
    parts.append(error(f"python: the process was killed by {name}"))
  elif result.returncode:
    parts.append(error(f"python: the code exited with status "
                       f"{result.returncode}"))
  if result.stdout:
    parts.append(result.stdout.rstrip("\n"))
  if result.stderr:
    parts.append("[stderr]\n" + result.stderr.rstrip("\n"))
  if result.dropped:
    parts.append(f"[output truncated: {result.dropped} more characters]")
  return "\n".join(parts) or "(no output)"


def _check_options(time_limit_s=10.0, memory_mb=512, max_output_chars=4000,
                   isolation="auto"):
  registry.check_real("time_limit_s", time_limit_s, low=0, low_open=True)
  registry.check_int("memory_mb", memory_mb, low=64,
                     why="the interpreter itself needs some")
  registry.check_int("max_output_chars", max_output_chars, low=1)
  registry.check_choice("isolation", isolation, ("auto",) + ISOLATIONS)
  if isolation != "auto" and not works(isolation):
    raise registry.OptionError(
        "isolation", f"isolation={isolation!r} does not work here; set "
        f"'auto' (here: {available()!r})")


@TOOLS.register(
    "python",
    description="Runs a Python program in a sandbox (no network, a "
    "temporary directory, time and memory limits) and returns what it "
    "prints. Print the values you need.",
    parameters={"type": "object", "properties": {"code": {
        "type": "string", "description": "the Python program"}},
                "required": ["code"], "additionalProperties": False},
    check=_check_options,
    examples=({}, {"time_limit_s": 2.0, "max_output_chars": 100}))
def python(arguments, *, time_limit_s: float = 10.0, memory_mb: int = 512,
           max_output_chars: int = 4000, isolation: str = "auto") -> str:
  """What ``arguments["code"]`` prints in the sandbox (`run_python`),
  after an error line if it failed or ran out of time."""
  code = arguments.get("code")
  if not isinstance(code, str):
    return error("python: the code must be text")
  try:
    result = run_python(code, time_limit_s=time_limit_s, memory_mb=memory_mb,
                        max_output_chars=max_output_chars,
                        isolation=isolation)
  except (ValueError, OSError) as e:
    return error(f"python: the sandbox could not run it ({e})")
  return observation(result, time_limit_s)


def describe() -> str:
  """A line saying which isolations work here, for logs and reports."""
  return ", ".join(f"{i}: {'works' if works(i) else 'unavailable'}"
                   for i in ISOLATIONS)


__all__ = ["ISOLATIONS", "SandboxResult", "available", "describe",
           "isolation_prefix", "observation", "python", "run_python", "works"]
