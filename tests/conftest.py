"""Test-wide JAX settings: strict shapes, cheap compiles, float32 exactness."""

import atexit
import gc
import os
import shutil
import tempfile

# Compile time dominates tiny-shape tests on two cores.
os.environ.setdefault("XLA_FLAGS", "")
# Eight simulated CPU devices for tests/test_sharding.py; set before jax is
# imported. Every other test still runs on device 0 (jax's default).
if "xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
  os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"
# One persistent compilation cache for the session, subprocesses included
# (they inherit the environment; jax reads these variables at import): the
# tiny model's programs, the same in many tests, compile once.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _CACHE = tempfile.mkdtemp(prefix="grpo_jax_test_xla_")
  atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
  os.environ.update(JAX_COMPILATION_CACHE_DIR=_CACHE,
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                    JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1")
import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_default_matmul_precision", "highest")
jax.config.update("jax_disable_most_optimizations", True)


_MAPPINGS_AFTER_CLEAR = 0


def _memory_mappings() -> int:
  """This process's memory mappings (0 where /proc is missing)."""
  try:
    with open("/proc/self/maps", "rb") as f:
      return f.read().count(b"\n")
  except OSError:
    return 0


@pytest.hookimpl(trylast=True)  # after the file's fixtures are torn down
def pytest_runtest_teardown(item, nextitem):
  """Drops jax's compiled programs after a test file's last test, and after
  any test that leaves the process 16k mappings (a quarter of the kernel's
  limit) past where the last clear left it.

  Each XLA:CPU executable holds memory mappings of its own: a suite worker
  that kept every program it compiled reached 61k of the kernel's limit,
  65530 (vm.max_map_count); past it an mmap fails and the worker dies, as
  one did (a segfault) in a CI run; one test file alone reached 37k. The
  persistent cache above makes a program compiled again cheap.
  """
  global _MAPPINGS_AFTER_CLEAR
  if (getattr(nextitem, "module", None) is not item.module
      or _memory_mappings() > _MAPPINGS_AFTER_CLEAR + 16384):
    jax.clear_caches()
    gc.collect()
    _MAPPINGS_AFTER_CLEAR = _memory_mappings()
