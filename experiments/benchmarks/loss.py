"""Forward + backward of per-token log-probs and the GRPO loss: JAX vs PyTorch.

    python -m experiments.benchmarks.loss --json runs/bench_loss.json

``--runs 3`` repeats every configuration three times back to back and
gives each time as the median with its range.

Every configuration computes the same scalar from the same data (numpy, fixed
seed): hidden states [N, T, D] and unembedding [D, V] -> logits (the final
projection, INCLUDED everywhere) -> tempered log-softmax at the sampled tokens
-> PPO-clip token-mean loss -> gradients w.r.t. hidden and unembedding.

  jax_chunked        grpo_jax.logprobs.token_logprobs + objectives.ppo_clip
  jax_naive          jax.nn.log_softmax over the full [N, T, V] logits
  torch_log_softmax  TRL's formulation (logits, log_softmax, gather), in chunks
                     of --torch-rows sequences, backward per chunk
  torch_selective    TRL's selective_log_softmax (gather minus a per-row loop
                     of logsumexp), same chunks
  torch_*_from_logits  the two PyTorch ones timing only log-softmax + loss
                     w.r.t. the logits (projection run untimed, outside)

Each configuration runs in its own subprocess, so peak memories do not mix.
Memory: for JAX, XLA's compiled memory analysis (temp + argument + output
bytes); a configuration above --memory-limit-gib is reported as not fitting and
is not run. For PyTorch (CPU), the process's peak RSS above the RSS it had once
its inputs existed, plus the input bytes. Both also report the RSS delta.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

from experiments.benchmarks import machine
from grpo_jax.runtime import allocator

CONFIGS = ("jax_chunked", "jax_naive", "torch_log_softmax", "torch_selective",
           "torch_log_softmax_from_logits", "torch_selective_from_logits")
DEFAULT_CONFIGS = ("jax_chunked", "jax_naive", "torch_log_softmax",
                   "torch_log_softmax_from_logits")
REFERENCE = "torch_log_softmax"
CLIP = 0.2
GIB = 2.0**30


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--n", type=int, default=64, help="rows N = P*G")
  p.add_argument("--t", type=int, default=1024, help="completion tokens T")
  p.add_argument("--d", type=int, default=576, help="model width D")
  p.add_argument("--v", type=int, default=49152, help="vocabulary V")
  p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  p.add_argument("--temperature", type=float, default=1.0)
  p.add_argument("--chunk-size", type=int, default=None,
                 help="positions per chunk of token_logprobs (default: its own)")
  p.add_argument("--torch-rows", type=int, default=8,
                 help="sequences per PyTorch chunk")
  p.add_argument("--repeats", type=int, default=1,
                 help="timed runs per configuration (the minimum is kept)")
  p.add_argument("--runs", type=int, default=1,
                 help="whole runs back to back; the table shows each time's "
                      "median and range over them")
  p.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                 help=f"comma-separated subset of {', '.join(CONFIGS)}")
  p.add_argument("--memory-limit-gib", type=float, default=None,
                 help="JAX configurations needing more are not run "
                      "(default: physical memory)")
  p.add_argument("--json", default=None, help="write results here")
  p.add_argument("--in-process", action="store_true",
                 help="no subprocesses (smoke tests; peaks then mix)")
  p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.runs < 1 or args.repeats < 1:
    p.error("--runs and --repeats must be >= 1")
  args.configs = [c for c in args.configs.split(",") if c]
  unknown = sorted(set(args.configs) - set(CONFIGS))
  if unknown:
    p.error(f"unknown --configs {unknown}; choose from {CONFIGS}")
  if args.memory_limit_gib is None:
    args.memory_limit_gib = (os.sysconf("SC_PAGE_SIZE")
                             * os.sysconf("SC_PHYS_PAGES") / GIB)
  return args


def make_data(args):
  """The shared inputs, as float32 / int numpy arrays (same in every process)."""
  rng = np.random.default_rng(0)
  n, t, d, v = args.n, args.t, args.d, args.v
  data = dict(
      hidden=rng.standard_normal((n, t, d), np.float32),
      unembedding=rng.standard_normal((d, v), np.float32) * 0.05,
      targets=rng.integers(0, v, (n, t)).astype(np.int64),
      advantages=rng.standard_normal(n).astype(np.float32),
      mask=(np.arange(t)[None, :] < rng.integers(t // 2, t + 1, n)[:, None]
            ).astype(np.float32))
  # Behaviour log-probs near the current ones so that ratios straddle the
  # clip band, as in a real update.
  data["old_logp"] = (-np.log(v) + 0.3 * rng.standard_normal((n, t))).astype(
      np.float32)
  return data


def _peak_rss_bytes():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _input_bytes(args):
  width = 2 if args.dtype == "bfloat16" else 4
  n, t, d, v = args.n, args.t, args.d, args.v
  return (n * t * d + d * v) * width + n * t * (4 + 4 + 4) + n * 4


# --------------------------------------------------------------------- JAX


def _jax_loss_fn(args, naive: bool):
  import jax
  import jax.numpy as jnp
  from grpo_jax import logprobs, objectives

  def loss_fn(hidden, unembedding, targets, old_logp, advantages, mask):
    if naive:
      logits = logprobs.project_logits(hidden, unembedding)
      log_p = logprobs.tempered_log_softmax(logits, args.temperature)
      logp = jnp.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
    else:
      logp = logprobs.token_logprobs(
          hidden, unembedding, targets, temperature=args.temperature,
          chunk_size=args.chunk_size).logp
    loss, _ = objectives.ppo_clip(logp, old_logp, advantages, mask,
                                  clip_low=CLIP, clip_high=CLIP,
                                  aggregation="token_mean")
    return loss

  return jax.jit(jax.value_and_grad(loss_fn, (0, 1)))


def run_jax(args, config):
  import jax
  import jax.numpy as jnp
  data = make_data(args)
  dtype = jnp.dtype(args.dtype)
  inputs = (jnp.asarray(data["hidden"], dtype),
            jnp.asarray(data["unembedding"], dtype),
            jnp.asarray(data["targets"], jnp.int32),
            jnp.asarray(data["old_logp"]), jnp.asarray(data["advantages"]),
            jnp.asarray(data["mask"]))
  del data
  step = _jax_loss_fn(args, naive=config == "jax_naive")
  start = time.perf_counter()
  compiled = step.lower(*inputs).compile()
  compile_s = time.perf_counter() - start
  memory = compiled.memory_analysis()
  needed = (memory.temp_size_in_bytes + memory.argument_size_in_bytes
            + memory.output_size_in_bytes)
  result = dict(config=config, projection_included=True,
                compile_s=round(compile_s, 2), peak_bytes=int(needed),
                memory_method="xla_memory_analysis",
                temp_bytes=int(memory.temp_size_in_bytes),
                fits=needed <= args.memory_limit_gib * GIB)
  if not result["fits"]:
    return result
  jax.block_until_ready(inputs)
  base = machine.resident_bytes()
  times = []
  for _ in range(args.repeats):
    start = time.perf_counter()
    loss, _ = jax.block_until_ready(compiled(*inputs))
    times.append(time.perf_counter() - start)
  result.update(time_s=min(times), loss=float(loss),
                rss_delta_bytes=int(max(0, _peak_rss_bytes() - base)))
  return result


# ------------------------------------------------------------------ PyTorch


def _torch_logp(logits, index, temperature, selective: bool):
  """log softmax(logits / temperature)[index], as TRL computes it."""
  import torch
  logits = logits.float() / temperature
  if not selective:
    return torch.gather(logits.log_softmax(-1), -1, index[..., None])[..., 0]
  # TRL's selective_log_softmax for float32: the gathered logit minus a
  # logsumexp computed one sequence at a time, to keep the peak down.
  picked = torch.gather(logits, -1, index[..., None])[..., 0]
  norms = torch.stack([torch.logsumexp(row, dim=-1) for row in logits])
  return picked - norms


def _torch_ppo_term(logp, old_logp, advantages):
  import torch
  ratio = torch.exp(logp - old_logp)
  clipped = torch.clamp(ratio, 1 - CLIP, 1 + CLIP)
  return -torch.minimum(ratio * advantages, clipped * advantages)


def run_torch(args, config):
  import torch
  torch.manual_seed(0)
  data = make_data(args)
  dtype = getattr(torch, args.dtype)
  hidden = torch.from_numpy(data["hidden"]).to(dtype).requires_grad_()
  unembedding = torch.from_numpy(data["unembedding"]).to(dtype).requires_grad_()
  targets = torch.from_numpy(data["targets"])
  old_logp = torch.from_numpy(data["old_logp"])
  advantages = torch.from_numpy(data["advantages"])[:, None]
  mask = torch.from_numpy(data["mask"])
  del data
  selective = "selective" in config
  from_logits = config.endswith("from_logits")
  # Token-mean over the whole batch: each chunk divides by the global count,
  # so the accumulated gradient is exactly the one-shot gradient.
  count = mask.sum()
  base = machine.resident_bytes()
  total_loss = 0.0
  elapsed = 0.0
  for _ in range(args.repeats):
    hidden.grad = unembedding.grad = None
    run_s, total_loss = 0.0, 0.0
    for lo in range(0, args.n, args.torch_rows):
      rows = slice(lo, lo + args.torch_rows)
      start = time.perf_counter()
      if from_logits:
        with torch.no_grad():
          logits = hidden[rows] @ unembedding
        logits.requires_grad_()
        start = time.perf_counter()
      else:
        logits = hidden[rows] @ unembedding
      logp = _torch_logp(logits, targets[rows], args.temperature, selective)
      term = _torch_ppo_term(logp, old_logp[rows], advantages[rows])
      loss = (term * mask[rows]).sum() / count
      loss.backward()
      run_s += time.perf_counter() - start
      total_loss += float(loss.detach())
      del logits, logp, term, loss
    elapsed = run_s if not elapsed else min(elapsed, run_s)
  peak = max(0, _peak_rss_bytes() - base)
  return dict(config=config, projection_included=not from_logits,
              time_s=elapsed, loss=total_loss,
              peak_bytes=int(peak + _input_bytes(args)),
              memory_method="rss_delta+inputs", rss_delta_bytes=int(peak),
              fits=True)


# ---------------------------------------------------------------- driver


def run_config(args, config):
  return run_jax(args, config) if config.startswith("jax") else run_torch(
      args, config)


def _worker_argv(args, config):
  argv = [sys.executable, "-m", "experiments.benchmarks.loss",
          "--worker", config, "--n", str(args.n), "--t", str(args.t),
          "--d", str(args.d), "--v", str(args.v), "--dtype", args.dtype,
          "--temperature", str(args.temperature),
          "--torch-rows", str(args.torch_rows),
          "--repeats", str(args.repeats),
          "--memory-limit-gib", str(args.memory_limit_gib)]
  if args.chunk_size is not None:
    argv += ["--chunk-size", str(args.chunk_size)]
  return argv


def run_all(args):
  results = []
  for config in args.configs:
    if args.in_process:
      result = run_config(args, config)
    else:
      proc = subprocess.run(_worker_argv(args, config), capture_output=True,
                            text=True)
      if proc.returncode != 0:
        result = dict(config=config, error=proc.stderr.strip()[-2000:])
      else:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    results.append(result)
    print(f"# {config}: {result}", file=sys.stderr, flush=True)
  reference = next((r for r in results if r["config"] == REFERENCE
                    and r.get("time_s")), None)
  for r in results:
    r.update(n=args.n, t=args.t, d=args.d, v=args.v, dtype=args.dtype,
             naive_logits_bytes=args.n * args.t * args.v * 4)
    if reference and r.get("time_s"):
      r["time_vs_torch"] = r["time_s"] / reference["time_s"]
    if reference and r.get("peak_bytes") and r.get("fits", True):
      r["memory_vs_torch"] = r["peak_bytes"] / reference["peak_bytes"]
  return results


def markdown_table(results, args):
  lines = [
      f"N={args.n}, T={args.t}, D={args.d}, V={args.v}, {args.dtype}, "
      f"temperature {args.temperature}; fwd+bwd of log-probs + PPO-clip "
      "token-mean loss w.r.t. hidden and unembedding; the final projection "
      "(hidden @ W) is included unless the name says from_logits. Naive "
      f"[N, T, V] float32 logits: {args.n * args.t * args.v * 4 / GIB:.1f} "
      "GiB.", "",
      "| configuration | projection | time (s) | vs torch | peak memory (GiB) "
      "| vs torch | memory method |",
      "|---|---|---|---|---|---|---|"]
  for r in results:
    if "error" in r:
      lines.append(f"| {r['config']} | | error | | | | |")
      continue
    fmt = lambda x, f: "" if x is None else f.format(x)
    time_s = (machine.with_range(r, "time_s", ".2f") if r.get("fits")
              else "does not fit")
    vs_torch = ("" if r.get("time_vs_torch") is None else
                machine.with_range(r, "time_vs_torch", ".2f", unit="x"))
    lines.append(
        f"| {r['config']} | {'yes' if r['projection_included'] else 'no'} "
        f"| {time_s} | {vs_torch} "
        f"| {r['peak_bytes'] / GIB:.3g} "
        f"| {fmt(r.get('memory_vs_torch'), '{:.2f}x')} "
        f"| {r['memory_method']} |")
  return "\n".join(lines)


def main(argv=None):
  args = parse_args(argv)
  if args.worker:
    print(json.dumps(run_config(args, args.worker)))
    return None
  runs = [run_all(args) for _ in range(args.runs)]
  results = runs[0] if args.runs == 1 else machine.median_rows(runs)
  if args.runs > 1:
    print(f"median of {args.runs} runs, the range in brackets")
  print(markdown_table(results, args))
  if args.json:
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
      for r in results:
        f.write(json.dumps(r) + "\n")
  return results


if __name__ == "__main__":
  allocator.enable()  # first: it re-executes this process
  main()
