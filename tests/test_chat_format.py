"""Chat formats (`data.chat`): observation ids token in / token out, and
tool-call parsing (`data.tool_calls`).

The tokenizers are built here, character-level (plus optional merged
pieces) with special tokens, under hand-written chat templates: ChatML with
a tool role (as Qwen's), one without a tool role, one that strips earlier
turns' reasoning, and the repo's tiny template.
"""

import json
import pathlib
import string

import pytest

from grpo_jax.data import chat
from grpo_jax.data import tool_calls
from grpo_jax.data.tool_calls import CallError, ToolCall
from grpo_jax.models import presets

pytest.importorskip("transformers")

# ChatML with a tool role; consecutive tool results share one user turn.
CHATML_TOOLS = (
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}"
    "{{ '<|im_start|>user' }}{% endif %}"
    "{{ '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}"
    "{{ '<|im_end|>\\n' }}{% endif %}"
    "{% else %}"
    "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# No tool role: any other role is refused; a turn ends on <|end|> alone.
NO_TOOL_ROLE = (
    "{% for m in messages %}"
    "{% if m.role not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('roles are system, user and assistant') }}{% endif %}"
    "{{ '<|start|>' + m.role + ': ' + m.content + '<|end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start|>assistant: ' }}{% endif %}")

# ChatML that drops the <think> block of every assistant turn but the last.
STRIPS_REASONING = (
    "{% for m in messages %}{% set content = m.content %}"
    "{% if m.role == 'assistant' and not loop.last and '</think>' in content %}"
    "{% set content = content.split('</think>')[-1].lstrip() %}{% endif %}"
    "{{ '<|im_start|>' + m.role + '\\n' + content + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

CHATML_SPECIALS = ("<|im_start|>", "<|im_end|>")


def char_tokenizer(template, specials=CHATML_SPECIALS, pieces=()):
  """One id per printable character, per piece in `pieces` (matched first:
  merged tokens) and per special token."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  chars = sorted(set(string.printable) - set("\x0b\x0c\r"))
  vocab = {t: i for i, t in enumerate(
      ["<pad>", "<eos>", "<unk>"] + list(pieces) + chars)}
  model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab,
                                                           unk_token="<unk>"))
  pattern = "|".join(list(pieces) + [r"[\s\S]"])
  model.pre_tokenizer = tokenizers.pre_tokenizers.Split(
      tokenizers.Regex(pattern), behavior="isolated")
  model.decoder = tokenizers.decoders.Fuse()
  tokenizer = transformers.PreTrainedTokenizerFast(
      tokenizer_object=model, pad_token="<pad>", eos_token="<eos>",
      unk_token="<unk>")
  tokenizer.add_special_tokens(
      {"additional_special_tokens": list(specials)})
  tokenizer.chat_template = template
  return tokenizer


def encode(tokenizer, text):
  return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def render(tokenizer, messages, generation_prompt):
  return tokenizer.apply_chat_template(
      messages, tokenize=False, add_generation_prompt=generation_prompt)


QUESTION = [{"role": "user", "content": "What is 6*7?"}]
CALL = ('I will compute. <tool_call>{"name": "calc", "arguments": '
        '{"expression": "6*7"}}</tool_call>')


def test_chat_format_reads_closing_end_of_turn_and_tool_role():
  tok = char_tokenizer(CHATML_TOOLS)
  fmt = chat.chat_format(tok)
  im_end = tok.convert_tokens_to_ids("<|im_end|>")
  assert fmt.closing == (im_end, tok.convert_tokens_to_ids("\n"))
  assert fmt.end_of_turn_id == im_end
  assert fmt.tool_role == "tool"
  plain = chat.chat_format(char_tokenizer(NO_TOOL_ROLE, ("<|start|>",
                                                         "<|end|>")))
  assert plain.tool_role == "user"
  assert chat.observation_message(plain, "42") == {"role": "user",
                                                   "content": "42"}


@pytest.mark.parametrize("ended", [True, False], ids=["ended", "cut"])
def test_tool_role_insert_is_the_full_renderings_suffix(ended):
  tok = char_tokenizer(CHATML_TOOLS)
  fmt = chat.chat_format(tok)
  im_end = tok.convert_tokens_to_ids("<|im_end|>")
  prompt_ids = encode(tok, render(tok, QUESTION, True))
  # Turn 1 ends on <|im_end|>, or is cut by the budget just before it.
  sampled = encode(tok, CALL) + ([im_end] if ended else [])
  assert chat.assistant_text(tok, fmt, sampled) == CALL
  history = QUESTION + [{"role": "assistant", "content": CALL}]
  new = [chat.observation_message(fmt, "42")]
  turn = chat.turn_ids(tok, fmt, history, sampled, new)

  whole = render(tok, history + new, True)
  assert prompt_ids + list(turn.ids) == encode(tok, whole)
  expected = (("" if ended else "<|im_end|>") + "\n<|im_start|>user\n"
              "<tool_response>\n42\n</tool_response><|im_end|>\n"
              "<|im_start|>assistant\n")
  assert list(turn.ids[len(sampled):]) == encode(tok, expected)
  assert turn.loss_mask == (1,) * len(sampled) + (0,) * (
      len(turn.ids) - len(sampled))


def test_two_results_and_two_turns_build_the_whole_conversation():
  tok = char_tokenizer(CHATML_TOOLS)
  fmt = chat.chat_format(tok)
  im_end = tok.convert_tokens_to_ids("<|im_end|>")
  ids = encode(tok, render(tok, QUESTION, True))
  history = list(QUESTION)
  for text, results in ((CALL + CALL, ["42", "42"]), ("It is 42.", [])):
    sampled = encode(tok, text) + [im_end]
    history.append({"role": "assistant",
                    "content": chat.assistant_text(tok, fmt, sampled)})
    new = [chat.observation_message(fmt, r) for r in results]
    ids += chat.turn_ids(tok, fmt, history, sampled, new).ids
    history += new
  # The episode ends on the last sampled id: no closing after it.
  assert ids == encode(tok, render(tok, history, False))[:-1]
  assert render(tok, history, False).count("<tool_response>") == 2


def test_a_template_without_tool_role_takes_results_as_user_messages():
  tok = char_tokenizer(NO_TOOL_ROLE, ("<|start|>", "<|end|>"))
  fmt = chat.chat_format(tok)
  end = tok.convert_tokens_to_ids("<|end|>")
  assert fmt.closing == (end,) and fmt.end_of_turn_id == end
  prompt_ids = encode(tok, render(tok, QUESTION, True))
  sampled = encode(tok, CALL) + [end]
  history = QUESTION + [{"role": "assistant", "content": CALL}]
  new = [chat.observation_message(fmt, "42")]
  turn = chat.turn_ids(tok, fmt, history, sampled, new)
  assert prompt_ids + list(turn.ids) == encode(tok, render(tok, history + new,
                                                           True))
  assert list(turn.ids[len(sampled):]) == encode(
      tok, "<|start|>user: 42<|end|><|start|>assistant: ")


def test_the_sampled_ids_are_kept_even_where_retokenizing_differs():
  tok = char_tokenizer(CHATML_TOOLS, pieces=("ab",))
  fmt = chat.chat_format(tok)
  im_end = tok.convert_tokens_to_ids("<|im_end|>")
  a, b = tok.convert_tokens_to_ids(["a", "b"])
  sampled = [a, b, a, b, im_end]  # "abab", drawn a character at a time
  text = chat.assistant_text(tok, fmt, sampled)
  assert text == "abab"
  assert encode(tok, text) != sampled[:-1]  # re-tokenizing would merge
  history = QUESTION + [{"role": "assistant", "content": text}]
  turn = chat.turn_ids(tok, fmt, history, sampled,
                       [chat.observation_message(fmt, "ok")])
  assert list(turn.ids[:len(sampled)]) == sampled
  assert turn.loss_mask[:len(sampled)] == (1,) * len(sampled)
  assert set(turn.loss_mask[len(sampled):]) == {0}


def test_a_template_that_rewrites_history_raises_naming_the_message():
  tok = char_tokenizer(STRIPS_REASONING)
  fmt = chat.chat_format(tok)
  text = "<think>six sevens</think> 42"
  sampled = encode(tok, text) + [fmt.end_of_turn_id]
  history = QUESTION + [{"role": "assistant", "content": text}]
  with pytest.raises(chat.ChatTemplateError,
                     match=r"message 1 \(assistant\) changes"):
    chat.turn_ids(tok, fmt, history, sampled,
                  [chat.observation_message(fmt, "ok")])
  # Without reasoning to strip, the same template extends the history.
  plain = QUESTION + [{"role": "assistant", "content": "42"}]
  assert chat.observation_ids(tok, fmt, plain, [{"role": "user",
                                                 "content": "ok"}])


def test_ids_that_merge_across_the_boundary_raise():
  # "\nu" is one token: the history's last "\n" merges with "user: ...".
  tok = char_tokenizer(presets.TINY_CHAT_TEMPLATE, (), pieces=("\nu",))
  fmt = chat.chat_format(tok)
  history = QUESTION + [{"role": "assistant", "content": CALL}]
  with pytest.raises(chat.ChatTemplateError, match="splits the history"):
    chat.observation_ids(tok, fmt, history,
                         [chat.observation_message(fmt, "42")])


def test_a_plain_text_closing_is_always_inserted():
  tok = presets.tiny_tokenizer()  # "role: content\n", no special end token
  fmt = chat.chat_format(tok)
  assert fmt.closing == tuple(encode(tok, "\n"))
  assert fmt.end_of_turn_id is None
  # It writes any role by its name: no tool role of its own.
  assert fmt.tool_role == "user"
  eos = tok.eos_token_id
  sampled = encode(tok, "42") + [eos]
  assert chat.assistant_text(tok, fmt, sampled, stop_ids=[eos]) == "42"
  assert chat.closing_ids(fmt, sampled, stop_ids=[eos]) == list(fmt.closing)


def test_a_stop_id_stands_for_the_end_of_turn_id():
  fmt = chat.chat_format(char_tokenizer(CHATML_TOOLS))
  newline = fmt.closing[1]
  assert chat.closing_ids(fmt, [5, 6, fmt.end_of_turn_id]) == [newline]
  assert chat.closing_ids(fmt, [5, 6, 1]) == list(fmt.closing)
  assert chat.closing_ids(fmt, [5, 6, 1], stop_ids=[1]) == [newline]


def test_bad_histories_and_tokenizers_are_clear_errors():
  tok = char_tokenizer(CHATML_TOOLS)
  fmt = chat.chat_format(tok)
  with pytest.raises(ValueError, match="must end with the assistant"):
    chat.observation_ids(tok, fmt, QUESTION, [{"role": "user",
                                               "content": "x"}])
  tok.chat_template = None
  with pytest.raises(chat.ChatTemplateError, match="no chat_template"):
    chat.chat_format(tok)


# Tool-call parsing.


def test_qwen_reads_several_calls_and_ignores_the_text_around():
  text = ('Let me check. <tool_call>\n{"name": "calc", "arguments": '
          '{"expression": "6*7"}}\n</tool_call> and <tool_call>{"name": '
          '"search", "arguments": {"q": "x", "k": 2}}</tool_call> done')
  assert tool_calls.parse_tool_calls(text, "qwen") == [
      ToolCall("calc", {"expression": "6*7"}),
      ToolCall("search", {"q": "x", "k": 2})]
  assert tool_calls.parse_tool_calls("The answer is 42.", "qwen") == []


def test_qwen_arguments_absent_or_as_a_json_string():
  text = ('<tool_call>{"name": "now"}</tool_call>'
          '<tool_call>{"name": "calc", "arguments": "{\\"x\\": 1}"}</tool_call>')
  assert tool_calls.qwen(text) == [ToolCall("now", {}),
                                   ToolCall("calc", {"x": 1})]


@pytest.mark.parametrize("body, problem", [
    ('{"name": "calc", "arguments": {"x": 1}', "not valid JSON"),
    ('{"arguments": {"x": 1}}', 'no "name"'),
    ('{"name": 3, "arguments": {}}', '"name" must be a non-empty string'),
    ('{"name": "calc", "arguments": [1, 2]}', "not an array"),
    ('["calc"]', "must be a JSON object, not an array"),
    ('calc(expression="6*7")', "Python call"),
])
def test_qwen_malformed_calls_are_errors_in_place(body, problem):
  good = '<tool_call>{"name": "ok", "arguments": {}}</tool_call>'
  parsed = tool_calls.qwen(f"{good} <tool_call>{body}</tool_call> {good}")
  assert parsed[0] == parsed[2] == ToolCall("ok", {})
  assert isinstance(parsed[1], CallError) and problem in parsed[1].problem
  assert body in parsed[1].text


def test_qwen_an_unclosed_call_is_an_error():
  text = ('<tool_call>{"name": "a", "arguments": {}}<tool_call>{"name": '
          '"b", "arguments": {}}</tool_call><tool_call>{"name": "c"')
  parsed = tool_calls.qwen(text)
  assert [type(p) for p in parsed] == [CallError, ToolCall, CallError]
  assert "not closed" in parsed[0].problem and '"a"' in parsed[0].text
  assert parsed[1] == ToolCall("b", {})
  assert parsed[2].text.endswith('"c"')


def test_llama3_json_reads_the_turn_as_calls():
  parse = tool_calls.llama3_json
  call = '{"name": "calc", "parameters": {"expression": "6*7"}}'
  assert parse(call) == [ToolCall("calc", {"expression": "6*7"})]
  assert parse("<|python_tag|>" + call) == parse(call)
  two = call + '; {"name": "search", "arguments": {"q": "x"}}'
  assert parse(two) == [ToolCall("calc", {"expression": "6*7"}),
                        ToolCall("search", {"q": "x"})]
  assert parse("The answer is 42.") == []


@pytest.mark.parametrize("text, problem", [
    ('{"name": "calc", "parameters": {"x": 1}', "not valid JSON"),
    ('{"parameters": {"x": 1}}', 'no "name"'),
    ('{"name": "calc", "parameters": 5}', "not a number"),
    ('<|python_tag|>brave_search.call(query="x")', "Python call"),
    ("<|python_tag|>search for x", "must be a JSON object"),
])
def test_llama3_json_malformed_calls_are_errors(text, problem):
  parsed = tool_calls.llama3_json(text)
  assert len(parsed) == 1 and isinstance(parsed[0], CallError)
  assert problem in parsed[0].problem


GARBAGE = ["", "<tool_call>", "</tool_call>", "{", "<|python_tag|>", "}{",
           "<tool_call>null</tool_call>", '{"name": null}', "[]", "{}",
           "<tool_call></tool_call>", '{"name": "x"}; oops', "\x00{\"a"]


@pytest.mark.parametrize("name", ["qwen", "llama3_json"])
def test_parsers_never_raise_on_garbage(name):
  for text in GARBAGE:
    for item in tool_calls.parse_tool_calls(text, name):
      assert isinstance(item, (ToolCall, CallError)), (text, item)


@pytest.mark.parametrize("name", tool_calls.TOOL_CALL_FORMATS.names())
def test_each_formats_example_is_a_call_it_reads(name):
  example = tool_calls.TOOL_CALL_FORMATS.entry(name).meta.example
  assert tool_calls.parse_tool_calls(example, name) == [
      ToolCall("calculator", {"expression": "12 * 34"})]


def test_error_observation_says_what_is_wrong_and_how_to_write_it():
  error = tool_calls.qwen("<tool_call>{\"arguments\": {}}</tool_call>")[0]
  text = tool_calls.error_observation(error, "qwen")
  assert 'no "name"' in text and error.text in text
  assert tool_calls.TOOL_CALL_FORMATS.entry("qwen").meta.example in text
  long = CallError("x" * 1000, "too long")
  assert len(tool_calls.error_observation(long, "llama3_json")) < 600


def test_the_format_follows_the_template_then_the_model_type():
  assert tool_calls.format_for("qwen3") == "qwen"
  assert tool_calls.format_for("llama") == "llama3_json"
  # SmolLM2 is a llama whose template is ChatML.
  assert tool_calls.format_for("llama", "<|im_start|>{{ m }}") == "qwen"
  assert tool_calls.format_for("qwen2", "<|python_tag|>") == "llama3_json"
  with pytest.raises(ValueError, match="no tool-call format"):
    tool_calls.format_for("mistral")
  with pytest.raises(ValueError, match="unknown"):
    tool_calls.parse_tool_calls("x", "mistral")


def test_every_shipped_architecture_has_a_format():
  folder = (pathlib.Path(tool_calls.__file__).parents[1] / "models" /
            "architectures")
  types = {json.loads(p.read_text())["model_type"]
           for p in folder.glob("*.json")}
  assert types == {"llama", "qwen2", "qwen3"}
  for model_type in types:
    assert tool_calls.format_for(model_type) in tool_calls.TOOL_CALL_FORMATS


def test_the_shipped_smollm2_tokenizer_extends_its_rendering():
  # A real BPE tokenizer and template (ChatML, every role by its name).
  from grpo_jax.models import loading  # pylint: disable=g-import-not-at-top
  tok = loading.load_tokenizer(pathlib.Path(loading.__file__).parent /
                               "tokenizers" / "SmolLM2-135M-Instruct.Q4_1")
  fmt = chat.chat_format(tok)
  assert fmt.end_of_turn_id == tok.convert_tokens_to_ids("<|im_end|>")
  assert fmt.tool_role == "user"
  assert tool_calls.format_for("llama", tok.chat_template) == "qwen"
  sampled = encode(tok, CALL) + [fmt.end_of_turn_id]
  history = QUESTION + [{"role": "assistant",
                         "content": chat.assistant_text(tok, fmt, sampled)}]
  new = [chat.observation_message(fmt, "42")]
  turn = chat.turn_ids(tok, fmt, history, sampled, new)
  prompt_ids = encode(tok, render(tok, QUESTION, True))
  assert prompt_ids + list(turn.ids) == encode(tok, render(tok, history + new,
                                                           True))
  assert tool_calls.qwen(chat.assistant_text(tok, fmt, sampled)) == [
      ToolCall("calc", {"expression": "6*7"})]
