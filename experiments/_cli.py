"""What every entry point shares: `run(main)` in place of ``app.run(main)``.

- ``--help`` prints the module's docstring and flags and exits 0 (absl's
  exits 1);
- a config error (`config.errors.is_config_error`) prints its message, one
  line naming the field and the fix, without a traceback; so do a
  misspelt ``--config.a.b`` override ("config.train.learnig_rate is not a
  field; did you mean learning_rate?"), a config file that is missing or
  raises, a bad flag value and an `app.UsageError`;
- ``--verbose`` (or absl's ``-v 1``) shows the traceback as well.
"""

import re
import sys

from absl import app
from absl import flags
from absl import logging

from grpo_jax.config import errors as config_errors

_VERBOSE = flags.DEFINE_bool(
    "verbose", False, "On a config error, show the traceback too.")
_HELP = ("--help", "-?", "--helpshort", "-help")
# ml_collections' message when a config file's get_config raised.
_CONFIG_FILE_RAISED = "Error whilst parsing config file"
_CONFIG_FILE_MISSING = "Failed loading config file"


def run(main) -> None:
  """``app.run(main)`` with the help and error handling above."""
  # --verbose in the entry point's --help (absl files it under this module).
  flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS["verbose"])
  app.run(_quiet(main), flags_parser=parse_flags)


def parse_flags(argv):
  """absl's flag parsing, but ``--help`` exits 0, and a bad flag value, a
  config file that raises or a misspelt config key read as one line
  (flags are not parsed yet: ``--verbose`` is looked for in `argv`)."""
  if any(arg in _HELP for arg in argv[1:_end_of_flags(argv)]):
    app.usage(shorthelp=True, writeto_stdout=True, exitcode=0)
  if "--helpfull" in argv[1:_end_of_flags(argv)]:
    app.usage(writeto_stdout=True, exitcode=0)
  verbose = any(arg in ("--verbose", "--verbose=true", "--verbose=True")
                for arg in argv)
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:  # a bad flag value (absl's message)
    message = str(error)
    if _CONFIG_FILE_RAISED in message and not verbose:
      # The config file's get_config raised: its last line says why.
      flag = message.split(": ", 1)[0]
      message = f"{flag}: {message.strip().splitlines()[-1].strip()}"
    _exit(f"{message}\n(--help shows the flags)")
  except (AttributeError, KeyError) as error:  # ml_collections' key lookup
    message = misspelt_key(error, argv)
    if message is None or verbose:
      raise
    _exit(message)


def _end_of_flags(argv) -> int:
  return argv.index("--") if "--" in argv else len(argv)


def misspelt_key(error: BaseException, argv) -> str:
  """ml_collections' error for an override of a field the config lacks
  (an AttributeError wrapping a KeyError whose message holds the key and
  perhaps 'Did you mean "x"'), as ``config.<path> is not a field; did you
  mean x?``; None when `error` is not that."""
  while isinstance(error, (AttributeError, KeyError)) and error.args and \
      isinstance(error.args[0], BaseException):
    error = error.args[0]
  text = str(error.args[0]) if error.args else ""
  keys = re.findall(r"""['"]([^'"\s]+)['"]""", text.split("\n")[0])
  if not keys:
    return None
  key = keys[0]
  for arg in argv:
    match = re.match(r"-{1,2}(?:no)?config\.([^=]+)", arg)
    parts = match.group(1).split(".") if match else []
    if key in parts:
      path = ".".join(parts[:parts.index(key) + 1])
      suggestion = re.search(r'Did you mean "([^"]+)"', text)
      fix = (f"did you mean {suggestion.group(1)}?" if suggestion else
             "check its spelling against the config file (--dry_run prints "
             "every field)")
      return f"config.{path} is not a field; {fix}"
  return None


def _quiet(main):
  def main_without_tracebacks(argv):
    try:
      return main(argv)
    except app.UsageError as error:
      if _verbose():
        raise
      _exit(f"{error} (--help shows the usage)")
    except ValueError as error:
      if _verbose() or not config_errors.is_config_error(error):
        raise
      _exit(str(error))
    except OSError as error:  # ml_collections: no such --config file
      if _verbose() or _CONFIG_FILE_MISSING not in str(error):
        raise
      _exit(f"--config: {str(error).strip().splitlines()[-1].strip()}")
  return main_without_tracebacks


def _verbose() -> bool:
  return _VERBOSE.value or logging.get_verbosity() >= logging.DEBUG


def _exit(message: str) -> None:
  sys.stderr.write(f"error: {message}\n")
  sys.exit(1)
