r"""Train a GRPO-family variant: ``python -m experiments.train``.

  python -m experiments.train --list     # the variants and every component
  python -m experiments.train --config=configs/grpo.py --workdir=runs/grpo
  python -m experiments.train --config=configs/dapo.py:tiny --workdir=/tmp/x \
      --config.train.num_steps=3
  python -m experiments.train --config=configs/dapo.py \
      --config.objective.kwargs.clip_high=0.3 --dry_run

``--config.a.b=value`` overrides a field; an unknown field is an error, and
the config is validated before any model is loaded: a config error prints
one line naming the field and the fix (``--verbose`` adds the traceback).
``--dry_run`` prints the config as resolved, validates it and lists the
components it builds, then stops: no model, no compute, nothing written.
At the end the run's summary says where its outputs are, its last figures
and the commands that evaluate and export it.

Rerunning the same command resumes from the latest checkpoint in the
workdir (a complete run says so and does nothing). SIGTERM (a
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
import numpy as np
import tqdm

from experiments import _cli
from grpo_jax import catalog
from grpo_jax import config as config_lib
from grpo_jax.runtime import checkpoint
from grpo_jax.runtime import sharding
from grpo_jax.runtime import summary
from grpo_jax import train as train_lib

CONFIGS_DIR = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "configs")

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "A configs/<variant>.py file, optionally :tiny.",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory.")
_LIST = flags.DEFINE_bool(
    "list", False, "List the variants (configs/*.py) and every registered "
    "component (name, paper, one line), then exit.")
_DRY_RUN = flags.DEFINE_bool(
    "dry_run", False, "Print the resolved config, validate it and list the "
    "components it builds, then exit: no model loaded, nothing written.")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", os.environ.get("GRPO_JAX_DISTRIBUTED", "") == "1",
    "Call jax.distributed.initialize() first (one process per host); "
    "default from the env var GRPO_JAX_DISTRIBUTED=1.")


class Progress:
  """A tqdm bar and the per-step callback that advances it. A new run's bar
  opens at once (`fresh`); a resumed run's at the first step it trains, at
  its checkpoint's step, so that a complete run shows none."""

  def __init__(self, num_steps: int, *, fresh: bool):
    self.num_steps = num_steps
    self.trained = 0  # steps trained by this call
    self._bar = self._open(0) if fresh else None
    self._held_out = None  # the latest evaluation's greedy accuracy

  def _open(self, step):
    return tqdm.tqdm(total=self.num_steps, initial=step, unit="step",
                     dynamic_ncols=True)

  def callback(self, step, record):
    if self._bar is None:
      self._bar = self._open(step)
    self._bar.n = step + 1
    self.trained += 1
    if "eval/greedy_accuracy" in record:
      self._held_out = record["eval/greedy_accuracy"]
    shown = {"reward": record.get("reward/total"),
             "acc": record.get("accuracy"), "kl": record.get("kl"),
             "eval": self._held_out, "tok/s": record.get("tokens_per_s")}
    self._bar.set_postfix(
        {k: f"{v:.3g}" for k, v in shown.items() if v is not None},
        refresh=False)
    self._bar.refresh()

  def close(self):
    if self._bar is not None:
      self._bar.close()


def dry_run(config) -> str:
  """The config as resolved (overrides applied), then validated and its
  components built (no model, no compute), listed with their papers."""
  flag = flags.FLAGS[_CONFIG.name]
  overrides = ", ".join(f"{path}={value!r}" for path, value in
                        config_flags.get_override_values(flag).items())
  text = [f"config {config_flags.get_config_filename(flag)}"
          + (f" with {overrides}:" if overrides else ":")]
  text += [f"  {path} = {value!r}" for path, value in catalog.fields(config)]
  train_lib.validate(config)
  config_lib.check_files(config)
  train_lib.make_components(config)
  train_lib.make_corrections(config)
  text.append("\nvalid; the components it builds:")
  picked = list(catalog.chosen(config))
  column = max(len(field) for field, _ in picked) + 2
  for field, line in picked:
    paper = f"  [{line.paper}]" if line.paper else ""
    text.append(f"  {field + ':':<{column}}{line.name}{paper}")
  text.append("dry run: no model loaded, nothing written.")
  return "\n".join(text)


def step_of(state) -> int:
  """The state's step as an int (its first local copy: on several hosts
  the step is replicated over the mesh)."""
  step = state.step
  if hasattr(step, "addressable_data"):
    step = step.addressable_data(0)
  return int(np.asarray(step))


def main(argv):
  del argv
  if _LIST.value:
    print(catalog.format_catalog(CONFIGS_DIR))
    return
  config = _CONFIG.value
  if config is None:
    raise app.UsageError("give --config=configs/<variant>.py; --list shows "
                         "the variants")
  if _DRY_RUN.value:
    print(dry_run(config))
    return
  if not _WORKDIR.value:
    raise app.UsageError("give --workdir, the run directory")
  # Before anything touches a device.
  sharding.maybe_initialize_distributed(_DISTRIBUTED.value)
  checkpoint.quiet_orbax_logs()
  if not sharding.is_main_process():
    train_lib.train(config, _WORKDIR.value)
    return
  train_lib.validate(config)  # a config error before the bar (train's: ms)
  ckpt_dir = train_lib.checkpoint_directory(_WORKDIR.value)
  progress = Progress(config.train.num_steps,
                      fresh=not os.path.exists(ckpt_dir))
  try:
    state = train_lib.train(config, _WORKDIR.value, callback=progress.callback)
  finally:
    progress.close()
  print(summary.describe(_WORKDIR.value, ckpt_dir, step=step_of(state),
                         num_steps=config.train.num_steps,
                         trained=progress.trained))


if __name__ == "__main__":
  _cli.run(main)
