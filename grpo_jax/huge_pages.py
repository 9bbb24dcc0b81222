"""Transparent huge pages for XLA:CPU's buffers, asked for at process start.

A decode step streams every weight once per token. On 4 KiB pages that
stream walks the page tables at every few KiB; on 2 MiB pages it does not:
on a 2-core AMD EPYC the sampler ran 1.17x faster at batch 1 and 1.09x
at 8 rows (`experiments/benchmarks/sampler.py`, README "Benchmarks").
Linux commonly gives huge pages only where a process asks
(`transparent_hugepage` in "madvise" mode), and XLA:CPU gets its buffers
from glibc's malloc, which asks when its tunable
``glibc.malloc.hugetlb=1`` is set (glibc 2.35 and later). glibc reads
tunables when the process starts, so `enable` re-executes the entry point
once with it set; our entry points (`experiments.train`,
`experiments.evaluate`, the benchmarks) call it first. A notebook or script of yours can set the variable itself:
``GLIBC_TUNABLES=glibc.malloc.hugetlb=1 jupyter lab``. Setting
``glibc.malloc.hugetlb=0`` turns it off.
"""

import os
import pathlib
import sys

TUNABLE = "glibc.malloc.hugetlb"
THP_MODE_FILE = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_mode(path: str = THP_MODE_FILE) -> str:
  """The kernel's transparent huge page mode ('always', 'madvise',
  'never'), or '' where there is none (not Linux, no THP)."""
  try:
    text = pathlib.Path(path).read_text()
  except OSError:
    return ""
  start, end = text.find("["), text.find("]")
  return text[start + 1:end] if 0 <= start < end else ""


def tunables_with_huge_pages(environ, mode: str):
  """The GLIBC_TUNABLES value that asks for huge pages, or None where
  nothing is to change: the kernel gives them without asking ('always') or
  never, the C library is not glibc 2.35+, or the tunable is already set
  (either way: 0 is the user's opt-out)."""
  current = environ.get("GLIBC_TUNABLES", "")
  if (mode != "madvise" or not glibc_has_the_tunable()
      or _setting(current) is not None):
    return None
  return ":".join(filter(None, [current, f"{TUNABLE}=1"]))


def _setting(tunables: str):
  """Our tunable's ``name=value`` item in a GLIBC_TUNABLES value, or None."""
  return next((item for item in tunables.split(":")
               if item.split("=")[0] == TUNABLE), None)


def libc_version() -> str:
  """This process's C library as glibc names it ('glibc 2.36'), or ''."""
  try:
    return os.confstr("CS_GNU_LIBC_VERSION") or ""
  except (ValueError, OSError):  # not a name this system knows: not glibc
    return ""


def glibc_has_the_tunable(version=None) -> bool:
  """Whether `version` (default: this process's `libc_version`) is glibc
  2.35+, the first with the tunable."""
  parts = (libc_version() if version is None else version).split()
  if len(parts) != 2 or parts[0] != "glibc":
    return False
  return tuple(int(x) for x in parts[1].split(".")[:2]) >= (2, 35)


def enable() -> None:
  """Re-executes this process (same interpreter, same arguments, same pid)
  with GLIBC_TUNABLES asking for huge pages, where that changes anything;
  returns at once otherwise (and always in an IPython kernel, which it must
  not restart). Call it first in an entry point's ``__main__``, before any
  work and ideally before heavy imports: nothing done before it survives."""
  tunables = tunables_with_huge_pages(os.environ, thp_mode())
  if tunables is None or "IPython" in sys.modules:
    return
  sys.stdout.flush()
  sys.stderr.flush()
  os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]],
            dict(os.environ, GLIBC_TUNABLES=tunables))


def describe() -> str:
  """This process's setting, for a benchmark's setup line."""
  value = _setting(os.environ.get("GLIBC_TUNABLES", "")) or f"{TUNABLE} unset"
  if not glibc_has_the_tunable():
    value += " (no effect: not glibc 2.35+)"
  return f"transparent huge pages {thp_mode() or 'n/a'}, {value}"
