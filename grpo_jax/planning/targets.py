"""What a plan is for: a training mode's config overrides, and the devices.

A mode is config overrides that feed the same build path (`MODES`). The
devices are simulated CPU ones (``--xla_force_host_platform_device_count``,
set before jax starts) or, with libtpu, a TPU slice's compile-only devices
(`tpu_devices`); the config's mesh must use all of them (`check_mesh`).
"""

import math
from typing import Any, Mapping, Sequence, Tuple

import jax

from grpo_jax.runtime import sharding

# A mode is config overrides that feed the same build path; a field the
# config lacks makes its mode a clear error.
MODES: Mapping[str, Mapping[str, Any]] = {
    "full": {},  # every weight trains; params float32, compute model.dtype
    "bf16": {"model.dtype": "bfloat16"},  # bf16 compute, float32 masters
    "lora": {"lora.rank": 16},  # adapters of rank 16 on lora.targets
    "remat": {"model.remat": True},  # layers recomputed in the backward pass
}


def apply_mode(config, mode: str):
  """`config` with the overrides of `mode` set, in place: a `MODES` name,
  or several joined by '+' (``bf16+lora``)."""
  names = mode.split("+")
  for name in names:
    if name not in MODES:
      raise ValueError(f"mode={name!r} is unknown; choose one of "
                       f"{', '.join(MODES)}, or several joined by '+'.")
  for field, value in [kv for name in names for kv in MODES[name].items()]:
    *parents, leaf = field.split(".")
    node = config
    for part in parents:
      node = node.get(part) if hasattr(node, "get") else None
      if node is None:
        break
    if node is None or leaf not in node:
      raise ValueError(
          f"mode={mode!r} sets config.{field}, which this config does not "
          "have; plan with --mode=full, or add the field.")
    node[leaf] = value
  return config


def check_mesh(shape: Sequence[int], num_devices: int) -> Tuple[int, ...]:
  """`shape` with a -1 resolved; ValueError unless its product is exactly
  `num_devices` (a plan is for the whole mesh)."""
  shape = tuple(int(s) for s in shape)
  known = math.prod(s for s in shape if s != -1)
  if shape.count(-1) > 1 or any(s == 0 or s < -1 for s in shape):
    raise ValueError(f"config.mesh.shape={shape} must hold positive sizes "
                     "and at most one -1.")
  if -1 in shape:
    if num_devices % known:
      raise ValueError(
          f"config.mesh.shape={shape} (known axes {known}) does not divide "
          f"--devices={num_devices}; make the product of mesh.shape "
          f"{num_devices}.")
    shape = tuple(num_devices // known if s == -1 else s for s in shape)
  if math.prod(shape) != num_devices:
    raise ValueError(
        f"config.mesh.shape={shape} uses {math.prod(shape)} devices but the "
        f"plan is for --devices={num_devices}; make the product of "
        f"mesh.shape {num_devices} (e.g. (1,{num_devices},1) for FSDP over "
        "all of them), or use -1 for one axis.")
  return shape


def mesh_for(config, devices=None):
  """The config's mesh over `devices` (default all), which its shape must
  use exactly."""
  devices = list(jax.devices() if devices is None else devices)
  shape = check_mesh(config.mesh.shape, len(devices))
  return sharding.make_mesh(shape, tuple(config.mesh.axis_names),
                            devices=devices)


def tpu_devices(topology: str):
  """Compile-only devices of a TPU slice (e.g. ``v5e:2x4``, ``v5p:2x2x1``)
  from `jax.experimental.topologies`: no TPU needed, but libtpu must load
  (``pip install 'jax[tpu]'``, or TPU_LIBRARY_PATH naming libtpu.so)."""
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  try:
    return topologies.get_topology_desc(topology, "tpu").devices
  except RuntimeError as e:  # jax: "JAX TPU support not installed"
    raise ValueError(
        f"--topology={topology!r} needs libtpu to compile for TPU ahead of "
        f"time ({e}); pip install 'jax[tpu]' (or set TPU_LIBRARY_PATH to a "
        "libtpu.so), or plan on simulated CPU devices with --devices=N.") \
        from e
