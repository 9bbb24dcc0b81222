"""Test-wide JAX settings: strict shapes, cheap compiles, float32 exactness."""

import os

# Compile time dominates tiny-shape tests on two cores.
os.environ.setdefault("XLA_FLAGS", "")
# Eight simulated CPU devices for tests/test_sharding.py; set before jax is
# imported. Every other test still runs on device 0 (jax's default).
if "xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
  os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"
import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_default_matmul_precision", "highest")
jax.config.update("jax_disable_most_optimizations", True)
