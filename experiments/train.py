"""Train a GRPO-family variant: ``python -m experiments.train``.

  python -m experiments.train --config=configs/grpo.py --workdir=runs/grpo
  python -m experiments.train --config=configs/dapo.py:tiny --workdir=/tmp/x \
      --config.train.num_steps=3

``--config.a.b=value`` overrides a field; an unknown field is an error, and
the config is validated before any model is loaded. Rerunning the same
command resumes from the latest checkpoint in the workdir. SIGTERM (a
preemption) or Ctrl-C finishes the current step, saves a checkpoint and
exits 0; Ctrl-C twice stops at once (docs/faults.md).

Several hosts: run the same command on every host with ``--distributed``
and a workdir all hosts see (e.g. a bucket or NFS path); outside TPU pods
and SLURM also set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and
JAX_PROCESS_ID (`sharding.maybe_initialize_distributed`). Process 0 shows
the progress bar and writes metrics; every process saves checkpoints.
"""

import os

if __name__ == "__main__":  # before the imports below, which a re-exec
  from grpo_jax.runtime import allocator  # would load twice
  allocator.enable()

from absl import app
from absl import flags
from ml_collections import config_flags
import tqdm

from grpo_jax.runtime import checkpoint
from grpo_jax.runtime import sharding
from grpo_jax import train as train_lib

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "A configs/<variant>.py file, optionally :tiny.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory.")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", os.environ.get("GRPO_JAX_DISTRIBUTED", "") == "1",
    "Call jax.distributed.initialize() first (one process per host); "
    "default from the env var GRPO_JAX_DISTRIBUTED=1.")
flags.mark_flags_as_required(["config", "workdir"])


def progress_bar(config):
  """A tqdm bar and the per-step callback that advances it."""
  bar = tqdm.tqdm(total=config.train.num_steps, unit="step", dynamic_ncols=True)
  held_out = {}  # the latest evaluation's greedy accuracy (eval.every)

  def callback(step, record):
    bar.n = step + 1
    if "eval/greedy_accuracy" in record:
      held_out["eval"] = record["eval/greedy_accuracy"]
    shown = {"reward": record.get("reward/total"),
             "acc": record.get("accuracy"), "kl": record.get("kl"),
             "eval": held_out.get("eval"),
             "tok/s": record.get("tokens_per_s")}
    bar.set_postfix({k: f"{v:.3g}" for k, v in shown.items() if v is not None},
                    refresh=False)
    bar.refresh()
  return bar, callback


def main(argv):
  del argv
  # Before anything touches a device.
  sharding.maybe_initialize_distributed(_DISTRIBUTED.value)
  checkpoint.quiet_orbax_logs()
  config = _CONFIG.value  # validated by train_lib.train, once
  if not sharding.is_main_process():
    train_lib.train(config, _WORKDIR.value)
    return
  bar, callback = progress_bar(config)
  try:
    train_lib.train(config, _WORKDIR.value, callback=callback)
  finally:
    bar.close()


if __name__ == "__main__":
  app.run(main)
