"""glibc malloc settings for XLA:CPU's buffers, asked for at process start.

XLA:CPU gets its buffers from glibc's malloc, which by default maps every
large buffer afresh and unmaps it when freed. An update allocates
gigabytes of temporaries a call (saved activations, gradients: 1.4 GB at
1 x 8 on SmolLM2), and a decode step streams every weight once per token.
Two settings help:

- **Huge pages** (``glibc.malloc.hugetlb=1``, glibc 2.35+, where the kernel's
  transparent huge pages are in "madvise" mode): the weight stream does not
  walk the page tables every few KiB. Sampler 1.17x at batch 1, 1.09x at 8
  rows on a 2-core AMD EPYC.
- **Freed memory kept** (every buffer from the heap, ``mmap_max=0``; one
  arena, ``arena_max=1``; its free top never handed back, a 1 TiB
  ``trim_threshold``): a buffer reuses pages the process already has
  instead of faulting in fresh, kernel-zeroed ones. Memory fresh from the
  kernel was written at 0.5-8.5 GB/s there against 27 GB/s for reused
  memory (slowest a few seconds after it was freed: that virtual machine
  hands freed pages back to its host), and the update right after a
  rollout lost 0.7-2 s to it against 3.3 s back to back. A 1 x 8 GRPO
  step ran 1.13x faster; the sampler alone slower (4-25% at 8 rows, cause
  not found), so decoding-only entry points leave it off. The process
  keeps its peak memory until it exits. glibc (2.36 measured) may not
  reuse a freed block for an aligned buffer of the same size once a small
  allocation sits after it, so a loop of calls that donate nothing can
  grow by a few times its temporaries before it settles
  (experiments/benchmarks/NOTES.md, "Profile").

glibc reads tunables when the process starts, so `enable` re-executes the
entry point once with them set; our entry points (`experiments.train`,
`experiments.evaluate`, `experiments.compare`, the reproductions, the
benchmarks) call it first. A notebook or
script of yours can set the variable itself (``GLIBC_TUNABLES=<what
`tunables` returns> jupyter lab``). Setting any of these tunables yourself
(e.g. ``glibc.malloc.hugetlb=0``) turns all of ours off.
"""

import os
import pathlib
import sys

THP_MODE_FILE = "/sys/kernel/mm/transparent_hugepage/enabled"
HUGE_PAGES = {"glibc.malloc.hugetlb": "1"}  # glibc 2.35+
KEEP_FREED = {  # glibc 2.26+ (the first with tunables)
    "glibc.malloc.mmap_max": "0",
    "glibc.malloc.arena_max": "1",
    # 1 TiB: no trimming in practice. At 4 GiB, the 5.7 GB of temporaries
    # of a 4 x 8 update (SmolLM2) went back to the kernel after some calls
    # when they sat at the heap's top, and the next call ran 2x slower
    # faulting them in again.
    "glibc.malloc.trim_threshold": str(1 << 40),
}


def thp_mode(path: str = THP_MODE_FILE) -> str:
  """The kernel's transparent huge page mode ('always', 'madvise',
  'never'), or '' where there is none (not Linux, no THP)."""
  try:
    text = pathlib.Path(path).read_text()
  except OSError:
    return ""
  start, end = text.find("["), text.find("]")
  return text[start + 1:end] if 0 <= start < end else ""


def libc_version() -> str:
  """This process's C library as glibc names it ('glibc 2.36'), or ''."""
  try:
    return os.confstr("CS_GNU_LIBC_VERSION") or ""
  except (ValueError, OSError):  # not a name this system knows: not glibc
    return ""


def is_glibc_at_least(minimum, version=None) -> bool:
  """Whether `version` (default: this process's `libc_version`) is glibc
  `minimum` (a (major, minor) tuple) or later."""
  parts = (libc_version() if version is None else version).split()
  if len(parts) != 2 or parts[0] != "glibc":
    return False
  return tuple(int(x) for x in parts[1].split(".")[:2]) >= minimum


def tunables(environ, mode: str, version=None, keep_freed: bool = True):
  """The GLIBC_TUNABLES value with our settings added, or None where
  nothing is to change: not glibc 2.26+, or the user already sets one of
  them (their choice wins, all of ours stay off). Huge pages only where
  the kernel gives them on request ('madvise') and glibc is 2.35+; freed
  memory kept unless `keep_freed` is False."""
  current = environ.get("GLIBC_TUNABLES", "")
  names = {item.split("=")[0] for item in current.split(":")}
  if (not is_glibc_at_least((2, 26), version)
      or names & (HUGE_PAGES.keys() | KEEP_FREED.keys())):
    return None
  ours = dict(KEEP_FREED) if keep_freed else {}
  if mode == "madvise" and is_glibc_at_least((2, 35), version):
    ours.update(HUGE_PAGES)
  if not ours:
    return None
  return ":".join(filter(None, [current] + [f"{name}={value}" for name,
                                            value in ours.items()]))


def enable(keep_freed: bool = True) -> None:
  """Re-executes this process (same interpreter, same arguments, same pid)
  with our malloc settings in GLIBC_TUNABLES, where that changes anything;
  returns at once otherwise (and always in an IPython kernel, which it must
  not restart). Call it first in an entry point's ``__main__``, before any
  work and ideally before heavy imports: nothing done before it survives.
  Decoding alone (evaluation, the sampler benchmark) passes
  ``keep_freed=False``: it ran slower with it (docs/benchmarks.md;
  experiments/benchmarks/NOTES.md)."""
  value = tunables(os.environ, thp_mode(), keep_freed=keep_freed)
  if value is None or "IPython" in sys.modules:
    return
  sys.stdout.flush()
  sys.stderr.flush()
  os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]],
            dict(os.environ, GLIBC_TUNABLES=value))


def describe() -> str:
  """This process's malloc settings, for a benchmark's setup line."""
  ours = HUGE_PAGES.keys() | KEEP_FREED.keys()
  items = [item for item in os.environ.get("GLIBC_TUNABLES", "").split(":")
           if item.split("=")[0] in ours]
  value = ":".join(items) or "glibc malloc defaults"
  if not is_glibc_at_least((2, 26)):
    value += " (no effect: not glibc 2.26+)"
  return f"transparent huge pages {thp_mode() or 'n/a'}, {value}"
