"""The reproductions (experiments/reproduce) and the runs overlay
(experiments/runs.py): arms, summaries and plots checked by hand, and the
scripts end to end on the tiny model."""

import glob
import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from experiments import runs
from experiments.reproduce import runner
from grpo_jax.runtime import metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLAIMS = sorted(
    os.path.basename(p)[:-3]
    for p in glob.glob(os.path.join(ROOT, "experiments", "reproduce", "*.py"))
    if os.path.basename(p) not in ("__init__.py", "runner.py"))


def claim(name):
  return importlib.import_module(f"experiments.reproduce.{name}")


def write_run(path, records, config=None):
  writer = metrics.MetricsWriter(str(path), tensorboard=False)
  for record in records:
    writer.write(record["step"], {k: v for k, v in record.items()
                                  if k != "step"})
  writer.close()
  if config is not None:
    metrics.write_config(str(path), json.dumps(config))


def test_there_are_seven_claims_each_with_command_and_runtime():
  assert CLAIMS == ["avspo_collapse", "gmpo_ratio", "group_size", "knapsack",
                    "length", "stale_data", "two_grpo"]
  for name in CLAIMS:
    doc = claim(name).__doc__
    assert f"python -m experiments.reproduce.{name}" in doc, name
    assert "Scale-down" in doc and ("minutes" in doc or "hours" in doc), name
    assert "arXiv" in doc or "seed 00" in doc, name


@pytest.mark.parametrize("name", CLAIMS)
@pytest.mark.parametrize("preset", ["quickstart", "tiny"])
def test_every_arm_validates_with_what_the_claim_varies(name, preset):
  """Each arm's config validates at both presets, with the arm's own
  fields set after the scale and the seed it is given; an arm label names
  one config wherever it appears (claims share those runs)."""
  for arm in claim(name).ARMS:
    config = runner.arm_config(arm, seed=2, preset=preset)
    assert config.seed == 2
    assert config.eval.every == config.train.num_steps
    for field, value in arm.overrides.items():
      node = config
      for part in field.split("."):
        node = node[part]
      assert node == value, (arm.label, field)
    if preset == "quickstart":
      assert config.data.ops == ("+", "-", "*")  # the comparison task
      assert config.train.num_steps == 40
      assert config.optimizer.learning_rate == 2e-5


def test_an_arm_label_names_one_config_across_the_claims():
  """Claims share the runs of an arm's label: each label must mean one
  config wherever it appears (grpo_4mb in two claims, grpo in three)."""
  configs = {}
  for name in CLAIMS:
    for arm in claim(name).ARMS:
      configs.setdefault(arm.label, set()).add(
          runner.arm_config(arm, 0).to_json_best_effort())
  assert all(len(found) == 1 for found in configs.values()), [
      label for label, found in configs.items() if len(found) > 1]
  assert len(configs) == 17


def test_the_claims_vary_what_they_say():
  """Spot checks against the claims' texts: equal prompts and equal
  rollouts in claim 1, a fixed budget of 16 in claim 7, 4 and 8 optimiser
  steps per batch in claim 3, the quickstart's 8 rollouts per step in
  claims 4 and 5."""
  shape = lambda arm: (lambda c: (c.rollout.num_prompts,
                                  c.rollout.num_generations))(
                                      runner.arm_config(arm, 0))
  two = {a.label: shape(a) for a in claim("two_grpo").ARMS}
  assert two == {"grpo_1x16": (1, 16), "two_grpo_1x2": (1, 2),
                 "two_grpo_8x2": (8, 2)}
  assert {p * g for p, g in map(shape, claim("group_size").ARMS)} == {16}
  steps = {a.label: (lambda c: c.train.num_iterations
                     * c.train.num_minibatches)(runner.arm_config(a, 0))
           for a in claim("stale_data").ARMS}
  assert steps == {"grpo_4mb": 4, "grpo_2x4mb": 8, "cfpo_4mb": 4,
                   "cfpo_2x4mb": 8, "r2vpo_4mb": 4, "r2vpo_2x4mb": 8}
  for name in ("knapsack", "avspo_collapse"):
    assert [shape(a) for a in claim(name).ARMS] == [(2, 4), (2, 4)]


def test_the_band_is_the_mean_and_range_over_runs_after_smoothing():
  """Two runs of three steps; a trailing mean over 2 steps turns [1, 3, 5]
  into [1, 2, 4] and [3, 3, 7] into [3, 3, 5]; a step only one run logs
  is left out."""
  a = [dict(step=0, x=1.0), dict(step=1, x=3.0), dict(step=2, x=5.0)]
  b = [dict(step=0, x=3.0), dict(step=1, x=3.0), dict(step=2, x=7.0),
       dict(step=3, x=9.0)]
  steps, mean, low, high = runs.step_band([a, b[:3]], "x", smooth=2)
  np.testing.assert_array_equal(steps, [0, 1, 2])
  np.testing.assert_allclose(mean, [2.0, 2.5, 4.5])
  np.testing.assert_allclose(low, [1.0, 2.0, 4.0])
  np.testing.assert_allclose(high, [3.0, 3.0, 5.0])
  steps, mean, _, _ = runs.step_band([a, b], "x")
  np.testing.assert_array_equal(steps, [0, 1, 2])
  np.testing.assert_allclose(mean, [2.0, 3.0, 6.0])
  assert runs.step_band([a], "missing") is None


def test_runs_differing_only_in_seed_share_a_line(tmp_path):
  records = [dict(step=0, accuracy=0.5, ratio_max=1.5, ratio_min=0.75)]
  config = dict(seed=0, rollout=dict(num_generations=4))
  write_run(tmp_path / "grpo" / "seed0", records, config)
  write_run(tmp_path / "grpo" / "seed1", records, dict(config, seed=1))
  write_run(tmp_path / "g8", records,
            dict(seed=0, rollout=dict(num_generations=8)))
  write_run(tmp_path / "old", records)  # no config.json: its own line
  write_run(tmp_path / "grpo" / "seedless", records,  # bookkeeping aside
            dict(config, seed=2, checkpoint=dict(every=3)))
  grouped = runs.runs_by_config([str(tmp_path / d) for d in (
      "grpo/seed0", "grpo/seed1", "g8", "old", "grpo/seedless")])
  assert {k: len(v) for k, v in grouped.items()} == {"grpo": 3, "g8": 1,
                                                     "old": 1}
  assert runs.run_identity(dict(config, checkpoint=dict(every=3))) == {
      "rollout.num_generations": 4}
  assert runs.with_ratio_spread(records)[0]["ratio_spread"] == 0.75
  path = runs.overlay(grouped, str(tmp_path / "plot.png"))
  assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
  with pytest.raises(SystemExit, match="no metrics.jsonl"):
    runs.runs_by_config([str(tmp_path / "nothing")])


def test_no_column_header_breaks_a_markdown_table():
  assert not [c.header for c in runs.COLUMNS.values() if "|" in c.header]


def test_the_table_gives_mean_and_sample_deviation_per_arm():
  """Held-out accuracy 0.5 and 0.7 over two seeds: mean 0.6, sample
  deviation sqrt(0.02) = 0.141; sampled accuracy over the last 10 of 12
  steps; an unmeasured column is a dash."""
  def records(heldout):
    steps = [dict(step=s, accuracy=float(s >= 2),
                  **{"reward/scored": 8, "time/rollout_s": 1.5,
                     "time/update_s": 0.5}) for s in range(12)]
    steps[-1]["eval/greedy_accuracy"] = heldout
    return steps
  summary = runner.summarize([records(0.5), records(0.7)],
                             ("heldout", "accuracy_last10", "rollouts",
                              "train_s", "clip_fraction"))
  assert summary["heldout"][0] == pytest.approx(0.6)
  assert summary["heldout"][1] == pytest.approx(0.02 ** 0.5)
  assert summary["accuracy_last10"] == (1.0, 0.0, 2)
  assert summary["rollouts"][0] == 96
  assert summary["train_s"] == (24.0, 0.0, 2)  # 12 steps of 1.5 + 0.5 s
  assert summary["clip_fraction"] == (None, None, 0)
  table = runner.markdown({"grpo": summary}, ("heldout", "clip_fraction"),
                          {"grpo": [0, 1]})
  assert table.splitlines()[-1] == "| grpo | 0,1 | 0.600 ± 0.141 | - |"
  counts = runner.markdown({"grpo": summary}, ("rollouts",), {"grpo": [0, 1]})
  assert counts.splitlines()[-1] == "| grpo | 0,1 | 96 ± 0 |"
  assert runner.markdown(  # a column's decimals, whatever its values
      {"g": {"rollouts": (80.0, None, 1), "length_last5": (314.667, 2.3, 3)}},
      ("rollouts", "length_last5"), {"g": [0]}).splitlines()[-1] == (
          "| g | 0 | 80 | 314.7 ± 2.3 |")


def test_a_run_directory_of_another_config_is_refused(tmp_path):
  arm = claim("knapsack").ARMS[0]
  config = runner.arm_config(arm, 0, "tiny")
  run_dir = tmp_path / arm.label / "seed0"
  write_run(run_dir, [dict(step=0, accuracy=0.0)],
            dict(json.loads(config.to_json_best_effort()), seed=5))
  with pytest.raises(SystemExit, match=r"another config.*seed"):
    runner.check_same_run(str(run_dir), config)
  extra = dict(json.loads(config.to_json_best_effort()), new_field=1)
  metrics.write_config(str(run_dir), json.dumps(extra))
  runner.check_same_run(str(run_dir), config)  # a field only one side has
  bookkeeping = json.loads(config.to_json_best_effort())
  bookkeeping["checkpoint"]["every"] += 1
  bookkeeping["train"]["compilation_cache_dir"] = "/elsewhere"
  metrics.write_config(str(run_dir), json.dumps(bookkeeping))
  runner.check_same_run(str(run_dir), config)
  other = json.loads(config.to_json_best_effort())
  other["rollout"]["num_generations"] += 1
  metrics.write_config(str(run_dir), json.dumps(other))
  with pytest.raises(SystemExit, match="rollout.num_generations"):
    runner.check_same_run(str(run_dir), config)
  with pytest.raises(SystemExit, match="rollout.num_generations"):
    runner.finished_records(str(run_dir), config)  # read back: checked too


def test_unknown_arms_and_no_seeds_are_named_before_any_run(tmp_path):
  run = lambda **kwargs: runner.reproduce(
      "knapsack", claim("knapsack").ARMS, ("heldout",), preset="tiny",
      workdir=str(tmp_path), out=str(tmp_path), **kwargs)
  with pytest.raises(SystemExit, match=r"\['gmpo'\].*knapsack_rl"):
    run(seeds=[0], only=["gmpo"])
  with pytest.raises(SystemExit, match="--seeds"):
    run(seeds=[])
  with pytest.raises(SystemExit, match="no run has finished"):
    run(seeds=[0], only=[])
  assert not os.listdir(tmp_path)


def check_outputs(out, name, arms, seeds):
  result = json.load(open(os.path.join(out, f"{name}.json")))
  assert sorted(result["runs"]) == sorted(a.label for a in arms)
  for label, by_seed in result["runs"].items():
    assert sorted(by_seed) == [str(s) for s in seeds]
    for records in by_seed.values():
      assert [r["step"] for r in records] == list(range(len(records)))
      assert "eval/greedy_accuracy" in records[-1]
  assert open(os.path.join(out, f"{name}.png"), "rb").read(4) == b"\x89PNG"
  table = open(os.path.join(out, f"{name}.md")).read()
  for arm in arms:
    assert f"| {arm.label} | {','.join(map(str, seeds))} |" in table
  assert "Base model, held-out greedy accuracy" in table


def test_a_claim_runs_end_to_end_and_reads_finished_runs_back(
    tmp_path, monkeypatch):
  """Knapsack's two arms on the tiny model: the JSON holds each arm's
  steps, the PNG and the table are written; a second call trains nothing
  (a finished run is read back) and the checkpoints are gone."""
  arms = claim("knapsack").ARMS
  kwargs = dict(seeds=[0], preset="tiny", workdir=str(tmp_path / "runs"),
                out=str(tmp_path / "out"))
  runner.reproduce("knapsack", arms, claim("knapsack").COLUMNS, **kwargs)
  check_outputs(kwargs["out"], "knapsack", arms, [0])
  assert not glob.glob(str(tmp_path / "runs" / "*" / "*" / "checkpoints"))

  def no_training(*args, **kwargs):
    raise AssertionError("a finished run was trained again")
  monkeypatch.setattr(runner.train_lib, "train", no_training)
  again = runner.reproduce("knapsack", arms, ("heldout",), **kwargs)
  assert len(again["runs"]["grpo"]["0"]) == runner.arm_config(
      arms[0], 0, "tiny").train.num_steps


@pytest.mark.slow
@pytest.mark.parametrize("name", CLAIMS)
def test_each_claim_runs_on_the_tiny_model(name, tmp_path):
  """The script's own command, from the repository root."""
  out = tmp_path / "out"
  env = dict(os.environ, JAX_DISABLE_MOST_OPTIMIZATIONS="true",
             PYTHONPATH=ROOT)
  result = subprocess.run(
      [sys.executable, "-m", f"experiments.reproduce.{name}", "--preset=tiny",
       "--seeds=0", f"--workdir={tmp_path / 'runs'}", f"--out={out}"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-4000:]
  check_outputs(str(out), name, claim(name).ARMS, [0])
