"""Low-rank adapters (LoRA, Hu et al., arXiv 2106.09685) on the decoder's matrices.

A target matrix W [in, out] gains A [in, r] and B [r, out]; the layer computes

    y = x W + (alpha / r) (x A) B

with W frozen. B starts at zero, so step 0 is the base model exactly, and the
reference policy of a KL penalty is the base params themselves: no second
copy of the weights exists. Adapters live in their own tree, laid out like
the params (``layers/attn/q_lora_a`` [Lyr, D, r] beside ``layers/attn/q``):

    adapters = init_adapters(params, rank=16, targets=("q", "v"), key=key)
    full = combine(params, adapters)   # what `transformer.forward` takes
    merged = merge(full, scale)        # W + scale A B: plain params again

The model applies the two small matmuls itself where a leaf has adapters
(never forming W + AB in training); each sampler call merges them into
one copy of the weights, and `train.saved_runs.restore_policy` merges them for
evaluation and export.

Our own rather than qwix: the sampler's decode step is a hand-written
function over the params dict, not a Flax module qwix could intercept, and
merging for it is two lines.
"""

from typing import Sequence

import jax
import jax.numpy as jnp

# Target name -> (module, matrix) in the params tree.
TARGETS = {"q": ("attn", "q"), "k": ("attn", "k"), "v": ("attn", "v"),
           "o": ("attn", "o"), "gate": ("mlp", "gate"), "up": ("mlp", "up"),
           "down": ("mlp", "down")}
A_SUFFIX, B_SUFFIX = "_lora_a", "_lora_b"


def check_targets(targets: Sequence[str]) -> None:
  """ValueError unless `targets` is a nonempty set of `TARGETS` names."""
  if not targets:
    raise ValueError("names no module; give at least one of "
                     f"{', '.join(TARGETS)}.")
  unknown = [t for t in targets if t not in TARGETS]
  if unknown:
    raise ValueError(f"{unknown[0]!r} names no module; choose from "
                     f"{', '.join(TARGETS)}.")


def init_adapters(params, *, rank: int, targets: Sequence[str], key) -> dict:
  """Adapters for `targets` of every layer: A uniform in +-1/sqrt(in) (as
  peft's default), B zero. float32 whatever the params' dtype."""
  check_targets(targets)
  if rank < 1:
    raise ValueError(f"rank={rank} must be >= 1.")
  layers = params["layers"]
  adapters = {}
  for i, name in enumerate(targets):
    module, matrix = TARGETS[name]
    num_layers, fan_in, fan_out = layers[module][matrix].shape
    bound = fan_in ** -0.5
    adapters.setdefault(module, {}).update({
        matrix + A_SUFFIX: jax.random.uniform(
            jax.random.fold_in(key, i), (num_layers, fan_in, rank),
            jnp.float32, -bound, bound),
        matrix + B_SUFFIX: jnp.zeros((num_layers, rank, fan_out),
                                     jnp.float32),
    })
  return {"layers": adapters}


def combine(params, adapters) -> dict:
  """The params tree with the adapter leaves added (no copies)."""
  if not adapters:
    return params
  layers = dict(params["layers"])
  for module, leaves in adapters["layers"].items():
    layers[module] = {**layers[module], **leaves}
  return {**params, "layers": layers}


def has_adapters(params) -> bool:
  return any(name.endswith(A_SUFFIX)
             for module in params["layers"].values()
             if isinstance(module, dict) for name in module)


def merge(params, scale: float) -> dict:
  """`params` with every adapted W replaced by W + scale A B and the
  adapter leaves dropped (in W's dtype)."""
  layers = dict(params["layers"])
  for module, leaves in params["layers"].items():
    if not isinstance(leaves, dict):
      continue
    merged = {name: w for name, w in leaves.items()
              if not name.endswith((A_SUFFIX, B_SUFFIX))}
    for name in list(merged):
      if name + A_SUFFIX in leaves:
        a, b = leaves[name + A_SUFFIX], leaves[name + B_SUFFIX]
        delta = jnp.einsum("lir,lro->lio", a.astype(jnp.float32),
                           b.astype(jnp.float32))
        merged[name] = (merged[name].astype(jnp.float32)
                        + scale * delta).astype(merged[name].dtype)
    layers[module] = merged
  return {**params, "layers": layers}


def adapted_matmul(module, name: str, x, w, dtype, scale: float):
  """``x @ w`` in `dtype`, plus the module's LoRA term for `name` if its
  params carry one (a Flax linen module inside `transformer`).

  x is one [rows, in] matrix, flattened once by the caller: the weight
  gradient is then ``x.T @ dy`` over one contracted axis, where over [B, S]
  XLA:CPU copied every MLP gradient transposed (1.06x on the SmolLM2
  update), and projections of the same input (q, k, v; gate, up) share
  one saved copy of it for the backward pass, where a reshape each kept
  one each. Returns [rows, out].
  """
  y = x @ w.astype(dtype)
  if module.has_variable("params", name + A_SUFFIX):
    a = module.get_variable("params", name + A_SUFFIX).astype(dtype)
    b = module.get_variable("params", name + B_SUFFIX).astype(dtype)
    y = y + ((x @ a) @ b) * jnp.asarray(scale, dtype)
  return y
