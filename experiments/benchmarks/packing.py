r"""Packed update vs padded update on the same long-tailed batch.

One `update.make_update_fn` step (the default config's clipped AdamW and
log-prob chunk, PPO clip, token mean; on policy, as one minibatch per batch
is) on P prompts x G completions of up to T new tokens, on random weights
of a model's shape (`--model`: the embedded SmolLM2-135M by default, or
`tiny`), run twice on the same batch:

- padded: the rows as the trainer lays them out, [N, Sp + T], each group's
  prompt run once (`batch.completion_hidden`);
- packed: ``train.pack_rows``, the rows' real tokens packed into B
  sequences of Sp + T (`train.packing`); its time includes the host's plan.

Completion lengths (`--lengths`): ``long_tailed`` (the issue's workload: a
share `--long_share` of the rows, drawn with `--seed`, run to T; the rest
stop uniformly in [1, `--short`]) or ``fixed`` (every row T tokens: nothing
to gain, what packing costs). The gradients of both are computed once
and compared (largest difference relative to the largest entry of the
padded gradient, over all params).

    python -m experiments.benchmarks.packing --json /tmp/packing.json

Each time is the best of `--repeats` calls after a warm-up (compilation
excluded); `--runs N` repeats the whole measurement and reports medians
with ranges.
"""

import argparse
import json
import time

import numpy as np

from experiments.benchmarks import accelerator
from experiments.benchmarks import machine

LENGTHS = ("long_tailed", "fixed")


def completion_lengths(args) -> np.ndarray:
  """[P*G] lengths: `long_share` of the rows (exactly, rounded) at T, the
  others uniform in [1, short]; or all T with ``fixed``."""
  n, t = args.prompts * args.group, args.max_new_tokens
  if args.lengths == "fixed":
    return np.full(n, t)
  rng = np.random.default_rng(args.seed)
  lengths = rng.integers(1, min(args.short, t) + 1, n)
  lengths[rng.permutation(n)[:round(args.long_share * n)]] = t
  return lengths


def make_batch(config, args):
  """A `batch.Batch` of P x G rows: random prompts of `prompt_len` shared by
  each group, completions of `completion_lengths`, right-padded."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from grpo_jax.train import batch as batch_lib  # pylint: disable=g-import-not-at-top
  n, t = args.prompts * args.group, args.max_new_tokens
  rng = np.random.default_rng(args.seed)
  high = min(1000, config.vocab_size)
  prompts = np.repeat(rng.integers(1, high, (args.prompts, args.prompt_len)),
                      args.group, axis=0)
  tokens = np.concatenate([prompts, rng.integers(1, high, (n, t))], axis=1)
  completion = (np.arange(t)[None, :]
                < completion_lengths(args)[:, None]).astype(np.float32)
  mask = np.concatenate([np.ones((n, args.prompt_len), np.float32),
                         completion], axis=1)
  return batch_lib.Batch(
      tokens=jnp.asarray(tokens, jnp.int32), input_mask=jnp.asarray(mask),
      completion_mask=jnp.asarray(completion),
      advantages=jnp.asarray(rng.normal(size=n), jnp.float32),
      old_logp=None, ref_logp=None, sampler_logp=None,
      temperature=jnp.ones((n,), jnp.float32))


def measure(config, params, args) -> dict:
  import jax  # pylint: disable=g-import-not-at-top
  from grpo_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from grpo_jax import objectives, train  # pylint: disable=g-import-not-at-top
  from grpo_jax.train import optim, packing, update  # pylint: disable=g-import-not-at-top
  batch = make_batch(config, args)
  defaults = config_lib.get_base_config()
  optimizer = optim.make_optimizer(**defaults.optimizer)
  objective = objectives.make("ppo_clip", aggregation="token_mean")
  kwargs = dict(model_config=config, objective=objective,
                group_size=args.group, chunk_size=defaults.train.chunk_size)
  update_fn = jax.jit(update.make_update_fn(
      optimizer=optimizer, microbatch_size=args.microbatch_size, jit=False,
      **kwargs))
  state = train.init_state(params, optimizer, seed=0,
                           components={"objective": objective})
  attach = lambda: packing.attach(batch, group_size=args.group,
                                  microbatch_size=args.microbatch_size)
  plan = attach().packing
  start = time.perf_counter()
  attach()
  plan_s = time.perf_counter() - start
  padded_s = machine.best_jax_seconds(update_fn, state, batch,
                                      repeats=args.repeats)
  packed_s = machine.best_seconds(
      lambda: jax.block_until_ready(update_fn(state, attach())), args.repeats)
  row = dict(
      lengths=args.lengths, rows=int(batch.tokens.shape[0]),
      columns=int(batch.tokens.shape[1]),
      real_tokens=int(batch.input_mask.sum()),
      packed_sequences=int(plan.sequences.shape[1]),
      packed_fill=packing.packed_fraction(plan, batch.tokens.shape[1]),
      padded_s=padded_s, packed_s=packed_s, plan_s=plan_s,
      speedup=padded_s / packed_s)
  if args.check_gradients:
    row["gradient_rel_diff"] = gradient_difference(
        update, kwargs, state, batch, attach(), args.microbatch_size)
  return row


def gradient_difference(update, kwargs, state, batch, packed_batch,
                        microbatch_size) -> float:
  """max |packed - padded| / max |padded| over every gradient entry."""
  import jax  # pylint: disable=g-import-not-at-top
  functions = update.make_loss_functions(**kwargs)
  grad = jax.jit(lambda params, b: update.minibatch_gradient(
      functions, params, state.states, b,
      microbatch_size=microbatch_size)[0])
  padded = jax.tree.leaves(grad(state.params, batch))
  packed = jax.tree.leaves(grad(state.params, packed_batch))
  scale = max(float(np.abs(np.asarray(g)).max()) for g in padded)
  diff = max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
             for a, b in zip(packed, padded))
  return diff / max(scale, 1e-30)


def table(rows) -> str:
  lines = ["| lengths | rows x columns | real tokens | packed sequences "
           "(fill) | padded s | packed s (plan) | padded / packed | "
           "gradient rel. diff |", "|---" * 8 + "|"]
  for r in rows:
    lines.append(
        f"| {r['lengths']} | {r['rows']} x {r['columns']} | "
        f"{r['real_tokens']} | {r['packed_sequences']} "
        f"({100 * r['packed_fill']:.0f}%) | "
        f"{machine.with_range(r, 'padded_s', '.3f')} | "
        f"{machine.with_range(r, 'packed_s', '.3f')} "
        f"({1e3 * r['plan_s']:.1f} ms) | "
        f"{machine.with_range(r, 'speedup', '.2f', unit='x')} | "
        f"{r.get('gradient_rel_diff', float('nan')):.1e} |")
  return "\n".join(lines)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model", default="smollm2-135m-instruct",
                      help="'tiny' or an architecture of grpo_jax/models")
  parser.add_argument("--dtype", default="float32")
  parser.add_argument("--prompts", type=int, default=8)
  parser.add_argument("--group", type=int, default=8)
  parser.add_argument("--prompt_len", type=int, default=32)
  parser.add_argument("--max_new_tokens", type=int, default=512)
  parser.add_argument("--short", type=int, default=64,
                      help="short rows stop uniformly in [1, short]")
  parser.add_argument("--long_share", type=float, default=0.1)
  parser.add_argument("--lengths", default="long_tailed,fixed",
                      help=f"comma-separated, of {', '.join(LENGTHS)}")
  parser.add_argument("--microbatch_size", type=int, default=8,
                      help="rows per microbatch (SmolLM2's padded update "
                      "of 64 rows x 544 columns at once needs ~60 GB)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--runs", type=int, default=1)
  parser.add_argument("--no_check_gradients", dest="check_gradients",
                      action="store_false")
  parser.add_argument("--json", default=None, help="write the results here")
  args = parser.parse_args(argv)
  args.workloads = [x.strip() for x in args.lengths.split(",") if x.strip()]
  bad = [x for x in args.workloads if x not in LENGTHS]
  if bad or not args.workloads:
    parser.error(f"--lengths: {bad[0] if bad else args.lengths!r} is not one "
                 f"of {', '.join(LENGTHS)}")
  if not 0.0 <= args.long_share <= 1.0:
    parser.error(f"--long_share={args.long_share} is not in [0, 1]")
  if args.runs < 1 or args.repeats < 1:
    parser.error("--runs and --repeats must be at least 1")
  return args


def main(argv=None):
  args = parse_args(argv)
  import jax  # pylint: disable=g-import-not-at-top
  from grpo_jax import models  # pylint: disable=g-import-not-at-top
  config = accelerator.model_config(args.model, args.dtype)
  params = models.init_params(config, jax.random.key(0))
  runs = []
  for _ in range(args.runs):
    runs.append([measure(config, params, argparse.Namespace(
        **{**vars(args), "lengths": lengths})) for lengths in args.workloads])
  rows = machine.median_rows(runs) if args.runs > 1 else runs[0]
  print(f"{args.model} ({args.dtype}), {args.prompts} x {args.group} rows, "
        f"prompt {args.prompt_len}, T = {args.max_new_tokens}, device "
        f"{jax.devices()[0].device_kind}")
  print(table(rows))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(dict(args=vars(args), rows=rows), f, indent=1)
  return rows


if __name__ == "__main__":
  main()
