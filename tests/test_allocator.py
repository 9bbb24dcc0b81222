"""grpo_jax.runtime.allocator: which malloc tunables are set, and that they work."""

import os
import subprocess
import sys

import pytest

from grpo_jax.runtime import allocator


@pytest.mark.parametrize("text, mode", [
    ("always [madvise] never\n", "madvise"),
    ("[always] madvise never\n", "always"),
    ("always madvise [never]\n", "never"),
    ("garbled\n", ""),
])
def test_thp_mode_reads_the_bracketed_choice(tmp_path, text, mode):
  path = tmp_path / "enabled"
  path.write_text(text)
  assert allocator.thp_mode(str(path)) == mode


def test_thp_mode_is_empty_without_the_file(tmp_path):
  assert allocator.thp_mode(str(tmp_path / "missing")) == ""


KEEP = ("glibc.malloc.mmap_max=0:glibc.malloc.arena_max=1:"
        "glibc.malloc.trim_threshold=1099511627776")
HUGE = "glibc.malloc.hugetlb=1"


@pytest.mark.parametrize("environ, mode, version, expected", [
    ({}, "madvise", "glibc 2.36", f"{KEEP}:{HUGE}"),
    ({"GLIBC_TUNABLES": "glibc.rtld.nns=2"}, "madvise", "glibc 2.36",
     f"glibc.rtld.nns=2:{KEEP}:{HUGE}"),
    # Huge pages only on request ('madvise') and from glibc 2.35 on.
    ({}, "always", "glibc 2.36", KEEP),
    ({}, "never", "glibc 2.36", KEEP),
    ({}, "", "glibc 2.36", KEEP),
    ({}, "madvise", "glibc 2.34", KEEP),
    ({}, "madvise", "glibc 2.26", KEEP),
    # No tunables before glibc 2.26, none outside glibc.
    ({}, "madvise", "glibc 2.25", None),
    ({}, "madvise", "", None),
    ({}, "madvise", "musl 1.2.4", None),
    # One of ours already set, either way: the user's choice, none of ours.
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, "madvise", "glibc 2.36",
     None),
    ({"GLIBC_TUNABLES": f"a.b=1:{HUGE}"}, "madvise", "glibc 2.36", None),
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, "madvise",
     "glibc 2.36", None),
])
def test_tunables_added_only_where_they_change_something(environ, mode,
                                                         version, expected):
  assert allocator.tunables(environ, mode, version) == expected


@pytest.mark.parametrize("mode, version, expected", [
    ("madvise", "glibc 2.36", HUGE),
    ("always", "glibc 2.36", None),  # nothing left to set
    ("madvise", "glibc 2.34", None),
])
def test_without_keep_freed_only_huge_pages(mode, version, expected):
  assert allocator.tunables({}, mode, version, keep_freed=False) == expected


@pytest.mark.parametrize("version, minimum, at_least", [
    ("glibc 2.36", (2, 35), True), ("glibc 2.35", (2, 35), True),
    ("glibc 3.0", (2, 35), True), ("glibc 2.34", (2, 35), False),
    ("glibc 2.26", (2, 26), True), ("glibc 2.25", (2, 26), False),
    ("", (2, 26), False), ("musl 1.2.4", (2, 26), False),
])
def test_is_glibc_at_least(version, minimum, at_least):
  assert allocator.is_glibc_at_least(minimum, version) is at_least


# 64 MiB from malloc (numpy would advise huge pages itself), touched, freed,
# then again: with freed memory kept the second buffer faults in nothing.
REPORT = """
import ctypes, os, re, resource
from grpo_jax.runtime import allocator
allocator.enable()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 64 << 20
buffer = libc.malloc(size)
ctypes.memset(buffer, 1, size)
libc.free(buffer)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
buffer = libc.malloc(size)
ctypes.memset(buffer, 1, size)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
rollup = open("/proc/self/smaps_rollup").read()
print(os.environ.get("GLIBC_TUNABLES"), faults,
      re.search(r"AnonHugePages:\\s+(\\d+) kB", rollup).group(1))
"""


def _report(env):
  return subprocess.run([sys.executable, "-c", REPORT], capture_output=True,
                        text=True, check=True, env=env,
                        timeout=120).stdout.split()


@pytest.mark.skipif(allocator.tunables({}, allocator.thp_mode()) is None,
                    reason="not glibc 2.26+: no tunables to set")
def test_enable_reexecutes_once_and_malloc_keeps_freed_memory():
  unset = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
  tunables, faults, huge_kib = _report(unset)
  # Set once (not appended twice), as `tunables` says.
  assert tunables == allocator.tunables({}, allocator.thp_mode())
  assert int(faults) < 16, faults  # 64 MiB in 4 KiB pages would be 16384
  if HUGE in tunables:
    assert int(huge_kib) >= 2048, huge_kib  # at least one 2 MiB page
  # Opted out: no re-exec; the second buffer is mapped afresh (above
  # glibc's 32 MiB mmap threshold) and faulted in page by page.
  tunables, faults, huge_kib = _report(
      dict(unset, GLIBC_TUNABLES="glibc.malloc.hugetlb=0"))
  assert tunables == "glibc.malloc.hugetlb=0"
  assert int(faults) >= 32, faults  # even in 2 MiB pages
  assert huge_kib == "0"
