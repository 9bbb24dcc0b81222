r"""Plan a run's memory and FLOPs ahead of time: ``python -m experiments.plan``.

  python -m experiments.plan --config=configs/grpo.py \
      --config.model.name=qwen2.5-7b --devices=8 --config.mesh.shape='(1,8,1)'
  python -m experiments.plan --config=configs/grpo.py \
      --config.model.name=/path/to/config.json --devices=4 \
      --config.mesh.shape='(1,4,1)' --mfu=0.4 --peak_tflops=459

  TPU_LIBRARY_PATH=/path/to/libtpu/libtpu.so python -m experiments.plan \
      --config=configs/grpo.py --config.model.name=qwen2.5-7b \
      --topology=v5p:2x2x1 --config.mesh.shape='(1,4,1)'

Compiles the step's programs (update, sampler, log-prob passes) for the
config on ``--devices`` simulated CPU devices (an estimate of accelerator
memory), or with ``--topology`` for a TPU slice's compile-only devices
(XLA:TPU's own figures; needs libtpu, ``pip install 'jax[tpu]'`` or
TPU_LIBRARY_PATH, but no TPU), without allocating anything or reading any
weights, and prints per-device memory, FLOPs and step time per chip
(`grpo_jax.planning`). ``--config.model.name`` names a shipped architecture
(``grpo_jax/models/architectures/*.json``), a Hugging Face config.json, or a
directory holding one. ``--mode`` applies a mode's config overrides
(`planning.MODES`).
"""

import os
import sys


def _flag_value(argv, name):
  """The value of ``--name=value`` or ``--name value`` in argv, or None."""
  for i, arg in enumerate(argv):
    if arg.startswith(f"--{name}="):
      return arg.split("=", 1)[1]
    if arg == f"--{name}" and i + 1 < len(argv):
      return argv[i + 1]
  return None


def _set_up_devices(argv) -> None:
  """Before jax is imported: ``--devices=N`` simulated CPU devices, or for
  ``--topology`` the CPU as jax's only runtime backend (the TPU devices are
  compile-only) and libtpu told not to look for a TPU host."""
  if _flag_value(argv, "topology"):
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    return
  devices = _flag_value(argv, "devices")
  if devices:
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    flags.append(f"--xla_force_host_platform_device_count={int(devices)}")
    os.environ["XLA_FLAGS"] = " ".join(flags)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


_set_up_devices(sys.argv)

# pylint: disable=g-import-not-at-top,wrong-import-position
import json

from absl import flags
import jax
from ml_collections import config_flags
from experiments import _cli
from grpo_jax import train as train_lib
from grpo_jax import planning

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "A configs/<variant>.py file, optionally :tiny.",
    lock_config=True)
_DEVICES = flags.DEFINE_integer(
    "devices", 0, "Simulated CPU devices to plan for (sets XLA_FLAGS before "
    "jax is imported); the mesh must use all of them. 0: jax's devices.")
_TOPOLOGY = flags.DEFINE_string(
    "topology", "", "Compile for a TPU slice instead, e.g. v5e:2x4 or "
    "v5p:2x2x1 (compile-only devices; needs libtpu).")
_MODE = flags.DEFINE_string(
    "mode", "full", "A training mode's config overrides: "
    f"{', '.join(planning.MODES)}, or several joined by '+' (bf16+lora).")
_MFU = flags.DEFINE_float("mfu", 0.4, "Model FLOPs utilisation for the "
                          "step time.")
_PEAK = flags.DEFINE_float("peak_tflops", 0.0, "A custom chip's dense peak "
                           "TFLOP/s (added to the named chips' rows).")
_PROMPT = flags.DEFINE_integer("prompt_length", 0, "Prompt columns Sp; 0: "
                               "the largest of data.prompt_buckets.")
_JSON = flags.DEFINE_string("json", "", "Also write the plan here as JSON.")
flags.mark_flags_as_required(["config"])


def main(argv):
  del argv
  config = train_lib.validate(planning.apply_mode(_CONFIG.value, _MODE.value))
  devices = None
  if _TOPOLOGY.value:
    devices = planning.tpu_devices(_TOPOLOGY.value)
  elif _DEVICES.value and jax.device_count() != _DEVICES.value:
    raise ValueError(
        f"--devices={_DEVICES.value} but jax has {jax.device_count()} "
        f"{jax.default_backend()} devices: the flag must reach XLA_FLAGS "
        "before jax starts (run as python -m experiments.plan).")
  mesh = planning.mesh_for(config, devices)
  result = planning.plan(config, mesh=mesh, prompt_length=_PROMPT.value)
  print(planning.format_plan(result, mfu=_MFU.value,
                             peak_tflops=_PEAK.value))
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(dict(result.to_dict(), mode=_MODE.value,
                     topology=_TOPOLOGY.value), f, indent=1)


if __name__ == "__main__":
  _cli.run(main)
