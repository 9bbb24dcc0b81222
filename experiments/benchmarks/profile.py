r"""Where the time goes: per-op XLA timings of decoding and of the update.

Runs the real sampler (`sampling.sample`, 64 new tokens at temperature 1)
at each batch, and the real `update.make_update_fn` step (the trainer's
default clipped AdamW and log-prob chunk, token_mean PPO clip) on P prompts
x G completions, each under `jax.profiler` once warm, again until a call
faults in no page (`profile`). Every
XLA op's time is read from the trace and filed under a category by the
op's source path (the `op_name` metadata of the compiled HLO: Flax module
names, the einsum equations, `jax.named_scope`s), then printed as shares:

- prefill: the sampler's forward pass over the prompts (all its ops);
- matmul: the dense projections (q, k, v, o, MLP), forward and backward;
- attention: scores, softmax, weighted values, RoPE (everything else under
  ``attn/``), and the KV cache writes;
- logits: the output projection and the (log-)softmax over the vocabulary;
- sample: drawing the token (noise, argmax, top-k);
- layers: per-layer weight slicing / gradient stacking of the layer scan;
- other: norms, SiLU, residual adds, embedding, optimiser, bookkeeping.

"wall" is the call's wall time; "ops" is the summed time of the ops (on all
threads, so with 2 threads it can reach 2x wall); "host and idle" is wall
minus ops per thread, the time no XLA op ran (dispatch, while-loop control,
waiting). ``--runs 3`` profiles everything three times back to back; each
time is then the median of the runs (the wall time with its range).

    python -m experiments.benchmarks.profile --batches 1,8,32 --prompts 1
"""

import argparse
import collections
import glob
import json
import os
import pathlib
import re
import resource
import tempfile
import time

from experiments.benchmarks import machine
from grpo_jax.runtime import allocator

CATEGORIES = ("prefill", "matmul", "attention", "logits", "sample", "layers",
              "other")


def category(op_name: str) -> str:
  """The category of one HLO op from its `op_name` source path."""
  if "sample_token" in op_name:
    return "sample"
  if "_sample" in op_name and "Decoder" in op_name:
    return "prefill"  # the sampler's scanned forward over the prompts
  if "logits" in op_name:
    return "logits"
  if "dynamic_index_in_dim" in op_name or "dynamic_update_index" in op_name:
    return "layers"
  if "/attn/" in op_name:
    if re.search(r"attn/dot_general$", op_name):
      return "matmul"
    return "attention"
  if "dot_general" in op_name:
    return "matmul"
  return "other"


def op_names(hlo_text: str, vocab_size: int = 0) -> dict:
  """HLO instruction name -> op_name metadata, from compiled HLO text.

  XLA leaves some rewritten instructions without metadata: the decode
  step's output projection at one row is one (a `dot` of result [V, 1]).
  With `vocab_size`, a `dot` without metadata whose result is [V, n] or
  [n, V] for a few rows n (at most 64) is named as the logits."""
  names = {}
  for match in re.finditer(r"^\s*(?:ROOT )?%?([\w.\-]+) = (.*)$", hlo_text,
                           re.MULTILINE):
    name, rest = match.groups()
    found = re.search(r'metadata=\{op_name="([^"]*)"', rest)
    dot = re.match(r"\w+\[(\d+),(\d+)\]\S* dot\(", rest)
    dims = tuple(map(int, dot.groups())) if dot else ()
    if found:
      names[name] = found.group(1)
    elif vocab_size and vocab_size in dims and min(dims) <= 64:
      names[name] = "logits (no metadata)"
  return names


def op_times(trace_dir: str) -> collections.Counter:
  """Summed duration (s) per XLA op name over the XLA threads of a trace."""
  import jax  # pylint: disable=g-import-not-at-top
  path = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)[0]
  data = jax.profiler.ProfileData.from_file(path)
  times = collections.Counter()
  for plane in data.planes:
    for line in plane.lines:
      if not line.name.startswith("tf_XLA"):
        continue
      for event in line.events:
        if not event.name.startswith("ThunkExecutor"):
          times[event.name] += event.duration_ns / 1e9
  return times


def profile(fn, args, threads: int, top: int = 0, vocab_size: int = 0,
            most: int = 6):
  """Runs `fn(*args)` warm under the profiler, again until a call faults in
  no page (at most `most` profiled calls); returns the split of the last
  (and prints its `top` slowest ops).

  A call that faults reads memory fresh from the kernel, slow to first
  touch on a virtual machine (`machine.first_touch_gb_s`); and glibc can
  take a fresh block for an aligned buffer the size of one it freed once a
  small allocation (the profiler's, say) sits after it
  (experiments/benchmarks/NOTES.md, "Profile"): a 1 x 8 update without
  donation, called alone, grew on each of its first four calls. The row
  says how many profiled calls it took (`calls`, a float so that `--runs`
  gives its median and range).
  """
  if most < 1:
    raise ValueError(f"most={most}: profile at least one call.")
  import jax  # pylint: disable=g-import-not-at-top
  names = op_names(fn.lower(*args).compile().as_text(), vocab_size)
  faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  jax.block_until_ready(fn(*args))
  for calls in range(1, most + 1):
    with tempfile.TemporaryDirectory() as trace_dir:
      with jax.profiler.trace(trace_dir):
        before, start = faults(), time.perf_counter()
        jax.block_until_ready(fn(*args))
        wall, fresh = time.perf_counter() - start, faults() - before
      if fresh == 0 or calls == most:
        times = op_times(trace_dir)
        break
  for name, seconds in times.most_common(top):
    op_name = names.get(name, "")
    print(f"#   {seconds:8.3f} s  {category(op_name):9s} {name}  {op_name}")
  split = dict.fromkeys(CATEGORIES, 0.0)
  for name, seconds in times.items():
    split[category(names.get(name, ""))] += seconds
  ops = sum(split.values())
  return dict(wall_s=wall, ops_s=ops,
              host_idle_s=max(wall - ops / threads, 0.0),
              calls=float(calls), page_faults=float(fresh), **split)


def smollm2():
  """(config, params, prompt ids): the embedded SmolLM2, one chat prompt."""
  from grpo_jax import models  # pylint: disable=g-import-not-at-top
  config, params, tokenizer = models.load("smollm2-135m-instruct")
  ids = tokenizer.apply_chat_template(
      [{"role": "user", "content": "What is 12 times 7?"}],
      add_generation_prompt=True, tokenize=True)
  ids = ids["input_ids"] if not isinstance(ids, list) else ids
  return config, params, list(ids)


def decode_case(config, params, prompt_ids, batch: int, new_tokens: int):
  """(fn, args) sampling `new_tokens` after `prompt_ids` for `batch` rows at
  temperature 1, EOS ignored."""
  import jax  # pylint: disable=g-import-not-at-top
  from grpo_jax import sampling  # pylint: disable=g-import-not-at-top
  tokens, mask = sampling.pad_prompts([list(prompt_ids)] * batch)
  fn = jax.jit(lambda params, tokens, mask, key: sampling.sample(
      params, config, tokens, mask, key, max_new_tokens=new_tokens,
      temperature=1.0, eos_ids=()))
  return fn, (params, tokens, mask, jax.random.key(0))


def update_case(config, params, num_prompts: int, group: int,
                prompt_len: int, new_tokens: int):
  """(fn, args): one `update.make_update_fn` step as the trainer's default
  config builds it (clipped AdamW, its log-prob chunk; token_mean PPO clip)
  on a synthetic batch of P x G rows of prompt_len + new_tokens."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from grpo_jax.train import batch as batch_lib  # pylint: disable=g-import-not-at-top
  from grpo_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from grpo_jax import objectives, train  # pylint: disable=g-import-not-at-top
  from grpo_jax.train import optim, update  # pylint: disable=g-import-not-at-top
  n, s = num_prompts * group, prompt_len + new_tokens
  rng = np.random.default_rng(0)
  high = min(1000, config.vocab_size)
  prompts = np.repeat(rng.integers(1, high, (num_prompts, prompt_len)),
                      group, axis=0)
  tokens = np.concatenate(
      [prompts, rng.integers(1, high, (n, new_tokens))], axis=1)
  batch = batch_lib.Batch(
      tokens=jnp.asarray(tokens, jnp.int32),
      input_mask=jnp.ones((n, s), jnp.float32),
      completion_mask=jnp.ones((n, new_tokens), jnp.float32),
      advantages=jnp.asarray(rng.normal(size=n), jnp.float32),
      old_logp=None, ref_logp=None, sampler_logp=None,
      temperature=jnp.ones((n,), jnp.float32))
  defaults = config_lib.get_base_config()
  optimizer = optim.make_optimizer(**defaults.optimizer)
  objective = objectives.make("ppo_clip", aggregation="token_mean")
  update_fn = update.make_update_fn(
      model_config=config, optimizer=optimizer, objective=objective,
      group_size=group, chunk_size=defaults.train.chunk_size, jit=False)
  state = train.init_state(params, optimizer, seed=0,
                           components={"objective": objective})
  return jax.jit(update_fn), (state, batch)


def table(rows) -> str:
  lines = ["| workload | wall s | " + " | ".join(CATEGORIES)
           + " | host and idle |", "|---" * (len(CATEGORIES) + 3) + "|"]
  for row in rows:
    shares = [f"{100 * row[c] / max(row['ops_s'], 1e-12):.0f}%"
              for c in CATEGORIES]
    lines.append(f"| {row['workload']} | "
                 f"{machine.with_range(row, 'wall_s', '.2f')} | "
                 + " | ".join(shares)
                 + f" | {100 * row['host_idle_s'] / row['wall_s']:.0f}% |")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batches", default="1,8,32",
                      type=machine.positive_ints,
                      help="decode batch sizes ('' for none)")
  parser.add_argument("--prompts", default="1", type=machine.positive_ints,
                      help="update rows: P values of P x G ('' for none)")
  parser.add_argument("--group", type=int, default=8)
  parser.add_argument("--prompt_len", type=int, default=64)
  parser.add_argument("--new_tokens", type=int, default=64)
  parser.add_argument("--top", type=int, default=0,
                      help="print the N slowest ops of each workload")
  parser.add_argument("--json", default=None)
  parser.add_argument("--runs", type=int, default=1,
                      help="profile everything N times; print medians")
  args = parser.parse_args(argv)
  if args.runs < 1:
    parser.error("--runs must be >= 1")
  threads = len(os.sched_getaffinity(0))
  config, params, prompt_ids = smollm2()
  runs = [profile_all(config, params, prompt_ids, args, threads)
          for _ in range(args.runs)]
  rows = runs[0] if args.runs == 1 else machine.median_rows(runs)
  median = f", median of {args.runs} runs" if args.runs > 1 else ""
  print(f"\nshares of the summed op time ({threads} threads{median})\n")
  print(table(rows))
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(rows, indent=2))


def profile_all(config, params, prompt_ids, args, threads):
  """One row per workload of `args`: decode batches, then updates."""
  rows = []
  for b in args.batches:
    row = profile(*decode_case(config, params, prompt_ids, b,
                               args.new_tokens), threads, args.top,
                  config.vocab_size)
    rows.append(dict(workload=f"decode, batch {b}", **row))
    print(f"# {rows[-1]}", flush=True)
  for p in args.prompts:
    row = profile(*update_case(config, params, p, args.group,
                               args.prompt_len, args.new_tokens),
                  threads, args.top, config.vocab_size)
    rows.append(dict(workload=f"update, {p} x {args.group}", **row))
    print(f"# {rows[-1]}", flush=True)
  return rows


if __name__ == "__main__":
  allocator.enable()  # first: it re-executes this process
  main()
