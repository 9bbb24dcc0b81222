"""The tools registry, a tool bound to its options (`Tool`), and a call that
never raises (`call`).

A tool is a function ``fn(arguments: dict, **options) -> str``: the model's
call arguments in, the observation text out. It registers with what a chat
template's ``tools=`` argument shows the model, a description and a JSON
schema of its arguments (`ToolMeta`); `schema` gives the
``{"type": "function", "function": {...}}`` dict that
``tokenizer.apply_chat_template(..., tools=[...])`` takes.

A failed call is an observation too, text starting with `ERROR_PREFIX`
(``"error: "``), so that the model reads what went wrong and a run counts
it (`is_error`); nothing a tool or its arguments do raises out of `call`.

A tool of one's own needs no registering: `make` takes it by reference,
``my_pkg.my_tools:lookup`` or ``path/to/my_tools.py:lookup``, resolved as
reward references are (`grpo_jax.rewards.references`). Its name is the
function's; its description and schema are its registered metadata when its
module registers it in `TOOLS`, else the function's ``description`` and
``parameters`` attributes, else its docstring and an object schema that
takes any arguments.
"""

import functools
import inspect
from typing import Any, Callable, Mapping, NamedTuple, Optional

from grpo_jax import registry
from grpo_jax.config.errors import fail
from grpo_jax.rewards import references

FIELD = "tools"  # the config field a tool's name comes from, until wired
ERROR_PREFIX = "error: "
ANY_ARGUMENTS = {"type": "object", "properties": {}}
# JSON schema's types, as Python checks them (a bool is not a number).
_JSON_TYPES = {
    "string": (str,), "integer": (int,), "number": (int, float),
    "boolean": (bool,), "object": (Mapping,), "array": (list, tuple),
    "null": (type(None),)}


class ToolMeta(NamedTuple):
  """A tool's metadata.

  Attributes:
    description: what the tool does, for the model.
    parameters: a JSON schema of its arguments (an ``"object"`` with
      ``properties`` and ``required``), for the model and for `call`.
    check: ``check(**options)`` raising `registry.OptionError` for a bad
      option value, or None.
  """
  description: str
  parameters: Mapping[str, Any]
  check: Optional[Callable] = None


TOOLS = registry.Registry("tool", positional=("arguments",), meta=ToolMeta)


class Tool(NamedTuple):
  """A tool with its options bound: `fn(arguments) -> str`. Calling it is
  `call` (errors as observations)."""
  name: str
  description: str
  parameters: Mapping[str, Any]
  fn: Callable

  def __call__(self, arguments) -> str:
    return call(self, arguments)


def error(message: str) -> str:
  """The observation of a failed call."""
  return ERROR_PREFIX + message


def is_error(observation: str) -> bool:
  """Whether `observation` reports a failed call (`error`)."""
  return observation.startswith(ERROR_PREFIX)


def schema(tool: Tool) -> dict:
  """The tool as a chat template's ``tools=`` list takes it."""
  return {"type": "function", "function": {
      "name": tool.name, "description": tool.description,
      "parameters": dict(tool.parameters)}}


def _first_paragraph(doc: Optional[str]) -> str:
  return " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())


def _reference_meta(fn) -> ToolMeta:
  """A referenced function's metadata: its registered one, else its own
  attributes and docstring."""
  for entry in TOOLS.entries():
    if entry.fn is fn:
      return entry.meta
  return ToolMeta(
      description=getattr(fn, "description", None)
      or _first_paragraph(fn.__doc__),
      parameters=getattr(fn, "parameters", None) or ANY_ARGUMENTS)


def _check_reference(text: str, fn, options, field: str) -> None:
  if not callable(fn):
    fail(field, f"{text!r} is not a function (its type: "
         f"{type(fn).__name__})", "name a function fn(arguments) -> str")
  try:
    signature = inspect.signature(fn)
  except (TypeError, ValueError):  # a builtin without one: cannot tell
    return
  try:
    signature.bind({}, **options)
  except TypeError as e:
    fail(field, f"{text!r} cannot be called as fn(arguments"
         f"{''.join(f', {k}=...' for k in options)}): its signature is "
         f"{signature} ({e})", "give it one positional parameter, the "
         "arguments dict, and keyword parameters for its options")


def make(name: str, *, field: str = FIELD, **options) -> Tool:
  """The `Tool` a config names, its options bound and checked: a registered
  name, or a reference ``module:function`` / ``path/to/file.py:function``;
  a config error naming `field` for an unknown name, option or value."""
  if not references.is_reference(name):
    if name not in TOOLS:
      fail(field, f"{name!r} is unknown", f"choose from "
           f"{', '.join(TOOLS.names())}, or name your own function as "
           "module.path:function or path/to/file.py:function")
    try:
      TOOLS.check_options(name, options)
    except ValueError as e:
      fail(field, str(e).rstrip("."), f"see --config.{field}")
    try:
      TOOLS.check_values(name, options)
    except registry.OptionError as e:  # it names the option
      fail(f"{field}.{e.key}", str(e).rstrip("."), f"see --config.{field}")
    entry = TOOLS.entry(name)
    fn, meta = entry.fn, entry.meta
  else:
    fn = references.parse(name, field=field, what="tool").resolve(
        field=field)
    _check_reference(name, fn, options, field)
    meta = _reference_meta(fn)
    name = references.column(name)
  bound = functools.partial(fn, **options) if options else fn
  return Tool(name, meta.description, dict(meta.parameters), bound)


def argument_problem(parameters: Mapping[str, Any], arguments) -> str:
  """What is wrong with `arguments` against the tool's schema (a dict, the
  required keys, no unknown keys where ``additionalProperties`` is false,
  the declared JSON types of the top-level values); "" when nothing."""
  if not isinstance(arguments, Mapping):
    return (f"the arguments must be a JSON object; got "
            f"{type(arguments).__name__}")
  properties = parameters.get("properties", {})
  missing = [k for k in parameters.get("required", ()) if k not in arguments]
  if missing:
    return f"missing required argument {missing[0]!r}"
  if parameters.get("additionalProperties", True) is False:
    unknown = [k for k in arguments if k not in properties]
    if unknown:
      return (f"unknown argument {unknown[0]!r}; the tool takes "
              f"{', '.join(properties) or 'none'}")
  for key, value in arguments.items():
    declared = properties.get(key, {}).get("type")
    names = [declared] if isinstance(declared, str) else list(declared or ())
    kinds = tuple(t for n in names for t in _JSON_TYPES.get(n, ()))
    if not kinds:
      continue
    if isinstance(value, bool) and bool not in kinds:
      kinds = ()  # JSON's true is no number
    if not isinstance(value, kinds):
      return (f"argument {key!r} must be of type {' or '.join(names)}; got "
              f"{type(value).__name__}")
  return ""


def call(tool: Tool, arguments) -> str:
  """The observation of calling `tool` with `arguments`: its text, or an
  `error` saying what was wrong (bad arguments, an exception, a result
  that is not text); never raises an Exception."""
  problem = argument_problem(tool.parameters, arguments)
  if problem:
    return error(f"{tool.name}: {problem}")
  try:
    observation = tool.fn(dict(arguments))
  except Exception as e:  # pylint: disable=broad-except
    return error(f"{tool.name} raised {type(e).__name__}: {e}")
  if not isinstance(observation, str):
    return error(f"{tool.name} returned {type(observation).__name__}, not "
                 "text")
  return observation
