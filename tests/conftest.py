"""Test-wide JAX settings: strict shapes, cheap compiles, float32 exactness."""

import os

# Compile time dominates tiny-shape tests on two cores.
os.environ.setdefault("XLA_FLAGS", "")
import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_default_matmul_precision", "highest")
jax.config.update("jax_disable_most_optimizations", True)
