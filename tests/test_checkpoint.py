"""Checkpoints: round trip, atomicity, exact resume (SIGKILL and the other
faults: tests/test_faults.py)."""

import os

import jax
import jax.numpy as jnp
import pytest

from configs import r2vpo as r2vpo_config
from grpo_jax.runtime import checkpoint
from grpo_jax.runtime import metrics
from grpo_jax import objectives
from grpo_jax import testing
from grpo_jax.train import optim
from grpo_jax import train


def small_state(objective="r2vpo", **options):
  optimizer = optim.make_optimizer(learning_rate=1e-3, warmup_steps=2,
                                   decay="cosine", total_steps=10)
  params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
  state = train.init_state(params, optimizer, seed=3, components={
      "objective": objectives.make(objective, **options)})
  return state._replace(step=jnp.asarray(7, jnp.int32))


def test_round_trip_restores_every_leaf_and_the_metadata(tmp_path):
  state = small_state(lam0=0.5)
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(7, state, {"note": "hello"})
  template = jax.tree.map(jnp.zeros_like, state)
  restored, meta = ckpt.restore(template)
  ckpt.close()
  testing.assert_close(restored, state, rtol=0, atol=0)
  assert jax.tree.structure(restored) == jax.tree.structure(state)
  assert float(restored.states["objective"].lam) == 0.5
  assert meta == {"note": "hello", "step": 7}


def test_a_stage_added_since_the_checkpoint_with_no_state_resumes(tmp_path):
  """A checkpoint written before the pipeline gained a stage (whose state is
  empty in this config) restores: the new stage starts from its empty
  state, every saved array as it was."""
  state = small_state(lam0=0.5)
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(7, state)
  newer = state._replace(states={**state.states, "shape": {},
                                 "temperature": ()})
  restored, _ = ckpt.restore(jax.tree.map(jnp.zeros_like, newer))
  ckpt.close()
  assert set(restored.states) == set(newer.states)
  assert restored.states["shape"] == {} and restored.states["temperature"] == ()
  testing.assert_close(restored, newer, rtol=0, atol=0)


def test_a_state_the_checkpoint_holds_empty_starts_from_the_template(
    tmp_path):
  """An objective that kept no state when the checkpoint was written (its
  entry empty or absent) resumes from the template's state with
  ``initial``; without it, or where the checkpoint holds arrays of another
  shape, restoring is refused."""
  state = small_state(lam0=0.5)
  template = jax.tree.map(jnp.zeros_like, state)
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  for step, stored in ((1, ()), (2, None)):
    states = {} if stored is None else {"objective": stored}
    ckpt.save(step, state._replace(states=states))
    restored, _ = ckpt.restore(template, step, initial=("states/objective",))
    assert float(restored.states["objective"].lam) == 0.0  # the template's
    testing.assert_close(restored.params, state.params, rtol=0, atol=0)
    with pytest.raises(checkpoint.StateMismatch, match="states/objective"):
      ckpt.restore(template, step)
  ckpt.save(3, state._replace(states={"objective": {"lam": jnp.zeros(2)}}))
  with pytest.raises(checkpoint.StateMismatch, match="states/objective/lam"):
    ckpt.restore(template, 3, initial=("states/objective",))
  ckpt.close()


def test_a_relative_directory_works(tmp_path, monkeypatch):
  # The README's command passes a relative workdir; orbax wants absolute paths.
  monkeypatch.chdir(tmp_path)
  state = small_state(objective="ppo_clip")
  ckpt = checkpoint.Checkpointer(os.path.join("runs", "checkpoints"))
  ckpt.save(3, state)
  restored, meta = ckpt.restore(state)
  ckpt.close()
  assert meta["step"] == 3
  assert os.path.isdir(tmp_path / "runs" / "checkpoints" / "3")
  testing.assert_close(restored, state, rtol=0, atol=0)


def test_keeps_only_the_newest_and_restores_the_latest(tmp_path):
  state = small_state(objective="ppo_clip")
  ckpt = checkpoint.Checkpointer(str(tmp_path), max_to_keep=2)
  for step in (1, 2, 3):
    ckpt.save(step, state._replace(step=jnp.asarray(step, jnp.int32)))
  assert ckpt.all_steps() == [2, 3]
  restored, meta = ckpt.restore(state)
  assert int(restored.step) == 3 and meta["step"] == 3
  ckpt.close()


def test_an_unfinished_save_is_not_a_checkpoint(tmp_path):
  state = small_state(objective="ppo_clip")
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(2, state)
  ckpt.close()
  # What a save killed midway leaves: orbax's temporary directory, never
  # renamed to its final name.
  os.makedirs(tmp_path / "4.orbax-checkpoint-tmp-1234" / "state")
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  assert ckpt.latest_step() == 2
  restored, _ = ckpt.restore(state)
  testing.assert_close(restored.params, state.params, rtol=0, atol=0)
  ckpt.close()


def test_restore_without_checkpoint_raises(tmp_path):
  with pytest.raises(FileNotFoundError):
    checkpoint.Checkpointer(str(tmp_path)).restore(small_state())


def test_metrics_writer_drops_records_after_the_resumed_step(tmp_path):
  writer = metrics.MetricsWriter(str(tmp_path), tensorboard=False)
  for step in range(4):
    writer.write(step, {"reward": step})
  writer.close()
  writer = metrics.MetricsWriter(str(tmp_path), start_step=2,
                                 tensorboard=False)
  writer.write(2, {"reward": 20.0})
  writer.close()
  records = metrics.read(os.path.join(tmp_path, metrics.METRICS_FILE))
  assert [(r["step"], r["reward"]) for r in records] == [
      (0, 0.0), (1, 1.0), (2, 20.0)]


# ----------------------------------------------------------------- resume


def test_resume_equals_uninterrupted_run(tmp_path):
  config = r2vpo_config.get_config("tiny")  # stateful objective: lam too
  config.train.num_steps = 4
  config.checkpoint.every = 2
  config.metrics.tensorboard = False
  config.metrics.plot = False
  testing.check_resume_is_exact(config, str(tmp_path))


def test_orbax_info_lines_stay_off_the_console_and_its_warnings_do_not():
  """The entry points' absl handler drops orbax's INFO records (several per
  save) and keeps its warnings and everyone else's INFO."""
  import logging  # pylint: disable=g-import-not-at-top
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  checkpoint.quiet_orbax_logs()
  checkpoint.quiet_orbax_logs()  # once is enough: no second filter
  handler = absl_logging.get_absl_handler()
  quiet = [f for f in handler.filters if isinstance(f, checkpoint._QuietOrbax)]
  try:
    assert len(quiet) == 1
    record = lambda path, level: logging.LogRecord("absl", level, path, 1,
                                                   "m", None, None)
    orbax_file = "/site-packages/orbax/checkpoint/checkpoint_manager.py"
    assert not handler.filter(record(orbax_file, logging.INFO))
    assert handler.filter(record(orbax_file, logging.WARNING))
    assert handler.filter(record("/grpo_jax/train/__init__.py", logging.INFO))
  finally:
    for f in quiet:
      handler.removeFilter(f)
