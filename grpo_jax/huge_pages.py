"""Transparent huge pages for XLA:CPU's buffers, asked for at process start.

A decode step streams every weight once per token. On 4 KiB pages that
stream walks the page tables at every few KiB; on 2 MiB pages it does not:
on a 2-core AMD EPYC the sampler ran 1.1x faster at batch 1 and 8
(`experiments/benchmarks/sampler.py`, README "Sampler"). Linux commonly
gives huge pages only where a process asks (`transparent_hugepage` in
"madvise" mode), and XLA:CPU gets its buffers from glibc's malloc, which
asks when its tunable ``glibc.malloc.hugetlb=1`` is set. glibc reads
tunables when the process starts, so `enable` re-executes the entry point
once with it set; our entry points (`experiments.train`, the benchmarks)
call it first. A notebook or script of yours can set the variable itself:
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
  never, the C library is not glibc, or the tunable is already set (either
  way: 0 is the user's opt-out)."""
  current = environ.get("GLIBC_TUNABLES", "")
  if (mode != "madvise" or not _is_glibc()
      or any(item.split("=")[0] == TUNABLE for item in current.split(":"))):
    return None
  return ":".join(filter(None, [current, f"{TUNABLE}=1"]))


def _is_glibc() -> bool:
  try:
    return bool(os.confstr("CS_GNU_LIBC_VERSION"))
  except (ValueError, OSError):  # not a name this system knows
    return False


def enable() -> None:
  """Re-executes this process (same interpreter, same arguments, same pid)
  with GLIBC_TUNABLES asking for huge pages, where that changes anything;
  returns at once otherwise. Call it first in an entry point's ``__main__``,
  before any work: nothing done before it survives."""
  tunables = tunables_with_huge_pages(os.environ, thp_mode())
  if tunables is None:
    return
  sys.stdout.flush()
  sys.stderr.flush()
  os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]],
            dict(os.environ, GLIBC_TUNABLES=tunables))


def describe() -> str:
  """This process's setting, for a benchmark's setup line."""
  value = next((item for item in
                os.environ.get("GLIBC_TUNABLES", "").split(":")
                if item.split("=")[0] == TUNABLE), f"{TUNABLE} unset")
  return f"transparent huge pages {thp_mode() or 'n/a'}, {value}"
