"""Chips, FLOPs and memory figures: the arithmetic of a plan.

FLOPs are counted as the code computes them (`forward_flops`: every matmul
and the attention over every key slot; elementwise work left out), beside
the conventional ``6 x params x tokens``. XLA's own count (`xla_flops`)
takes each loop body once, so it undercounts anything scanned or looped.
"""

import dataclasses
from typing import Mapping, NamedTuple, Optional

from grpo_jax import models

GIB = 1024 ** 3


@dataclasses.dataclass(frozen=True)
class Chip:
  """One accelerator chip: dense bf16 peak and HBM per chip, and where the
  figures come from."""
  name: str
  peak_tflops: float
  hbm_bytes: int
  source: str


CHIPS: Mapping[str, Chip] = {
    "v5e": Chip("TPU v5e", 197.0, 16 * GIB,
                "cloud.google.com/tpu/docs/v5e: 197 TFLOPs bf16, 16 GB HBM2"),
    "v5p": Chip("TPU v5p", 459.0, 95 * GIB,
                "cloud.google.com/tpu/docs/v5p: 459 TFLOPs bf16, 95 GiB HBM"),
    "h100": Chip("H100 SXM", 989.0, 80 * GIB,
                 "NVIDIA H100 datasheet: bf16 1979 TFLOPS with sparsity "
                 "(989 dense), 80 GB HBM3"),
}

# Below this share of a chip's HBM a plan "fits"; up to all of it is
# "tight" (the runtime, fragmentation and XLA's own reserve need room; JAX
# on GPU preallocates 75% unless XLA_PYTHON_CLIENT_MEM_FRACTION says more).
FIT_FRACTION = 0.9


def fits(peak_bytes: int, hbm_bytes: int) -> str:
  """'yes' (<= 90% of HBM), 'tight' (<= 100%) or 'no'."""
  if peak_bytes <= FIT_FRACTION * hbm_bytes:
    return "yes"
  return "tight" if peak_bytes <= hbm_bytes else "no"


def step_time(flops: float, *, num_devices: int, mfu: float,
              peak_tflops: float) -> float:
  """Seconds for `flops` (all devices together) on `num_devices` chips of
  `peak_tflops` each running at model FLOPs utilisation `mfu`."""
  if not 0 < mfu <= 1:
    raise ValueError(f"mfu must be in (0, 1]; got {mfu}.")
  if peak_tflops <= 0:
    raise ValueError(f"peak_tflops must be > 0; got {peak_tflops}.")
  return flops / (num_devices * mfu * peak_tflops * 1e12)


def layer_matmul_params(config: models.ModelConfig) -> int:
  """Weights one token meets in one layer's matmuls: q, k, v, o and the
  SwiGLU's gate, up and down (biases and norms are not matmuls)."""
  d, f = config.hidden_size, config.intermediate_size
  q = config.num_heads * config.head_dim
  kv = config.num_kv_heads * config.head_dim
  return d * q + 2 * d * kv + q * d + 3 * d * f


def forward_flops(config: models.ModelConfig, *, queries: int, keys: int,
                  logit_positions: int) -> int:
  """Matmul and attention FLOPs of one forward pass, as the code runs it.

      2 * layers * (layer_matmul_params * queries
                    + 2 * H * hd * queries * keys)   (scores, then values)
      + 2 * D * V * logit_positions                  (the unembedding)

  Args:
    config: the model.
    queries: query positions the layers run on (all rows together).
    keys: key slots each query attends over (our attention computes every
      slot and masks: the full sequence or cache length, not the causal
      half).
    logit_positions: positions whose logits (or log-probs) are computed.
  """
  attention = 2 * config.num_heads * config.head_dim * queries * keys
  layers = config.num_layers * (layer_matmul_params(config) * queries
                                + attention)
  return 2 * layers + 2 * config.hidden_size * config.vocab_size * (
      logit_positions)


def sequence_forward_flops(config: models.ModelConfig, *, rows: int,
                           prompt_length: int, completion_length: int,
                           group_size: int = 1) -> int:
  """`forward_flops` of `batch.policy_logprobs` on [rows, Sp + T] tokens:
  the prompt columns run once per block of `group_size` rows
  (`batch.completion_hidden`), every query attends over all S slots, and
  the T completion positions get log-probs."""
  s = prompt_length + completion_length
  if group_size > 1:
    queries = rows // group_size * prompt_length + rows * completion_length
  else:
    queries = rows * s
  return forward_flops(config, queries=queries, keys=s,
                       logit_positions=rows * completion_length)


def training_flops(num_params: int, tokens: int) -> int:
  """The conventional 6 x params x tokens of a forward and backward pass."""
  return 6 * num_params * tokens


class MemorySummary(NamedTuple):
  """Per-device bytes of one compiled program (XLA's memory analysis)."""
  argument: int
  output: int
  alias: int  # outputs that reuse a donated argument's buffer
  temp: int
  code: int

  @property
  def peak(self) -> int:
    """What the program holds at once: arguments, outputs not aliased to
    a donated argument, and temporaries."""
    return self.argument + self.output - self.alias + self.temp


def memory_summary(compiled) -> MemorySummary:
  """`MemorySummary` of a ``jax.jit(...).lower(...).compile()`` result."""
  m = compiled.memory_analysis()
  if m is None:
    raise ValueError("this backend gives no memory analysis of the "
                     "compiled program.")
  return MemorySummary(
      argument=int(m.argument_size_in_bytes),
      output=int(m.output_size_in_bytes),
      alias=int(m.alias_size_in_bytes), temp=int(m.temp_size_in_bytes),
      code=int(m.generated_code_size_in_bytes))


def xla_flops(compiled) -> Optional[float]:
  """FLOPs per device from XLA's cost analysis (each loop body counted
  once), or None where the backend gives none."""
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else None
  if not cost or "flops" not in cost:
    return None
  return float(cost["flops"])
