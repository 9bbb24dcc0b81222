"""The config checks' error helpers, shared by `config` (field checks),
`rollout.checks` (checks across stages) and `rollout.path_checks` (the step paths'):
every config error reads ``config.<field>: <problem>; <fix>.``

Kept apart from `config` so that the check modules import it without a
cycle; it imports nothing of the library but `registry` (`OptionError`).

A config error is a `ConfigError` (a ValueError), so that the entry points
print it alone, without a traceback (`is_config_error`).
"""

import math
import re
from typing import Any, Mapping

from grpo_jax import registry


class ConfigError(ValueError):
  """A config that cannot run: ``config.<field>: <problem>; <fix>.``."""


def is_config_error(error: BaseException) -> bool:
  """Whether `error` is about the config and its message says it all: a
  `ConfigError`, or a ValueError in its form (``config.<field>...``) from a
  check that cannot import this module (the registries' option checks)."""
  return isinstance(error, ConfigError) or (
      isinstance(error, ValueError) and str(error).startswith("config."))


def fail(field: str, problem: str, fix: str):
  raise ConfigError(f"config.{field}: {problem}; {fix}.")


def option_named(message: str, options) -> str:
  """The option a component's error is about, the name its message starts
  with ("clip_high must be >= 0 ...", "n_min=5 exceeds ..."), when it is one
  of `options`; else ""."""
  match = re.match(r"\s*([A-Za-z_]\w*)", message)
  return match.group(1) if match and match.group(1) in options else ""


def fail_option(field: str, message: str, defaults: Mapping[str, Any], *,
                owner: str):
  """A component's ValueError as a config error: at ``<field>.<option>``
  with its default (`owner`'s, from `defaults`) as the example fix when the
  message starts with one of its options, else at `field`."""
  message = message.rstrip(".")
  option = option_named(message, defaults)
  if not option:
    fail(field, message, f"see --config.{field}")
  default = defaults[option]
  fix = (f"e.g. --config.{field}.{option}={default} ({owner}'s default)"
         if isinstance(default, (bool, int, float, str)) and default != ""
         else f"set another --config.{field}.{option}")
  fail(f"{field}.{option}", message, fix)


def check_choice(field, value, choices):
  if value not in choices:
    fail(field, f"{value!r} is unknown",
         f"choose one of {', '.join(map(str, choices))}")


def check_component(field, make, name, kwargs):
  """A stage component's own checks (its name, option names and values)
  as a config error naming `field`, or ``<field>.<option>`` where the
  component names the option (`registry.OptionError`, or a message that
  starts with an option the config sets)."""
  try:
    return make(name, **kwargs)
  except registry.OptionError as e:
    raise ConfigError(f"config.{field}.{e.key}: {e}") from None
  except ValueError as e:
    option = option_named(str(e), kwargs)
    where = f"{field}.{option}" if option else field
    fail(where, str(e).rstrip("."), f"see --config.{where}")


def positive(c, field, *, allow_zero=False):
  value = c
  for part in field.split("."):
    value = value[part]
  # NaN passes every comparison: name it rather than turn a term off.
  if math.isnan(value) or value < 0 or (value == 0 and not allow_zero):
    bound = ">= 0" if allow_zero else "> 0"
    fail(field, f"{value!r} is not {bound}", f"set a value {bound}")
