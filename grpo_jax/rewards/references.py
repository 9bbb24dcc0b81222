"""Reward functions named by reference in ``rewards.functions``, beside the
registered names: a module path or a file path, then ``:function``,

  --config.rewards.functions=my_pkg.my_rewards:digit_share
  --config.rewards.functions=path/to/my_rewards.py:digit_share

so that a reward of one's own runs from the command line, with no driver
script. A module path is imported as ``import`` would (``python -m`` puts
the current directory on the path); a relative file path is read from the
current directory. The function is called as the registered ones are,
``fn(prompts, completions, answers) -> N floats`` (`verifiers`), which
`check` holds its signature against before any compute.

A reference's reward column is its function's name (`column`): the
metrics read ``reward/digit_share``, ``groups.kwargs.signal_reward`` names
``digit_share``; no two entries may make one column, nor may a reference
take a registered reward's (shapers read ``accuracy`` as correctness).
The config, saved with every checkpoint, keeps the reference, so that
evaluating the run resolves it again. `get` gives a `Reference`, a
callable that resolves the function where it is first called, so a worker
process (`workers`) imports the module or loads the file itself and never
needs the trainer's ``__main__``. A function that is also registered in
`VERIFIERS` (its module registers it) brings its declared range
(`declared_range`); otherwise it declares none. Other kinds referenced
the same way (tools, `grpo_jax.tools`) resolve through `parse` and
`Reference.resolve` with their own config field.
"""

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from typing import Callable, Dict, NamedTuple, Optional, Tuple

from grpo_jax.config.errors import fail
from grpo_jax.rewards.verifiers import VERIFIERS

FIELD = "rewards.functions"
_FORMS = "module.path:function or path/to/file.py:function"
_RESOLVED: Dict[Tuple[str, str], Callable] = {}  # (target, function) -> fn


def is_reference(name: str) -> bool:
  """Whether a ``rewards.functions`` entry is a reference (holds ``:``)
  rather than a registered name."""
  return ":" in name


def _is_file(target: str) -> bool:
  return target.endswith(".py") or "/" in target or os.sep in target


class Reference(NamedTuple):
  """A reward function by reference: `text` as the config gives it,
  `target` the module name or the absolute file path, `function` the
  name in it. Calling it calls the function, resolved on first use in
  each process; it pickles as these three strings."""
  text: str
  target: str
  function: str

  def resolve(self, *, field: str = FIELD) -> Callable:
    """The function, imported or loaded once per process; a config error
    naming `field` (the config field the reference came from) if it
    cannot be found."""
    key = (self.target, self.function)
    if key not in _RESOLVED:
      _RESOLVED[key] = _lookup(
          self.text, _module(self.text, self.target, field), self.function,
          field)
    return _RESOLVED[key]

  def __call__(self, prompts, completions, answers):
    return self.resolve()(prompts, completions, answers)


def parse(text: str, *, field: str = FIELD, what: str = "reward"
          ) -> Reference:
  """The `Reference` of ``target:function`` (a relative file path made
  absolute against the current directory); a config error naming `field`
  (``rewards.functions``; another kind's field, `what` naming the kind,
  when another kind of component is referenced: tools) when `text` has
  neither form."""
  target, _, function = text.rpartition(":")
  if not target or not function.isidentifier():
    fail(field, f"{text!r} is not a {what} reference", f"write {_FORMS} "
         "(the function's name after the last ':'), or a registered name")
  if _is_file(target):
    target = os.path.abspath(os.path.expanduser(target))
  elif not all(part.isidentifier() for part in target.split(".")):
    fail(field, f"{text!r} names neither a module ({target!r} is not a "
         "dotted module path) nor a .py file", f"write {_FORMS}")
  return Reference(text, target, function)


def _file_module_name(path: str) -> str:
  # One name per file, the same in every process: a second resolve (a
  # worker's, an evaluation's) finds the module loaded once.
  digest = hashlib.sha1(path.encode()).hexdigest()[:12]
  stem = os.path.splitext(os.path.basename(path))[0]
  return f"_reward_file_{''.join(ch if ch.isalnum() else '_' for ch in stem)}_{digest}"


def _module(text: str, target: str, field: str):
  """The module `target` names, imported or loaded from its file."""
  if not _is_file(target):
    try:
      return importlib.import_module(target)
    except ImportError as error:
      fail(field, f"the module of {text!r} cannot be imported ({error!r})",
           f"run from the directory that holds {target.split('.')[0]!r} or "
           "put it on PYTHONPATH, or give the file's path "
           "(path/to/file.py:function)")
    except Exception as error:  # pylint: disable=broad-except
      fail(field, f"importing the module of {text!r} raised {error!r}",
           "fix the module so that it imports")
  name = _file_module_name(target)
  if name in sys.modules:
    return sys.modules[name]
  if not os.path.isfile(target):
    fail(field, f"the file of {text!r} does not exist ({target}; a relative "
         f"path is read from the current directory, {os.getcwd()})",
         "give the path of an existing .py file")
  spec = importlib.util.spec_from_file_location(name, target)
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module  # as import does: the file may refer to itself
  try:
    spec.loader.exec_module(module)
  except Exception as error:  # pylint: disable=broad-except
    del sys.modules[name]
    fail(field, f"loading the file of {text!r} raised {error!r}",
         "fix the file so that it runs")
  return module


def _lookup(text: str, module, function: str, field: str) -> Callable:
  fn = getattr(module, function, None)
  if fn is None:
    own = sorted(k for k, v in vars(module).items()
                 if inspect.isfunction(v) and not k.startswith("_")
                 and v.__module__ == module.__name__)
    fail(field, f"{text!r}: its module has no {function!r}",
         f"name one of its functions ({', '.join(own) or 'it defines none'})")
  return fn


def _check_signature(text: str, fn) -> None:
  """A config error unless `fn` takes (prompts, completions, answers)
  positionally, as the scorer calls every reward function."""
  if not callable(fn):
    fail(FIELD, f"{text!r} is not a function (its type: "
         f"{type(fn).__name__})",
         "name a function fn(prompts, completions, answers)")
  try:
    signature = inspect.signature(fn)
  except (TypeError, ValueError):  # a builtin without one: cannot tell
    return
  try:
    signature.bind(["prompt"], ["completion"], ["answer"])
  except TypeError as error:
    fail(FIELD, f"{text!r} cannot be called as fn(prompts, completions, "
         f"answers): its signature is {signature} ({error})",
         "give it three positional parameters (prompts, completions, "
         "answers: lists of N strings) and return N floats")


def get(name: str) -> Callable:
  """The reward function a ``rewards.functions`` entry names: the
  registered one, or a `Reference` (checked, `check`)."""
  if not is_reference(name):
    return VERIFIERS.get(name)
  check(name)
  return parse(name)


def check(name: str) -> None:
  """A config error naming ``rewards.functions`` unless `name` is a
  registered reward or a reference to a function that imports and takes
  (prompts, completions, answers); imports the module or runs the file."""
  if not is_reference(name):
    if name not in VERIFIERS:
      fail(FIELD, f"{name!r} is unknown", f"choose from "
           f"{', '.join(VERIFIERS.names())}, or name your own function as "
           f"{_FORMS}")
    return
  _check_signature(name, parse(name).resolve())


def column(name: str) -> str:
  """The reward column of a ``rewards.functions`` entry (its metric is
  ``reward/<column>``): a registered name itself, a reference its
  function's name."""
  return name.rpartition(":")[2]


def columns(functions) -> Tuple[str, ...]:
  """`column` of each ``rewards.functions`` entry, in order."""
  return tuple(column(name) for name in functions)


def check_columns(functions) -> None:
  """A config error naming ``rewards.functions`` when two entries make one
  column, or a reference makes a registered reward's column with another
  function (shapers and metrics would read it as the registered one)."""
  seen = {}
  for name in functions:
    key = column(name)
    if key in seen:
      fail(FIELD, f"{seen[key]!r} and {name!r} both make the reward column "
           f"{key!r} (a reference's column is its function's name)",
           "name each function once, and give functions of one name in "
           "two files names of their own")
    if (is_reference(name) and key in VERIFIERS
        and VERIFIERS.get(key) is not parse(name).resolve()):
      fail(FIELD, f"{name!r} makes the reward column {key!r}, the name of a "
           "registered reward (which shapers and the metrics read as that "
           "one)", f"rename the function, or use the registered {key!r}")
    seen[key] = name


def declared_range(name: str) -> Optional[Tuple[float, float]]:
  """The ``(lo, hi)`` a reward declares: a registered one's, or a
  referenced function's when it is registered too; else None."""
  if not is_reference(name):
    return VERIFIERS.entry(name).meta.range
  fn = parse(name).resolve()
  for entry in VERIFIERS.entries():
    if entry.fn is fn:
      return entry.meta.range
  return None
