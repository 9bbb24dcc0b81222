"""Mesh and partition rules: data, FSDP and tensor parallelism.

One mesh with three named axes carries every kind of parallelism:

* ``data``: rows of the batch (pure data parallelism, params replicated);
* ``fsdp``: rows of the batch AND the width D of every weight (ZeRO-3 style:
  each device stores 1/fsdp of the params and optimiser state, and XLA
  all-gathers a weight just before it is used);
* ``tensor``: attention heads and the MLP's hidden dimension F (Megatron
  style, arXiv:1909.08053): q/k/v and gate/up split their output, o and down
  their input, so each device computes a slice of the heads and of F.

How each parameter is split is data: `DEFAULT_RULES` maps a parameter path
(``layers/attn/q``) to a `PartitionSpec` over its full shape, the leading
stacked-layer axis included (never split: `lax.scan` walks it). The same specs
serve the policy params, the reference params and the optimiser state (whose
moment trees mirror the params). Batches split their leading row axis over
``('data', 'fsdp')``; the KV cache splits rows and key/value heads.

Activations follow the same plan through `constrain`, which the model and the
sampler call on the residual stream, the heads, the MLP hidden layer and the
KV cache. It acts under ``with jax.set_mesh(mesh):`` (the trainer's step, the
sampler and the log-prob passes run under it) and is the identity elsewhere,
so single-device code is unchanged.

A dimension that a mesh axis does not divide is an error (a `ValueError`
naming the array, the dimension and the axis), never a silent replication.
"""

import logging
import math
import os
import re
from typing import Any, Callable, Optional, Sequence, Tuple

import jax
from jax.experimental import multihost_utils
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS_NAMES = ("data", "fsdp", "tensor")
# Rows of a batch (and of the KV cache) are split over both batch-like axes.
BATCH_AXES = ("data", "fsdp")

# Activation layouts, applied inside traced code by `constrain`.
WHOLE = P()  # every device holds all of it.
RESIDUAL = P(BATCH_AXES, None, None)  # [B, S, D]: the residual stream.
HEADS = P(BATCH_AXES, None, "tensor", None)  # [B, S|L, heads, hd]: q/k/v and
                                             # one layer's KV cache.
MLP_HIDDEN = P(BATCH_AXES, None, "tensor")  # [B, S, F]
# The same, feature-major (the decode step's [D, N] activations).
COLUMNS = P(None, BATCH_AXES)  # [D, N]
HEAD_COLUMNS = P("tensor", None, BATCH_AXES)  # [heads, hd, N]
MLP_COLUMNS = P("tensor", BATCH_AXES)  # [F, N]
# The decode loop's KV cache: keys [N, K, hd, L], values [N, K, L, hd].
DECODE_CACHE = P(BATCH_AXES, "tensor", None, None)

# (regex over the '/'-joined parameter path, spec over the full shape).
# First full match wins. Shapes from models/transformer.py (Lyr leading).
DEFAULT_RULES: Tuple[Tuple[str, P], ...] = (
    (r"embed", P("tensor", "fsdp")),                    # [V, D]
    (r"lm_head", P("fsdp", "tensor")),                  # [D, V]
    (r"layers/attn/(q|k|v)", P(None, "fsdp", "tensor")),  # [Lyr, D, heads*hd]
    (r"layers/attn/o", P(None, "tensor", "fsdp")),      # [Lyr, H*hd, D]
    (r"layers/attn/(q|k|v)_bias", P(None, "tensor")),   # [Lyr, heads*hd]
    (r"layers/attn/(q|k)_norm", P(None, None)),         # [Lyr, hd]
    (r"layers/mlp/(gate|up)", P(None, "fsdp", "tensor")),  # [Lyr, D, F]
    (r"layers/mlp/down", P(None, "tensor", "fsdp")),    # [Lyr, F, D]
    (r"layers/(attn|mlp)_norm", P(None, None)),         # [Lyr, D]
    # LoRA adapters (models.lora): A splits like its matrix's input axis,
    # B like its output axis; the rank axis stays whole.
    (r"layers/(attn/(q|k|v)|mlp/(gate|up))_lora_a", P(None, "fsdp", None)),
    (r"layers/(attn/(q|k|v)|mlp/(gate|up))_lora_b", P(None, None, "tensor")),
    (r"layers/(attn/o|mlp/down)_lora_a", P(None, "tensor", None)),
    (r"layers/(attn/o|mlp/down)_lora_b", P(None, None, "fsdp")),
    (r"final_norm", P(None)),                           # [D]
)

Rules = Sequence[Tuple[str, P]]


# ------------------------------------------------------------------ mesh


def make_mesh(shape: Sequence[int], axis_names: Sequence[str] = AXIS_NAMES,
              devices: Optional[Sequence[Any]] = None) -> Mesh:
  """A `Mesh` of `shape` over `devices` (default: all, every process).

  One entry of `shape` may be -1: that axis gets the devices the others
  leave, e.g. ``(1, -1, 1)`` is full FSDP on any device count. A shape whose
  product divides the device count uses the first devices (one process
  only), e.g. ``(1, 1, 1)`` runs on one device.

  Args:
    shape: one size per axis name, e.g. ``(2, 4, 1)`` = data 2, fsdp 4.
    axis_names: the axis names, by default ``('data', 'fsdp', 'tensor')``.
    devices: the devices to lay out; default ``jax.devices()``.

  Returns:
    A `jax.sharding.Mesh` with Auto axes (XLA propagates shardings).
  """
  devices = list(jax.devices() if devices is None else devices)
  shape = tuple(int(s) for s in shape)
  axis_names = tuple(axis_names)
  if len(shape) != len(axis_names):
    raise ValueError(
        f"mesh shape {shape} has {len(shape)} entries but axis_names "
        f"{axis_names} has {len(axis_names)}; give one size per axis.")
  if shape.count(-1) > 1 or any(s == 0 or s < -1 for s in shape):
    raise ValueError(
        f"mesh shape {shape} must hold positive sizes and at most one -1.")
  known = math.prod(s for s in shape if s != -1)
  if -1 in shape:
    if len(devices) % known:
      raise ValueError(
          f"mesh shape {shape} (product of the known axes {known}) does not "
          f"divide the device count {len(devices)}.")
    shape = tuple(len(devices) // known if s == -1 else s for s in shape)
  size = math.prod(shape)
  if len(devices) % size or (size < len(devices) and jax.process_count() > 1):
    raise ValueError(
        f"mesh shape {shape} (product {size}) does not divide the device "
        f"count {len(devices)}; make the product of mesh.shape a divisor of "
        "it (equal to it on several hosts), or use -1 for one axis.")
  if size < len(devices):
    logging.warning("mesh shape %s uses %d of the %d devices.", shape, size,
                    len(devices))
    devices = devices[:size]
  if devices == list(jax.devices()):
    # Topology-aware order (TPU slices, multi-host) for all devices.
    return jax.make_mesh(shape, axis_names,
                         (jax.sharding.AxisType.Auto,) * len(shape))
  return Mesh(np.asarray(devices, dtype=object).reshape(shape), axis_names)


# ------------------------------------------------------------ param specs


def path_string(path) -> str:
  """'layers/attn/q' from a pytree key path: its dict keys, '/'-joined.

  Attribute and index keys (a NamedTuple field, an optax chain position) are
  skipped, so a state's ``params`` and an optimiser's ``mu`` give the same
  string as the params tree itself.
  """
  return "/".join(str(k.key) for k in path
                  if isinstance(k, jax.tree_util.DictKey))


def spec_for(path: str, rules: Rules = DEFAULT_RULES) -> P:
  """The spec of the first rule whose regex fully matches `path`."""
  for pattern, spec in rules:
    if re.fullmatch(pattern, path):
      return spec
  raise ValueError(
      f"no partition rule matches parameter path {path!r}; add a rule "
      "(regex, PartitionSpec) for it, e.g. (r'.*', PartitionSpec()) to "
      "replicate the rest.")


def param_specs(params, rules: Rules = DEFAULT_RULES):
  """A tree of `PartitionSpec`s, one per params leaf (same structure).

  Raises ValueError if no rule matches a leaf or a spec has more entries
  than the leaf has dimensions.
  """
  def one(path, leaf):
    name = path_string(path)
    spec = spec_for(name, rules)
    if len(spec) > np.ndim(leaf):
      raise ValueError(
          f"partition rule for {name!r} gives {spec} ({len(spec)} dims) but "
          f"the array has shape {np.shape(leaf)}; fix the rule.")
    return spec
  return jax.tree_util.tree_map_with_path(one, params)


def tree_specs(tree, params, rules: Rules = DEFAULT_RULES):
  """Specs for a tree whose sub-trees mirror `params` (optimiser state,
  a `TrainState`): a leaf whose dict-key path and shape equal a parameter's
  gets that parameter's spec; every other leaf (step counts, learning
  rates, keys) is replicated.
  """
  by_path = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    by_path[path_string(path)] = (np.shape(leaf), spec_for(
        path_string(path), rules))

  def one(path, leaf):
    shape, spec = by_path.get(path_string(path), (None, P()))
    return spec if np.shape(leaf) == shape else P()
  return jax.tree_util.tree_map_with_path(one, tree)


def check_divisible(tree, specs, mesh: Mesh, *, name: str = "params") -> None:
  """ValueError naming the leaf, dimension and mesh axis that do not divide.

  e.g. "params['layers']['attn']['q'] dim 2 (size 96) is not divisible by
  mesh axis 'tensor' (size 8)".
  """
  leaves = jax.tree_util.tree_leaves_with_path(tree)
  spec_leaves = jax.tree_util.tree_leaves(
      specs, is_leaf=lambda x: isinstance(x, P))
  for (path, leaf), spec in zip(leaves, spec_leaves):
    shape = np.shape(leaf)
    for dim, entry in enumerate(spec):
      axes = _axes(entry)
      if not axes:
        continue
      for axis in axes:
        if axis not in mesh.shape:
          raise ValueError(
              f"{name}{jax.tree_util.keystr(path)} spec {spec} names mesh "
              f"axis {axis!r}, which the mesh {dict(mesh.shape)} lacks.")
      size = math.prod(mesh.shape[a] for a in axes)
      if shape[dim] % size:
        axis_text = " x ".join(repr(a) for a in axes)
        raise ValueError(
            f"{name}{jax.tree_util.keystr(path)} dim {dim} (size "
            f"{shape[dim]}) is not divisible by mesh axis {axis_text} (size "
            f"{size}); change mesh.shape or the model dimensions.")


def _named(mesh, specs):
  return jax.tree.map(lambda s: NamedSharding(mesh, s), specs,
                      is_leaf=lambda x: isinstance(x, P))


def param_shardings(params, mesh: Mesh, rules: Rules = DEFAULT_RULES):
  """A tree of `NamedSharding`s for `params` (divisibility checked)."""
  specs = param_specs(params, rules)
  check_divisible(params, specs, mesh, name="params")
  return _named(mesh, specs)


def tree_shardings(tree, params, mesh: Mesh, rules: Rules = DEFAULT_RULES, *,
                   name: str = "state"):
  """`NamedSharding`s for a params-mirroring tree (see `tree_specs`)."""
  specs = tree_specs(tree, params, rules)
  check_divisible(tree, specs, mesh, name=name)
  return _named(mesh, specs)


def shard_params(params, mesh: Mesh, rules: Rules = DEFAULT_RULES):
  """`params` placed on `mesh` by `rules` (works on reference params too).

  A replicated leaf may share its buffer with the input on the input's
  device: copy the input first if the result is later donated and the input
  must survive.
  """
  return jax.device_put(params, param_shardings(params, mesh, rules))


def shard_tree(tree, params, mesh: Mesh, rules: Rules = DEFAULT_RULES, *,
               name: str = "state"):
  """A params-mirroring tree (optimiser state, `TrainState`) on `mesh`."""
  return jax.device_put(tree, tree_shardings(tree, params, mesh, rules,
                                             name=name))


# -------------------------------------------------------- batches, cache


def batch_spec(ndim: int) -> P:
  """Rows (the leading axis) over ('data', 'fsdp'); other axes whole."""
  if ndim < 1:
    raise ValueError(f"a batch array needs a row axis; got ndim={ndim}.")
  return P(BATCH_AXES, *([None] * (ndim - 1)))


def batch_shardings(batch, mesh: Mesh):
  """`NamedSharding`s for every array of `batch` (rows split)."""
  specs = jax.tree.map(lambda x: batch_spec(np.ndim(x)), batch)
  check_divisible(batch, specs, mesh, name="batch")
  return _named(mesh, specs)


def shard_batch(batch, mesh: Mesh):
  """`batch` (any pytree of [N, ...] arrays; None leaves stay None) on
  `mesh`, rows split over ('data', 'fsdp').

  On several processes every process passes the same full batch (host or
  replicated arrays) and keeps only the rows of its own devices; an array
  already laid out so is passed through.
  """
  shardings = batch_shardings(batch, mesh)
  if jax.process_count() == 1:
    return jax.device_put(batch, shardings)

  def global_array(x, sharding):
    if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(sharding,
                                                                x.ndim):
      return x
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding,
                                        lambda index: host[index])
  return jax.tree.map(global_array, batch, shardings)


def check_rows(rows: int, mesh: Mesh, *, name: str) -> None:
  """ValueError unless `rows` splits evenly over ('data', 'fsdp')."""
  size = math.prod(mesh.shape[a] for a in BATCH_AXES)
  if rows % size:
    raise ValueError(
        f"{name}={rows} rows is not divisible by mesh axis 'data' x 'fsdp' "
        f"(size {size}); change {name} or mesh.shape.")


def mesh_from_config(mesh_config) -> Mesh:
  """`make_mesh` from a config's ``mesh`` block (shape, axis_names)."""
  return make_mesh(tuple(mesh_config.shape), tuple(mesh_config.axis_names))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def constrain(x, spec: P):
  """`with_sharding_constraint(x, spec)` on the mesh set by `jax.set_mesh`.

  The model and the sampler call it on their activations, so that code
  traced under ``with jax.set_mesh(mesh):`` keeps rows split over ('data',
  'fsdp') and heads / F over 'tensor' (XLA would otherwise pick its own
  layouts from the weights', e.g. split D and all-gather activations). It is
  the identity without a mesh, and for an array whose dimension a mesh axis
  does not divide (3 rows over 4 devices, 9 heads over 2): XLA then keeps
  its own choice rather than padding.
  """
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return x
  # Axes the mesh lacks (a custom mesh of ('data',) only) count as size 1.
  spec = P(*(tuple(a for a in _axes(axes) if a in mesh.shape) or None
             for axes in spec))
  for leaf in jax.tree.leaves(x):
    for dim, axes in enumerate(spec):
      if leaf.shape[dim] % math.prod(mesh.shape[a] for a in _axes(axes)):
        return x
  return jax.lax.with_sharding_constraint(x, spec)


def _axes(entry) -> Tuple[str, ...]:
  """The mesh axes of one PartitionSpec entry (None, a name or a tuple)."""
  if entry is None:
    return ()
  return (entry,) if isinstance(entry, str) else tuple(entry)


# --------------------------------------------------------- the update_fn


def jit_sharded(update_fn: Callable, state, mesh: Mesh,
                rules: Rules = DEFAULT_RULES, *, donate: bool = True,
                frozen=None) -> Callable:
  """``jax.jit(update_fn)`` with the state and batch shardings pinned.

  Inputs and outputs keep one sharding (the state by `rules`, every batch
  array's rows over ('data', 'fsdp'), measurements replicated), so the
  function compiles once per batch shape and step t's output is step t+1's
  input without any copy. Each batch goes through `shard_batch` first (free
  for rows already split; a clear error when they do not divide).

  Args:
    update_fn: ``(state, batch[, frozen]) -> (state, measurements)``, not
      jitted (`update.make_update_fn(..., jit=False)`).
    state: a `TrainState` (arrays or ShapeDtypeStructs) to take shapes from.
    mesh: the mesh.
    rules: partition rules of the params.
    donate: donate the input state's buffers.
    frozen: params the update reads but does not train (a LoRA run's base,
      already on `mesh`), passed to every call as its third argument.
  """
  state_sh = tree_shardings(state, state.params, mesh, rules, name="state")
  # A spec shorter than an array's rank leaves the other axes whole, so one
  # sharding serves every array of the batch.
  batch_sh = NamedSharding(mesh, P(BATCH_AXES))
  in_shardings = (state_sh, batch_sh)
  if frozen is not None:
    in_shardings += (param_shardings(frozen, mesh, rules),)
  jitted = jax.jit(update_fn, in_shardings=in_shardings,
                   out_shardings=(state_sh, replicated(mesh)),
                   donate_argnums=(0,) if donate else ())
  extra = () if frozen is None else (frozen,)

  def placed_update_fn(state, batch):
    # jit refuses committed arrays laid out otherwise (e.g. log-probs from
    # another jitted function); placing is free for already-split rows.
    # The mesh context lets the model's `constrain` calls take effect.
    with jax.set_mesh(mesh):
      return jitted(state, shard_batch(batch, mesh), *extra)
  return placed_update_fn


# ------------------------------------------------------------ multi-host


def maybe_initialize_distributed(enabled: bool) -> bool:
  """Calls `jax.distributed.initialize()` if `enabled`.

  On TPU pod slices and SLURM / Open MPI GPU clusters JAX discovers the
  coordinator and the process ids itself. Elsewhere set, on every host,
  JAX_COORDINATOR_ADDRESS (host:port of process 0), JAX_NUM_PROCESSES and
  JAX_PROCESS_ID (this host's index). Returns whether it initialised.
  """
  if not enabled:
    return False
  num_processes = os.environ.get("JAX_NUM_PROCESSES")
  process_id = os.environ.get("JAX_PROCESS_ID")
  jax.distributed.initialize(
      num_processes=None if num_processes is None else int(num_processes),
      process_id=None if process_id is None else int(process_id))
  logging.info("jax.distributed: process %d of %d, %d local / %d devices",
               jax.process_index(), jax.process_count(),
               jax.local_device_count(), jax.device_count())
  return True


def process_rows(total: int, *, process_index: Optional[int] = None,
                 process_count: Optional[int] = None) -> slice:
  """The slice of `total` items (prompts) this process loads.

  Contiguous blocks, process i taking ``[i*total/n, (i+1)*total/n)``, which
  is how `jax.make_array_from_process_local_data` lays rows out.
  """
  index = jax.process_index() if process_index is None else process_index
  count = jax.process_count() if process_count is None else process_count
  if total % count:
    raise ValueError(
        f"{total} items cannot be split evenly over {count} processes; make "
        "it a multiple of the process count.")
  per = total // count
  return slice(index * per, (index + 1) * per)


def is_main_process() -> bool:
  """True on process 0, the one that writes metrics and logs."""
  return jax.process_index() == 0


def to_host(tree):
  """Numpy copies of `tree`'s arrays, whole on every process.

  An array whose shards other processes hold (not fully addressable, not
  replicated) is gathered with ``process_allgather``; every process must
  call this together. Other leaves are copied locally.
  """
  def one(x):
    if (isinstance(x, jax.Array) and not x.is_fully_addressable
        and not x.is_fully_replicated):
      return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))
  return jax.tree.map(one, tree)


def gather_process_blocks(local: np.ndarray) -> np.ndarray:
  """Every process's block of rows, concatenated in process order.

  [R, ...] on each of n processes -> [n*R, ...] on every process (the
  inverse of `process_rows`); the block itself on one process.
  """
  if jax.process_count() == 1:
    return np.asarray(local)
  return np.asarray(multihost_utils.process_allgather(
      np.asarray(local), tiled=True))
