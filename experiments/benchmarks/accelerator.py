r"""The benchmarks' grpo_jax side on an accelerator, in absolute figures.

The peers' columns need the real weights, a tokenizer and PyTorch, which an
accelerator machine without the network may lack. This runs grpo_jax alone,
in one process on the default device, on random weights of the embedded
model's shape (SmolLM2-135M: 30 layers, width 576, vocabulary 49152, tied
embedding), once in float32 and once in bfloat16 compute over float32
master weights, and prints for each:

- the device's limits, measured in the same run: the best jitted matmul in
  that dtype (`machine.matmul_gflop_s`) and the best jitted `x + 1` over a
  large buffer (`machine.device_bandwidth_gb_s`: HBM, read + write);
- decode: B rows x 64 new tokens after a 32-token prompt (temperature 1,
  EOS ignored, compile excluded), against the decode floor (every weight
  read once per step in the compute dtype, or 2 FLOPs per weight per row,
  whichever binds): at batch 1 the share of the bandwidth bound;
- update: one `update.make_update_fn` step (AdamW, PPO clip, token mean) on
  P prompts x 8 completions of 32 + 64 tokens, against 6 W FLOPs per token:
  the share is the MFU against the measured matmul throughput;
- log-probs + loss: the loss benchmark's `jax_chunked` configuration
  (`token_logprobs` + PPO clip, forward and backward, N=64 x T=1024 at the
  model's width and vocabulary) against 6 N T D V FLOPs, with XLA's peak
  memory.

It runs on CPU as well (the tests run it on the `tiny` shape).

    python -m experiments.benchmarks.accelerator --json accelerator.json
"""

import argparse
import json
import pathlib

from experiments.benchmarks import loss as loss_bench
from experiments.benchmarks import machine
from experiments.benchmarks import profile

# SmolLM2-135M-Instruct's config (the embedded model), weights not needed.
SMOLLM2_135M = dict(
    model_type="llama", vocab_size=49152, hidden_size=576,
    intermediate_size=1536, num_layers=30, num_heads=9, num_kv_heads=3,
    head_dim=64, rope_theta=100000.0, rms_norm_eps=1e-5,
    tie_word_embeddings=True, max_position_embeddings=8192)


def model_config(shape: str, dtype: str):
  from grpo_jax import models  # pylint: disable=g-import-not-at-top
  if shape == "tiny":
    return models.tiny_model_config(vocab_size=256).replace(dtype=dtype)
  return models.ModelConfig(**SMOLLM2_135M, dtype=dtype)


def row(dtype, workload, seconds, tokens, floor_s, binding, **extra):
  return dict(dtype=dtype, workload=workload, seconds=seconds,
              tokens_per_s=tokens / seconds, floor_s=floor_s,
              binding=binding, share_of_floor=floor_s / seconds, **extra)


def decode_rows(config, params, args, limits):
  weights, _ = machine.matmul_weights(params)
  weight_bytes = weights * config.compute_dtype.itemsize
  prompt = list(range(1, args.prompt_len + 1))
  rows = []
  for batch in args.batches:
    fn, fn_args = profile.decode_case(config, params, prompt, batch,
                                      args.new_tokens)
    seconds = machine.best_jax_seconds(fn, *fn_args, repeats=args.repeats)
    floor = (weights, weight_bytes, batch, limits)
    rows.append(row(config.dtype, f"decode, batch {batch}", seconds,
                    batch * args.new_tokens,
                    args.new_tokens * machine.decode_step_floor_s(*floor),
                    machine.decode_binding(*floor)))
  return rows


def update_rows(config, params, args, limits):
  weights, _ = machine.matmul_weights(params)
  rows = []
  for prompts in args.prompts:
    fn, fn_args = profile.update_case(config, params, prompts, args.group,
                                      args.prompt_len, args.new_tokens)
    seconds = machine.best_jax_seconds(fn, *fn_args, repeats=args.repeats)
    tokens = prompts * args.group * (args.prompt_len + args.new_tokens)
    rows.append(row(config.dtype, f"update, {prompts} x {args.group}",
                    seconds, tokens,
                    machine.update_floor_s(weights, tokens, limits), "matmul"))
  return rows


def loss_row(config, args, limits):
  n, t, d, v = args.loss_n, args.loss_t, config.hidden_size, config.vocab_size
  loss_args = loss_bench.parse_args(
      ["--n", str(n), "--t", str(t), "--d", str(d), "--v", str(v),
       "--dtype", config.dtype, "--repeats", str(args.repeats)])
  result = loss_bench.run_jax(loss_args, "jax_chunked")
  floor_s = 6 * n * t * d * v / (limits.matmul_gflop_s * 1e9)
  return row(config.dtype, f"log-probs + loss, {n} x {t}", result["time_s"],
             n * t, floor_s, "matmul",
             peak_gib=result["peak_bytes"] / loss_bench.GIB)


def measure(args) -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  from grpo_jax import models  # pylint: disable=g-import-not-at-top
  device = jax.devices()[0]
  bandwidth = machine.device_bandwidth_gb_s(args.copy_mib * 2**20,
                                            args.repeats)
  params = models.init_params(model_config(args.shape, "float32"),
                              jax.random.key(0))
  out = dict(device=f"{device.platform} {device.device_kind}",
             shape=args.shape, bandwidth_gb_s=bandwidth, limits={}, rows=[])
  for dtype in args.dtypes:
    limits = machine.Limits(
        machine.matmul_gflop_s(args.matmul_size, args.repeats, dtype),
        bandwidth)
    out["limits"][dtype] = limits._asdict()
    config = model_config(args.shape, dtype)
    rows = (decode_rows(config, params, args, limits)
            + update_rows(config, params, args, limits)
            + [loss_row(config, args, limits)])
    print("\n".join(f"# {r}" for r in rows), flush=True)
    out["rows"] += rows
  return out


def table(result) -> str:
  lines = ["| dtype | workload | time (s) | tokens/s | floor (s, binding) "
           "| share of floor |", "|---" * 6 + "|"]
  for r in result["rows"]:
    lines.append(
        f"| {r['dtype']} | {r['workload']} | {r['seconds']:.4g} | "
        f"{r['tokens_per_s']:.4g} | {r['floor_s']:.3g} ({r['binding']}) | "
        f"{100 * r['share_of_floor']:.0f}% |")
  return "\n".join(lines)


def _ints(text):
  return [int(x) for x in text.split(",") if x]


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--shape", default="smollm2", choices=("smollm2", "tiny"))
  p.add_argument("--dtypes", default="float32,bfloat16",
                 type=lambda s: s.split(","))
  p.add_argument("--batches", default="1,8,32", type=_ints)
  p.add_argument("--prompts", default="1,4", type=_ints,
                 help="update rows: P values of P x --group")
  p.add_argument("--group", type=int, default=8)
  p.add_argument("--prompt_len", type=int, default=32)
  p.add_argument("--new_tokens", type=int, default=64)
  p.add_argument("--loss_n", type=int, default=64)
  p.add_argument("--loss_t", type=int, default=1024)
  p.add_argument("--matmul_size", type=int, default=8192)
  p.add_argument("--copy_mib", type=int, default=2048)
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--json", default=None, help="write the results here")
  args = p.parse_args(argv)
  bad = [d for d in args.dtypes if d not in ("float32", "bfloat16")]
  if bad:
    p.error(f"--dtypes: {bad} unsupported; choose float32 and/or bfloat16")
  return args


def main(argv=None):
  args = parse_args(argv)
  result = measure(args)
  print(f"\n{result['device']}, {args.shape} shape; device copy "
        f"{result['bandwidth_gb_s']:.4g} GB/s; matmul "
        + ", ".join(f"{d} {l['matmul_gflop_s']:.4g} GFLOP/s"
                    for d, l in result["limits"].items()) + "\n")
  print(table(result))
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(result, indent=2))
  return result


if __name__ == "__main__":
  main()
