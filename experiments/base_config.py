"""The config `experiments.evaluate` parses ``--config.a.b=value`` against
when no --config is given: the base config (`config.get_base_config`),
whose fields give the overrides their types. With --checkpoint the
overrides then apply to the run's own config (`saved_runs.with_overrides`).
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  return config_lib.finalize(config_lib.get_base_config(), arg)
