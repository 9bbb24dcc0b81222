"""grpo_jax: Group Relative Policy Optimization and its family in JAX."""

__version__ = "0.1.0"
