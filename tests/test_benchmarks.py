"""Smoke tests of experiments/benchmarks/ (not the benchmarks themselves).

Tiny shapes only; peers (TRL, Tunix) are not needed.
"""

import argparse
import functools
import json
import logging

import numpy as np
import pytest

from grpo_jax.data import arithmetic
from grpo_jax import train as train_lib
from experiments.benchmarks import machine
from experiments.benchmarks import profile as profile_bench
from experiments.benchmarks import sampler as sampler_bench
from experiments.benchmarks import step as step_bench
from grpo_jax import data

# A machine whose floors are easy to check by hand.
LIMITS = machine.Limits(matmul_gflop_s=100.0, bandwidth_gb_s=10.0)


_small_measure = functools.partial(  # bound now: tests monkeypatch measure
    machine.measure, matmul_size=64, copy_bytes=2**20, repeats=2)


# ------------------------------------------------------------------ machine


def test_machine_measures_on_tiny_sizes(tmp_path):
  path = tmp_path / "machine.json"
  limits = machine.main(["--matmul_size", "64", "--copy_mib", "1",
                         "--repeats", "2", "--json", str(path)])
  assert limits.matmul_gflop_s > 0 and limits.bandwidth_gb_s > 0
  assert json.loads(path.read_text()) == limits._asdict()


@pytest.mark.parametrize("text,expected", [
    ("1,8,32", [1, 8, 32]), ("4", [4]), ("", []), (" 2, 3 ,", [2, 3])])
def test_positive_ints_parse_lists(text, expected):
  assert machine.positive_ints(text) == expected


@pytest.mark.parametrize("parse,text,named", [
    (machine.positive_ints, "1,0", "'0'"),
    (machine.positive_ints, "8,x", "'x'"),
    (machine.positive_ints, "-1", "'-1'"),
    (machine.positive_ints, "2.5", "'2.5'"),
    (machine.positive_ints, "\u00b2", "'\u00b2'"),
    (sampler_bench.batch_names, "8,8x0", "'8x0'"),
    (sampler_bench.batch_names, "x8", "'x8'"),
    (sampler_bench.batch_names, "1x2x3", "'1x2x3'"),
    (sampler_bench.batch_names, "2.5", "'2.5'"),
    (sampler_bench.batch_names, "", "''")])
def test_list_arguments_name_the_bad_item(parse, text, named):
  with pytest.raises(argparse.ArgumentTypeError, match=named):
    parse(text)


@pytest.mark.parametrize("argv", [["--prompts", "0"], ["--batches", "1,b"]])
def test_profile_refuses_bad_lists_before_loading(argv, monkeypatch):
  monkeypatch.setattr(profile_bench, "smollm2", lambda: pytest.fail(
      "the model loaded before the arguments were checked"))
  with pytest.raises(SystemExit):
    profile_bench.main(argv)


@pytest.mark.parametrize("text,expected", [
    ("1,8,32,8x8", ["1", "8", "32", "8x8"]), (" 4x2 ,", ["4x2"])])
def test_sampler_batch_names_parse(text, expected):
  assert sampler_bench.batch_names(text) == expected
  assert sampler_bench.parse_args(["--batches", text]).batches == expected


def test_sampler_refuses_bad_batches_before_any_worker(monkeypatch):
  monkeypatch.setattr(sampler_bench, "spawn_worker", lambda *a: pytest.fail(
      "a worker started before the arguments were checked"))
  with pytest.raises(SystemExit):
    sampler_bench.main(["--batches", "8,8x0"])


def test_decode_floor_takes_the_binding_limit():
  # 1e9 weights of 4 bytes: reading them takes 0.4 s; 2e9 FLOPs per row 0.02 s.
  assert machine.decode_step_floor_s(1e9, 4e9, 1, LIMITS) == 0.4
  assert machine.decode_step_floor_s(1e9, 4e9, 100, LIMITS) == 2.0
  assert machine.update_floor_s(1e9, 10, LIMITS) == 0.6


def test_matmul_weights_count_a_tied_embedding_once_and_skip_an_untied_one():
  tied = dict(embed=np.zeros((10, 4), np.float32),
              layers=dict(q=np.zeros((2, 4, 4), np.float32)))
  assert machine.matmul_weights(tied) == (72, 288)
  untied = dict(tied, lm_head=np.zeros((4, 10), np.float32))
  assert machine.matmul_weights(untied) == (72, 288)


# ------------------------------------------------------------------ sampler


def _sampler_results():
  result = lambda speeds: dict(weights=1e9, weight_bytes=4e9,
                               tokens_per_s=dict(zip(("1", "8x8"), speeds)))
  # grpo_jax's dots alone take 0.25 s a step at 1 row, 0.5 s at 64.
  grpo_jax = dict(result([2.0, 64.0]), dots_s={"1": 0.25, "8x8": 0.5})
  return dict(grpo_jax=grpo_jax, hf=result([1.0, 32.0]),
              tunix=result([4.0, 64.0]))


def test_sampler_rows_give_ratios_floors_and_shares():
  rows = sampler_bench.make_rows(_sampler_results(), LIMITS, ["1", "8x8"])
  one, many = rows
  assert (one["bound_tokens_per_s"], one["binding"]) == (2.5, "bandwidth")
  assert (one["ratio_vs_hf"], one["ratio_vs_tunix"]) == (2.0, 0.5)
  assert one["grpo_jax_share_of_bound"] == 0.8
  # Dots alone: 1 row / 0.25 s = 4 tokens/s, of which 2 is half.
  assert (one["dots_tokens_per_s"], one["grpo_jax_share_of_dots"]) == (4, 0.5)
  assert many["dots_tokens_per_s"] == 128 and many[
      "grpo_jax_share_of_dots"] == 0.5
  # 64 rows: 1.28 s of FLOPs per step binds.
  assert many["rows"] == 64 and many["binding"] == "matmul"
  assert many["bound_tokens_per_s"] == pytest.approx(50.0)
  assert many["tunix_share_of_bound"] == pytest.approx(1.28)


def test_sampler_table_has_a_column_per_framework():
  rows = sampler_bench.make_rows(_sampler_results(), LIMITS, ["1", "8x8"])
  lines = sampler_bench.table(rows, ["grpo_jax", "hf", "tunix"]).splitlines()
  assert len(lines) == 4
  assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|")
  assert lines[2] == ("| 1 | 2.0 | 1.0 | 4.0 | 2.00x | 0.50x | 2.5 "
                      "(bandwidth) | 80% | 40% | 160% | 4.0 | 50% |")
  alone = sampler_bench.table(rows, ["grpo_jax"]).splitlines()
  assert alone[2] == "| 1 | 2.0 | 2.5 (bandwidth) | 80% | 4.0 | 50% |"


def test_sampler_runs_give_medians_and_ranges():
  """Three runs: each figure the middle one, its range the other two."""
  runs = []
  for scale in (1.0, 3.0, 2.0):
    results = _sampler_results()
    results["grpo_jax"]["tokens_per_s"] = {"1": 2.0 * scale}
    runs.append(sampler_bench.make_rows(results, LIMITS, ["1"]))
  (row,) = machine.median_rows(runs)
  assert row["grpo_jax_tokens_per_s"] == 4.0  # of 2, 6, 4
  assert row["grpo_jax_tokens_per_s_range"] == (2.0, 6.0)
  assert row["ratio_vs_hf"] == 4.0 and row["ratio_vs_hf_range"] == (2.0, 6.0)
  assert row["bound_tokens_per_s_range"] == (2.5, 2.5)
  line = sampler_bench.table([row], ["grpo_jax", "hf"]).splitlines()[2]
  assert line == ("| 1 | 4.0 (2.0-6.0) | 1.0 (1.0-1.0) | 4.00x (2.00-6.00x) "
                  "| 2.5 (bandwidth) | 160% (80-240%) "
                  "| 40% (40-40%) | 4.0 (4.0-4.0) | 100% (50-150%) |")


@pytest.mark.parametrize("fused", [False, True])
def test_decode_dots_floor_times_every_projection_once(monkeypatch, fused):
  """The floor's program holds each layer's 7 projection dots (4 with q/k/v
  and gate/up stacked) and the output projection, and no other dot."""
  import jax
  from grpo_jax.sampling import decoding
  from grpo_jax import models, testing
  config = testing.tiny_config(num_layers=3)
  params = models.init_params(config, jax.random.key(0))
  monkeypatch.setattr(decoding, "fuse_projections", lambda: fused)
  timed = []
  monkeypatch.setattr(
      sampler_bench.machine, "best_jax_seconds",
      lambda fn, *args, repeats: timed.append((fn, args)) or 0.25)
  assert sampler_bench.decode_dots_seconds(config, params, 8) == 0.25
  (fn, args), = timed
  program = fn.lower(*args).as_text()
  assert program.count("stablehlo.dot_general") == 3 * (4 if fused else 7) + 1
  assert jax.eval_shape(fn, *args).shape == (8, config.vocab_size)


def test_sampler_skips_peers_on_request():
  args = sampler_bench.parse_args(["--skip_hf", "--skip_tunix"])
  assert sampler_bench.frameworks_to_run(args) == ["grpo_jax"]
  assert sampler_bench.parse_batch("8x8") == (8, 8)
  assert sampler_bench.parse_batch("32") == (32, 1)


@pytest.mark.parametrize("argv", [["--runs", "0"], ["--repeats", "0"]])
def test_sampler_refuses_no_runs(argv):
  with pytest.raises(SystemExit):
    sampler_bench.parse_args(argv)


def test_tunix_tokenizer_hands_over_exact_ids():
  ids = sampler_bench.TunixIds({"prompt 0": [5, 6]}, tokenizer=None)
  assert ids.encode("prompt 0") == [5, 6]
  assert (ids.bos_id(), ids.pad_id(), ids.eos_id()) == (None, 0, -1)


# --------------------------------------------------------------------- step


def test_defaults_match_the_trl_comparison():
  args = step_bench.parse_args([])
  assert (args.num_prompts, args.steps, args.beta) == ([1], 3, 0.0)
  assert args.loss_type == "dapo"
  assert args.max_new_tokens == 64


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--runs", "0"],
                                  ["--model", "tiny"], ["--loss_type", "bnpo"],
                                  ["--num_prompts", "1,0"], ["--num_prompts", ""]])
def test_bad_arguments_exit(argv):
  with pytest.raises(SystemExit):
    step_bench.parse_args(argv)


@pytest.mark.parametrize("loss_type,aggregation", [
    ("dapo", "token_mean"), ("grpo", "seq_mean_token_mean")])
def test_config_is_valid_and_matches_trl(loss_type, aggregation):
  args = step_bench.parse_args(
      ["--loss_type", loss_type, "--beta", "0.04", "--steps", "2"])
  c = step_bench.make_config(args, num_prompts=4)
  train_lib.validate(c)
  assert c.objective.kwargs.aggregation == aggregation
  assert (c.rollout.num_prompts, c.rollout.num_generations) == (4, 8)
  assert c.rollout.max_new_tokens == 64
  assert c.kl.beta == 0.04
  # transformers' AdamW: betas (0.9, 0.999), constant schedule here.
  assert (c.optimizer.b1, c.optimizer.b2) == (0.9, 0.999)
  assert c.optimizer.decay == "constant"
  assert c.train.num_steps == 3  # one warm-up step + 2 timed


def test_remat_is_off_unless_asked_and_then_leaves_tunix_out(monkeypatch):
  off = step_bench.parse_args([])
  on = step_bench.parse_args(["--remat"])
  assert step_bench.make_config(off, num_prompts=1).model.remat is False
  assert step_bench.make_config(on, num_prompts=1).model.remat is True
  # As if Tunix were installed: only --remat leaves it out.
  monkeypatch.setattr(step_bench.importlib.util, "find_spec",
                      lambda name: object())
  assert step_bench.peers_to_run(off) == ["trl", "tunix"]
  assert step_bench.peers_to_run(on) == ["trl"]


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
  assert isinstance(task, arithmetic.ArithmeticTask)


def _step_row():
  result = dict(step_s=2.0, sample_s=1.0, logprob_s=0.5, update_s=0.5,
                completion_length=64.0, update_tokens=1000.0, weights=1e9,
                weight_bytes=4e9, first_step_s=20.0,
                first_step_compile_s=dict(sampler=9.0, update=6.0, other=1.0),
                cache_hits=0)
  row = dict(num_prompts=1, grpo_jax=result,
             trl=dict(result, step_s=8.0, trl_version="1.16.0"))
  step_bench.add_floors(row, LIMITS, max_new_tokens=64)
  return row


def test_floors_add_decode_and_update():
  row = _step_row()
  # 64 decode steps of 8 rows at 0.4 s (bandwidth), 6e12 FLOPs of update.
  assert row["grpo_jax"]["decode_floor_s"] == pytest.approx(25.6)
  assert row["grpo_jax"]["update_floor_s"] == pytest.approx(60.0)
  assert row["trl"]["share_of_floor"] == pytest.approx(85.6 / 8.0)


def test_table_has_both_frameworks():
  lines = step_bench.table([_step_row()]).splitlines()
  assert len(lines) == 4
  assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|")
  assert lines[2].startswith("| 1 x 8 | grpo_jax | 2.00 |")
  assert lines[2].endswith("| 64.0 | 1000 | 25.6 + 60 | 4280% |")
  assert lines[3].startswith("| 1 x 8 | TRL 1.16.0 | 8.00 |")


def test_step_runs_give_medians_and_ranges():
  """Three runs of one row: each side's times the middle run's, nested."""
  runs = []
  for step_s in (2.0, 6.0, 4.0):
    row = _step_row()
    row["grpo_jax"]["step_s"] = step_s
    row["ratio_vs_trl"] = 8.0 / step_s
    step_bench.add_floors(row, LIMITS, max_new_tokens=64)
    runs.append([row])
  (row,) = machine.median_rows(runs)
  assert row["grpo_jax"]["step_s"] == 4.0
  assert row["grpo_jax"]["step_s_range"] == (2.0, 6.0)
  assert row["ratio_vs_trl"] == 2.0 and row["ratio_vs_trl_range"] == (
      8.0 / 6.0, 4.0)
  assert row["trl"]["step_s_range"] == (8.0, 8.0)
  assert row["num_prompts"] == 1
  line = step_bench.table([row]).splitlines()[2]
  # 85.6 s of floor over 6, 4 and 2 s: 1427%, 2140%, 4280%.
  assert line.startswith("| 1 x 8 | grpo_jax | 4.00 (2.00-6.00) | ")
  assert line.endswith("| 64.0 | 1000 | 25.6 + 60 | 2140% (1427-4280%) |")
  # The compile split's ranges sit beside its figures, not in its sum.
  assert "compilation in it 16.00 s" in step_bench.first_step_text(
      "grpo_jax", row["grpo_jax"])


def test_table_has_a_tunix_row():
  row = _step_row()
  row["tunix"] = dict(row["grpo_jax"], step_s=4.0, tunix_version="0.1.7")
  step_bench.add_floors(row, LIMITS, max_new_tokens=64)
  lines = step_bench.table([row]).splitlines()
  assert len(lines) == 5
  assert lines[4].startswith("| 1 x 8 | Tunix 0.1.7 | 4.00 |")
  assert lines[4].endswith("| 25.6 + 60 | 2140% |")


def test_peers_can_be_skipped():
  args = step_bench.parse_args(["--model", "tiny", "--skip_trl",
                                "--skip_tunix"])
  assert step_bench.peers_to_run(args) == []
  args = step_bench.parse_args(["--skip_tunix"])
  assert step_bench.peers_to_run(args) == ["trl"]


def test_tunix_tokenizer_never_pads_or_ends_a_completion():
  from grpo_jax import testing  # pylint: disable=g-import-not-at-top
  hf = testing.tiny_tokenizer()
  tokenizer = step_bench.TunixTokenizer(hf, pad_id=len(hf))
  ids = tokenizer.encode("ab")
  assert ids == hf.encode("ab", add_special_tokens=False)
  assert tokenizer.decode(ids + [hf.eos_token_id]) == "ab"
  assert (tokenizer.bos_id(), tokenizer.eos_id()) == (None, -1)
  assert tokenizer.pad_id() == len(hf)  # past every sampled id


def test_tunix_reward_weighs_grpo_jax_scores():
  def count_chars(prompts, completions, answers):
    assert prompts == ["", ""]
    return [float(len(c) + int(a)) for c, a in zip(completions, answers)]

  reward = step_bench.tunix_reward("count_chars", count_chars, 0.5)
  assert reward.__name__ == "count_chars"
  assert reward(prompts=["p", "q"], completions=["abc", "de"],
                answer=np.array(["1", "2"]), mode="train") == [2.0, 2.0]


def test_tunix_prompts_use_grpo_jax_buckets():
  args = step_bench.parse_args(["--model", "tiny", "--skip_trl"])
  c = step_bench.make_config(args, num_prompts=2)
  c.data.prompt_buckets = (64, 128)
  assert step_bench.prompt_width(c, [10, 70]) == 128
  assert step_bench.prompt_width(c, [300]) == 300


def test_first_step_text_splits_compilation():
  row = _step_row()
  assert step_bench.first_step_text("grpo_jax", row["grpo_jax"]) == (
      "grpo_jax: first step 20.0 s = 10.0x the mean later step; XLA "
      "compilation in it 16.00 s (sampler 9.00, update 6.00, other 1.00), 0 "
      "persistent cache hits")
  row["grpo_jax"].update(
      first_step_trace_s=dict(sampler=0.5, update=0.25, other=0.0),
      first_step_lower_s=dict(sampler=0.13, update=0.5, other=0.25),
      first_step_resident_growth_gb=2.1, first_touch_gb_s=0.5, build_s=4.3)
  assert step_bench.first_step_text("grpo_jax", row["grpo_jax"]).endswith(
      "persistent cache hits; tracing 0.75 s (sampler 0.50, update 0.25, "
      "other 0.00); lowering 0.88 s (sampler 0.13, update 0.50, other 0.25); "
      "resident memory +2.10 GB in it, fresh memory first written at 0.50 "
      "GB/s here (4.20 s); train.build 4.3 s before it")
  del row["trl"]["first_step_compile_s"]
  assert step_bench.first_step_text("TRL", row["trl"]).endswith(
      "2.5x the mean later step")


def test_compile_split_by_function():
  compiled = [("jit(_sample)", 3.0), ("jit(update_fn)", 2.0),
              ("jit(_assemble)", 0.5), ("jit(add)", 0.25)]
  assert step_bench.compile_split(compiled) == dict(
      sampler=3.0, update=2.0, other=0.75)


def test_compile_log_sorts_jax_records_by_stage():
  log = step_bench._CompileLog()  # pylint: disable=protected-access
  messages = [
      "Finished tracing _sample for jit in 0.5 sec",
      "Finished jaxpr to MLIR module conversion jit(_sample) in 0.125 sec",
      "Persistent compilation cache hit for 'jit__sample' with key 'k'",
      "Finished XLA compilation of jit(_sample) in 0.25 sec",
      "Finished tracing update_fn for jit in 0.75 sec",
      "Finished XLA compilation of jit(update_fn) in 2.0 sec",
      "Not compiling: something else"]
  for message in messages:
    log.emit(logging.LogRecord("jax", logging.WARNING, "", 0, message, (),
                               None))
  assert log.cache_hits == 1
  assert step_bench.stage_split(log.records, "tracing") == dict(
      sampler=0.5, update=0.75, other=0.0)
  assert step_bench.stage_split(log.records, "lowering") == dict(
      sampler=0.125, update=0.0, other=0.0)
  assert step_bench.stage_split(log.records, "compilation") == dict(
      sampler=0.25, update=2.0, other=0.0)


def test_compilation_cache_only_when_asked():
  args = step_bench.parse_args(["--model", "tiny", "--skip_trl"])
  assert step_bench.make_config(args, 1).train.compilation_cache_dir == ""
  args = step_bench.parse_args(["--model", "tiny", "--skip_trl",
                                "--compilation_cache", "/tmp/cache"])
  assert (step_bench.make_config(args, 1).train.compilation_cache_dir
          == "/tmp/cache")


def test_tiny_run_writes_json(tmp_path, monkeypatch):
  monkeypatch.setattr(machine, "measure", _small_measure)
  path = tmp_path / "step.json"
  step_bench.main(["--model", "tiny", "--skip_trl", "--skip_tunix",
                   "--steps", "1", "--max_new_tokens", "8",
                   "--json", str(path)])
  out = json.loads(path.read_text())
  assert out["grpo_jax_step_s"] > 0
  assert out["trl_step_s"] is None and out["tunix_step_s"] is None
  ours = out["rows"][0]["grpo_jax"]
  assert ours["compiles_per_step"][1] == 0
  # End ids ignored: every completion has all its tokens.
  assert ours["completion_length"] == 8.0
  assert ours["update_tokens"] > 8 * 8
  assert ours["first_step_compile_s"]["sampler"] > 0
  assert ours["first_step_trace_s"]["sampler"] > 0
  assert ours["first_step_lower_s"]["update"] > 0
  assert ours["first_touch_gb_s"] > 0
  assert ours["build_s"] > 0
  # Tiny shapes: the small-matrix throughput makes the floor loose.
  assert ours["share_of_floor"] > 0
  assert out["limits"]["matmul_gflop_s"] > 0


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


# ------------------------------------------------------------------ profile


@pytest.mark.parametrize("op_name,expected", [
    ("jit(_sample)/Decoder/while/body/layers/mlp/dot_general", "prefill"),
    ("jit(f)/transpose(jvp(Decoder))/layers/mlp/dot_general", "matmul"),
    ("jit(f)/jvp(Decoder)/layers/attn/dot_general", "matmul"),
    ("jit(f)/jvp(Decoder)/layers/attn/bskgd,blkd->bkgsl/dot_general",
     "attention"),
    ("jit(f)/jvp(Decoder)/layers/attn/exp", "attention"),
    ("jit(f)/jvp(logits)/while/body/closed_call/reduce_sum", "logits"),
    ("jit(_sample)/while/body/sample_token/reduce", "sample"),
    ("jit(f)/jvp(Decoder)/while/body/jit(dynamic_index_in_dim)/dynamic_slice",
     "layers"),
    ("jit(f)/jit(_where)/select_n", "other"),
])
def test_profile_files_ops_by_source_path(op_name, expected):
  assert profile_bench.category(op_name) == expected


def test_profile_reads_op_names_from_compiled_hlo():
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  def f(x):
    with jax.named_scope("logits"):
      return jnp.exp(x) @ x
  text = jax.jit(f).lower(jnp.ones((4, 4))).compile().as_text()
  names = profile_bench.op_names(text)
  assert names and any("logits" in name for name in names.values())


def test_profile_files_an_unnamed_vocabulary_sized_op_as_logits():
  text = """
  %dot.7 = f32[49152,1]{1,0} dot(%a, %b), lhs_contracting_dims={1}
  %dot.8 = f32[8,49152]{1,0} dot(%a, %c), lhs_contracting_dims={1}
  %dot.9 = f32[49152,576]{1,0} dot(%a, %c), lhs_contracting_dims={0}
  %copy.2 = f32[49152,1]{1,0} copy(%c)
  %add.3 = f32[49152,1]{1,0} add(%dot.7, %d), metadata={op_name="jit(f)/add"}
  %t = (f32[49152], s32[]) tuple(%e, %f)
"""
  names = profile_bench.op_names(text, vocab_size=49152)
  assert profile_bench.category(names["dot.7"]) == "logits"
  assert profile_bench.category(names["dot.8"]) == "logits"
  assert names["add.3"] == "jit(f)/add"
  # Not the output projection: the embedding's gradient, a copy, a tuple.
  assert not {"dot.9", "copy.2", "t"} & names.keys()
  assert "dot.7" not in profile_bench.op_names(text)


def test_profile_runs_the_trainers_update_on_a_tiny_model():
  """The profiled update on tiny shapes: at most `most` profiled calls,
  its ops filed by source path (the projections under matmul, the log-prob
  head under logits)."""
  import jax  # pylint: disable=g-import-not-at-top
  from grpo_jax import models  # pylint: disable=g-import-not-at-top
  config = models.tiny_model_config(vocab_size=64)
  params = models.init_params(config, jax.random.PRNGKey(0))
  row = profile_bench.profile(
      *profile_bench.update_case(config, params, 1, 2, 4, 4), threads=2,
      most=3)
  assert row["calls"] in (1.0, 2.0, 3.0)
  assert row["matmul"] > 0 and row["logits"] > 0 and row["wall_s"] > 0
  with pytest.raises(ValueError, match="most=0"):
    profile_bench.profile(None, (), threads=2, most=0)


def test_profile_table_of_three_runs_shows_medians():
  """Three hand-built runs of one workload: the wall time is the median
  with its range, the shares are the median seconds over the median op
  time (matmul 3 of 4 s = 75%, other 1 s = 25%), host and idle the median
  0.5 s of the median 2.5 s wall = 20%."""
  def run(wall, matmul):
    split = dict.fromkeys(profile_bench.CATEGORIES, 0.0)
    split.update(matmul=matmul, other=4.0 - matmul)
    return [dict(workload="decode, batch 1", wall_s=wall, ops_s=4.0,
                 host_idle_s=wall - 2.0, **split)]
  rows = machine.median_rows([run(2.0, 3.0), run(2.5, 2.0), run(4.0, 3.5)])
  line = profile_bench.table(rows).splitlines()[2]
  assert line == ("| decode, batch 1 | 2.50 (2.00-4.00) | 0% | 75% | 0% | "
                  "0% | 0% | 0% | 25% | 20% |")


def test_precision_benchmark_measures_both_dtypes():
  from experiments.benchmarks import precision  # pylint: disable=g-import-not-at-top
  result = precision.measure("tiny", prompts=2, samples=2, new_tokens=4)
  f32, bf16 = result["float32"], result["bfloat16"]
  assert f32["tokens"] > 0 and bf16["tokens"] > 0
  # float32's two programs agree to its rounding; bf16's within bf16's (on
  # this tiny model and 8 tokens they may agree exactly), and bf16 moves
  # the trainer's log-probs off float32's.
  assert f32["sampler_vs_trainer"]["max"] < 1e-4
  assert bf16["sampler_vs_trainer"]["max"] < 0.1
  assert 0 < bf16["trainer_bf16_vs_float32"]["max"] < 0.1


# -------------------------------------------------------------- accelerator

_TINY_ACCELERATOR = ["--model", "tiny", "--batches", "1,2", "--prompts", "1",
                     "--group", "2", "--prompt_len", "4", "--new_tokens", "4",
                     "--loss_n", "2", "--loss_t", "8", "--repeats", "1"]


def test_accelerator_rows_against_hand_computed_floors(tmp_path, monkeypatch):
  from experiments.benchmarks import accelerator  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(machine, "matmul_gflop_s", lambda *a: 100.0)
  monkeypatch.setattr(machine, "device_bandwidth_gb_s", lambda *a: 10.0)
  path = tmp_path / "accelerator.json"
  accelerator.main(_TINY_ACCELERATOR + ["--json", str(path)])
  result = json.loads(path.read_text())
  rows = {(r["dtype"], r["workload"].split(" (")[0]): r
          for r in result["rows"]}
  assert len(rows) == 2 * 4
  # The tiny model (vocabulary 100, width 32, MLP 64, 2 layers of q 32x32,
  # k and v 32x16, o 32x32 and two norms; the embedding tied as the output
  # projection; a final norm): W weights, the projection's 3200 among them.
  weights = 100 * 32 + 2 * (1024 + 512 + 512 + 1024 + 3 * 32 * 64 + 64) + 32
  assert weights == 21792
  # A decode step reads the layers in the compute dtype and the output
  # projection in float32, the params' dtype.
  step_bytes = {"float32": 4 * weights,
                "bfloat16": 2 * (weights - 3200) + 4 * 3200}
  for dtype in ("float32", "bfloat16"):
    decode = rows[dtype, "decode, batch 1"]
    # 4 steps, each reading its bytes at 10 GB/s (2 W FLOPs at 100 GFLOP/s
    # take a tenth of that or less).
    assert decode["floor_s"] == pytest.approx(4 * step_bytes[dtype] / 1e10)
    assert decode["binding"] == "bandwidth"
    assert decode["tokens_per_s"] == pytest.approx(4 / decode["seconds"])
    # 1 prompt of 4 tokens, run once, and 2 completions of 4: 12 tokens.
    update = rows[dtype, "update, 1 x 2"]
    assert update["floor_s"] == pytest.approx(6 * weights * 12 / 1e11)
    assert update["share_of_floor"] == pytest.approx(
        update["floor_s"] / update["seconds"])
    logprobs = rows[dtype, "log-probs + loss, 2 x 8"]
    assert logprobs["floor_s"] == pytest.approx(6 * 2 * 8 * 32 * 100 / 1e11)
  assert result["limits"]["bfloat16"] == dict(matmul_gflop_s=100.0,
                                              bandwidth_gb_s=10.0)


def _accelerator_result(dtype, bandwidth, matmul, rows):
  """A saved result of one run: rows of (workload, seconds, share)."""
  return dict(device="gpu test", model="tiny", bandwidth_gb_s=bandwidth,
              limits={dtype: dict(matmul_gflop_s=matmul,
                                  bandwidth_gb_s=bandwidth)},
              rows=[dict(dtype=dtype, workload=w, seconds=t,
                         tokens_per_s=64 / t, floor_s=0.01,
                         binding="bandwidth", share_of_floor=share)
                    for w, t, share in rows])


def test_accelerator_combines_saved_runs_into_medians(tmp_path, capsys):
  from experiments.benchmarks import accelerator  # pylint: disable=g-import-not-at-top
  # Three bfloat16 runs (one process each) and one float32 run; the loss
  # row's label names its peak memory, which must not split the rows.
  saved = [
      _accelerator_result("bfloat16", 10.0, 100.0, [
          ("decode, batch 1", 2.0, 0.5), ("loss (peak 1 GiB)", 4.0, 0.1)]),
      _accelerator_result("bfloat16", 30.0, 300.0, [
          ("decode, batch 1", 6.0, 0.25), ("loss (peak 2 GiB)", 8.0, 0.3)]),
      _accelerator_result("bfloat16", 20.0, 200.0, [
          ("decode, batch 1", 1.0, 0.75), ("loss (peak 1 GiB)", 5.0, 0.2)]),
      _accelerator_result("float32", 40.0, 50.0, [
          ("decode, batch 1", 3.0, 0.4)]),
  ]
  paths = []
  for i, result in enumerate(saved):
    paths.append(tmp_path / f"run{i}.json")
    paths[-1].write_text(json.dumps(result))
  combined = accelerator.main(["--combine", *map(str, paths)])
  rows = {(r["dtype"], r["workload"].split(" (")[0]): r
          for r in combined["rows"]}
  assert sorted(rows) == [("bfloat16", "decode, batch 1"),
                          ("bfloat16", "loss"), ("float32", "decode, batch 1")]
  decode = rows["bfloat16", "decode, batch 1"]
  assert (decode["seconds"], decode["share_of_floor"]) == (2.0, 0.5)
  assert decode["seconds_range"] == (1.0, 6.0)
  assert decode["runs"] == 3
  assert rows["bfloat16", "loss"]["seconds"] == 5.0
  # A row of one run stays as it was, with no range.
  assert rows["float32", "decode, batch 1"] == dict(
      saved[3]["rows"][0], runs=1)
  # Bandwidth: median of 10, 30, 20, 40; each dtype's matmul its own runs'.
  assert combined["bandwidth_gb_s"] == 25.0
  assert combined["limits"]["bfloat16"]["matmul_gflop_s"] == 200.0
  assert combined["limits"]["float32"]["matmul_gflop_s"] == 50.0
  out = capsys.readouterr().out
  assert "median of 1-3 runs" in out
  assert "| bfloat16 | decode, batch 1 | 2 (1-6) |" in out
  assert "| 50.0% (25.0-75.0%) |" in out


def test_accelerator_runs_twice_in_one_process(monkeypatch):
  from experiments.benchmarks import accelerator  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(machine, "matmul_gflop_s", lambda *a: 100.0)
  monkeypatch.setattr(machine, "device_bandwidth_gb_s", lambda *a: 10.0)
  result = accelerator.main(_TINY_ACCELERATOR + ["--dtypes", "float32",
                                                 "--runs", "2"])
  assert [r["runs"] for r in result["rows"]] == [2] * 4
  for r in result["rows"]:
    low, high = r["seconds_range"]
    assert low <= r["seconds"] <= high


@pytest.mark.parametrize("argv", [["--dtypes", "float16"], ["--dtypes", ","],
                                  ["--batches", "8,x"], ["--prompts", "-1"],
                                  ["--model", "no-such-model"],
                                  ["--runs", "0"],
                                  ["--combine", "no/such/result.json"]])
def test_accelerator_refuses_bad_arguments(argv):
  from experiments.benchmarks import accelerator  # pylint: disable=g-import-not-at-top
  with pytest.raises(SystemExit):
    accelerator.parse_args(argv)


def test_device_limits_measure_in_both_dtypes():
  assert machine.matmul_gflop_s(64, repeats=1, dtype="bfloat16") > 0
  assert machine.device_bandwidth_gb_s(2**20, repeats=1) > 0


@pytest.mark.real_model
def test_accelerator_model_is_the_embedded_models_shape():
  from experiments.benchmarks import accelerator  # pylint: disable=g-import-not-at-top
  from grpo_jax import models  # pylint: disable=g-import-not-at-top
  config, _, _ = models.load("smollm2-135m-instruct")
  # The GGUF stores the norm's epsilon in float32.
  assert accelerator.model_config("smollm2-135m-instruct",
                                  "float32") == config.replace(
                                      rms_norm_eps=1e-5)
  assert config.rms_norm_eps == pytest.approx(1e-5)


# ----------------------------------------------------- long-tailed workload

from experiments.benchmarks import long_tail  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_long_tail_draws_one_tenth_at_the_limit_the_rest_short():
  lengths = long_tail.draw_lengths(64, 512)
  assert lengths.shape == (64,) and lengths.dtype == np.int32
  # round(6.4) rows at the limit, the others in [1, 64].
  assert (lengths == 512).sum() == 6
  short = lengths[lengths != 512]
  assert short.min() >= 1 and short.max() <= 64
  assert len(set(short.tolist())) > 20  # spread, not one value
  # The same draws every time (every side, every step); a seed changes them.
  np.testing.assert_array_equal(lengths, long_tail.draw_lengths(64, 512))
  assert not np.array_equal(lengths, long_tail.draw_lengths(64, 512, seed=1))
  # Few rows still get one long row; short rows stay under a small limit.
  tiny = long_tail.draw_lengths(4, 16)
  assert (tiny == 16).sum() == 1 and tiny.min() >= 1
  with pytest.raises(ValueError, match="rows and tokens"):
    long_tail.draw_lengths(0, 16)


def test_end_steps_leave_the_limit_rows_without_an_end():
  np.testing.assert_array_equal(
      long_tail.end_steps([1, 5, 8, 3], 8), [0, 4, 8, 2])


def test_lengths_read_back_from_each_sides_output():
  # transformers: up to and with the first end id (2 or 0), else all T.
  ids = [[7, 7, 2, 0], [7, 7, 7, 7], [0, 2, 2, 2]]
  np.testing.assert_array_equal(long_tail.hf_lengths(ids, (0, 2), 4),
                                [3, 4, 1])
  # Tunix returns completions cut before the end id.
  tokens = [[7, 7], [7, 7, 7, 7], []]
  np.testing.assert_array_equal(long_tail.tunix_lengths(tokens, 4),
                                [3, 4, 1])
  assert long_tail.useful_tokens([3, 4, 1]) == 8


def test_check_lengths_names_the_side_and_rows():
  long_tail.check_lengths("x", np.array([3, 4]), np.array([3, 4]))
  with pytest.raises(AssertionError, match=r"TRL: .*rows \[1\]"):
    long_tail.check_lengths("TRL", [3, 5], [3, 4])
  with pytest.raises(AssertionError, match="rows all"):
    long_tail.check_lengths("Tunix", [3], [3, 4])


@pytest.mark.parametrize("slots", [None, 3])
def test_jax_hook_makes_the_sampler_draw_the_lengths(slots):
  """On a tiny model whose rows would end at other steps, the hook gives
  every row its drawn length, in a batch and in slots, the end id at its
  last token and no end id before."""
  import jax  # pylint: disable=g-import-not-at-top
  from grpo_jax import sampling, testing  # pylint: disable=g-import-not-at-top
  config, params = testing.peaked_tiny_model(3.0)
  t, end_id, banned = 12, 5, (5, 6, 7)
  workload = long_tail.make_workload(8, t, end_id, banned, seed=3)
  assert sorted(set(workload.lengths.tolist())) != [t]
  tokens, mask = sampling.pad_prompts([[1, 2, 3], [4]], buckets=(4,))
  out = jax.device_get(sampling.sample(
      params, config, tokens, mask, jax.random.key(0), num_samples=4,
      max_new_tokens=t, eos_ids=(end_id,), slots=slots,
      logits_hook=workload.hook))
  np.testing.assert_array_equal(out.lengths, workload.lengths)
  for row, length in enumerate(workload.lengths):
    drawn = out.tokens[row, :length]
    assert not np.isin(drawn[:-1], banned).any()
    assert (drawn[-1] == end_id) == (length < t)
  assert np.isfinite(out.logprobs).all() and np.isfinite(out.entropies).all()


def test_hf_processor_makes_generate_draw_the_lengths():
  """transformers' generate on a tiny random Llama, the processor passed
  as TRL's GRPOTrainer gets it (the model's generate wrapped)."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  torch.manual_seed(0)
  model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
      vocab_size=64, hidden_size=32, intermediate_size=64,
      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))
  t, end_id, banned = 10, 3, (3, 4)
  workload = long_tail.make_workload(6, t, end_id, banned, seed=1)
  processor = long_tail.hf_processor(workload.lengths, t, end_id, banned)
  calls = long_tail.hf_generate_with(model, processor)
  input_ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
  out = model.generate(input_ids=input_ids, max_new_tokens=t,
                       do_sample=True, top_k=0, eos_token_id=end_id,
                       pad_token_id=0, num_return_sequences=3)
  # generate got the 2 prompts (TRL passes its P x G rows as they are).
  assert calls == [2] and processor.calls > 0
  np.testing.assert_array_equal(
      long_tail.hf_lengths(out[:, 3:], (end_id,), t), workload.lengths)
  with pytest.raises(ValueError, match="the draws are for 6"):
    model.generate(input_ids=input_ids[:1], max_new_tokens=t,
                   do_sample=True, eos_token_id=end_id, pad_token_id=0)


def _long_tail_results():
  lengths = {"2x2": [3, 1, 8, 2]}
  return dict(
      grpo_jax=dict(tokens_per_s={"2x2": 10.0}, lengths=lengths,
                    slots_tokens_per_s={"2x2": {"2": 30.0, "3": 20.0}}),
      hf=dict(tokens_per_s={"2x2": 5.0}), tunix=dict(
          tokens_per_s={"2x2": 60.0}))


def test_sampler_long_tail_rows_take_the_best_slot_count():
  (row,) = sampler_bench.make_long_tail_rows(_long_tail_results(), ["2x2"])
  assert (row["rows"], row["long_rows"], row["useful_tokens"]) == (4, 1, 14)
  assert row["best_slots"] == "2" and row["best_tokens_per_s"] == 30.0
  assert (row["ratio_vs_static"], row["ratio_vs_hf"],
          row["ratio_vs_tunix"]) == (3.0, 6.0, 0.5)
  lines = sampler_bench.long_tail_table(
      [row], ["grpo_jax", "hf", "tunix"]).splitlines()
  assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|")
  assert lines[2] == ("| 2x2 (4, 1) | 14 | 10.0 | 30.0 | 20.0 | 5.0 | 60.0 "
                      "| 3.00x | 6.00x | 0.50x |")


def test_sampler_long_tail_defaults():
  args = sampler_bench.parse_args(["--workload", "long_tail"])
  assert (args.batches, args.max_new_tokens, args.slots) == (
      ["8x8"], 512, [8, 16, 32])
  fixed = sampler_bench.parse_args([])
  assert (fixed.batches, fixed.max_new_tokens) == (
      ["1", "8", "32", "8x8"], 64)
  with pytest.raises(SystemExit):
    sampler_bench.parse_args(["--max_new_tokens", "0"])


def test_step_long_tail_defaults_and_floor():
  args = step_bench.parse_args(["--workload", "long_tail"])
  assert (args.num_prompts, args.max_new_tokens, args.slots) == ([8], 512,
                                                                 16)
  assert step_bench.make_config(args, 8).rollout.slots == 16
  assert step_bench.parse_args([]).slots == 0
  with pytest.raises(SystemExit):
    step_bench.parse_args(["--slots", "-1"])
  row = _step_row()
  row["grpo_jax"]["lengths"] = [64, 10, 20, 6]
  step_bench.add_floors(row, LIMITS, max_new_tokens=64)
  # The longest row's 64 steps at 0.4 s (4e9 bytes at 10 GB/s), more than
  # 2e9 FLOPs x 100 useful tokens at 100 GFLOP/s (2 s).
  assert row["useful_tokens"] == 100.0
  assert row["grpo_jax"]["decode_floor_s"] == pytest.approx(25.6)
  row["grpo_jax"]["slots"] = 4
  row["ratio_vs_trl"] = 4.0
  lines = step_bench.useful_table([row]).splitlines()
  assert lines[2] == "| 1 x 8 | grpo_jax (4 slots) | 100 | 2.00 | 50.0 | - |"
  assert lines[3] == "| 1 x 8 | TRL 1.16.0 | 100 | 8.00 | 12.5 | 4.00x |"


@pytest.mark.slow
def test_tiny_long_tail_step_writes_json(tmp_path, monkeypatch):
  monkeypatch.setattr(machine, "measure", _small_measure)
  path = tmp_path / "step.json"
  step_bench.main(["--model", "tiny", "--skip_trl", "--skip_tunix",
                   "--workload", "long_tail", "--num_prompts", "2",
                   "--max_new_tokens", "12", "--slots", "4", "--steps", "1",
                   "--json", str(path)])
  ours = json.loads(path.read_text())["rows"][0]["grpo_jax"]
  lengths = long_tail.draw_lengths(16, 12)
  assert ours["lengths"] == lengths.tolist() and ours["slots"] == 4
  assert ours["completion_length"] == pytest.approx(lengths.mean())
  assert ours["compiles_per_step"][1] == 0


# ------------------------------------------------------------------ paged


def test_paged_cache_gathers_back_to_the_regions():
  import jax  # pylint: disable=g-import-not-at-top
  from experiments.benchmarks import paged  # pylint: disable=g-import-not-at-top
  caches = paged.region_caches(jax.random.key(0), layers=2, slots=3,
                               kv_heads=2, head_dim=4, columns=12,
                               dtype="float32")
  table = paged.page_table(3, 12, 4)
  assert sorted(table.reshape(-1).tolist()) == list(range(9))
  assert table.reshape(-1).tolist() != list(range(9))  # shuffled
  for (k, v), (pk, pv) in zip(caches, paged.to_pages(caches, table, 4)):
    got_k, got_v = paged.gather_pages(pk, pv, table)
    np.testing.assert_array_equal(got_k, k)
    np.testing.assert_array_equal(got_v, v)
  with pytest.raises(ValueError, match="multiple"):
    paged.page_table(3, 10, 4)


def test_paged_check_runs_at_a_tiny_size(capsys):
  from experiments.benchmarks import paged  # pylint: disable=g-import-not-at-top
  (row,) = paged.main(["--slots", "2", "--layers", "1", "--columns", "16",
                       "--page", "4", "--repeats", "1"])
  assert row["regions_s"] > 0 and row["paged_s"] > 0
  assert row["ratio"] == row["paged_s"] / row["regions_s"]
  assert "| 2 |" in capsys.readouterr().out
  with pytest.raises(SystemExit):
    paged.parse_args(["--columns", "10", "--page", "4"])


# ------------------------------------------------- accelerator: 1.5B shape


def test_accelerator_shape_presets_and_flags_beside_them_win():
  from experiments.benchmarks import accelerator  # pylint: disable=g-import-not-at-top
  args = accelerator.parse_args(["--shape", "1.5b"])
  assert (args.model, args.dtypes, args.batches, args.prompts) == (
      "qwen2.5-1.5b", ["bfloat16"], [1, 8, 32, 128], [16])
  assert (args.group, args.loss_n, args.plan) == (8, 0, "cpu")
  args = accelerator.parse_args(["--shape", "1.5b", "--batches", "1",
                                 "--plan", "off"])
  assert (args.batches, args.plan) == ([1], "off")
  assert accelerator.parse_args([]).plan == "off"
  for bad in (["--shape", "7b"], ["--plan_mfu", "0"], ["--loss_n", "-1"]):
    with pytest.raises(SystemExit):
      accelerator.parse_args(bad)


def test_accelerator_tiny_shape_puts_the_plan_beside_the_update(
    monkeypatch, capsys):
  from experiments.benchmarks import accelerator  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(machine, "matmul_gflop_s", lambda *a: 100.0)
  monkeypatch.setattr(machine, "device_bandwidth_gb_s", lambda *a: 10.0)
  result = accelerator.main(["--shape", "tiny"])
  assert [r["workload"] for r in result["rows"]] == [
      "decode, batch 1", "decode, batch 2", "update, 2 x 2"]
  (plan,) = result["plan"]
  update = result["rows"][2]
  assert plan["workload"] == "2 x 2" and plan["platform"] == "cpu"
  assert plan["measured_update_s"] == update["seconds"]
  # The planner's FLOPs over the measured time, of 100 GFLOP/s; its time
  # at 40% of the same.
  assert plan["measured_mfu"] == pytest.approx(
      plan["update_flops"] / update["seconds"] / 1e11)
  assert plan["update_s_at_mfu"] == pytest.approx(
      plan["update_flops"] / (0.4 * 1e11))
  assert plan["update_peak_gib"] > 0 and plan["sample_peak_gib"] > 0
  assert "| bfloat16 | 2 x 2 |" in capsys.readouterr().out
