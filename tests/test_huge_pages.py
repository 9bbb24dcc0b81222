"""grpo_jax.huge_pages: when the tunable is asked for, and that it works."""

import os
import subprocess
import sys

import pytest

from grpo_jax import huge_pages


@pytest.mark.parametrize("text, mode", [
    ("always [madvise] never\n", "madvise"),
    ("[always] madvise never\n", "always"),
    ("always madvise [never]\n", "never"),
    ("garbled\n", ""),
])
def test_thp_mode_reads_the_bracketed_choice(tmp_path, text, mode):
  path = tmp_path / "enabled"
  path.write_text(text)
  assert huge_pages.thp_mode(str(path)) == mode


def test_thp_mode_is_empty_without_the_file(tmp_path):
  assert huge_pages.thp_mode(str(tmp_path / "missing")) == ""


@pytest.mark.parametrize("environ, mode, expected", [
    ({}, "madvise", "glibc.malloc.hugetlb=1"),
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, "madvise",
     "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"),
    # Already set, either way (0 is the opt-out): nothing to change.
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, "madvise", None),
    ({"GLIBC_TUNABLES": "a.b=1:glibc.malloc.hugetlb=1"}, "madvise", None),
    # A kernel that gives huge pages unasked, never, or has no THP.
    ({}, "always", None),
    ({}, "never", None),
    ({}, "", None),
])
def test_tunables_ask_only_where_it_changes_something(environ, mode,
                                                      expected):
  if not huge_pages.glibc_has_the_tunable():
    expected = None
  assert huge_pages.tunables_with_huge_pages(environ, mode) == expected


@pytest.mark.parametrize("version, has", [
    ("glibc 2.36", True), ("glibc 2.35", True), ("glibc 3.0", True),
    ("glibc 2.34", False), ("glibc 2.31", False), ("", False),
    ("musl 1.2.4", False),
])
def test_only_glibc_2_35_and_later_has_the_tunable(version, has):
  assert huge_pages.glibc_has_the_tunable(version) is has


REPORT = """
import ctypes, os, re
from grpo_jax import huge_pages
huge_pages.enable()
# 64 MiB straight from malloc (numpy would advise huge pages itself), every
# page touched.
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
buffer = libc.malloc(64 << 20)
ctypes.memset(buffer, 1, 64 << 20)
rollup = open("/proc/self/smaps_rollup").read()
print(os.environ.get("GLIBC_TUNABLES"),
      re.search(r"AnonHugePages:\\s+(\\d+) kB", rollup).group(1))
"""


@pytest.mark.skipif(
    huge_pages.tunables_with_huge_pages({}, huge_pages.thp_mode()) is None,
    reason="this kernel or C library gives nothing to ask for")
def test_enable_reexecutes_once_and_buffers_get_huge_pages():
  unset = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
  out = subprocess.run([sys.executable, "-c", REPORT], capture_output=True,
                       text=True, check=True, env=unset,
                       timeout=120).stdout.split()
  tunables, huge_kib = out
  assert tunables == "glibc.malloc.hugetlb=1"  # set once, not appended twice
  assert int(huge_kib) >= 2048, out  # at least one 2 MiB page
  # Opted out: no re-exec, no huge pages from malloc.
  out = subprocess.run([sys.executable, "-c", REPORT], capture_output=True,
                       text=True, check=True, timeout=120,
                       env=dict(unset, GLIBC_TUNABLES="glibc.malloc.hugetlb=0")
                       ).stdout.split()
  assert out == ["glibc.malloc.hugetlb=0", "0"], out
