"""Observation ids for multi-turn episodes, token in / token out.

An episode row is ``[prompt | turn 1 | inserted 1 | turn 2 | ...]``. The
turns are the ids the sampler drew, kept as they are (never a
re-tokenization of their text); each inserted span is what the tokenizer's
chat template writes between the end of one assistant turn and the start of
the next (`turn_ids` puts the two together with their loss mask):

  inserted = closing_ids(...) + observation_ids(...)

- `closing_ids`: the rest of the template's closing of an assistant turn
  (``<|im_end|>\\n`` in ChatML, ``<|eot_id|>`` in Llama 3): all of it when
  the sampled turn ended without the end-of-turn id (cut by the token
  budget), else what follows that id (ChatML's ``\\n``).
- `observation_ids`: the new messages (tool results in the template's tool
  role where it has one of its own, `observation_message`; else user
  messages) as the template renders them after the history, with the next
  generation prompt: the ids of render(history + new) past those of
  render(history).
  The history's assistant messages hold the decoded sampled text
  (`assistant_text`); it is rendered only to take that difference.

The difference is the new messages' ids only when the template renders the
history the same whatever follows it (a strict extension). Templates that
rewrite earlier turns break that: Qwen3's writes an empty ``<think>`` block
in the last assistant turn only, and strips reasoning from turns before the
last user query; ChatML tool templates merge consecutive tool results into
one turn (give all of a turn's results in one call). `observation_ids`
then raises `ChatTemplateError` saying which message changed, rather than
insert ids that never followed the sampled ones.

`chat_format` reads the template's closing, end-of-turn id and tool role
once per tokenizer, from a rendered probe conversation.
"""

from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence

# Probe contents: plain words every template writes as given.
_PROBE_USER = "probe question"
_PROBE_ANSWER = "probe answer"
_PROBE_RESULT = "probe tool result"
_PROBE_ROLE = "probe_role"


class ChatTemplateError(ValueError):
  """A chat template that cannot give observation ids token in / token out."""


class ChatFormat(NamedTuple):
  """What `chat_format` read from a tokenizer's chat template.

  Attributes:
    closing: the ids the template writes after an assistant message's
      content (``<|im_end|>``, ``\\n`` in ChatML).
    end_of_turn_id: ``closing[0]`` when it is a special token (the id the
      sampler stops a turn on), else None.
    tool_role: ``"tool"`` where the template renders a tool role, else
      ``"user"`` (tool results then go in as user messages).
    template_kwargs: passed to every rendering (``tools``,
      ``enable_thinking``, ...), so that all renderings agree.
  """
  closing: tuple
  end_of_turn_id: Optional[int]
  tool_role: str
  template_kwargs: Mapping[str, Any]


class TurnIds(NamedTuple):
  """One turn's part of an episode row: the sampled ids as drawn, then the
  inserted ones; `loss_mask` is 1 exactly on the sampled ids."""
  ids: tuple
  loss_mask: tuple


def _render(tokenizer, fmt_kwargs, messages, *, generation_prompt) -> str:
  return tokenizer.apply_chat_template(
      [dict(m) for m in messages], tokenize=False,
      add_generation_prompt=generation_prompt, **fmt_kwargs)


def _encode(tokenizer, text: str) -> List[int]:
  # The template writes the special tokens (BOS included) as text.
  return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _special_ids(tokenizer) -> set:
  ids = set(tokenizer.all_special_ids)
  decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
  ids.update(i for i, token in decoder.items() if getattr(token, "special",
                                                          False))
  return ids


def _tool_role(tokenizer, kwargs, probe) -> str:
  """"tool" when the template has a tool role of its own, else "user".

  A template without one may raise on a tool message, drop it, or write
  any role by its name (SmolLM2's, the tiny model's: the model never saw
  "tool" there); so the role is the template's own when a tool message's
  content is written, and otherwise than a made-up role's would be.
  """
  import jinja2  # pylint: disable=g-import-not-at-top

  def rendered(role):
    messages = probe + [{"role": role, "content": _PROBE_RESULT}]
    try:
      return _render(tokenizer, kwargs, messages, generation_prompt=True)
    except (jinja2.TemplateError, ValueError, KeyError, TypeError):
      return None
  tool = rendered("tool")
  if tool is None or _PROBE_RESULT not in tool:
    return "user"
  other = rendered(_PROBE_ROLE)
  generic = other is not None and other.replace(_PROBE_ROLE, "tool") == tool
  return "user" if generic else "tool"


def chat_format(tokenizer, **template_kwargs) -> ChatFormat:
  """Reads `ChatFormat` from `tokenizer`'s chat template, by rendering a
  probe conversation (a user question, an assistant answer, a tool result).

  Args:
    tokenizer: a transformers tokenizer with a chat template.
    **template_kwargs: options every rendering passes to
      ``apply_chat_template`` (``tools=``, ``enable_thinking=``, ...).
  """
  if not getattr(tokenizer, "chat_template", None):
    raise ChatTemplateError(
        "tokenizer has no chat_template; use an instruct model's tokenizer "
        "or set tokenizer.chat_template.")
  probe = [{"role": "user", "content": _PROBE_USER},
           {"role": "assistant", "content": _PROBE_ANSWER}]
  text = _render(tokenizer, template_kwargs, probe, generation_prompt=False)
  at = text.rfind(_PROBE_ANSWER)
  if at < 0:
    raise ChatTemplateError(
        "the chat template does not write an assistant message's content as "
        f"given (rendered {text!r}); use a template that does.")
  closing = tuple(_encode(tokenizer, text[at + len(_PROBE_ANSWER):]))
  end_of_turn = (closing[0] if closing and closing[0] in _special_ids(tokenizer)
                 else None)
  return ChatFormat(closing, end_of_turn,
                    _tool_role(tokenizer, template_kwargs, probe),
                    dict(template_kwargs))


def observation_message(fmt: ChatFormat, content: str) -> Dict[str, str]:
  """A tool result as a message: the template's tool role, else user."""
  return {"role": fmt.tool_role, "content": content}


def _ends_turn(fmt: ChatFormat, sampled_ids: Sequence[int],
               stop_ids: Sequence[int]) -> bool:
  enders = set(stop_ids)
  if fmt.end_of_turn_id is not None:
    enders.add(fmt.end_of_turn_id)
  return bool(len(sampled_ids)) and int(sampled_ids[-1]) in enders


def assistant_text(tokenizer, fmt: ChatFormat, sampled_ids: Sequence[int], *,
                   stop_ids: Sequence[int] = ()) -> str:
  """The assistant message's content for the history and the tool-call
  parser: the sampled ids decoded, without the id that ended the turn
  (`fmt.end_of_turn_id` or one of the sampler's `stop_ids`). Special tokens
  inside stay as text, so that a tag such as ``<|python_tag|>`` reaches the
  parser."""
  ids = [int(i) for i in sampled_ids]
  if _ends_turn(fmt, ids, stop_ids):
    ids = ids[:-1]
  return tokenizer.decode(ids, skip_special_tokens=False)


def closing_ids(fmt: ChatFormat, sampled_ids: Sequence[int], *,
                stop_ids: Sequence[int] = ()) -> List[int]:
  """The ids that close the sampled assistant turn as the template does.

  All of `fmt.closing` when the turn ended without the end-of-turn id (cut
  by the token budget, or a template whose closing is plain text); the ids
  after it when the turn ended on it, or on one of the sampler's `stop_ids`
  (say Llama 3's ``<|eom_id|>``), which then stands for it.
  """
  if fmt.end_of_turn_id is not None and _ends_turn(fmt, sampled_ids, stop_ids):
    return list(fmt.closing[1:])
  return list(fmt.closing)


def _first_difference(a: Sequence, b: Sequence) -> int:
  n = min(len(a), len(b))
  return next((i for i in range(n) if a[i] != b[i]), n)


def _message_at(tokenizer, fmt, history, position: int) -> int:
  """The index of the history message whose rendering spans `position`
  (the last one if no prefix of the history reaches it)."""
  for k in range(1, len(history) + 1):
    try:
      length = len(_render(tokenizer, fmt.template_kwargs, history[:k],
                           generation_prompt=False))
    except Exception:  # pylint: disable=broad-except  (a prefix it refuses)
      continue
    if length > position:
      return k - 1
  return len(history) - 1


def _rewrite_error(tokenizer, fmt, history, before, after) -> ChatTemplateError:
  at = _first_difference(before, after)
  index = _message_at(tokenizer, fmt, history, at)
  lo = max(0, at - 30)
  return ChatTemplateError(
      "the chat template re-renders the history once the new message(s) "
      f"follow: message {index} ({history[index].get('role')}) changes at "
      f"character {at}: {before[lo:at + 30]!r} becomes {after[lo:at + 30]!r}. "
      "Observation ids would not extend the sampled ones (token in, token "
      "out). This template rewrites earlier turns (e.g. Qwen3's drops an "
      "earlier turn's <think> block, empty or before the last user query; "
      "tool results that follow one another merge into one turn, so give "
      "all of a turn's results in one call); use a chat template that "
      "keeps earlier turns as written (set tokenizer.chat_template), or "
      "template options that do.")


def observation_ids(tokenizer, fmt: ChatFormat,
                    history: Sequence[Mapping[str, Any]],
                    new_messages: Sequence[Mapping[str, Any]]) -> List[int]:
  """The ids of `new_messages` and the next generation prompt, as the
  template renders them after `history`: render(history + new) past
  render(history), checked to be a strict extension, in text and in ids.

  Args:
    tokenizer: the tokenizer `fmt` was read from.
    fmt: its `chat_format`.
    history: the conversation so far, ending with the assistant message
      of the turn just sampled (content: `assistant_text`).
    new_messages: the observation, one or more messages (all of this
      turn's tool results at once: `observation_message`).

  Raises:
    ChatTemplateError: the template renders the history differently once
      the new messages follow (which message, and where), closes the
      assistant turn otherwise than `fmt.closing`, or tokenizes across the
      boundary (the history's last ids merge with the new ones).
  """
  history = list(history)
  if not history or history[-1].get("role") != "assistant":
    raise ValueError("history must end with the assistant message of the "
                     "turn just sampled; append it before asking for the "
                     "observation ids.")
  if not new_messages:
    raise ValueError("new_messages is empty; an episode that ends inserts "
                     "no observation.")
  kwargs = fmt.template_kwargs
  before = _render(tokenizer, kwargs, history, generation_prompt=False)
  after = _render(tokenizer, kwargs, history + list(new_messages),
                  generation_prompt=True)
  if not after.startswith(before):
    raise _rewrite_error(tokenizer, fmt, history, before, after)
  before_ids = _encode(tokenizer, before)
  after_ids = _encode(tokenizer, after)
  if after_ids[:len(before_ids)] != before_ids:
    at = _first_difference(before_ids, after_ids)
    raise ChatTemplateError(
        "the tokenizer splits the history's rendering differently once the "
        f"new message(s) follow (token {at}: {before_ids[at:at + 4]} becomes "
        f"{after_ids[at:at + 4]}): the text at the boundary merges across "
        "it, so the observation cannot be inserted as separate ids; use a "
        "template that ends a turn on a special token.")
  closing = list(fmt.closing)
  if closing and before_ids[len(before_ids) - len(closing):] != closing:
    raise ChatTemplateError(
        f"the chat template closes this assistant turn with ids "
        f"{before_ids[-len(closing):]}, not {closing} as in the probe "
        "(chat_format); the closing inserted after the sampled ids would "
        "be wrong. Use a template that closes every assistant turn alike.")
  return after_ids[len(before_ids):]


def turn_ids(tokenizer, fmt: ChatFormat, history: Sequence[Mapping[str, Any]],
             sampled_ids: Sequence[int],
             new_messages: Sequence[Mapping[str, Any]], *,
             stop_ids: Sequence[int] = ()) -> TurnIds:
  """A turn's ids for the episode row: `sampled_ids` as drawn, then, when
  an observation follows, `closing_ids` and `observation_ids`; the loss
  mask 1 on the sampled ids alone. No `new_messages`: the episode ends
  after the sampled ids (nothing inserted).

  Args:
    tokenizer, fmt: as `observation_ids`.
    history: the conversation so far, ending with this turn's assistant
      message (content ``assistant_text(tokenizer, fmt, sampled_ids)``).
    sampled_ids: the turn's ids as the sampler drew them.
    new_messages: the observation, or () when the episode ends.
    stop_ids: the sampler's other turn-ending ids (`closing_ids`).
  """
  sampled = tuple(int(i) for i in sampled_ids)
  inserted = ()
  if new_messages:
    inserted = tuple(closing_ids(fmt, sampled, stop_ids=stop_ids) +
                     observation_ids(tokenizer, fmt, history, new_messages))
  return TurnIds(sampled + inserted,
                 (1,) * len(sampled) + (0,) * len(inserted))
