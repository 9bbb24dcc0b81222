"""Evaluation: pass@k and maj@k by hand, benchmarks (held-out, GSM8K through
tfds's mock data, JSONL files), errors before any model loads, the sampler
layout (one greedy row per prompt, one compile per problem set), the CLI."""

import itertools
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from configs import grpo as grpo_config
from grpo_jax import data
from grpo_jax import evaluation
from grpo_jax.runtime import metrics
from grpo_jax import models
from grpo_jax import sampling
from grpo_jax.rewards import verifiers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_config():
  return grpo_config.get_config("tiny")


def write_jsonl(path, records):
  path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
  return str(path)


# ------------------------------------------------------------ pass@k


@pytest.mark.parametrize("n,c,k,expected", [
    (5, 2, 2, 1 - 3 / 10),      # 1 - C(3,2)/C(5,2)
    (10, 3, 4, 1 - 35 / 210),   # 1 - C(7,4)/C(10,4)
    (4, 1, 1, 1 / 4),           # k = 1 is c / n
    (4, 0, 4, 0.0),             # nothing correct
    (4, 3, 2, 1.0),             # n - c < k: every pair holds a correct one
    (3, 1, 3, 1.0),             # k = n: "any correct"
])
def test_pass_at_k_by_hand(n, c, k, expected):
  assert float(evaluation.pass_at_k(n, c, k)) == pytest.approx(expected,
                                                               abs=1e-12)


def test_pass_at_k_is_the_share_of_k_subsets_holding_a_correct_sample():
  """The definition, by enumerating every k-subset of n samples."""
  for n, c, k in [(6, 2, 3), (7, 3, 2), (8, 1, 5), (5, 0, 2)]:
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    expected = sum(any(s) for s in subsets) / len(subsets)
    assert float(evaluation.pass_at_k(n, c, k)) == pytest.approx(expected)


def test_pass_at_k_broadcasts_over_problems():
  # n = 4, k = 2: C(4 - c, 2) = 6, 3, 1, 0, 0 over C(4, 2) = 6.
  got = evaluation.pass_at_k(4, np.arange(5), 2)
  np.testing.assert_allclose(got, [0.0, 0.5, 5 / 6, 1.0, 1.0])


@pytest.mark.parametrize("n,c,k,match", [
    (3, 1, 4, "num_samples must be >= k=4"),
    (3, 1, 0, "k must be an integer >= 1"),
    (3, 4, 2, r"num_correct must be in \[0, num_samples\]"),
])
def test_pass_at_k_rejects_bad_counts(n, c, k, match):
  with pytest.raises(ValueError, match=match):
    evaluation.pass_at_k(n, c, k)


def test_check_k_names_k_and_num_samples():
  assert evaluation.check_k([4, 1, 4], 4) == (1, 4)
  with pytest.raises(ValueError, match="k=8 exceeds num_samples=4"):
    evaluation.check_k([1, 8], 4)
  with pytest.raises(ValueError, match="k=0 is below 1"):
    evaluation.check_k([0], 4)


# ----------------------------------------------------------- majority


@pytest.mark.parametrize("answers,expected", [
    (["3", "5", "3"], 0),
    (["5", "3", "3"], 1),        # the index of the class's first member
    (["a", "b"], 0),             # a tie: the class seen first
    (["a", "b", "b", "a"], 0),
    ([None, "b", None], 1),      # no answer does not vote
    ([None, None], None),
    ([], None),
])
def test_majority_vote_by_hand(answers, expected):
  assert evaluation.majority_vote(answers) == expected


def test_majority_vote_groups_equivalent_parsed_answers():
  texts = ["\\boxed{2}", "so \\boxed{0.5}", "\\boxed{\\frac{1}{2}}", "none"]
  answers = [verifiers.parse_answer(t) or None for t in texts]
  assert answers[3] is None
  # 0.5 and 1/2 are one class of two: it beats 2, and starts at index 1.
  assert evaluation.majority_vote(answers, same=verifiers.same_answer) == 1


def test_majority_correct_votes_in_disjoint_blocks():
  # One problem, answer "a"; samples a, b, b, b.
  correct = np.array([[True, False, False, False]])
  answers = [["a", "b", "b", "b"]]
  got = lambda k: float(evaluation.majority_correct(correct, answers, k)[0])
  assert got(1) == 0.25  # each sample votes alone: pass@1
  assert got(2) == 0.5   # blocks (a, b): tie -> a, right; (b, b) -> wrong
  assert got(3) == 0.0   # one block (a, b, b) -> b; the 4th sample unused
  assert got(4) == 0.0
  with pytest.raises(ValueError, match=r"k must be in \[1, n=4\]"):
    evaluation.majority_correct(correct, answers, 5)


def test_majority_correct_without_any_answer_is_wrong():
  got = evaluation.majority_correct(np.array([[False, False]]), [[None, None]],
                                    2)
  assert got.tolist() == [0.0]


def test_summarize_by_hand():
  scores = evaluation.Scores(
      greedy=np.array([True, False]),
      correct=np.array([[True, False, True, False], [False, False, False,
                                                     True]]),
      answers=[["8", "7", "8", "7"], ["1", "1", None, "3"]])
  got = evaluation.summarize(scores, [1, 2], same=lambda a, b: a == b)
  assert got == pytest.approx({
      "greedy_accuracy": 0.5,
      # c = 2 and 1 of n = 4.
      "pass@1": (2 / 4 + 1 / 4) / 2,
      "pass@2": ((1 - 1 / 6) + (1 - 3 / 6)) / 2,
      "maj@1": (2 / 4 + 1 / 4) / 2,
      # Problem 0: (8, 7) -> 8 right, (8, 7) -> 8 right; problem 1: (1, 1)
      # -> 1 wrong, (None, 3) -> 3 right.
      "maj@2": (1.0 + 0.5) / 2,
  })


# --------------------------------------------------------- benchmarks


def test_heldout_benchmark_is_the_tasks_heldout_split():
  config = tiny_config()
  expected = data.make_task(config.data, seed=0).heldout(3)
  assert evaluation.load_benchmark("heldout", config,
                                   num_problems=3) == expected
  assert len(evaluation.load_benchmark("heldout", config)) == (
      config.data.heldout_size)
  with pytest.raises(ValueError, match="held-out split of data.task"):
    evaluation.load_benchmark("heldout", config, num_problems=10_000)


def test_math500_style_file_reads_problem_and_answer(tmp_path):
  path = write_jsonl(tmp_path / "math500.jsonl", [
      {"problem": "Simplify $\\sqrt{200}$.", "solution": "... $\\boxed{10"
       "\\sqrt{2}}$.", "answer": "10\\sqrt{2}", "level": 3},
      {"problem": "Find $p$.", "solution": "So $\\boxed{p - q}$.",
       "answer": "p - q"}])
  got = evaluation.load_benchmark(path, tiny_config())
  # "answer" comes before "solution" when both are there.
  assert got == [data.Example("Simplify $\\sqrt{200}$.", "10\\sqrt{2}", 0),
                 data.Example("Find $p$.", "p - q", 1)]
  golds = evaluation.parse_references(got, source="math500")
  assert verifiers.matches_reference(
      verifiers.parse_answer("\\boxed{10\\sqrt{2}}"), golds[0])
  # 10 alone is not 10 sqrt(2) (a bare parse of the reference reads 10).
  assert not verifiers.matches_reference(verifiers.parse_answer("\\boxed{10}"),
                                         golds[0])


def test_aime_style_file_with_capitalised_fields_and_integer_answers(
    tmp_path):
  path = write_jsonl(tmp_path / "aime.jsonl", [
      {"ID": "2024-I-1", "Problem": "Find m+n.", "Answer": 204},
      {"ID": "2024-I-2", "Problem": "Find x.", "Answer": 25}])
  got = evaluation.load_benchmark(path, tiny_config(), num_problems=1)
  # "ID" is not an integer "id" field: the record index is the id.
  assert got == [data.Example("Find m+n.", "204", 0)]
  # Nor is a string "id": a benchmark's problems are numbered by order
  # (a training file's would be refused, `prompt_ids.record_ids`).
  path = write_jsonl(tmp_path / "ids.jsonl", [
      {"id": "2024-I-1", "Problem": "Find m+n.", "Answer": 204}])
  assert evaluation.load_benchmark(path, tiny_config()) == [
      data.Example("Find m+n.", "204", 0)]


def test_solution_only_file_takes_the_boxed_answer(tmp_path):
  path = write_jsonl(tmp_path / "s.jsonl", [
      {"question": "What is 6*7?", "solution": "6*7 = 42, so $\\boxed{42}$."}])
  examples = evaluation.load_benchmark(path, tiny_config())
  gold, = evaluation.parse_references(examples, source="s")
  assert verifiers.matches_reference(verifiers.parse_answer("\\boxed{42}"),
                                     gold)
  assert not verifiers.matches_reference(verifiers.parse_answer("\\boxed{7}"),
                                         gold)


def test_explicit_field_names(tmp_path):
  path = write_jsonl(tmp_path / "x.jsonl", [{"q": "1+1?", "a": "2"}])
  got = evaluation.load_benchmark(path, tiny_config(), question_key="q",
                                  answer_key="a")
  assert got == [data.Example("1+1?", "2", 0)]


@pytest.mark.parametrize("records,kwargs,match", [
    ([{"problem": "x"}], {}, r"x\.jsonl:1: missing key 'answer' or "
     r"'solution' \(keys: \['problem'\]\); set answer_key="),
    ([{"text": "x", "answer": 1}], {}, r"missing key 'question' or 'problem'"),
    ([{"problem": "x", "answer": "1"}], {"question_key": "q"},
     r"missing key 'q'"),
    ([{"problem": "x", "answer": None}], {}, r"missing key 'answer'"),
    ([{"problem": "x", "answer": "1"}], {"num_problems": 2},
     r"num_problems=2 but benchmark .* holds 1 problems"),
])
def test_a_file_without_the_needed_fields_names_them(tmp_path, records, kwargs,
                                                     match):
  path = write_jsonl(tmp_path / "x.jsonl", records)
  with pytest.raises(ValueError, match=match):
    evaluation.load_benchmark(path, tiny_config(), **kwargs)


def test_a_missing_file_or_unknown_name_is_named(tmp_path):
  with pytest.raises(ValueError, match="'nope.jsonl' is not 'heldout' or "
                     "'gsm8k' and no such file exists"):
    evaluation.load_benchmark("nope.jsonl", tiny_config())


def test_an_unparsable_reference_names_the_problem():
  examples = [data.Example("Q0", "8"), data.Example("Q1", "no number here")]
  with pytest.raises(ValueError, match="bench: problem 1 .*'no number here'"):
    evaluation.parse_references(examples, source="bench")


def _gsm8k_records(builder, split, **kwargs):
  del builder, kwargs
  rows = {"train": [("Tom has 3 apples and buys 4. How many?", "7")],
          "test": [("What is 2 * 21?", "42"),
                   ("Sam earns $1,200 a week. How much in 2 weeks?",
                    "2,400")]}[split]
  return [{"question": q.encode(), "answer": f"So.\n#### {a}".encode(),
           "short_answer": a.encode()} for q, a in rows]


def test_gsm8k_benchmark_is_the_test_split_through_tfds():
  tfds = pytest.importorskip("tensorflow_datasets")
  with tfds.testing.mock_data(as_data_source_fn=_gsm8k_records):
    got = evaluation.load_benchmark("gsm8k", tiny_config())
    first = evaluation.load_benchmark("gsm8k", tiny_config(), num_problems=1)
  assert got == [data.Example("What is 2 * 21?", "42", 0),
                 data.Example("Sam earns $1,200 a week. How much in 2 weeks?",
                              "2400", 1)]
  assert first == got[:1]


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_samples=2, k=(1, 4)), "k=4 exceeds num_samples=2"),
    (dict(benchmark="missing.jsonl"), "no such file exists"),
    (dict(benchmark="FIELDLESS"), "missing key 'question' or 'problem'"),
    (dict(benchmark="UNPARSABLE"), "problem 0 .* no parsable answer"),
    (dict(batch_size=-1), "batch_size must be >= 1"),
])
def test_bad_input_fails_before_the_model_loads(tmp_path, monkeypatch, kwargs,
                                                match):
  def no_model(*args, **kw):
    raise AssertionError("the model was loaded before the input was checked")
  monkeypatch.setattr(models, "load_model", no_model)
  files = {"FIELDLESS": [{"text": "x", "answer": "1"}],
           "UNPARSABLE": [{"question": "x", "answer": "no number here"}]}
  if kwargs.get("benchmark") in files:
    kwargs["benchmark"] = write_jsonl(tmp_path / "b.jsonl",
                                      files[kwargs["benchmark"]])
  with pytest.raises(ValueError, match=match):
    evaluation.evaluate(tiny_config(), load_policy=no_model, **kwargs)


def test_num_samples_defaults_to_the_largest_k(monkeypatch):
  seen = {}

  def fake(params, model_config, tokenizer, examples, key, *, num_samples, k,
           sampling, golds):
    seen.update(num_samples=num_samples, k=k, batch=sampling.batch_size)
    return {}
  monkeypatch.setattr(evaluation, "evaluate_examples", fake)
  got = evaluation.evaluate(tiny_config(), k=(1, 4),
                            load_policy=lambda: (None, None, None, 0))
  assert seen == {"num_samples": 4, "k": (1, 4), "batch": 64}
  assert got["num_samples"] == 4 and got["k"] == [1, 4]


# ------------------------------------------------------------ sampling


@pytest.fixture(scope="module")
def tiny_model():
  return models.load_model("tiny", seed=0)


def test_each_prompt_gets_one_greedy_row_then_its_samples(tiny_model):
  model_config, params, tokenizer = tiny_model
  config = tiny_config()
  examples = data.make_task(config.data, seed=0).heldout(3)
  settings = evaluation.Sampling.from_rollout(config, batch_size=2)
  key = jax.random.PRNGKey(3)
  before = sampling.trace_count()
  greedy, sampled = evaluation.complete(
      params, model_config, tokenizer, examples, key, num_samples=3,
      sampling=settings)
  # Two calls (2 prompts, then 1 filled up to 2) of one shape: one trace.
  assert sampling.trace_count() - before <= 1
  assert len(greedy) == 3 and [len(s) for s in sampled] == [3, 3, 3]
  # The greedy row is plain greedy decoding of the same prompt.
  only_greedy, none = evaluation.complete(
      params, model_config, tokenizer, examples, key, num_samples=0,
      sampling=settings)
  assert only_greedy == greedy and none == [[], [], []]
  # The sampled rows are samples: a random model's differ.
  assert len({t for s in sampled for t in s}) > 1
  again = sampling.trace_count()
  evaluation.complete(params, model_config, tokenizer, examples,
                      jax.random.PRNGKey(4), num_samples=3, sampling=settings)
  assert sampling.trace_count() == again  # a new key or params: no retrace


def test_scores_and_figures_of_known_completions(monkeypatch):
  examples = [data.Example("What is 3 + 5?", "8"),
              data.Example("What is 1 + 2?", "3")]
  greedy = ["\\boxed{8}", "I think 4"]
  sampled = [["\\boxed{8}", "\\boxed{9}", "8.0 is it: \\boxed{8}"],
             ["\\boxed{3 + 0}", "no idea", "\\boxed{4}"]]
  monkeypatch.setattr(evaluation, "complete",
                      lambda *a, **kw: (greedy, sampled))
  got = evaluation.evaluate_examples(
      None, None, None, examples, None, num_samples=3, k=(1, 3),
      sampling=None)
  # Problem 0: 2 of 3 right, majority 8 (right). Problem 1: "3 + 0" is
  # unevaluated arithmetic (wrong), no answer, 4: 0 right, majority (3 + 0,
  # 4 tie) -> 3 + 0, wrong.
  assert got == pytest.approx({"greedy_accuracy": 0.5,
                               "pass@1": (2 / 3 + 0) / 2,
                               "maj@1": (2 / 3 + 0) / 2,
                               "pass@3": 0.5, "maj@3": 0.5})


def test_a_multi_part_problem_is_right_when_every_box_is():
  # As the all_segments reward judges it; a whole-text parse reads the
  # reference "11; 5; 0" as 0 and three boxes as the set {0, 5, 11}.
  examples = [data.Example("(a) 6 + 5 (b) 2 + 3 (c) 0 + 0", "11; 5; 0")]
  gold, = evaluation.parse_references(examples, source="s", segmented=True)
  texts = {
      "(a) \\boxed{11} (b) \\boxed{5} (c) \\boxed{0}": True,
      "\\boxed{11}, \\boxed{5}, \\boxed{0}, \\boxed{7}": True,  # extra box
      "(a) \\boxed{11} (b) \\boxed{6} (c) \\boxed{0}": False,
      "\\boxed{5} \\boxed{11} \\boxed{0}": False,  # out of order
      "\\boxed{11} \\boxed{5}": False,  # a part missing
      "so the answer is \\boxed{0}": False,  # only the last part
      "11, 5, 0": False,  # no boxes
  }
  for text, expected in texts.items():
    answer = evaluation.parse_completion(text, gold)
    assert evaluation.is_correct(answer, gold) is expected, text
  # The whole-text judge passes the last part alone: why it is not used.
  plain, = evaluation.parse_references(examples, source="s")
  assert evaluation.is_correct(verifiers.parse_answer("\\boxed{0}"), plain)


def test_multi_part_votes_compare_every_part():
  gold = evaluation.Segmented((verifiers.parse_reference("7"),
                               verifiers.parse_reference("4")))
  greedy = ["\\boxed{7} \\boxed{4}"]
  sampled = [["\\boxed{7} \\boxed{4}", "\\boxed{7} \\boxed{5}",
              "\\boxed{7.0} \\boxed{5}", "none"]]
  scores = evaluation.score([gold], greedy, sampled)
  assert scores.greedy.tolist() == [True]
  assert scores.correct.tolist() == [[True, False, False, False]]
  assert scores.answers[0][3] is None  # no box: no vote
  # maj@4: (7, 5) holds 2 votes (7.0 equals 7) against (7, 4)'s 1: wrong.
  # maj@2: block 1 ties -> its first, (7, 4), right; block 2 -> (7, 5).
  figures = evaluation.summarize(scores, (2, 4))
  assert figures["maj@4"] == 0.0 and figures["maj@2"] == 0.5
  assert figures["pass@4"] == 1.0


def test_the_part_accuracy_counts_each_part_in_order():
  """greedy_part_accuracy: the share of parts right per problem, averaged
  (box 1 against part 1, ...); only for multi-part references."""
  examples = [data.Example("q1", "11; 5; 0"), data.Example("q2", "7; 4")]
  golds = evaluation.parse_references(examples, source="s", segmented=True)
  greedy = ["\\boxed{11} \\boxed{6} \\boxed{0}",  # 2 of 3
            "\\boxed{4} \\boxed{7}"]  # out of order: 0 of 2
  figures = evaluation.summarize(
      evaluation.score(golds, greedy, [[], []]), ())
  assert figures == pytest.approx({"greedy_accuracy": 0.0,
                                   "greedy_part_accuracy": (2 / 3 + 0) / 2})
  figures = evaluation.summarize(
      evaluation.score(golds, ["11, 5, 0", "\\boxed{7}"], [[], []]), ())
  assert figures["greedy_part_accuracy"] == pytest.approx((0 + 1 / 2) / 2)
  plain = evaluation.parse_references(examples[:1], source="s")
  assert "greedy_part_accuracy" not in evaluation.summarize(
      evaluation.score(plain, ["\\boxed{0}"], [[]]), ())


def test_only_the_segments_task_is_segmented():
  config = tiny_config()
  assert not evaluation.is_segmented(config)
  config.data.task = "segments"
  assert evaluation.is_segmented(config)


# ------------------------------------------------------ training's view


def test_from_config_is_off_by_default_and_checks_num_problems():
  config = tiny_config()
  assert config.eval.every == 0
  assert evaluation.from_config(config, None, None) is None
  config.eval.every, config.eval.num_problems = 1, 10_000
  with pytest.raises(ValueError, match="config.eval.num_problems: 10000"):
    evaluation.from_config(config, None, None)


@pytest.mark.parametrize("k,num_samples,expected", [
    ((), 0, ()), ((), 4, (1, 4)), ((), 1, (1,)), ((2,), 4, (2,))])
def test_config_k_default(k, num_samples, expected):
  assert evaluation.auto_k(k, num_samples) == expected


@pytest.mark.parametrize("field,value,named", [
    ("every", -1, "eval.every"),
    ("num_problems", 0, "eval.num_problems"),
    ("num_samples", -1, "eval.num_samples"),
    ("batch_size", 0, "eval.batch_size"),
    ("k", (4,), r"eval.k: holds k=4, outside \[1, eval.num_samples=0\]"),
])
def test_eval_fields_are_validated_by_name(field, value, named):
  from grpo_jax import train  # pylint: disable=g-import-not-at-top
  config = tiny_config()
  config.eval[field] = value
  with pytest.raises(ValueError, match=f"config.{named}"):
    train.validate(config)


def test_the_plot_draws_sparse_eval_figures(tmp_path):
  records = [{"step": s, "reward/total": 0.1 * s} for s in range(4)]
  records[1].update({"eval/greedy_accuracy": 0.5, "eval/pass@2": 0.75})
  records[3].update({"eval/greedy_accuracy": 0.6, "eval/pass@2": 0.8})
  assert metrics.panel_keys(records, ("eval/*",)) == [
      "eval/greedy_accuracy", "eval/pass@2"]
  assert metrics.panel_keys(records, ("nope", "reward/total")) == [
      "reward/total"]
  path = metrics.plot(records, str(tmp_path / "c.png"))
  assert open(path, "rb").read()[:4] == b"\x89PNG"


def test_the_kl_panel_names_the_kl_it_draws():
  """approx_kl is the objective's estimate of the KL to the policy that
  sampled the batch, not to a reference: a run without a KL term draws it
  under its own title; a run with one draws its "kl"."""
  no_term = [{"step": s, "approx_kl": 0.01 * s} for s in range(3)]
  with_term = [dict(r, kl=0.02 * r["step"]) for r in no_term]
  for records, title, drawn in (
      (no_term, "KL to old policy (approx)", "approx_kl"),
      (with_term, "KL to reference", "kl")):
    kl_axes = metrics.figure(records).axes[-1]
    assert kl_axes.get_title() == title
    assert [line.get_label() for line in kl_axes.get_lines()] == [drawn]
  assert metrics.figure([{"step": 0}]).axes[-1].get_title() == (
      "KL to reference")  # neither measured: the panel's own title


# ------------------------------------------------------------------ CLI


def test_cli_rejects_k_above_num_samples_before_loading(tmp_path):
  result = subprocess.run(
      [sys.executable, "-m", "experiments.evaluate",
       "--config=configs/grpo.py:tiny", "--num_samples=2", "--k=1,4"],
      cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu"),
      capture_output=True, text=True, timeout=300)
  assert result.returncode != 0
  assert "k=4 exceeds num_samples=2" in result.stderr


def test_cli_evaluates_a_jsonl_benchmark(tmp_path):
  path = write_jsonl(tmp_path / "bench.jsonl", [
      {"Problem": f"What is {i} + 1?", "solution": f"$\\boxed{{{i + 1}}}$"}
      for i in range(3)])
  out = tmp_path / "figures.json"
  result = subprocess.run(
      [sys.executable, "-m", "experiments.evaluate",
       "--config=configs/quickstart.py:tiny", f"--benchmark={path}",
       "--num_samples=3", "--k=1,2", "--batch_size=2", f"--json={out}"],
      cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
                         JAX_DISABLE_MOST_OPTIMIZATIONS="true"),
      capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  figures = json.loads(out.read_text())
  assert figures["benchmark"] == path and figures["num_problems"] == 3
  assert figures["num_samples"] == 3 and figures["k"] == [1, 2]
  for name in ("greedy_accuracy", "pass@1", "pass@2", "maj@1", "maj@2"):
    assert 0.0 <= figures[name] <= 1.0, name
