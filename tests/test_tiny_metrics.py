"""experiments.tiny_metrics: a config's records without timing, and the
comparison that tells two sets of runs apart."""

from experiments import tiny_metrics


def test_timing_figures_are_left_out():
  assert tiny_metrics.timing("time/sample_s")
  assert tiny_metrics.timing("tokens_per_s")
  assert not tiny_metrics.timing("reward/total")


def test_differences_name_the_config_step_and_figure():
  before = {"grpo": [{"step": 0, "loss": 1.0}], "dapo": [{"step": 0}]}
  assert tiny_metrics.differences(before, before) == []
  after = {"grpo": [{"step": 0, "loss": 2.0}], "dapo": {"error": "x"}}
  assert tiny_metrics.differences(before, after) == [
      ("dapo", "missing, failed or of another length"),
      ("grpo", "step 0 loss: 1.0 -> 2.0")]


def test_a_tiny_run_records_each_step_without_timing():
  records = tiny_metrics.run_config("grpo", 1)
  assert [r["step"] for r in records] == [0]
  assert "reward/total" in records[0]
  assert not any(tiny_metrics.timing(k) for k in records[0])
