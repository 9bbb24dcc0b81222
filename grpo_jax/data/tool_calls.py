"""Tool calls parsed from an assistant turn's text, in the formats the
shipped architectures' chat templates teach (`TOOL_CALL_FORMATS`):

- ``qwen`` (Qwen2.5, Qwen3; the Hermes convention of ChatML templates):
  each call a JSON object ``{"name": ..., "arguments": {...}}`` between
  ``<tool_call>`` and ``</tool_call>``; a turn may hold several, and the
  text around them is not a call.
- ``llama3_json`` (Llama 3.1): the turn is the JSON object
  ``{"name": ..., "parameters": {...}}`` (``"arguments"`` read too),
  optionally after ``<|python_tag|>``; further objects after ``;`` or
  whitespace are further calls, and a turn that does not start with ``{``
  (after the tag) holds no call.

A parser never raises on the model's text: it returns, in order, a
`ToolCall` per well-formed call and a `CallError` per malformed one, and
`error_observation` turns a `CallError` into the text the model reads back
(what is wrong, and how a call is written). `format_for` picks the format
from the chat template, else the model type. Parse the text of
`chat.assistant_text` (special tokens kept, so the tag is seen).
"""

import json
from typing import Any, Dict, List, NamedTuple, Optional, Union

from grpo_jax import registry


class ToolCall(NamedTuple):
  """A well-formed call: the tool's name and its keyword arguments."""
  name: str
  arguments: Dict[str, Any]


class CallError(NamedTuple):
  """A malformed call: its text as written, and what is wrong with it."""
  text: str
  problem: str


Parsed = List[Union[ToolCall, CallError]]


class FormatMeta(NamedTuple):
  """What a tool-call format declares: a well-formed call, which the error
  observations show the model."""
  example: str


# name -> ``parse(text) -> [ToolCall | CallError]``.
TOOL_CALL_FORMATS = registry.Registry("tool call format", positional=("text",),
                                      meta=FormatMeta)

# The format of each supported model type (`models.config`), where the chat
# template names none (`format_for`).
FORMAT_BY_MODEL_TYPE = {"qwen2": "qwen", "qwen3": "qwen",
                        "llama": "llama3_json"}
# Text in a chat template that says which format it teaches, in order:
# Qwen's tool templates write <tool_call>, Llama 3.1's <|python_tag|>, and
# a ChatML template without tools (SmolLM2's) takes ChatML's convention.
_TEMPLATE_MARKERS = (("<tool_call>", "qwen"), ("<|python_tag|>", "llama3_json"),
                     ("<|im_start|>", "qwen"))

_JSON_TYPES = ((bool, "a boolean"), (dict, "an object"), (list, "an array"),
               (str, "a string"), ((int, float), "a number"))


def _json_type(value) -> str:
  if value is None:
    return "null"
  return next(name for kind, name in _JSON_TYPES if isinstance(value, kind))


def _looks_like_python_call(text: str) -> bool:
  head = text.strip().split("(", 1)[0]
  return "(" in text and bool(head) and all(
      part.isidentifier() for part in head.split("."))


def _call_from_object(value, raw: str, argument_keys) -> Union[ToolCall,
                                                               CallError]:
  """The `ToolCall` a decoded JSON value describes, or what is wrong."""
  if not isinstance(value, dict):
    return CallError(raw, f"a call must be a JSON object, not "
                     f"{_json_type(value)}")
  name = value.get("name")
  if name is None:
    return CallError(raw, 'the call has no "name" (the tool to call)')
  if not isinstance(name, str) or not name.strip():
    return CallError(raw, f'"name" must be a non-empty string, not '
                     f"{json.dumps(name)}")
  key = next((k for k in argument_keys if k in value), argument_keys[0])
  arguments = value.get(key)
  if arguments is None:  # a call with no arguments
    arguments = {}
  if isinstance(arguments, str):  # the arguments' JSON given as a string
    try:
      decoded = json.loads(arguments)
    except json.JSONDecodeError:
      decoded = None
    arguments = decoded if isinstance(decoded, dict) else arguments
  if not isinstance(arguments, dict):
    return CallError(raw, f'"{key}" must be a JSON object of argument names '
                     f"to values, not {_json_type(arguments)}")
  return ToolCall(name.strip(), arguments)


def _call_from_json(body: str, raw: str, argument_keys) -> Union[ToolCall,
                                                                 CallError]:
  try:
    value = json.loads(body)
  except json.JSONDecodeError as e:
    if _looks_like_python_call(body):
      return CallError(raw, "the call is written as a Python call; write it "
                       "as a JSON object")
    return CallError(raw, f"the call is not valid JSON ({e.msg} at "
                     f"character {e.pos})")
  return _call_from_object(value, raw, argument_keys)


_OPEN, _CLOSE = "<tool_call>", "</tool_call>"


@TOOL_CALL_FORMATS.register(
    "qwen", example=('<tool_call>\n{"name": "calculator", "arguments": '
                     '{"expression": "12 * 34"}}\n</tool_call>'))
def qwen(text: str) -> Parsed:
  """Calls between ``<tool_call>`` and ``</tool_call>`` (Qwen2.5, Qwen3):
  each a JSON object with "name" and "arguments"; a ``<tool_call>`` not
  closed before the next one or the end of the text is an error."""
  parsed: Parsed = []
  start = text.find(_OPEN)
  while start >= 0:
    body_start = start + len(_OPEN)
    end = text.find(_CLOSE, body_start)
    following = text.find(_OPEN, body_start)
    if end < 0 or 0 <= following < end:
      stop = following if following >= 0 else len(text)
      parsed.append(CallError(text[start:stop].strip(), f"{_OPEN} is not "
                              f"closed by {_CLOSE}"))
      start = following
      continue
    raw = text[start:end + len(_CLOSE)]
    parsed.append(_call_from_json(text[body_start:end].strip(), raw,
                                  ("arguments",)))
    start = text.find(_OPEN, end + len(_CLOSE))
  return parsed


_PYTHON_TAG = "<|python_tag|>"


@TOOL_CALL_FORMATS.register(
    "llama3_json", example=('{"name": "calculator", "parameters": '
                            '{"expression": "12 * 34"}}'))
def llama3_json(text: str) -> Parsed:
  """The turn as JSON calls (Llama 3.1): objects with "name" and
  "parameters", optionally after ``<|python_tag|>``, separated by ``;`` or
  whitespace; text after the last one is not read. A turn that does not
  start with ``{`` holds no call, unless it starts with the tag (then it is
  a call in a form this parser does not read, an error)."""
  body = text.strip()
  tagged = body.startswith(_PYTHON_TAG)
  if tagged:
    body = body[len(_PYTHON_TAG):].strip()
  if not body.startswith("{"):
    if not tagged:
      return []
    problem = ("the call is written as a Python call; write it as a JSON "
               "object" if _looks_like_python_call(body) else
               f"after {_PYTHON_TAG} a call must be a JSON object")
    return [CallError(text.strip(), problem)]
  decoder = json.JSONDecoder()
  parsed: Parsed = []
  position = 0
  while position < len(body) and body[position] == "{":
    try:
      value, end = decoder.raw_decode(body, position)
    except json.JSONDecodeError as e:
      parsed.append(CallError(body[position:], f"the call is not valid JSON "
                              f"({e.msg} at character {e.pos - position})"))
      break
    parsed.append(_call_from_object(value, body[position:end],
                                    ("parameters", "arguments")))
    position = end
    while position < len(body) and (body[position].isspace()
                                    or body[position] == ";"):
      position += 1
  return parsed


def parse_tool_calls(text: str, format_name: str) -> Parsed:
  """The calls in `text`, in the registered format `format_name`."""
  return TOOL_CALL_FORMATS.get(format_name)(text)


def format_for(model_type: str, chat_template: Optional[str] = None) -> str:
  """The tool-call format of a model: the one its chat template teaches
  (Qwen's ``<tool_call>``, Llama 3.1's ``<|python_tag|>``, ChatML), else its
  model type's (`FORMAT_BY_MODEL_TYPE`)."""
  for marker, name in _TEMPLATE_MARKERS:
    if chat_template and marker in chat_template:
      return name
  if model_type in FORMAT_BY_MODEL_TYPE:
    return FORMAT_BY_MODEL_TYPE[model_type]
  raise ValueError(
      f"no tool-call format is known for model_type={model_type!r} and its "
      "chat template; name one of "
      f"{', '.join(TOOL_CALL_FORMATS.names())}.")


_SHOWN = 300  # characters of a malformed call shown back to the model


def error_observation(error: CallError, format_name: str) -> str:
  """The observation for a malformed call: what is wrong, the call as
  written (shortened), and a well-formed call in `format_name`."""
  example = TOOL_CALL_FORMATS.entry(format_name).meta.example
  shown = error.text if len(error.text) <= _SHOWN else (
      error.text[:_SHOWN] + " ...")
  return (f"Tool call error: {error.problem}.\nThe call was: {shown}\n"
          f"Write each call like this: {example}")
