"""Data sources beyond the embedded tasks, all offline: Hugging Face
datasets (data.task='hf': local files, save_to_disk directories, a hub id
that is not cached), reasoning_gym's generators with their own scorers
(data.task='reasoning_gym' and the 'reasoning_gym' reward), and GSM8K's
errors (what failed to import; unprepared data, never downloaded)."""

import csv
import json
import os
import subprocess
import sys
import time

import pytest

from configs import grpo as grpo_config
from configs import reasoning_gym as gym_configs
from grpo_jax import data
from grpo_jax import evaluation
from grpo_jax import rewards
from grpo_jax import train as train_lib
from grpo_jax.runtime import metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ------------------------------------------------------------------ hf

ROWS = [{"problem": f"What is {i} + 2?", "solution": i + 2} for i in range(30)]


def hf_config(path, **fields):
  config = grpo_config.get_config("tiny")
  config.data.task, config.data.path = "hf", str(path)
  config.data.question_key, config.data.answer_key = "problem", "solution"
  config.data.update(fields)
  return config


def pairs(examples):
  return sorted((e.question, e.answer) for e in examples)


def expected_pairs(rows):
  return sorted((r["problem"], str(r["solution"])) for r in rows)


def test_hf_reads_a_save_to_disk_directory_by_split(tmp_path):
  datasets = pytest.importorskip("datasets")
  test_rows = [{"problem": "What is 40 + 2?", "solution": 42},
               {"problem": "What is 7 * 6?", "solution": 42}]
  datasets.DatasetDict({
      "train": datasets.Dataset.from_list(ROWS),
      "test": datasets.Dataset.from_list(test_rows),
  }).save_to_disk(str(tmp_path / "saved"))
  config = hf_config(tmp_path / "saved", heldout_split="test")
  task = data.make_task(config.data, seed=0)
  train = task.train(0, len(ROWS))  # one epoch: every training row once
  assert pairs(train) == expected_pairs(ROWS)
  assert task.heldout(2) == [data.Example("What is 40 + 2?", "42", 0),
                             data.Example("What is 7 * 6?", "42", 1)]
  # Ids are the rows' indices in their split.
  assert sorted(e.index for e in train) == list(range(len(ROWS)))
  assert task.example(5).question == ROWS[5]["problem"]
  config.data.split = "validation"
  with pytest.raises(ValueError, match=r"data.split='validation' is not a "
                     r"split of .*\['test', 'train'\]"):
    data.make_task(config.data, seed=0)


def write_rows(path, rows):
  """`rows` as a data file of `path`'s format, written without datasets."""
  kind = path.suffix
  if kind == ".jsonl":
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  elif kind == ".json":
    path.write_text(json.dumps(rows))
  elif kind == ".csv":
    with open(path, "w", newline="") as f:
      writer = csv.DictWriter(f, fieldnames=list(rows[0]))
      writer.writeheader()
      writer.writerows(rows)
  else:
    import pyarrow as pa  # pylint: disable=g-import-not-at-top
    import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
    pq.write_table(pa.Table.from_pylist(rows), str(path))


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.json", "rows.csv",
                                  "rows.parquet"])
def test_hf_reads_a_local_file_and_holds_out_a_hash_split(tmp_path, name):
  pytest.importorskip("datasets")
  path = tmp_path / name
  write_rows(path, ROWS)
  config = hf_config(path, heldout_fraction=0.3)
  task = data.make_task(config.data, seed=0)
  train = task.train(0, task.num_problems)
  heldout = task.heldout(len(task.heldout_examples))
  assert 0 < len(heldout) < len(ROWS)
  assert pairs(train + heldout) == expected_pairs(ROWS)  # each row once
  assert not {e.question for e in train} & {e.question for e in heldout}


def test_hf_takes_a_slice_of_a_file(tmp_path):
  pytest.importorskip("datasets")
  path = tmp_path / "rows.jsonl"
  write_rows(path, ROWS)
  config = hf_config(path, split="train[:10]", heldout_split="train[10:14]")
  task = data.make_task(config.data, seed=0)
  assert pairs(task.train(0, 10)) == expected_pairs(ROWS[:10])
  assert pairs(task.heldout(4)) == expected_pairs(ROWS[10:14])


def test_hf_bad_column_and_path_name_the_field(tmp_path):
  pytest.importorskip("datasets")
  path = tmp_path / "rows.jsonl"
  write_rows(path, ROWS)
  with pytest.raises(ValueError, match=r"data.question_key='question' is "
                     r"not a column .*\['problem', 'solution'\]"):
    data.make_task(hf_config(path, question_key="question").data, seed=0)
  with pytest.raises(ValueError, match=r"config.data.path: is empty but "
                     r"data.task='hf'"):
    train_lib.validate(hf_config(""))
  (tmp_path / "rows.txt").write_text("x")
  with pytest.raises(ValueError, match=r"\.txt is not a data file format"):
    data.make_task(hf_config(tmp_path / "rows.txt").data, seed=0)


def test_hf_hub_id_not_in_the_offline_cache_fails_fast_with_the_fix(
    tmp_path, monkeypatch):
  datasets = pytest.importorskip("datasets")
  import huggingface_hub.constants  # pylint: disable=g-import-not-at-top
  # HF_HUB_OFFLINE=1 as datasets and huggingface_hub read it at import,
  # and an empty cache.
  for module in (datasets.config, huggingface_hub.constants):
    monkeypatch.setattr(module, "HF_HUB_OFFLINE", True, raising=False)
  monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True,
                      raising=False)
  monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path)
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE",
                      str(tmp_path / "hub"))
  monkeypatch.chdir(tmp_path)  # no local directory of the id's name
  start = time.perf_counter()
  with pytest.raises(ValueError) as error:
    data.make_task(hf_config("someone/not-cached", subset="main").data,
                   seed=0)
  assert time.perf_counter() - start < 30
  message = str(error.value)
  assert "the hub dataset 'someone/not-cached'" in message
  assert "load_dataset('someone/not-cached', 'main')" in message
  assert "save_to_disk" in message


# -------------------------------------------------------- reasoning_gym


def gym_config(arg="tiny", **fields):
  config = gym_configs.get_config(arg)
  config.data.update(fields)
  return config


def library_problems(name, level, size):
  """reasoning_gym's own problem set of `name` at curriculum level `level`:
  the library's curriculum and factory, as its docs use them."""
  from reasoning_gym import factory  # pylint: disable=g-import-not-at-top
  curriculum = factory.create_curriculum(name)
  curriculum.set_global_level(level)
  config = curriculum.generate_configuration({"seed": 0, "size": size})
  return factory.DATASETS[name][0](config=config)


def test_gym_task_draws_the_generators_problems_and_holds_some_out():
  pytest.importorskip("reasoning_gym")
  names = ("leg_counting", "word_sorting")
  config = gym_config(generators=names, problems_per_generator=40)
  task = data.make_task(config.data, seed=0)
  library = {name: library_problems(name, 0, 40) for name in names}
  train = [e for step in range(5) for e in task.train(step, 8)]
  heldout = task.heldout(8)
  for example in train + heldout:
    g, j = divmod(example.index, 40)  # id = generator * size + index
    assert example.question == library[names[g]][j]["question"]
  assert {e.index // 40 for e in train} == {0, 1}  # both generators drawn
  assert not {e.question for e in train} & {e.question for e in heldout}
  assert len({e.question for e in heldout}) == 8
  assert task.train(3, 8) == task.train(3, 8)  # a function of (seed, step)
  other = data.make_task(config.data, seed=1)
  assert other.train(3, 8) != task.train(3, 8)
  assert other.heldout(8) == heldout  # the split is the seed's too
  held = {e.index for e in heldout}
  assert held.isdisjoint(task.train_indices())


def test_gym_difficulty_is_the_generators_curriculum_level():
  pytest.importorskip("reasoning_gym")
  # leg_counting's curriculum: animal kinds per problem at levels 1, 2,
  # 3, 4, ...; level L draws from 1 to L + 1 kinds.
  kinds = {}
  for level in (0, 3):
    task = data.make_task(gym_config(generators=("leg_counting",),
                                     difficulty=level,
                                     problems_per_generator=50).data, seed=0)
    kinds[level] = [len(library_problems("leg_counting", level, 50)[
        e.index]["metadata"]["animals"]) for e in task.train(0, 30)]
  assert set(kinds[0]) == {1}
  assert max(kinds[3]) <= 4 and max(kinds[3]) > 1


def test_the_gym_reward_is_the_generators_own_score():
  pytest.importorskip("reasoning_gym")
  config = gym_config(generators=("leg_counting", "word_sorting"),
                      problems_per_generator=20)
  task = data.make_task(config.data, seed=0)
  legs = task.example(3)  # leg_counting's problem 3
  words = task.example(20 + 4)  # word_sorting's problem 4
  legs_entry = library_problems("leg_counting", 0, 20)[3]
  sorting = library_problems("word_sorting", 0, 20)
  words_entry = sorting[4]
  right = legs_entry["answer"]
  backwards = ", ".join(reversed(words_entry["metadata"]["sorted_words"]))
  completions = [f"So \\boxed{{{right}}}", f"\\boxed{{{int(right) + 1}}}",
                 right, f"\\boxed{{{backwards}}}",
                 f"\\boxed{{{words_entry['answer']}}}"]
  answers = [legs.answer] * 3 + [words.answer] * 2
  got = rewards.get("reasoning_gym")([""] * 5, completions, answers)
  partial = sorting.score_answer(backwards, words_entry)
  assert 0 < partial < 1  # word sorting's partial credit
  assert got == [1.0, 0.0, 0.0, partial, 1.0]  # no box: no answer
  result = rewards.score({"reasoning_gym": (rewards.get("reasoning_gym"),
                                            1.0)}, [""] * 5, completions,
                         answers)
  assert result.num_errors == {"reasoning_gym": 0}
  assert result.total.tolist() == pytest.approx(got)


def test_gym_references_are_judged_by_their_scorer_in_evaluation():
  pytest.importorskip("reasoning_gym")
  task = data.make_task(gym_config(generators=("leg_counting",)).data,
                        seed=0)
  problems = task.heldout(2)
  golds = evaluation.parse_references(problems, source="heldout")
  library = library_problems("leg_counting", 0, 1000)
  oracles = [library[p.index]["answer"] for p in problems]
  rights = [f"\\boxed{{{oracle}}}" for oracle in oracles]
  wrong = "\\boxed{-1}"
  scores = evaluation.score(golds, [rights[0], wrong],
                            [[rights[0], wrong], [rights[1], "no box"]])
  assert scores.greedy.tolist() == [True, False]
  assert scores.correct.tolist() == [[True, False], [True, False]]
  assert scores.answers == [[oracles[0], "-1"], [oracles[1], None]]


@pytest.mark.parametrize("fields,match", [
    (dict(generators=("no_such_generator",)),
     r"config.data.generators: generator 'no_such_generator' is not"),
    (dict(difficulty=-1), r"config.data.difficulty: difficulty must be an "
     r"integer >= 0"),
    (dict(difficulty=10_000), r"config.data.difficulty: difficulty=10000 is "
     r"above the highest"),
    (dict(problems_per_generator=0),
     r"config.data.problems_per_generator: problems_per_generator must be"),
])
def test_gym_options_name_the_field(fields, match):
  pytest.importorskip("reasoning_gym")
  with pytest.raises(ValueError, match=match):
    train_lib.validate(gym_config(**fields))


def test_the_gym_reward_and_task_come_together():
  pytest.importorskip("reasoning_gym")
  arithmetic = grpo_config.get_config("tiny")
  arithmetic.rewards.functions = ("reasoning_gym",)
  arithmetic.rewards.weights = (1.0,)
  with pytest.raises(ValueError, match=r"config.rewards.functions: "
                     r"'reasoning_gym' scores data.task='reasoning_gym'"):
    train_lib.validate(arithmetic)
  config = gym_config()
  config.rewards.functions = ("accuracy", "format")
  with pytest.raises(ValueError, match=r"config.rewards.functions: .*"
                     r"'accuracy' reads each answer as math"):
    train_lib.validate(config)


def test_the_reasoning_gym_config_trains_a_tiny_step(tmp_path):
  pytest.importorskip("reasoning_gym")
  workdir = tmp_path / "rg"
  env = dict(os.environ, JAX_DISABLE_MOST_OPTIMIZATIONS="true",
             PYTHONPATH=ROOT)
  result = subprocess.run(
      [sys.executable, "-m", "experiments.train",
       "--config=configs/reasoning_gym.py:tiny", f"--workdir={workdir}",
       "--config.train.num_steps=1"], cwd=ROOT, env=env, capture_output=True,
      text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-4000:]
  records = metrics.read(str(workdir / metrics.METRICS_FILE))
  assert [r["step"] for r in records] == [0]
  assert 0.0 <= records[0]["reward/reasoning_gym"] <= 1.0
  assert records[0]["reward_errors/reasoning_gym"] == 0


# --------------------------------------------------------------- GSM8K


def test_gsm8k_names_the_module_that_failed_to_import(monkeypatch):
  tfds = pytest.importorskip("tensorflow_datasets")

  def missing_dependency(*args, **kwargs):
    # What tfds 4.9 raises where importlib_resources is not installed.
    raise ModuleNotFoundError("No module named 'importlib_resources'",
                              name="importlib_resources")
  monkeypatch.setattr(tfds, "data_source", missing_dependency)
  with pytest.raises(ValueError) as error:
    evaluation.load_benchmark("gsm8k", grpo_config.get_config("tiny"))
  message = str(error.value)
  assert "No module named 'importlib_resources'" in message
  assert "pip install importlib-resources" in message
  assert "pip install tensorflow-datasets" not in message


def test_gsm8k_without_tfds_says_to_install_it(monkeypatch):
  monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
  with pytest.raises(ValueError, match="pip install tensorflow-datasets"):
    evaluation.load_benchmark("gsm8k", grpo_config.get_config("tiny"))


def test_gsm8k_unprepared_fails_fast_and_never_downloads(tmp_path,
                                                         monkeypatch):
  pytest.importorskip("tensorflow_datasets")
  from tensorflow_datasets.core import dataset_builder  # pylint: disable=g-import-not-at-top

  def no_download(*args, **kwargs):
    raise AssertionError("download_and_prepare was called")
  monkeypatch.setattr(dataset_builder.DatasetBuilder, "download_and_prepare",
                      no_download)
  start = time.perf_counter()
  with pytest.raises(ValueError) as error:
    evaluation.load_benchmark("gsm8k", grpo_config.get_config("tiny"),
                              data_dir=str(tmp_path))
  assert time.perf_counter() - start < 30
  message = str(error.value)
  assert f"GSM8K is not prepared in {tmp_path}" in message
  assert f"tfds.data_source('gsm8k', data_dir='{tmp_path}')" in message
