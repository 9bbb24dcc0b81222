"""Smoke tests of experiments/benchmarks/step.py (not the benchmark itself)."""

import json

import pytest

from grpo_jax import config as config_lib
from experiments.benchmarks import step as step_bench
from grpo_jax import data


def test_defaults_match_the_trl_comparison():
  args = step_bench.parse_args([])
  assert (args.num_prompts, args.steps, args.beta) == ("1", 3, 0.0)
  assert args.loss_type == "dapo"
  assert args.max_new_tokens == 64


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--model", "tiny"],
                                  ["--loss_type", "bnpo"]])
def test_bad_arguments_exit(argv):
  with pytest.raises(SystemExit):
    step_bench.parse_args(argv)


@pytest.mark.parametrize("loss_type,aggregation", [
    ("dapo", "token_mean"), ("grpo", "seq_mean_token_mean")])
def test_config_is_valid_and_matches_trl(loss_type, aggregation):
  args = step_bench.parse_args(
      ["--loss_type", loss_type, "--beta", "0.04", "--steps", "2"])
  c = step_bench.make_config(args, num_prompts=4)
  config_lib.validate(c)
  assert c.objective.kwargs.aggregation == aggregation
  assert (c.rollout.num_prompts, c.rollout.num_generations) == (4, 8)
  assert c.rollout.max_new_tokens == 64
  assert c.kl.beta == 0.04
  # transformers' AdamW: betas (0.9, 0.999), constant schedule here.
  assert (c.optimizer.b1, c.optimizer.b2) == (0.9, 0.999)
  assert c.optimizer.decay == "constant"
  assert c.train.num_steps == 3  # one warm-up step + 2 timed


def test_summarize_skips_the_warmup_step():
  steps = [dict(step_s=10.0, sample_s=9.0, logprob_s=0.5, update_s=0.5,
                completion_length=64.0),
           dict(step_s=2.0, sample_s=1.0, logprob_s=0.25, update_s=0.75,
                completion_length=30.0),
           dict(step_s=4.0, sample_s=2.0, logprob_s=0.75, update_s=1.25,
                completion_length=50.0)]
  out = step_bench.summarize(steps)
  assert out["step_s"] == 3.0
  assert out["sample_s"] == 1.5
  assert out["logprob_s"] == 0.5
  assert out["update_s"] == 1.0
  assert out["completion_length"] == 40.0
  assert out["first_step_s"] == 10.0
  assert out["per_step_s"] == [10.0, 2.0, 4.0]


def test_trl_reward_scores_chat_completions_like_grpo_jax():
  def count_chars(prompts, completions, answers):
    assert prompts == ["", ""]
    return [float(len(c) + int(a)) for c, a in zip(completions, answers)]

  reward = step_bench.trl_reward("count_chars", count_chars)
  completions = [[{"role": "assistant", "content": "abc"}],
                 [{"role": "assistant", "content": "\\boxed{8}"}]]
  assert reward.__name__ == "count_chars"
  assert reward(["p", "q"], completions, answer=["1", "2"],
                completion_ids=None) == [4.0, 11.0]


def test_trl_dataset_holds_grpo_jax_prompts_in_order():
  pytest.importorskip("datasets")
  args = step_bench.parse_args(["--steps", "2"])
  c = step_bench.make_config(args, num_prompts=2)
  dataset = step_bench.trl_dataset(c, num_rows=3)
  task = data.make_task(c.data, seed=c.seed)
  expected = [e for s in range(3) for e in task.train(s, 2)]
  assert len(dataset) == 6
  for row, example in zip(dataset, expected):
    assert row["prompt"] == [
        {"role": "system", "content": c.data.system_prompt},
        {"role": "user", "content": example.question}]
    assert row["answer"] == example.answer
  assert isinstance(task, data.ArithmeticTask)


def test_table_has_both_frameworks():
  result = dict(step_s=2.0, sample_s=1.0, logprob_s=0.5, update_s=0.5,
                completion_length=64.0)
  text = step_bench.table([dict(
      num_prompts=1, grpo_jax=result,
      trl=dict(result, step_s=8.0, trl_version="1.16.0"))])
  lines = text.splitlines()
  assert len(lines) == 4
  assert lines[2].startswith("| 1 x 8 | grpo_jax | 2.00 |")
  assert lines[3].startswith("| 1 x 8 | TRL 1.16.0 | 8.00 |")


def test_tiny_run_writes_json(tmp_path):
  path = tmp_path / "step.json"
  step_bench.main(["--model", "tiny", "--skip_trl", "--steps", "1",
                   "--max_new_tokens", "8", "--json", str(path)])
  out = json.loads(path.read_text())
  assert out["grpo_jax_step_s"] > 0
  assert out["trl_step_s"] is None
  assert out["rows"][0]["grpo_jax"]["compiles_per_step"][1] == 0


def test_summarize_needs_a_step_after_warmup():
  with pytest.raises(ValueError, match="need more than 1"):
    step_bench.summarize([dict(step_s=1.0)])


def test_timer_records_each_call_and_keeps_the_output():
  class Worker:
    def double(self, x):
      return 2 * x

  worker = Worker()
  timer = step_bench._Timer(worker, "double")  # pylint: disable=protected-access
  assert [worker.double(3), worker.double(5)] == [6, 10]
  assert timer.outputs == [6, 10]
  assert len(timer.times) == 2 and all(t >= 0 for t in timer.times)
