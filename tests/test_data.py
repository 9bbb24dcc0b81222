"""Tests for grpo_jax.data: arithmetic task, list datasets, JSONL, GSM8K."""

import json
import re

import pytest

from grpo_jax.data import arithmetic
from grpo_jax import data
from grpo_jax import rewards
from grpo_jax import testing

_QUESTION = re.compile(r"What is (.+?)\?")


def _expression(example):
  return _QUESTION.match(example.question).group(1)


def test_train_is_deterministic_in_seed_and_step():
  task = arithmetic.ArithmeticTask(digits=2, ops=("+", "-"), operands=2, seed=3)
  again = arithmetic.ArithmeticTask(digits=2, ops=("+", "-"), operands=2, seed=3)
  assert task.train(7, 16) == again.train(7, 16)
  assert task.train(7, 16) != task.train(8, 16)
  other_seed = arithmetic.ArithmeticTask(digits=2, ops=("+", "-"), operands=2, seed=4)
  assert task.train(7, 16) != other_seed.train(7, 16)


def test_train_after_resume_is_the_same_order():
  # A run resumed at step 5 asks only for steps >= 5.
  first = arithmetic.ArithmeticTask(seed=1)
  stream = [first.train(step, 4) for step in range(8)]
  resumed = arithmetic.ArithmeticTask(seed=1)
  assert [resumed.train(step, 4) for step in range(5, 8)] == stream[5:]


def test_answers_are_correct_arithmetic():
  task = arithmetic.ArithmeticTask(digits=2, ops=("+", "-", "*"), operands=3, seed=0)
  for example in task.train(0, 50) + task.heldout(20):
    numbers = [int(x) for x in re.findall(r"\d+", _expression(example))]
    ops = re.findall(r" ([-+*]) ", _expression(example))
    # Independent reference: Python's own precedence.
    value = eval(_expression(example))  # pylint: disable=eval-used
    assert example.answer == str(value)
    assert len(numbers) == 3 and len(ops) == 2
    assert all(0 <= x < 100 for x in numbers)


def test_answers_score_as_correct():
  task = arithmetic.ArithmeticTask(digits=2, ops=("-", "*"), operands=2)
  batch = task.train(0, 4)
  completions = [f"\\boxed{{{e.answer}}}" for e in batch]
  assert rewards.accuracy([e.question for e in batch], completions,
                          [e.answer for e in batch]) == [1.0] * 4


def test_heldout_disjoint_from_train_small_space():
  task = arithmetic.ArithmeticTask(digits=1, ops=("+",), operands=2, seed=0)
  heldout = {_expression(e) for e in task.heldout(task_heldout_size(task))}
  seen = {_expression(e) for step in range(50) for e in task.train(step, 32)}
  assert heldout and not heldout & seen
  # Together they cover the whole space of 100 sums.
  assert len(heldout | seen) == 100


def task_heldout_size(task):
  return sum(task.is_heldout(f"{a} + {b}") for a in range(10) for b in range(10))


def test_heldout_disjoint_from_train_large_space():
  task = arithmetic.ArithmeticTask(digits=3, ops=("+", "*"), operands=3, seed=0)
  heldout = task.heldout(50)
  assert len({e.question for e in heldout}) == 50
  seen = {_expression(e) for step in range(20) for e in task.train(step, 50)}
  assert not {_expression(e) for e in heldout} & seen


def test_heldout_same_for_every_seed():
  assert arithmetic.ArithmeticTask(seed=0).heldout(5) == arithmetic.ArithmeticTask(
      seed=9).heldout(5)


def test_heldout_too_many_raises():
  task = arithmetic.ArithmeticTask()
  with pytest.raises(ValueError, match="held out"):
    task.heldout(task_heldout_size(task) + 1)


def test_difficulty_settings_change_problems():
  base = arithmetic.ArithmeticTask(digits=1, ops=("+",), operands=2).train(0, 64)
  wide = arithmetic.ArithmeticTask(digits=3, ops=("+",), operands=2).train(0, 64)
  many = arithmetic.ArithmeticTask(digits=1, ops=("+",), operands=4).train(0, 64)
  mixed = arithmetic.ArithmeticTask(digits=1, ops=("-", "*"), operands=2).train(0, 64)
  assert max(int(x) for e in base for x in re.findall(r"\d+", _expression(e))) < 10
  assert max(int(x) for e in wide for x in re.findall(r"\d+", _expression(e))) >= 100
  assert all(_expression(e).count("+") == 3 for e in many)
  ops = {op for e in mixed for op in re.findall(r" ([-+*]) ", _expression(e))}
  assert ops == {"-", "*"}


@pytest.mark.parametrize("kwargs,match", [
    (dict(digits=0), "digits"), (dict(operands=1), "operands"),
    (dict(ops=("/",)), "ops"), (dict(ops=()), "ops"),
    (dict(heldout_fraction=1.0), "heldout_fraction"),
])
def test_arithmetic_task_rejects_bad_settings(kwargs, match):
  with pytest.raises(ValueError, match=match):
    arithmetic.ArithmeticTask(**kwargs)


def test_questions_are_bare_unless_instructed():
  bare = arithmetic.ArithmeticTask().train(0, 1)[0].question
  assert re.fullmatch(r"What is \d \+ \d\?", bare)
  task = arithmetic.ArithmeticTask(instruction=rewards.ANSWER_INSTRUCTION)
  question = task.train(0, 1)[0].question
  assert question == bare + " " + rewards.ANSWER_INSTRUCTION


def test_system_prompt_asks_for_the_rewarded_format():
  assert "\\boxed{" in data.SYSTEM_PROMPT
  # A completion that follows the instruction earns the format reward.
  assert rewards.format_reward([""], ["1 + 2 = 3, so \\boxed{3}"], [""]) == [1.0]


def _examples(n):
  # Indexed as ListDataset indexes its training examples: by position.
  return [data.Example(f"q{i}", str(i), i) for i in range(n)]


def test_list_dataset_epochs_are_permutations():
  dataset = data.ListDataset(_examples(10), seed=0)
  first_epoch = dataset.train(0, 5) + dataset.train(1, 5)
  second_epoch = dataset.train(2, 5) + dataset.train(3, 5)
  assert sorted(first_epoch) == sorted(_examples(10))
  assert sorted(second_epoch) == sorted(_examples(10))
  assert first_epoch != second_epoch


def test_list_dataset_is_deterministic_and_straddles_epochs():
  dataset = data.ListDataset(_examples(7), seed=2)
  assert dataset.train(3, 4) == data.ListDataset(_examples(7), seed=2).train(3, 4)
  assert dataset.train(3, 4) != data.ListDataset(_examples(7), seed=3).train(3, 4)
  # Step 1 of batch 4 covers stream positions 4..7: three of epoch 0, one of 1.
  stream = dataset.train(0, 7) + dataset.train(1, 7)
  assert dataset.train(1, 4) == stream[4:8]


def test_list_dataset_heldout():
  dataset = data.ListDataset(_examples(3), _examples(2))
  assert dataset.heldout(2) == _examples(2)
  with pytest.raises(ValueError, match="held-out"):
    dataset.heldout(3)
  with pytest.raises(ValueError, match="empty"):
    data.ListDataset([])


def test_split_heldout_is_disjoint_and_stable():
  examples = _examples(200) + _examples(10)  # duplicates stay on one side
  train, heldout = data.split_heldout(examples, fraction=0.25)
  assert len(train) + len(heldout) == 210
  assert not {e.question for e in train} & {e.question for e in heldout}
  assert 20 < len(heldout) < 80
  assert (train, heldout) == data.split_heldout(examples, fraction=0.25)


def _write(tmp_path, lines):
  path = tmp_path / "data.jsonl"
  path.write_text("\n".join(lines) + "\n")
  return path


def test_jsonl_good(tmp_path):
  path = _write(tmp_path, [
      json.dumps({"question": "1+1?", "answer": "2"}), "",
      json.dumps({"question": "2*3?", "answer": 6, "extra": True})])
  # Each record's index among the records is its id (blank lines skipped).
  assert data.jsonl(path) == [data.Example("1+1?", "2", 0),
                              data.Example("2*3?", "6", 1)]
  assert data.jsonl(path, instruction="Box it.")[0].question == "1+1? Box it."


def test_jsonl_custom_keys(tmp_path):
  path = _write(tmp_path, [json.dumps({"problem": "p", "solution": "s"})])
  assert data.jsonl(path, question_key="problem", answer_key="solution") == [
      data.Example("p", "s", 0)]


def test_jsonl_malformed_line_names_file_and_line(tmp_path):
  path = _write(tmp_path, [json.dumps({"question": "a", "answer": "1"}),
                           "{not json"])
  with pytest.raises(ValueError, match=r"data\.jsonl:2: not valid JSON"):
    data.jsonl(path)


def test_jsonl_non_object_line(tmp_path):
  path = _write(tmp_path, ["[1, 2]"])
  with pytest.raises(ValueError, match=r"data\.jsonl:1: expected a JSON object"):
    data.jsonl(path)


def test_jsonl_missing_key_names_key_and_line(tmp_path):
  path = _write(tmp_path, [json.dumps({"question": "a", "answer": "1"}),
                           json.dumps({"question": "b", "answer": "2"}),
                           json.dumps({"question": "c"})])
  with pytest.raises(ValueError, match=r"data\.jsonl:3: missing key 'answer'"):
    data.jsonl(path)


@pytest.mark.parametrize("bad,problem", [
    ('"a-1"', "'id' is 'a-1', not an integer >= 0"),
    ("3.5", "'id' is 3.5, not an integer >= 0"),
    ("true", "'id' is True, not an integer >= 0"),
    (None, "has no 'id' field, but the record on line 1 has one"),
])
def test_jsonl_a_bad_id_names_file_line_and_field(tmp_path, bad, problem):
  """An id that is not an integer >= 0 (or one missing beside others) is
  an error, not a silent renumbering: ids key per-prompt state."""
  third = ('{"question": "c", "answer": "3"}' if bad is None else
           '{"id": %s, "question": "c", "answer": "3"}' % bad)
  path = _write(tmp_path, ['{"id": 4, "question": "a", "answer": "1"}', "",
                           '{"id": "7", "question": "b", "answer": "2"}',
                           third])
  with pytest.raises(ValueError, match=(
      r"data\.jsonl:4: " + problem + r".*give every record an integer 'id' "
      r">= 0, or drop \(or rename\) the 'id' field")):
    data.jsonl(path)
  # Without ids (id_key=None: a benchmark's) the records take their order.
  assert [e.index for e in data.jsonl(path, id_key=None)] == [0, 1, 2]
  # Integer ids, and strings of digits, are the records' ids.
  path = _write(tmp_path, ['{"id": 4, "question": "a", "answer": "1"}',
                           '{"id": "7", "question": "b", "answer": "2"}'])
  assert [e.index for e in data.jsonl(path)] == [4, 7]


def _gsm8k_records(builder, split, **kwargs):
  del builder, kwargs
  rows = {"train": [("Tom has 3 apples and buys 4. How many?", "7"),
                    ("Sam earns $1,200 a week. How much in 2 weeks?", "2,400")],
          "test": [("What is 2 * 21?", "42")]}[split]
  return [{"question": q.encode(), "annotation": b"...",
           "answer": f"Work it out.\n#### {a}".encode(),
           "short_answer": a.encode()} for q, a in rows]


def test_a_config_with_a_jsonl_task_trains_and_holds_out(tmp_path):
  """configs' data.task='jsonl' through data.make_task, as train and
  evaluate use it: every line lands on exactly one side, unchanged."""
  from configs import grpo as grpo_config  # pylint: disable=g-import-not-at-top
  path = tmp_path / "problems.jsonl"
  lines = [{"question": f"What is {i} + 1?", "answer": i + 1}
           for i in range(40)]
  path.write_text("\n".join(json.dumps(line) for line in lines))
  config = grpo_config.get_config("tiny")
  config.data.task, config.data.path = "jsonl", str(path)
  config.data.heldout_fraction = 0.25
  task = data.make_task(config.data, seed=0)
  train = task.train(0, len(task.train_examples))
  heldout = task.heldout(len(task.heldout_examples))
  assert 0 < len(heldout) < 40 and len(train) + len(heldout) == 40
  assert sorted((e.question, e.answer) for e in train + heldout) == sorted(
      (line["question"], str(line["answer"])) for line in lines)


def test_gsm8k_maps_records_via_data_source():
  tfds = pytest.importorskip("tensorflow_datasets")
  with tfds.testing.mock_data(as_data_source_fn=_gsm8k_records):
    train = data.gsm8k("train", instruction=rewards.ANSWER_INSTRUCTION)
    test = data.gsm8k("test")
  assert [e.answer for e in train] == ["7", "2400"]
  assert train[0].question == ("Tom has 3 apples and buys 4. How many? "
                               + rewards.ANSWER_INSTRUCTION)
  assert test == [data.Example("What is 2 * 21?", "42", 0)]
  assert [e.index for e in train] == [0, 1]  # the record index


def test_gsm8k_default_mock_data():
  tfds = pytest.importorskip("tensorflow_datasets")
  with tfds.testing.mock_data(num_examples=6):
    examples = data.gsm8k("train")
  assert len(examples) == 6
  assert all(isinstance(e.question, str) and isinstance(e.answer, str)
             for e in examples)


def test_format_prompt_uses_chat_template():
  tokenizer = testing.tiny_tokenizer()
  assert data.format_prompt(tokenizer, "What is 1 + 2?") == (
      "user: What is 1 + 2?\nassistant: ")
  assert data.format_prompt(tokenizer, "Hi", system_prompt="Be brief.") == (
      "system: Be brief.\nuser: Hi\nassistant: ")


def test_format_prompt_without_template_raises():
  tokenizer = testing.tiny_tokenizer()
  tokenizer.chat_template = None
  with pytest.raises(ValueError, match="chat_template"):
    data.format_prompt(tokenizer, "q")


@pytest.mark.real_model
def test_format_prompt_with_smollm2_tokenizer():
  from grpo_jax.models import loading  # pylint: disable=g-import-not-at-top
  path = loading.embedded_model_path("smollm2-135m-instruct")
  tokenizer = loading.load_tokenizer(path.parent, gguf_file=path.name)
  question = arithmetic.ArithmeticTask().heldout(1)[0].question
  text = data.format_prompt(tokenizer, question,
                            system_prompt=data.SYSTEM_PROMPT)
  assert text == (f"<|im_start|>system\n{data.SYSTEM_PROMPT}<|im_end|>\n"
                  f"<|im_start|>user\n{question}<|im_end|>\n"
                  "<|im_start|>assistant\n")
