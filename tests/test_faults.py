"""Faults: each one injected into a tiny run, and what the run does.

Preemption (SIGTERM, SIGINT), an unreadable checkpoint, an unwritable or
full disk, a storm of non-finite updates, a reward that fails every step,
and config paths that do not exist. The two-process preemption check is in
tests/test_multihost.py, the reward deadlines in tests/test_reward_workers.py.
"""

import os
import random
import re
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import grpo as grpo_config
from grpo_jax.runtime import checkpoint
from grpo_jax import config as config_lib
from grpo_jax.runtime import faults
from grpo_jax import measures
from grpo_jax.runtime import metrics
from grpo_jax import rewards
from grpo_jax import testing
from grpo_jax import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_STEPS = 6


def tiny_config(**train_fields):
  config = grpo_config.get_config("tiny")
  config.train.num_steps = NUM_STEPS
  config.checkpoint.every = 2
  config.metrics.tensorboard = False
  config.metrics.plot = False
  # Lengths vary within groups, so advantages and the update are not zero.
  config.rewards.shapers.overlong = dict(weight=1.0, max_length=8,
                                         cache_length=4)
  config.train.update(train_fields)
  return config


@pytest.fixture(scope="module")
def run():
  return train.build(tiny_config())


@pytest.fixture(scope="module")
def straight(run, tmp_path_factory):
  """An uninterrupted run: (final state, its metrics)."""
  workdir = tmp_path_factory.mktemp("straight")
  state = train.train(run.config, str(workdir), run=run)
  return state, metrics.read(str(workdir / metrics.METRICS_FILE))


def without_timing(records):
  return [{k: v for k, v in r.items()
           if not k.startswith("time/") and "per_s" not in k}
          for r in records]


def with_loop(run, **fields):
  return run._replace(loop=run.loop._replace(**fields))


def latest(workdir):
  ckpt = checkpoint.Checkpointer(str(workdir / "checkpoints"))
  try:
    return ckpt.latest_step()
  finally:
    ckpt.close()


# ------------------------------------------------------------- preemption


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_run_saves_stops_and_the_rerun_matches(
    run, straight, tmp_path, signum, caplog):
  def signal_in_step_2(step, record):
    del record
    if step == 2:  # a periodic checkpoint is due only after step 3
      os.kill(os.getpid(), signum)

  handler = signal.getsignal(signum)
  state = train.train(run.config, str(tmp_path), run=run,
                      callback=signal_in_step_2)
  assert signal.getsignal(signum) is handler  # put back
  assert int(state.step) == 3
  assert latest(tmp_path) == 3
  name = signal.Signals(signum).name
  assert f"stopped by {name} after step 3 of {NUM_STEPS}" in caplog.text

  resumed = train.train(run.config, str(tmp_path), run=run)
  testing.assert_close(resumed, straight[0], rtol=0, atol=0)
  records = metrics.read(str(tmp_path / metrics.METRICS_FILE))
  assert [r["step"] for r in records] == list(range(NUM_STEPS))
  assert without_timing(records) == without_timing(straight[1])


def test_a_second_sigint_stops_at_once(run, tmp_path):
  survived_the_first = []

  def twice_in_step_2(step, record):
    del record
    if step == 2:
      os.kill(os.getpid(), signal.SIGINT)
      survived_the_first.append(True)
      os.kill(os.getpid(), signal.SIGINT)

  with pytest.raises(KeyboardInterrupt):
    train.train(run.config, str(tmp_path), run=run, callback=twice_in_step_2)
  assert survived_the_first == [True]
  assert latest(tmp_path) == 2  # no checkpoint for step 3


def test_a_sigterm_while_the_model_loads_ends_the_run_before_a_step(
    run, tmp_path, monkeypatch, caplog):
  def build_then_preempted(config):
    del config
    os.kill(os.getpid(), signal.SIGTERM)
    return run
  monkeypatch.setattr(train, "build_validated", build_then_preempted)
  state = train.train(run.config, str(tmp_path))
  assert int(state.step) == 0 and latest(tmp_path) is None
  assert "stopped by SIGTERM before step 0" in caplog.text
  assert not (tmp_path / metrics.METRICS_FILE).exists()


def test_a_sigterm_during_a_save_stops_after_it(run, tmp_path, monkeypatch):
  real_save = checkpoint.Checkpointer.save

  def preempted_while_saving_2(self, step, *args, **kwargs):
    real_save(self, step, *args, **kwargs)
    if step == 2:
      os.kill(os.getpid(), signal.SIGTERM)

  monkeypatch.setattr(checkpoint.Checkpointer, "save",
                      preempted_while_saving_2)
  state = train.train(run.config, str(tmp_path), run=run)
  assert int(state.step) == 2 and latest(tmp_path) == 2  # no extra step


def cli(workdir, cache_dir, num_steps):
  """The README's train command on the tiny config, and its environment
  (a compilation cache shared by the reruns)."""
  command = [sys.executable, "-m", "experiments.train",
             "--config=configs/grpo.py:tiny", f"--workdir={workdir}",
             "--config.metrics.tensorboard=False",
             f"--config.train.num_steps={num_steps}",
             "--config.checkpoint.every=1"]
  env = dict(os.environ, JAX_DISABLE_MOST_OPTIMIZATIONS="true",
             JAX_COMPILATION_CACHE_DIR=str(cache_dir),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", PYTHONPATH=ROOT)
  return command, env


def wait_for(process, condition, what):
  deadline = time.time() + 600
  while time.time() < deadline and process.poll() is None and not condition():
    time.sleep(0.002)
  assert process.poll() is None, f"the run ended before {what}"


def saving(ckpt_dir):
  """Whether orbax is writing a checkpoint (its temporary directory, renamed
  to the step's name when the save completes) after a first one exists."""
  names = os.listdir(ckpt_dir) if ckpt_dir.exists() else []
  return (any(n.isdigit() for n in names)
          and any("orbax-checkpoint-tmp" in n for n in names))


def test_the_command_survives_sigkill_mid_save_and_sigterm(tmp_path):
  """SIGKILL while a checkpoint is being written, rerun; SIGTERM, which
  exits 0 with a checkpoint; rerun to the end: every step once."""
  workdir, num_steps = tmp_path / "run", 40
  command, env = cli(workdir, tmp_path / "cache", num_steps)
  ckpt_dir, metrics_file = workdir / "checkpoints", workdir / metrics.METRICS_FILE
  start = lambda: subprocess.Popen(command, cwd=ROOT, env=env,
                                   stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
  process = start()
  wait_for(process, lambda: saving(ckpt_dir), "SIGKILL")
  process.send_signal(signal.SIGKILL)
  process.communicate()
  killed_at = latest(workdir)
  assert killed_at is not None and killed_at < num_steps

  process = start()
  wait_for(process, lambda: metrics_file.exists() and len(
      metrics.read(str(metrics_file))) >= killed_at + 2, "SIGTERM")
  process.send_signal(signal.SIGTERM)
  _, stderr = process.communicate(timeout=300)
  assert process.returncode == 0, stderr[-3000:]
  assert f"resuming from the checkpoint of step {killed_at}" in stderr
  stopped = latest(workdir)
  assert killed_at + 2 <= stopped < num_steps
  assert f"stopped by SIGTERM after step {stopped} of {num_steps}" in stderr
  assert [r["step"] for r in metrics.read(str(metrics_file))] == list(
      range(stopped))

  rerun = subprocess.run(command, cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert latest(workdir) == num_steps
  assert [r["step"] for r in metrics.read(str(metrics_file))] == list(
      range(num_steps))


# -------------------------------------------------- checkpoint integrity


def truncate_data_files(step_dir):
  for root, _, files in os.walk(step_dir / "state"):
    for name in files:
      path = os.path.join(root, name)
      if os.path.getsize(path) > 1000:
        with open(path, "r+b") as f:
          f.truncate(100)


@pytest.mark.parametrize("fault", ["truncated", "stray_directory"])
def test_an_unreadable_newest_checkpoint(run, straight, tmp_path, fault,
                                         caplog):
  short = with_loop(run, num_steps=4)
  train.train(run.config, str(tmp_path), run=short)  # checkpoints 2 and 4
  ckpt_dir = tmp_path / "checkpoints"
  if fault == "truncated":
    bad, good = 4, 2
    truncate_data_files(ckpt_dir / "4")
  else:  # a directory with a step's name and none of orbax's files
    bad, good = 5, 4
    os.makedirs(ckpt_dir / "5")

  with pytest.raises(checkpoint.CorruptCheckpoint) as error:
    train.train(run.config, str(tmp_path), run=run)
  message = str(error.value)
  assert f"checkpoint {bad} in {ckpt_dir}" in message
  assert f"newest readable checkpoint is {good}" in message
  assert "checkpoint.on_corrupt=previous" in message
  assert (ckpt_dir / str(bad)).is_dir()  # nothing moved

  resumed = train.train(run.config, str(tmp_path),
                        run=with_loop(run, on_corrupt="previous"))
  assert f"resuming from checkpoint {good}" in caplog.text
  moved = os.listdir(str(ckpt_dir) + checkpoint.CORRUPT_SUFFIX)
  assert len(moved) == 1 and moved[0].startswith(f"{bad}-")
  testing.assert_close(resumed, straight[0], rtol=0, atol=0)


def test_a_checkpoint_of_another_config_is_a_mismatch_not_corruption(
    tmp_path):
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(3, {"tracker": jnp.zeros((4, 2)), "lam": jnp.ones(())})
  other = {"tracker": jnp.zeros((8, 2)), "lam": jnp.ones(())}
  with pytest.raises(checkpoint.StateMismatch, match=r"checkpoint 3 in .* "
                     r"holds tracker of shape \(4, 2\); this config makes it "
                     r"\(8, 2\)"):
    ckpt.restore_newest(other, on_corrupt="previous")
  with pytest.raises(checkpoint.StateMismatch, match="has no extra"):
    ckpt.restore_newest(dict(other, tracker=jnp.zeros((4, 2)),
                             extra=jnp.zeros(2)), on_corrupt="previous")
  assert ckpt.all_steps() == [3]  # nothing moved
  ckpt.close()


def test_no_readable_checkpoint_moves_nothing(run, tmp_path):
  train.train(run.config, str(tmp_path), run=with_loop(run, num_steps=2))
  truncate_data_files(tmp_path / "checkpoints" / "2")
  with pytest.raises(checkpoint.CorruptCheckpoint, match="None of the 1"):
    train.train(run.config, str(tmp_path),
                run=with_loop(run, on_corrupt="previous"))
  assert (tmp_path / "checkpoints" / "2").is_dir()


def test_an_unwritable_workdir_fails_before_the_model_loads(tmp_path,
                                                            monkeypatch):
  blocker = tmp_path / "a_file"
  blocker.write_text("")
  monkeypatch.setattr(train, "build_validated",
                      lambda config: pytest.fail("built"))
  with pytest.raises(OSError, match="cannot write to .*a_file"):
    train.train(tiny_config(), str(blocker / "run"))


def test_a_full_disk_fails_before_the_first_step(run, tmp_path, monkeypatch):
  usage = checkpoint.shutil.disk_usage(tmp_path)
  monkeypatch.setattr(checkpoint.shutil, "disk_usage",
                      lambda path: usage._replace(free=1000))
  monkeypatch.setattr(train, "train_step",
                      lambda *args: pytest.fail("a step ran"))
  with pytest.raises(OSError, match="0.00 GiB free, and a checkpoint needs"):
    train.train(run.config, str(tmp_path), run=run)


def test_a_failed_save_keeps_the_previous_checkpoint(run, tmp_path,
                                                     monkeypatch):
  real_save = checkpoint.ocp.CheckpointManager.save

  def disk_full_at_step_4(self, step, *args, **kwargs):
    if step == 4:  # part of the save written, then the disk is full
      partial = tmp_path / "checkpoints" / "4.orbax-checkpoint-tmp-7" / "state"
      partial.mkdir(parents=True)
      (partial / "d").write_bytes(b"\0" * 100)
      raise OSError(28, "No space left on device")
    return real_save(self, step, *args, **kwargs)

  monkeypatch.setattr(checkpoint.ocp.CheckpointManager, "save",
                      disk_full_at_step_4)
  with pytest.raises(OSError, match="saving checkpoint 4 .* No space left on "
                     "device.*checkpoint 2 is intact"):
    train.train(run.config, str(tmp_path), run=run)
  monkeypatch.undo()
  assert latest(tmp_path) == 2
  resumed = train.train(run.config, str(tmp_path), run=run)
  assert int(resumed.step) == NUM_STEPS


# ------------------------------------------------------------- NaN storms


def poisoned(run, bad_steps):
  """`run` whose update gets NaN advantages at `bad_steps` (one update per
  step here: one iteration, one minibatch)."""
  calls = []

  def update_fn(state, batch):
    step = len(calls)
    calls.append(step)
    if step in bad_steps:
      batch = batch._replace(advantages=batch.advantages * jnp.nan)
    return run.update_fn(state, batch)
  return run._replace(update_fn=update_fn)


def test_a_nan_storm_stops_the_run_and_keeps_the_last_good_checkpoint(
    run, tmp_path):
  storm = poisoned(with_loop(run, max_nonfinite_updates=3, checkpoint_every=1),
                   bad_steps=range(2, NUM_STEPS))
  with pytest.raises(faults.NonFiniteUpdates) as error:
    train.train(run.config, str(tmp_path), run=storm)
  message = str(error.value)
  assert "3 optimiser updates in a row" in message
  assert "the last finite one was in step 1" in message
  assert re.search("Non-finite in step 4: .*grad_norm.*loss", message)
  assert latest(tmp_path) == 2  # steps 2-4 saved nothing
  records = metrics.read(str(tmp_path / metrics.METRICS_FILE))
  assert [r["nonfinite_updates"] for r in records] == [0, 0, 1, 1, 1]


def test_a_blip_of_nan_postpones_the_save_but_does_not_stop(run, straight,
                                                            tmp_path):
  # Step 1's update is skipped: the periodic save after it waits for step 2.
  blip = poisoned(with_loop(run, max_nonfinite_updates=2), bad_steps={1})
  state = train.train(run.config, str(tmp_path), run=blip)
  assert int(state.step) == NUM_STEPS
  steps = checkpoint.Checkpointer(str(tmp_path / "checkpoints")).all_steps()
  assert steps == [3, 4, 6]
  assert not np.allclose(jax.tree.leaves(state.params)[0],
                         jax.tree.leaves(straight[0].params)[0])


def test_health_counts_updates_across_steps_and_ignores_empty_ones():
  def step_figures(nonfinite, trailing, updates=2, empty=0):
    return {"optimizer_steps": float(updates),
            "empty_minibatches": float(empty),
            "nonfinite_updates": float(nonfinite),
            "nonfinite_updates/trailing": float(trailing),
            "loss": float("nan") if nonfinite else 0.5}

  check = lambda health, step, figures: faults.check_health(
      health, step, figures, reward_names=(), max_nonfinite_updates=5,
      max_failing_steps=0)
  health = check(faults.Health(), 0, step_figures(0, 0))
  assert health == faults.Health(0, 0, ())
  health = check(health, 1, step_figures(1, 1))  # finite, then non-finite
  assert health == faults.Health(1, 1, ())
  health = check(health, 2, step_figures(2, 2))  # both non-finite
  assert health == faults.Health(3, 1, ())
  # Only empty minibatches: neither counts nor breaks the run.
  health = check(health, 3, step_figures(0, 0, updates=2, empty=2))
  assert health == faults.Health(3, 1, ())
  with pytest.raises(faults.NonFiniteUpdates, match="5 optimiser updates .*"
                     "last finite one was in step 1.*step 4: loss"):
    check(health, 4, step_figures(2, 2))
  # Saved with a checkpoint and read back.
  assert faults.Health.from_json(health.to_json()) == health
  failing = faults.Health(0, 3, (("format", 1), ("judge", 2)))
  assert faults.Health.from_json(failing.to_json()) == failing
  assert faults.Health.from_json(None) == faults.Health()


def test_trailing_nonfinite_reads_the_updates_in_order():
  def record(nonfinite, empty=0):
    return {"nonfinite_updates": measures.Sum(np.float32(nonfinite)),
            "empty_minibatches": measures.Sum(np.float32(empty))}
  records = [record(1), record(0), record(1), record(0, empty=1), record(1)]
  assert faults.trailing_nonfinite(records) == 2
  assert faults.trailing_nonfinite(records[:2]) == 0
  assert faults.trailing_nonfinite([]) == 0


# ------------------------------------------------------- failing rewards


def test_a_reward_failing_every_step_warns_then_stops_the_run(tmp_path,
                                                              caplog):
  def broken(prompts, completions, answers):
    raise RuntimeError("the judge is down")

  with rewards.VERIFIERS.scoped():
    rewards.VERIFIERS.register("judge")(broken)
    config = tiny_config()
    config.rewards.functions = ("judge", "format")
    config.rewards.weights = (1.0, 0.1)
    config.rewards.max_failing_steps = 3
    config.kl.beta = 0.0
    with pytest.raises(faults.RewardFailure) as error:
      train.train(config, str(tmp_path))
  assert "reward 'judge' failed on all 8 completions of step 2" in str(
      error.value)
  assert "rewards.max_failing_steps=3" in str(error.value)
  for step in (0, 1):  # a warning each step before
    assert (f"reward 'judge' failed on all 8 completions of step {step} "
            f"({step + 1} step(s) in a row") in caplog.text
  assert "RuntimeError('the judge is down')" in caplog.text  # the scorer's
  records = metrics.read(str(tmp_path / metrics.METRICS_FILE))
  assert [r["reward_errors/judge"] for r in records] == [8, 8, 8]
  assert [r["reward_errors/format"] for r in records] == [0, 0, 0]
  assert latest(tmp_path) == 2  # step 2 saved nothing


# ----------------------------------------------------------- data paths


@pytest.mark.parametrize("field, value, match", [
    ("data.path", "/nonexistent/train.jsonl", "data.path.*is not a file"),
    ("data.path", "DIR", "data.path.*is a directory"),
    ("model.name", "./nonexistent/model", "model.name.*does not exist"),
    ("model.name", "/nonexistent/model.gguf", "model.name.*does not exist"),
])
def test_a_missing_file_is_an_error_naming_its_field(tmp_path, field, value,
                                                     match):
  """`train.build` checks the files (`check_files`) before it loads any."""
  config = tiny_config()
  if field == "data.path":
    config.data.task = "jsonl"
    config.data.path = str(tmp_path) if value == "DIR" else value
  else:
    config.model.name = value
  train.validate(config)  # planning or evaluating needs no files
  with pytest.raises(ValueError, match=match):
    config_lib.check_files(config)


# ------------------------------------------------------------------ soak


def count_lines(path):
  return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.slow
def test_soak_sigkill_at_random_moments_ends_where_a_straight_run_does(
    tmp_path):
  """A 200-step run SIGKILLed four times at random steps (and random
  moments within them, saves included), restarted each time, ends with
  the params of an uninterrupted run, bit for bit."""
  num_steps, kills = 200, 4
  env = dict(os.environ, JAX_DISABLE_MOST_OPTIMIZATIONS="true",
             JAX_COMPILATION_CACHE_DIR=str(tmp_path / "cache"),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", PYTHONPATH=ROOT)

  def command(workdir):
    return [sys.executable, "-m", "experiments.train",
            "--config=configs/grpo.py:tiny", f"--workdir={workdir}",
            "--config.metrics.tensorboard=False",
            "--config.metrics.plot=False",
            f"--config.train.num_steps={num_steps}",
            "--config.checkpoint.every=3"]

  def finish(workdir):
    result = subprocess.run(command(workdir), cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]

  finish(tmp_path / "straight")
  rng = random.Random(0)
  workdir = tmp_path / "killed"
  metrics_file = workdir / metrics.METRICS_FILE
  kill_at = sorted(rng.sample(range(5, num_steps - 5), kills))
  for target in kill_at:
    process = subprocess.Popen(command(workdir), cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.time() + 900
    while (process.poll() is None and time.time() < deadline
           and count_lines(metrics_file) < target):
      time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 0.3))
    assert process.poll() is None, f"the run ended before step {target}"
    process.send_signal(signal.SIGKILL)
    process.wait()
  finish(workdir)

  template = train.build(grpo_config.get_config("tiny")).state
  states = []
  for name in ("straight", "killed"):
    ckpt = checkpoint.Checkpointer(str(tmp_path / name / "checkpoints"))
    assert ckpt.latest_step() == num_steps
    states.append(ckpt.restore(template)[0])
    ckpt.close()
  testing.assert_close(states[1], states[0], rtol=0, atol=0)
  records = metrics.read(str(metrics_file))
  assert [r["step"] for r in records] == list(range(num_steps))
