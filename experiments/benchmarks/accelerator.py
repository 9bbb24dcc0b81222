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

`--shape 1.5b` is the 1.5B run in one command: Qwen2.5-1.5B's shape on
random weights, bfloat16 compute, decode at 1 / 8 / 32 / 128 rows against
the HBM bound, the update's MFU at 16 prompts x 8 rows, no loss row, and
beside them the planner's estimate for the same shapes (`--plan cpu`:
`grpo_jax.planning` compiled on the host's CPU, as where no accelerator is;
`--plan device`: compiled for the accelerator, XLA's own figures): the
update's and the sampler's peak memory and analytic FLOPs, the update's
time at `--plan_mfu` of the measured matmul throughput, against the
measured time and the device's peak memory in use. `--shape tiny` is the
same program on the tiny model at tiny sizes (a CPU check). Any flag given
beside `--shape` wins over its preset:

    python -m experiments.benchmarks.accelerator --shape 1.5b \
        --json accelerator_1.5b.json
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


# `--shape` presets: argparse defaults, so a flag given beside wins.
SHAPES = {
    "1.5b": dict(model="qwen2.5-1.5b", dtypes="bfloat16",
                 batches="1,8,32,128", prompts="16", group=8, prompt_len=32,
                 new_tokens=64, loss_n=0, repeats=3, plan="cpu"),
    "tiny": dict(model="tiny", dtypes="bfloat16", batches="1,2",
                 prompts="2", group=2, prompt_len=4, new_tokens=4, loss_n=0,
                 repeats=1, matmul_size=64, copy_mib=1, plan="cpu"),
}


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


def device_peak_gib():
  """The default device's peak memory in use so far (GiB), None where it
  reports none (CPU)."""
  import jax  # pylint: disable=g-import-not-at-top
  stats = jax.devices()[0].memory_stats() or {}
  peak = stats.get("peak_bytes_in_use")
  return None if peak is None else peak / loss_bench.GIB


def loss_rows(config, args, limits):
  if not args.loss_n:  # --loss_n 0: no loss row
    return []
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
    rows = decode_rows(config, params, args, limits)
    peak_after_decode = device_peak_gib()
    rows += update_rows(config, params, args, limits)
    out.setdefault("device_peak_gib", {})[dtype] = dict(
        after_decode=peak_after_decode, after_update=device_peak_gib())
    rows += loss_rows(config, args, limits)
    print("\n".join(f"# {r}" for r in rows), flush=True)
    out["rows"] += rows
  return out


def plan_config(args, num_prompts, dtype):
  """The trainer's config for the measured update's shapes: P prompts x
  --group rows of --prompt_len + --new_tokens, on policy, no KL, PPO clip
  with token mean (as `profile.update_case`), one device."""
  from grpo_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from grpo_jax import train as train_lib  # pylint: disable=g-import-not-at-top
  c = config_lib.finalize(config_lib.get_base_config(), None)
  c.model.name = args.model
  c.model.dtype = dtype
  c.rollout.num_prompts = num_prompts
  c.rollout.num_generations = args.group
  c.rollout.max_new_tokens = args.new_tokens
  c.data.prompt_buckets = (args.prompt_len,)
  c.kl.beta = 0.0
  c.objective.name = "ppo_clip"
  c.objective.kwargs = dict(aggregation="token_mean")
  c.train.num_iterations = 1
  c.train.num_minibatches = 1
  c.train.microbatch_size = 0
  c.mesh.shape = (1, 1, 1)
  return train_lib.validate(c)


def plan_rows(args, result) -> list:
  """The planner's update and sampler at each --prompts P (x --group) for
  each dtype, beside what the device measured: the update's time and MFU
  (of the planner's analytic FLOPs), the device's peak memory in use."""
  import jax  # pylint: disable=g-import-not-at-top
  from grpo_jax import planning  # pylint: disable=g-import-not-at-top
  devices = jax.devices("cpu")[:1] if args.plan == "cpu" else None
  measured = {(r["dtype"], r["workload"]): r for r in result["rows"]}
  rows = []
  for dtype in args.dtypes:
    matmul = result["limits"][dtype]["matmul_gflop_s"] * 1e9
    peaks = result.get("device_peak_gib", {}).get(dtype, {})
    for prompts in args.prompts:
      config = plan_config(args, prompts, dtype)
      plan = planning.plan(config, mesh=planning.mesh_for(config, devices),
                           prompt_length=args.prompt_len,
                           programs=("update", "sample"))
      programs = plan.by_name
      update, sample = programs["update"], programs["sample"]
      got = measured.get((dtype, f"update, {prompts} x {args.group}"))
      row_ = dict(
          dtype=dtype, workload=f"{prompts} x {args.group}",
          platform=plan.platform,
          update_peak_gib=update.peak / loss_bench.GIB,
          sample_peak_gib=sample.peak / loss_bench.GIB,
          update_flops=float(update.flops), sample_flops=float(sample.flops),
          update_s_at_mfu=planning.step_time(
              update.flops, num_devices=1, mfu=args.plan_mfu,
              peak_tflops=matmul / 1e12),
          measured_update_s=got and got["seconds"],
          measured_peak_gib=peaks.get("after_update"))
      if got:
        row_["measured_mfu"] = update.flops / got["seconds"] / matmul
      rows.append(row_)
      print(f"# plan {row_}", flush=True)
  return rows


def plan_table(rows, mfu) -> str:
  """Markdown: the planner's figures beside the measured ones."""
  def text(value, form):
    return "-" if value is None else f"{value:{form}}"
  lines = [
      "| dtype | P x G | planner: update peak GiB | planner: sampler peak "
      f"GiB | update TFLOPs (analytic) | planner: update s at {mfu:.0%} MFU "
      "| measured update s | measured MFU | device peak in use GiB |",
      "|---" * 9 + "|"]
  for r in rows:
    lines.append(
        f"| {r['dtype']} | {r['workload']} | {r['update_peak_gib']:.2f} | "
        f"{r['sample_peak_gib']:.2f} | {r['update_flops'] / 1e12:.3g} | "
        f"{r['update_s_at_mfu']:.4g} | "
        f"{text(r['measured_update_s'], '.4g')} | "
        f"{text(r.get('measured_mfu'), '.1%')} | "
        f"{text(r['measured_peak_gib'], '.2f')} |")
  return "\n".join(lines)


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
  shape = argparse.ArgumentParser(add_help=False)
  shape.add_argument("--shape", choices=sorted(SHAPES), default=None)
  preset = SHAPES.get(shape.parse_known_args(argv)[0].shape, {})
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                              parents=[shape])
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
  p.add_argument("--loss_n", type=int, default=64,
                 help="rows of the log-prob + loss row; 0 leaves it out")
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
  p.add_argument("--plan", choices=("off", "cpu", "device"), default="off",
                 help="the planner's estimate beside the update: compiled "
                 "on the host's CPU (as without an accelerator) or for the "
                 "device")
  p.add_argument("--plan_mfu", type=float, default=0.4,
                 help="the MFU the planner's update time assumes")
  p.set_defaults(**preset)
  args = p.parse_args(argv)
  if args.runs < 1:
    p.error(f"--runs={args.runs}: must be at least 1")
  if args.loss_n < 0:
    p.error(f"--loss_n={args.loss_n}: must be >= 0 (0: no loss row)")
  if not 0 < args.plan_mfu <= 1:
    p.error(f"--plan_mfu={args.plan_mfu}: must be in (0, 1]")
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
    # The process's peak memory so far: the last run's holds every run's.
    result["device_peak_gib"] = results[-1]["device_peak_gib"]
  print(f"\n{result['device']}, {result['model']} (random weights"
        f"{_runs_label(result['rows'])}); "
        f"device copy "
        f"{result['bandwidth_gb_s']:.4g} GB/s; matmul "
        + ", ".join(f"{dtype} {limits['matmul_gflop_s']:.4g} GFLOP/s"
                    for dtype, limits in result["limits"].items()) + "\n")
  print(table(result))
  if args.plan != "off" and not args.combine:
    result["plan"] = plan_rows(args, result)
    print(f"\nThe planner (grpo_jax.planning, compiled for "
          f"{result['plan'][0]['platform']}) for the same shapes; the "
          "device's peak memory in use is the process's after the update "
          "(decode and the update's own buffers in it):\n")
    print(plan_table(result["plan"], args.plan_mfu))
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(result, indent=2))
  return result


if __name__ == "__main__":
  allocator.enable()  # first: it re-executes this process
  main()
