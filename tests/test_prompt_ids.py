"""Prompt ids (`grpo_jax.data.prompt_ids`): every task's stable example ids, the
two ways a per-prompt table takes them (exact, hash), and the build-time
checks of tables, repeated ids and draws without replacement on every task.
Expected values are worked by hand."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from configs import hapo_length as hapo_config
from configs import knapsack_rl as knapsack_config
from configs import spo as spo_config
from grpo_jax import advantages
from grpo_jax import config as config_lib
from grpo_jax import train as train_lib
from grpo_jax import data
from grpo_jax import groups as groups_lib
from grpo_jax.data import prompt_ids
from grpo_jax.rollout import revisits
from grpo_jax import rewards
from grpo_jax.strategies import select


def test_slots_by_hand_in_both_modes():
  ids = [-1, 0, 3, 5, 12]
  slot, tracked = prompt_ids.slots(ids, 5, "exact")
  assert slot.tolist() == [0, 0, 3, 0, 0]
  assert tracked.tolist() == [False, True, True, False, False]
  slot, tracked = prompt_ids.slots(ids, 5, "hash")  # id mod 5
  assert slot.tolist() == [0, 0, 3, 0, 2]
  assert tracked.tolist() == [False, True, True, True, True]
  slot, tracked = prompt_ids.slots(jnp.asarray(ids), 5, "hash", xp=jnp)
  assert np.asarray(slot).tolist() == [0, 0, 3, 0, 2]
  with pytest.raises(ValueError, match="prompt_ids='modulo'"):
    prompt_ids.slots(ids, 5, "modulo")


def test_record_ids_are_id_fields_else_record_indices():
  assert prompt_ids.record_ids([{"id": 7}, {"id": "3"}]) == [7, 3]
  assert prompt_ids.record_ids([{"q": 1}, {}]) == [0, 1]  # no id field
  # An id that is not an integer >= 0, or one missing beside others, is an
  # error naming the source, the line and the field: never a silent
  # renumbering.
  for other, problem in (({"id": "a-1"}, "'id' is 'a-1', not an integer"),
                         ({"id": 3.5}, "'id' is 3.5, not an integer"),
                         ({"id": True}, "'id' is True, not an integer"),
                         ({"id": -2}, "'id' is -2, not an integer"),
                         ({"id": None}, "'id' is None, not an integer"),
                         ({"id": "\u00b3"}, "'id' is '\u00b3', not"),
                         ({}, "has no 'id' field, but the record on line 4")):
    with pytest.raises(ValueError, match=(
        "f.jsonl:9: " + problem + ".*integer 'id' >= 0, or drop")):
      prompt_ids.record_ids([{"id": 7}, other], source="f.jsonl",
                            lines=[4, 9])
  assert prompt_ids.duplicates([4, 1, 4, 2, 1]) == (1, 4)


def test_a_non_integer_jsonl_id_fails_before_any_compute(tmp_path):
  """At validation where a stage keys state on the ids (SPO), else at
  `check_files` (train.build, before the model loads): the file, the line
  and the field, and the fix."""
  records = [{"id": i, "question": f"q{i}", "answer": str(i)}
             for i in range(10)]
  records[6]["id"] = 3.5
  path = _write(tmp_path, records)
  config = _spo_on(spo_config.get_config(), path)
  match = (r"config\.data\.path: .*p\.jsonl:7: 'id' is 3\.5, not an integer "
           r">= 0.*drop \(or rename\) the 'id' field")
  with pytest.raises(ValueError, match=match):
    train_lib.validate(config)
  plain = config_lib.get_base_config()  # GRPO keys nothing on the ids
  plain.data.task, plain.data.path = "jsonl", path
  train_lib.validate(plain)  # (a config can be planned without its files)
  with pytest.raises(ValueError, match=match):
    config_lib.check_files(plain)


@pytest.mark.parametrize("table", ["spo", "spo_hash", "hapo_length",
                                   "knapsack"])
def test_a_table_of_zero_slots_names_its_capacity_field(table):
  """capacity=0 (or a bool) fails at validation naming the table's full
  field, exact or hashed, whichever stage keeps it."""
  if table.startswith("spo"):
    config, field = spo_config.get_config(), "advantage.kwargs.capacity"
    config.select.name, config.select.kwargs = "uniform", {}  # no draw
    config.advantage.kwargs = dict(
        capacity=0, **(dict(prompt_ids="hash") if table == "spo_hash"
                       else {}))
  elif table == "hapo_length":
    config = hapo_config.get_config()
    field = "rewards.shapers.hapo_length.capacity"
    config.rewards.shapers.hapo_length.capacity = 0
  else:
    config = knapsack_config.get_config()
    field = "budget.kwargs.capacity"
    config.budget.kwargs = dict(config.budget.kwargs, capacity=0,
                                prompt_ids="hash")
  with pytest.raises(ValueError, match=(
      r"config\." + field.replace(".", r"\.") + r": capacity=0 must be an "
      r"integer >= 1.*prompt_ids='hash'")):
    train_lib.validate(config)


def _write(tmp_path, records, name="p.jsonl"):
  path = tmp_path / name
  path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
  return str(path)


def test_a_jsonl_task_keeps_the_files_ids_through_the_split(tmp_path):
  path = _write(tmp_path, [{"id": 100 + 3 * i, "question": f"q{i}",
                            "answer": str(i)} for i in range(30)])
  examples = data.jsonl(path)
  assert [e.index for e in examples] == [100 + 3 * i for i in range(30)]
  task = data.ListDataset(*data.split_heldout(examples, fraction=0.3))
  train_ids = sorted(e.index for e in task.train_examples)
  assert task.train_indices().tolist() == train_ids
  x = train_ids[1]
  assert task.example(x).question == f"q{(x - 100) // 3}"
  with pytest.raises(ValueError, match="not the id of a training example"):
    task.example(101)
  # A list without ids is numbered by position, as before.
  plain = data.ListDataset([data.Example("a", "1"), data.Example("b", "2")])
  assert [e.index for e in plain.train_examples] == [0, 1]


def _spo_on(config, path):
  config.data.task, config.data.path = "jsonl", path
  config.data.heldout_fraction = 0.2
  return config


def test_an_exact_table_past_the_ids_fails_at_build_naming_its_field(
    tmp_path):
  """Ids up to 2999 against SPO's 300 slots: exact fails before any
  compute, naming the capacity, the ids and both fixes; hash builds."""
  path = _write(tmp_path, [{"id": 100 * i, "question": f"q{i}",
                            "answer": str(i)} for i in range(30)])
  config = _spo_on(spo_config.get_config(), path)
  with pytest.raises(ValueError, match=(
      r"config\.advantage\.kwargs\.capacity: 300 slots cannot hold the \d+ "
      r"problems of data\.path=.*'spo'.*prompt_ids='exact'.*capacity=\d+ or "
      r"more, or --config\.advantage\.kwargs\.prompt_ids=hash")):
    train_lib.validate(config)
  config.advantage.kwargs.prompt_ids = "hash"
  config.advantage.kwargs.rho = "constant"  # hashed: no stored responses
  train_lib.validate(config)


def test_gsm8k_exceeds_the_default_tables_unless_they_hash():
  """GSM8K's 7473 training problems (known without loading it) against
  hapo_length's default 1024 slots, and SPO's."""
  config = hapo_config.get_config()
  config.data.task = "gsm8k"
  config.rewards.shapers.hapo_length = dict(weight=1.0)  # 1024 slots
  with pytest.raises(ValueError, match=(
      r"config\.rewards\.shapers\.hapo_length\.capacity: 1024 slots cannot "
      r"hold the 7473 problems of data\.task='gsm8k'")):
    train_lib.validate(config)
  config.rewards.shapers.hapo_length.prompt_ids = "hash"
  train_lib.validate(config)
  config = spo_config.get_config()
  config.data.task = "gsm8k"
  with pytest.raises(ValueError, match=r"advantage\.kwargs\.capacity: 300 "
                     r"slots.*7473 problems"):
    train_lib.validate(config)


def test_repeated_ids_fail_where_a_stage_keys_on_them(tmp_path):
  path = _write(tmp_path, [{"id": i % 10, "question": f"q{i}",
                            "answer": str(i)} for i in range(40)])
  config = _spo_on(spo_config.get_config(), path)
  config.advantage.kwargs.prompt_ids = "hash"
  config.advantage.kwargs.rho = "constant"
  with pytest.raises(ValueError, match=(
      r"config\.data\.path: .*p\.jsonl repeats the 'id' field.*estimator "
      r"'spo', select 'prioritized'.*distinct 'id'.*drop the field")):
    train_lib.validate(config)
  plain = config_lib.get_base_config()  # GRPO keys nothing on the ids
  plain.data.task, plain.data.path = "jsonl", path
  train_lib.validate(plain)


def test_a_draw_without_replacement_is_checked_on_every_task(tmp_path):
  path = _write(tmp_path, [{"question": f"q{i}", "answer": str(i)}
                           for i in range(10)])
  config = _spo_on(spo_config.get_config(), path)
  config.rollout.num_prompts = 12
  config.train.num_minibatches = 1
  with pytest.raises(ValueError, match=(
      r"config\.rollout\.num_prompts: 12 exceeds the \d training problems "
      r"'prioritized' draws from without replacement \(data\.path=")):
    train_lib.validate(config)
  config = spo_config.get_config()
  config.data.task = "gsm8k"
  config.advantage.kwargs.prompt_ids = "hash"
  config.advantage.kwargs.rho = "constant"
  config.rollout.num_prompts = 7480
  config.train.num_minibatches = 1
  with pytest.raises(ValueError, match=r"num_prompts: 7480 exceeds the 7473"):
    train_lib.validate(config)


def test_spo_hashes_ids_into_its_tracker_by_hand():
  """Capacity 5, ids 2 and 7 share slot 2 (hash): G = 2, rewards (1, 1)
  and (0, 1), rho = 0.5 (one decay per slot): alpha = 0.5 x 0.5 + (2 + 1)
  = 3.25, beta = 0.25 + (0 + 1) = 1.25; exact leaves id 7 untracked:
  alpha = 0.25 + 2, beta = 0.25 + 0."""
  rewards_ = jnp.asarray([[1.0, 1.0], [0.0, 1.0]])
  for mode, alpha, beta in (("hash", 3.25, 1.25), ("exact", 2.25, 0.25)):
    est = advantages.make("spo", capacity=5, rho_value=0.5, prompt_ids=mode)
    _, state = est.estimate(est.init(), groups_lib.from_rewards(
        rewards_, prompt_index=jnp.asarray([2, 7])))
    assert float(state.alpha[2]) == pytest.approx(alpha)
    assert float(state.beta[2]) == pytest.approx(beta)
    assert np.asarray(state.alpha)[[0, 1, 3, 4]].tolist() == [0.5] * 4


def test_hapo_length_hashes_ids_into_its_history_by_hand():
  """Capacity 3: ids 1 and 4 share slot 1 under hash (the shortest
  correct of both, 5); exact tracks id 1 alone (9)."""
  lengths = np.asarray([9, 5, 2])
  correct, ids = np.asarray([1.0, 1.0, 0.0]), np.asarray([1, 4, 4])
  for mode, h in (("hash", 5.0), ("exact", 9.0)):
    shaper = rewards.make_shaper("hapo_length", capacity=3, prompt_ids=mode)
    state = shaper.update(shaper.init(), lengths, correct=correct,
                          prompt_index=ids)
    assert np.asarray(state.history).tolist() == [0.0, h, 0.0]


def test_revisits_and_the_prioritised_draw_take_hashed_slots():
  memory = revisits.init(capacity=3, num_tokens=2)
  assert revisits.slots(memory, [0, 4, -1, 7]).tolist() == [0, -1, -1, -1]
  assert revisits.slots(memory, [0, 4, -1, 7], "hash").tolist() == [
      0, 1, -1, 1]
  # Ids 0..3 on a table of 2: ids 1 and 3 (slot 1) weigh 0, so only 0 and
  # 2 are ever drawn.
  task = data.ListDataset([data.Example(f"q{i}", str(i), i)
                           for i in range(4)])
  drawn = {e.index for s in range(50)
           for e in select.draw_by_priority(task, s, 2, [1.0, 0.0])}
  assert drawn == {0, 2}


def test_hashed_ids_are_refused_where_spo_rescores_stored_responses():
  """The revisit memory keeps one response per slot: with hashed ids two
  prompts could share one, and SPO's KL-adaptive D would rescore another
  prompt's response. Refused at validation naming the option, and by the
  memory itself."""
  config = spo_config.get_config()
  config.advantage.kwargs = dict(capacity=8, prompt_ids="hash",
                                 rho="kl_adaptive")
  with pytest.raises(ValueError, match=r"config\.advantage\.kwargs\."
                     r"prompt_ids: 'hash'.*set prompt_ids='exact'"):
    train_lib.validate(config)
  config.advantage.kwargs = dict(capacity=8, prompt_ids="hash")
  train_lib.validate(config)  # constant rho: no stored responses
  with pytest.raises(ValueError, match="prompt_ids='hash'"):
    revisits.make(capacity=4, num_tokens=2, prompt_ids="hash")
