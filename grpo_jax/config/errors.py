"""The config checks' error helpers, shared by `config` (field checks),
`rollout.checks` (checks across stages) and `rollout.path_checks` (the step paths'):
every config error reads ``config.<field>: <problem>; <fix>.``

Kept apart from `config` so that the check modules import it without a
cycle; it imports nothing of the library but `registry` (`OptionError`).
"""

import math

from grpo_jax import registry


def fail(field: str, problem: str, fix: str):
  raise ValueError(f"config.{field}: {problem}; {fix}.")


def check_choice(field, value, choices):
  if value not in choices:
    fail(field, f"{value!r} is unknown",
         f"choose one of {', '.join(map(str, choices))}")


def check_component(field, make, name, kwargs):
  """A stage component's own checks (its name, option names and values)
  as a config error naming `field`, or ``<field>.<option>`` where the
  component names the option (`registry.OptionError`)."""
  try:
    return make(name, **kwargs)
  except registry.OptionError as e:
    raise ValueError(f"config.{field}.{e.key}: {e}") from None
  except ValueError as e:
    fail(field, str(e).rstrip("."), f"see --config.{field}")


def positive(c, field, *, allow_zero=False):
  value = c
  for part in field.split("."):
    value = value[part]
  # NaN passes every comparison: name it rather than turn a term off.
  if math.isnan(value) or value < 0 or (value == 0 and not allow_zero):
    bound = ">= 0" if allow_zero else "> 0"
    fail(field, f"{value!r} is not {bound}", f"set a value {bound}")
