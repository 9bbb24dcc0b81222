r"""The benchmarks' grpo_jax side on an accelerator, in absolute figures.

The peers' columns need the real weights, a tokenizer and PyTorch, which an
accelerator machine without the network may lack. This runs grpo_jax alone,
in one process on the default device, on random weights of a model's shape
(`--model`: the embedded SmolLM2-135M by default, or any architecture under
grpo_jax/models/architectures), once in float32 and once in bfloat16
compute over float32 master weights, and prints for each:

- the device's limits, measured in the same run: the best jitted matmul in
  that dtype (`machine.matmul_gflop_s`) and the best jitted `x + 1` over a
  large buffer (`machine.device_bandwidth_gb_s`: HBM, read + write);
- decode: B rows x 64 new tokens after a 32-token prompt (temperature 1,
  EOS ignored, compile excluded, the prefill included), against 64 decode
  steps' floor: every weight read once per step (the layers in the compute
  dtype, the output projection in float32, as the sampler keeps it), or 2
  FLOPs per weight per row, whichever binds; at batch 1 the share of the
  bandwidth bound;
- update: one `update.make_update_fn` step (`profile.update_case`: the
  default config's clipped AdamW and log-prob chunk, PPO clip, token mean) on
  P prompts x 8 completions of 32 + 64 tokens, against 6 W FLOPs per token
  it runs (each group's prompt once, as the update does): the share is the
  MFU against the measured matmul throughput (in bfloat16 the output
  projection still multiplies float32 weights, so that MFU flatters);
- log-probs + loss: the loss benchmark's `jax_chunked` configuration
  (`token_logprobs` + PPO clip, forward and backward, N=64 x T=1024 at the
  model's width and vocabulary) against 6 N T D V FLOPs, with XLA's peak
  memory.

On a GPU, float32 matmuls run as TF32 at JAX's default precision (on a TPU
as bf16 passes), in the model and in the measured throughput alike. On a
CPU it runs too, but slowly at the default sizes (the tests run the `tiny`
model at small ones).

    python -m experiments.benchmarks.accelerator --json accelerator.json

`--runs N` measures everything N times in the process and reports each
figure as the median with its range; `--combine a.json b.json ...` prints
that median table from the saved results of separate runs (e.g. one process
per dtype) without measuring anything.
"""

import argparse
import json
import pathlib

import numpy as np

from experiments.benchmarks import loss as loss_bench
from experiments.benchmarks import machine
from experiments.benchmarks import profile
from grpo_jax.runtime import allocator
from grpo_jax import models

# Hugging Face config.json files shipped with the package; read directly
# rather than through `planning`, whose imports (transformers) an
# accelerator machine may lack.
ARCHITECTURES = pathlib.Path(models.__file__).parent / "architectures"


def model_config(name: str, dtype: str):
  """The ModelConfig of `tiny` or a shipped architecture, no weights."""
  built_in = models.built_in_config(name)
  if built_in is not None:
    return built_in.replace(dtype=dtype)
  path = ARCHITECTURES / f"{name}.json"
  if not path.is_file():
    raise SystemExit(f"--model={name!r}: neither 'tiny' nor one of "
                     f"{sorted(p.stem for p in ARCHITECTURES.glob('*.json'))}")
  return models.ModelConfig.from_hf(json.loads(path.read_text()), dtype=dtype)


def row(dtype, workload, seconds, tokens, floor_s, binding):
  return dict(dtype=dtype, workload=workload, seconds=seconds,
              tokens_per_s=tokens / seconds, floor_s=floor_s,
              binding=binding, share_of_floor=floor_s / seconds)


def decode_bytes(config, params) -> int:
  """Bytes one decode step reads: the layers' weights in the compute dtype
  (`decoding.weights` casts them once per call), the output projection
  as stored (`models.unembedding` keeps the params' dtype)."""
  weights, _ = machine.matmul_weights(params)
  head = models.unembedding(params, config)
  return (weights - head.size) * config.compute_dtype.itemsize + head.nbytes


def decode_rows(config, params, args, limits):
  weights, _ = machine.matmul_weights(params)
  step_bytes = decode_bytes(config, params)
  floor_args = lambda batch: (weights, step_bytes, batch, limits)
  prompt = list(range(1, args.prompt_len + 1))
  rows = []
  for batch in args.batches:
    fn, fn_args = profile.decode_case(config, params, prompt, batch,
                                      args.new_tokens)
    seconds = machine.best_jax_seconds(fn, *fn_args, repeats=args.repeats)
    rows.append(row(
        config.dtype, f"decode, batch {batch}", seconds,
        batch * args.new_tokens,
        args.new_tokens * machine.decode_step_floor_s(*floor_args(batch)),
        machine.decode_binding(*floor_args(batch))))
  return rows


def update_rows(config, params, args, limits):
  weights, _ = machine.matmul_weights(params)
  rows = []
  for prompts in args.prompts:
    fn, fn_args = profile.update_case(config, params, prompts, args.group,
                                      args.prompt_len, args.new_tokens)
    seconds = machine.best_jax_seconds(fn, *fn_args, repeats=args.repeats)
    tokens = prompts * (args.prompt_len + args.group * args.new_tokens)
    rows.append(row(config.dtype, f"update, {prompts} x {args.group}",
                    seconds, tokens,
                    machine.update_floor_s(weights, tokens, limits), "matmul"))
  return rows


def device_memory_gib():
  """The default device's memory (GiB), None where it reports none (CPU)."""
  import jax  # pylint: disable=g-import-not-at-top
  stats = jax.devices()[0].memory_stats() or {}
  limit = stats.get("bytes_limit")
  return None if limit is None else limit / loss_bench.GIB


def loss_rows(config, args, limits):
  n, t, d, v = args.loss_n, args.loss_t, config.hidden_size, config.vocab_size
  argv = ["--n", str(n), "--t", str(t), "--d", str(d), "--v", str(v),
          "--dtype", config.dtype, "--repeats", str(args.repeats)]
  memory_gib = device_memory_gib()
  if memory_gib is not None:  # else the host's memory bounds it
    argv += ["--memory-limit-gib", str(memory_gib)]
  result = loss_bench.run_jax(loss_bench.parse_args(argv), "jax_chunked")
  peak = result["peak_bytes"] / loss_bench.GIB
  workload = f"log-probs + loss, {n} x {t} (peak {peak:.2f} GiB)"
  if not result["fits"]:
    print(f"# {workload}: does not fit in this device's memory; not run")
    return []
  floor_s = 6 * n * t * d * v / (limits.matmul_gflop_s * 1e9)
  return [row(config.dtype, workload, result["time_s"], n * t, floor_s,
              "matmul")]


def measure(args) -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  device = jax.devices()[0]
  bandwidth = machine.device_bandwidth_gb_s(args.copy_mib * 2**20,
                                            args.repeats)
  params = models.init_params(model_config(args.model, "float32"),
                              jax.random.key(0))
  out = dict(device=f"{device.platform} {device.device_kind}",
             model=args.model, bandwidth_gb_s=bandwidth, limits={}, rows=[])
  for dtype in args.dtypes:
    limits = machine.Limits(
        machine.matmul_gflop_s(args.matmul_size, args.repeats, dtype),
        bandwidth)
    out["limits"][dtype] = limits._asdict()
    config = model_config(args.model, dtype)
    rows = (decode_rows(config, params, args, limits)
            + update_rows(config, params, args, limits)
            + loss_rows(config, args, limits))
    print("\n".join(f"# {r}" for r in rows), flush=True)
    out["rows"] += rows
  return out


def _workload_key(row):
  """(dtype, workload) without the peak memory the loss row names."""
  return row["dtype"], row["workload"].split(" (")[0]


def _median_row(same):
  return same[0] if len(same) == 1 else machine.median_rows(
      [[r] for r in same])[0]


def combine(results) -> dict:
  """Several runs' results -> one: each (dtype, workload) row, each limit
  and the bandwidth the median over the runs that have it (with ranges, as
  `machine.median_rows`), under `runs` the number of runs it had."""
  groups, limits = {}, {}
  for result in results:
    for r in result["rows"]:
      groups.setdefault(_workload_key(r), []).append(r)
    for dtype, values in result["limits"].items():
      limits.setdefault(dtype, []).append(values)
  return dict(
      device=results[0]["device"], model=results[0]["model"],
      bandwidth_gb_s=float(np.median([r["bandwidth_gb_s"] for r in results])),
      limits={dtype: {key: float(np.median([v[key] for v in values]))
                      for key in values[0]}
              for dtype, values in limits.items()},
      rows=[dict(_median_row(same), runs=len(same))
            for same in groups.values()])


def _runs_label(rows) -> str:
  """", median of 2 runs" (or "of 1-3 runs"); "" for single runs."""
  low = min(r.get("runs", 1) for r in rows)
  high = max(r.get("runs", 1) for r in rows)
  if high == 1:
    return ""
  return f", median of {low if low == high else f'{low}-{high}'} runs"


def table(result) -> str:
  lines = ["| dtype | workload | time (s) | tokens/s | floor (s, binding) "
           "| share of floor |", "|---" * 6 + "|"]
  for r in result["rows"]:
    seconds = machine.with_range(r, "seconds", ".4g")
    share = machine.with_range(r, "share_of_floor", ".1f", scale=100,
                               unit="%")
    lines.append(
        f"| {r['dtype']} | {r['workload']} | {seconds} | "
        f"{r['tokens_per_s']:.4g} | {r['floor_s']:.3g} ({r['binding']}) | "
        f"{share} |")
  return "\n".join(lines)


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--model", default="smollm2-135m-instruct",
                 help="'tiny' or an architecture's name (random weights)")
  p.add_argument("--dtypes", default="float32,bfloat16",
                 type=lambda s: [d for d in s.split(",") if d])
  p.add_argument("--batches", default="1,8,32", type=machine.positive_ints)
  p.add_argument("--prompts", default="1,4", type=machine.positive_ints,
                 help="update rows: P values of P x --group")
  p.add_argument("--group", type=int, default=8)
  p.add_argument("--prompt_len", type=int, default=32)
  p.add_argument("--new_tokens", type=int, default=64)
  p.add_argument("--loss_n", type=int, default=64)
  p.add_argument("--loss_t", type=int, default=1024)
  p.add_argument("--matmul_size", type=int, default=8192)
  p.add_argument("--copy_mib", type=int, default=2048)
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--runs", type=int, default=1,
                 help="measure N times; report medians with their range")
  p.add_argument("--combine", nargs="+", default=None, metavar="JSON",
                 help="print the median table of saved --json results; "
                 "measures nothing")
  p.add_argument("--json", default=None, help="write the results here")
  args = p.parse_args(argv)
  if args.runs < 1:
    p.error(f"--runs={args.runs}: must be at least 1")
  missing = [f for f in args.combine or () if not pathlib.Path(f).is_file()]
  if missing:
    p.error(f"--combine: no such file {missing[0]!r}; give the --json files "
            "of earlier runs")
  bad = [d for d in args.dtypes if d not in ("float32", "bfloat16")]
  if bad or not args.dtypes:
    p.error(f"--dtypes={','.join(args.dtypes)}: choose float32 and/or "
            "bfloat16")
  model_config(args.model, "float32")  # an unknown name fails here
  return args


def main(argv=None):
  args = parse_args(argv)
  if args.combine:
    result = combine([json.loads(pathlib.Path(f).read_text())
                      for f in args.combine])
  else:
    results = [measure(args) for _ in range(args.runs)]
    result = results[0] if args.runs == 1 else combine(results)
  print(f"\n{result['device']}, {result['model']} (random weights"
        f"{_runs_label(result['rows'])}); "
        f"device copy "
        f"{result['bandwidth_gb_s']:.4g} GB/s; matmul "
        + ", ".join(f"{dtype} {limits['matmul_gflop_s']:.4g} GFLOP/s"
                    for dtype, limits in result["limits"].items()) + "\n")
  print(table(result))
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(result, indent=2))
  return result


if __name__ == "__main__":
  allocator.enable()  # first: it re-executes this process
  main()
