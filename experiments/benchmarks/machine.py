r"""This machine's limits, and the floors they put under the benchmarks.

A benchmark figure means little without the hardware's own ceiling beside it,
so the benchmarks measure it in the same run:

- matmul throughput: the best of several jitted [n, n] x [n, n] products
  in JAX on the default device (2 n^3 FLOPs each), GFLOP/s, in float32
  unless asked for another dtype;
- memory bandwidth: the best of several numpy copies of a large buffer
  (host memory), or of a jitted ``x + 1`` on the default device (an
  accelerator's HBM), counting the bytes read and written, GB/s;
- first touch (printed, not a floor): GB/s at which the process writes
  memory new to it, what an allocation larger than any block it freed costs
  on first use; on a virtual machine whose host takes freed pages back it
  is far below the copy bandwidth.

From these, lower bounds on the time of a model's work (attention scores,
norms and the KV cache are left out: small beside the weight matmuls here):

- one decode step of B rows reads every weight once and does 2 FLOPs per
  weight per row: max(weight bytes / bandwidth, 2 W B / throughput);
- one update (forward + backward) over n tokens does 6 W n FLOPs.

W counts the weights a token is multiplied by: every parameter, the tied
embedding included as the LM head, an untied embedding table excluded (a
lookup, not a matmul).

    python -m experiments.benchmarks.machine
"""

import argparse
import json
import os
import time
from typing import NamedTuple

import numpy as np

from grpo_jax.runtime import allocator


class Limits(NamedTuple):
  """What this machine can do, as measured."""
  matmul_gflop_s: float  # matmul throughput (float32 unless said)
  bandwidth_gb_s: float  # copy bandwidth (read + write)


def best_seconds(run, repeats: int) -> float:
  """Fastest of `repeats` calls of `run()` after a warm-up call (compile,
  allocate); `run` waits for its own results."""
  run()
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    run()
    best = min(best, time.perf_counter() - start)
  return best


def best_jax_seconds(fn, *args, repeats: int) -> float:
  """`best_seconds` of `fn(*args)`, up to its last result."""
  import jax  # pylint: disable=g-import-not-at-top
  return best_seconds(lambda: jax.block_until_ready(fn(*args)), repeats)


def matmul_gflop_s(size=2048, repeats=5, dtype="float32") -> float:
  """Best [size, size] x [size, size] throughput of jitted JAX, on the
  default device, in `dtype`."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  keys = jax.random.split(jax.random.key(0))
  a, b = (jax.random.normal(k, (size, size), dtype) for k in keys)
  return 2 * size**3 / best_jax_seconds(jax.jit(jnp.matmul), a, b,
                                        repeats=repeats) / 1e9


def memory_bandwidth_gb_s(num_bytes=512 * 2**20, repeats=5) -> float:
  """Best copy bandwidth in GB/s, counting the bytes read and written."""
  src = np.ones(num_bytes // 8, np.float64)
  dst = np.empty_like(src)
  return 2 * src.nbytes / best_seconds(lambda: np.copyto(dst, src),
                                       repeats) / 1e9


def first_touch_gb_s(num_bytes=256 * 2**20) -> float:
  """GB/s at which this process writes memory new to it: a fresh private
  anonymous mapping (as glibc's heap is), 2 MiB pages asked for (as glibc
  asks under `allocator.enable()`), written once. One measurement, not the
  best of several: a second mapping could be given the pages this one just
  handed back."""
  import mmap  # pylint: disable=g-import-not-at-top
  private = {"flags": mmap.MAP_PRIVATE} if hasattr(mmap, "MAP_PRIVATE") else {}
  region = mmap.mmap(-1, num_bytes, **private)
  try:
    if hasattr(mmap, "MADV_HUGEPAGE"):
      region.madvise(mmap.MADV_HUGEPAGE)
    pages = np.frombuffer(region, np.uint8)
    start = time.perf_counter()
    pages.fill(1)
    seconds = time.perf_counter() - start
    del pages  # the mapping closes only once no array views it
  finally:
    region.close()
  return num_bytes / seconds / 1e9


def resident_bytes():
  """This process's resident memory in bytes (Linux; NaN elsewhere)."""
  try:
    with open("/proc/self/statm") as f:
      pages = int(f.read().split()[1])
  except (OSError, IndexError, ValueError):
    return float("nan")
  return pages * os.sysconf("SC_PAGE_SIZE")


def device_bandwidth_gb_s(num_bytes=512 * 2**20, repeats=5) -> float:
  """Best jitted `x + 1` over a float32 buffer on the default device (an
  accelerator's HBM), GB/s counting the bytes read and written."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  x = jnp.zeros((num_bytes // 4,), jnp.float32)
  return 2 * x.nbytes / best_jax_seconds(jax.jit(lambda x: x + 1), x,
                                         repeats=repeats) / 1e9


def measure(matmul_size=2048, copy_bytes=512 * 2**20, repeats=5) -> Limits:
  return Limits(matmul_gflop_s(matmul_size, repeats),
                memory_bandwidth_gb_s(copy_bytes, repeats))


def matmul_weights(params) -> tuple:
  """(W, bytes of W) for a grpo_jax params tree; see the module docstring."""
  import jax  # pylint: disable=g-import-not-at-top
  leaves = jax.tree.leaves(params)
  count = sum(x.size for x in leaves)
  num_bytes = sum(x.nbytes for x in leaves)
  if "lm_head" in params:  # untied: the embedding table is only looked up
    count -= params["embed"].size
    num_bytes -= params["embed"].nbytes
  return int(count), int(num_bytes)


def decode_step_floor_s(weights, weight_bytes, rows, limits: Limits) -> float:
  """Least time of one decode step of `rows` rows: the binding one of
  reading every weight once and 2 FLOPs per weight per row."""
  return max(weight_bytes / (limits.bandwidth_gb_s * 1e9),
             2 * weights * rows / (limits.matmul_gflop_s * 1e9))


def decode_binding(weights, weight_bytes, rows, limits: Limits) -> str:
  """Which limit sets `decode_step_floor_s`: 'bandwidth' or 'matmul'."""
  reading_s = weight_bytes / (limits.bandwidth_gb_s * 1e9)
  return ("bandwidth" if reading_s == decode_step_floor_s(
      weights, weight_bytes, rows, limits) else "matmul")


def update_floor_s(weights, tokens, limits: Limits) -> float:
  """Least time of a forward + backward pass over `tokens` tokens."""
  return 6 * weights * tokens / (limits.matmul_gflop_s * 1e9)


def describe(limits: Limits) -> str:
  return (f"float32 matmul {limits.matmul_gflop_s:.1f} GFLOP/s, copy "
          f"bandwidth {limits.bandwidth_gb_s:.1f} GB/s")


def median_rows(runs):
  """Rows of several runs of a benchmark (the same rows in each) -> one set:
  every float the median over the runs, its (lowest, highest) under
  ``<key>_range``; nested dicts alike; other fields, and a float some run
  lacks, from the first run."""
  return [_median_of(same) for same in zip(*runs)]


def _median_of(same):
  row = dict(same[0])
  for key, value in same[0].items():
    if not all(key in r for r in same):  # e.g. a time where one run failed
      continue
    if isinstance(value, float):
      values = [r[key] for r in same]
      row[key] = float(np.median(values))
      row[f"{key}_range"] = (min(values), max(values))
    elif isinstance(value, dict):
      row[key] = _median_of([r[key] for r in same])
  return row


def is_positive_int(text: str) -> bool:
  """Whether `text` is a positive integer in decimal digits ("8", not "8.0",
  "-1" or "²")."""
  return text.isdecimal() and int(text) > 0


def positive_ints(text: str) -> list:
  """An argparse type: "1,8,32" -> [1, 8, 32], "" -> [] (none); any item
  that is not a positive integer is an error that names it, before any
  model loads."""
  items = [item.strip() for item in text.split(",") if item.strip()]
  bad = [item for item in items if not is_positive_int(item)]
  if bad:
    raise argparse.ArgumentTypeError(
        f"expected positive integers separated by commas (e.g. 1,8,32); "
        f"got {', '.join(map(repr, bad))} in {text!r}")
  return [int(item) for item in items]


def with_range(row, key, form, scale=1, unit="") -> str:
  """``row[key]`` formatted, with its `median_rows` range in brackets when
  it has one: "4.0 (2.0-6.0)"."""
  text = f"{scale * row[key]:{form}}{unit}"
  if f"{key}_range" in row:
    low, high = (scale * x for x in row[f"{key}_range"])
    text += f" ({low:{form}}-{high:{form}}{unit})"
  return text


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--matmul_size", type=int, default=2048)
  parser.add_argument("--copy_mib", type=int, default=512)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--json", default=None, help="write the limits here")
  args = parser.parse_args(argv)
  touch = first_touch_gb_s()  # first: before the others free memory
  limits = measure(args.matmul_size, args.copy_mib * 2**20, args.repeats)
  print(describe(limits) + f"; first touch {touch:.2f} GB/s")
  if args.json:
    with open(args.json, "w") as f:
      json.dump(limits._asdict(), f, indent=2)
  return limits


if __name__ == "__main__":
  allocator.enable()  # first: it re-executes this process
  main()
