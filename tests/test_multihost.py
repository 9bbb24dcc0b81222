"""Multi-host training: two real JAX processes on CPU, and its pieces.

The two-process test starts this file twice as a script (``python
tests/test_multihost.py <process id> <port> <workdir>``); the processes meet
through `jax.distributed.initialize` on localhost and run collectives with
gloo (JAX's CPU default), two simulated devices each, one global mesh of 4.
"""

import json
import os
import signal
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import pytest

from configs import grpo as grpo_config
from grpo_jax.runtime import metrics
from grpo_jax.rollout import build as rollout_build
from grpo_jax.runtime import sharding
from grpo_jax import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_STEPS = 2
# Wall-clock figures differ between processes; every other figure must not.
HOST_LOCAL = ("time/", "tokens_per_s")


def tiny_config():
  config = grpo_config.get_config("tiny")
  config.train.num_steps = NUM_STEPS
  config.checkpoint.every = 1
  # The random tiny model never answers right; a length penalty that varies
  # within groups gives nonzero advantages, so the params really move.
  config.rewards.shapers.overlong = dict(weight=1.0, max_length=8,
                                         cache_length=4)
  # Lengths vary only where a row ends early, which the tiny model rarely
  # does in 8 tokens: seed 2's two steps both have such groups (asserted).
  config.seed = 2
  return config


# ------------------------------------------------------- one process


def test_to_host_copies_arrays_to_numpy():
  tree = {"a": jnp.arange(6).reshape(2, 3), "b": np.ones(2, np.float32)}
  host = sharding.to_host(tree)
  assert isinstance(host["a"], np.ndarray)
  np.testing.assert_array_equal(host["a"], [[0, 1, 2], [3, 4, 5]])
  np.testing.assert_array_equal(host["b"], [1.0, 1.0])


def test_one_process_gathers_its_own_block():
  block = np.asarray([[1.0, 2.0], [3.0, 4.0]])
  np.testing.assert_array_equal(sharding.gather_process_blocks(block), block)


def test_num_prompts_must_split_over_processes(monkeypatch):
  monkeypatch.setattr(jax, "process_count", lambda: 3)
  config = tiny_config()  # num_prompts = 2
  with pytest.raises(ValueError, match="rollout.num_prompts=2"):
    rollout_build.from_config(config, None, None)


def test_only_process_zero_writes_metrics(tmp_path, monkeypatch):
  """A process other than 0 trains, checkpoints and calls back, but writes
  no metrics.jsonl, TensorBoard events or plot."""
  monkeypatch.setattr(sharding, "is_main_process", lambda: False)
  config = tiny_config()
  config.train.num_steps = 1
  records = []
  train.train(config, str(tmp_path),
              callback=lambda step, record: records.append(record))
  assert [r["step"] for r in records] == [0]
  assert "reward/total" in records[0]
  assert not (tmp_path / metrics.METRICS_FILE).exists()
  assert not (tmp_path / "tensorboard").exists()
  assert not (tmp_path / metrics.PLOT_FILE).exists()
  assert (tmp_path / "checkpoints" / "1").is_dir()


# ----------------------------------------------------- two processes


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_two_processes_train_the_same_params(tmp_path):
  """Two processes x 2 CPU devices, FSDP over all 4: both finish with the
  same params and the same (global) measurements; process 0 alone opens
  a metrics writer; orbax saves every step. Process 1 alone is sent
  SIGTERM in step 1 of 3: both stop after step 2 with its checkpoint."""
  port = free_port()
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=2")
  workers = [subprocess.Popen(
      [sys.executable, os.path.abspath(__file__), str(i), str(port),
       str(tmp_path)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True) for i in range(2)]
  outputs = []
  try:
    for worker in workers:
      outputs.append(worker.communicate(timeout=900)[0])
  finally:
    for worker in workers:
      if worker.poll() is None:
        worker.kill()
  for worker, output in zip(workers, outputs):
    assert worker.returncode == 0, output[-4000:]

  results = [json.loads((tmp_path / f"result_{i}.json").read_text())
             for i in range(2)]
  assert [r["process_count"] for r in results] == [2, 2]
  assert [r["device_count"] for r in results] == [4, 4]
  assert [r["writers"] for r in results] == [1, 0]
  assert results[0]["blocks"] == results[1]["blocks"] == [0, 0, 1, 1]
  for r in results:
    assert not r["split_is_addressable"]
    assert r["split_to_host"] == [0, 1, 2, 3]
  # Every figure but wall-clock time agrees: rewards scored on each
  # process's own prompts were gathered before measuring.
  global_figures = [
      {k: v for k, v in record.items() if not k.startswith(HOST_LOCAL)}
      for r in results for record in r["records"]]
  assert global_figures[:NUM_STEPS] == global_figures[NUM_STEPS:]
  assert [r["step"] for r in results[0]["records"]] == list(range(NUM_STEPS))
  assert [r["final_step"] for r in results] == [NUM_STEPS, NUM_STEPS]
  assert all(r["advantage/abs_mean"] > 0.1 for r in results[0]["records"])

  params = [np.load(tmp_path / f"params_{i}.npz") for i in range(2)]
  assert sorted(params[0].files) == sorted(params[1].files)
  for name in params[0].files:
    np.testing.assert_array_equal(params[0][name], params[1][name])
  # Adam moves a weight with a nonzero gradient by about the learning rate.
  moved = np.abs(params[0]["arr_0"] - np.asarray(results[0]["initial_leaf"]))
  assert moved.max() > 1e-4

  records = metrics.read(str(tmp_path / metrics.METRICS_FILE))
  assert [r["step"] for r in records] == list(range(NUM_STEPS))
  assert len(list((tmp_path / "tensorboard").iterdir())) == 1
  assert (tmp_path / metrics.PLOT_FILE).exists()
  assert sorted(os.listdir(tmp_path / "checkpoints")) == ["1", "2"]


def worker_main(process_id: int, port: int, workdir: str) -> None:
  """One of the two processes of `test_two_processes_train_the_same_params`."""
  jax.config.update("jax_numpy_rank_promotion", "raise")
  jax.config.update("jax_disable_most_optimizations", True)
  jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}",
                             num_processes=2, process_id=process_id)
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  writers = []
  real_init = metrics.MetricsWriter.__init__

  def counting_init(self, *args, **kwargs):
    writers.append(1)
    real_init(self, *args, **kwargs)
  metrics.MetricsWriter.__init__ = counting_init

  config = tiny_config()
  config.mesh.shape = (1, -1, 1)  # FSDP over the 4 devices of 2 processes
  config.train.num_steps = NUM_STEPS + 1  # a preemption ends it early
  run = train.build(config)
  initial_leaf = multihost_utils.process_allgather(
      jax.tree.leaves(run.state.params)[0], tiled=True)
  records = []

  def callback(step, record):
    records.append(record)
    if process_id == 1 and step == NUM_STEPS - 1:
      os.kill(os.getpid(), signal.SIGTERM)
  state = train.train(config, workdir, run=run, callback=callback)
  params = multihost_utils.process_allgather(state.params, tiled=True)
  np.savez(os.path.join(workdir, f"params_{process_id}.npz"),
           *jax.tree.leaves(params))
  blocks = sharding.gather_process_blocks(np.full((2,), process_id))
  # Rows split over both processes (each holds 2 of the 4).
  split = jax.make_array_from_callback(
      (4,), NamedSharding(sharding.mesh_from_config(config.mesh),
                          P(sharding.BATCH_AXES)),
      lambda index: np.arange(4)[index])
  result = {"process_count": jax.process_count(),
            "device_count": jax.device_count(), "writers": len(writers),
            "blocks": blocks.tolist(), "records": records,
            "final_step": int(state.step),
            "split_is_addressable": split.is_fully_addressable,
            "split_to_host": sharding.to_host(split).tolist(),
            "initial_leaf": np.asarray(initial_leaf).tolist()}
  with open(os.path.join(workdir, f"result_{process_id}.json"), "w") as f:
    json.dump(result, f)
  jax.distributed.shutdown()


if __name__ == "__main__":
  worker_main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
