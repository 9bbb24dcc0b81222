r"""Per-slot cache regions against a paged cache: one decode step's attention.

The generation engine (`grpo_jax/sampling/engine.py`) gives each slot a
fixed region of the KV cache. A paged cache would instead keep a pool of
fixed-size pages and a page table per slot; without a paged-attention kernel
(JAX ships one for TPU only) a decode step under XLA must gather each slot's
pages into one contiguous array before its attention dots. This times both,
at SmolLM2-135M's attention shape by default (9 query heads, 3 key/value
heads of 64, 30 layers, each layer its own cache as in the engine's loop):

- regions: keys [S, K, hd, L] and values [S, K, L, hd] per layer, the
  engine's layouts; scores, a masked softmax, the weighted values;
- paged: the same attention after gathering each slot's L / page pages
  from a pool of S L / page pages per layer through a shuffled page table
  ([S, L / page] int32), as a paged cache holding every slot at its full
  length must (a static shape: XLA cannot gather fewer pages for a shorter
  row without recompiling); the dots read the gathered pages in the pool's
  layout (`attend_pages`), with no copy back into the regions' layout.

Both compute the same numbers (checked before timing). Prints, per slot
count, the best-of-`--repeats` milliseconds of each and paged / regions:

    python experiments/benchmarks/sampler.py --paged_check
    python -m experiments.benchmarks.paged --slots 8,32 --columns 576
"""

import argparse
import json
import pathlib
import sys

import numpy as np

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script: make `experiments` importable
  sys.path.insert(0, str(REPO_ROOT))
# pylint: disable-next=wrong-import-position
from experiments.benchmarks import machine

# SmolLM2-135M's attention.
NUM_LAYERS, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 30, 9, 3, 64


def region_caches(key, *, layers, slots, kv_heads, head_dim, columns,
                  dtype):
  """Per layer (keys [S, K, hd, L], values [S, K, L, hd]), random."""
  import jax  # pylint: disable=g-import-not-at-top
  out = []
  for layer in range(layers):
    k_key, v_key = jax.random.split(jax.random.fold_in(key, layer))
    out.append((
        jax.random.normal(k_key, (slots, kv_heads, head_dim, columns), dtype),
        jax.random.normal(v_key, (slots, kv_heads, columns, head_dim), dtype)))
  return tuple(out)


def page_table(slots, columns, page, seed=0) -> np.ndarray:
  """[S, L / page] int32: slot s's pages, in order, somewhere in a pool of
  S L / page pages (a shuffle, as pages are handed out as rows come)."""
  if columns % page:
    raise ValueError(f"--columns={columns} is not a multiple of "
                     f"--page={page}")
  per_slot = columns // page
  pool = np.random.default_rng(seed).permutation(slots * per_slot)
  return pool.reshape(slots, per_slot).astype(np.int32)


def to_pages(caches, table, page):
  """The region caches moved into page pools that `table` indexes: per
  layer (keys [pages, K, hd, page], values [pages, K, page, hd])."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  table = jnp.asarray(table)
  slots, per_slot = table.shape
  pools = []
  for k, v in caches:
    _, kv_heads, head_dim, _ = k.shape
    # [S, K, hd, n, page] -> [S, n, K, hd, page], pages flat in slot order.
    k_pages = k.reshape(slots, kv_heads, head_dim, per_slot, page)
    k_pages = jnp.moveaxis(k_pages, 3, 1).reshape(-1, kv_heads, head_dim,
                                                  page)
    v_pages = v.reshape(slots, kv_heads, per_slot, page, head_dim)
    v_pages = jnp.moveaxis(v_pages, 2, 1).reshape(-1, kv_heads, page,
                                                  head_dim)
    # Pool position table[s, j] holds slot s's page j.
    order = table.reshape(-1)
    pools.append((jnp.zeros_like(k_pages).at[order].set(k_pages),
                  jnp.zeros_like(v_pages).at[order].set(v_pages)))
  return tuple(pools)


def gather_pages(pool_k, pool_v, table):
  """One layer's slots as regions again: [S, K, hd, L] and [S, K, L, hd]
  (the inverse of `to_pages`; the timed step reads the pages as gathered,
  `attend_pages`)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  slots, per_slot = table.shape
  k = pool_k[table]  # [S, n, K, hd, page]
  v = pool_v[table]  # [S, n, K, page, hd]
  _, _, kv_heads, head_dim, page = k.shape
  k = jnp.moveaxis(k, 1, 3).reshape(slots, kv_heads, head_dim,
                                    per_slot * page)
  v = jnp.moveaxis(v, 1, 2).reshape(slots, kv_heads, per_slot * page,
                                    head_dim)
  return k, v


def attend(q, k, v, lengths):
  """q [S, K, g, hd] over keys [S, K, hd, L], values [S, K, L, hd], each
  slot's first `lengths[s]` columns: [S, K, g, hd]."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  scores = jnp.einsum("skgd,skdl->skgl", q, k,
                      preferred_element_type=jnp.float32)
  scores = scores / np.sqrt(q.shape[-1])
  live = jnp.arange(k.shape[-1])[None, :] < lengths[:, None]  # [S, L]
  scores = jnp.where(live[:, None, None, :], scores, -1e30)
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  return jnp.einsum("skgl,skld->skgd", probs, v,
                    preferred_element_type=jnp.float32)


def attend_pages(q, k, v, lengths):
  """`attend` over each slot's gathered pages as they come from the pool,
  keys [S, n, K, hd, page] and values [S, n, K, page, hd]: the dots take
  the page axes as they are (no copy back into the regions' layout)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  slots, per_slot, _, _, page = k.shape
  scores = jnp.einsum("skgd,snkdp->skgnp", q, k,
                      preferred_element_type=jnp.float32)
  scores = scores.reshape(*scores.shape[:3], per_slot * page)
  scores = scores / np.sqrt(q.shape[-1])
  live = jnp.arange(per_slot * page)[None, :] < lengths[:, None]
  scores = jnp.where(live[:, None, None, :], scores, -1e30)
  probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
  probs = probs.reshape(*probs.shape[:3], per_slot, page)
  del slots
  return jnp.einsum("skgnp,snkpd->skgd", probs, v,
                    preferred_element_type=jnp.float32)


def step_functions():
  """(regions(qs, caches, lengths), paged(qs, pools, table, lengths)):
  one decode step's attention over every layer, each layer's output
  summed so none is dropped."""
  import jax  # pylint: disable=g-import-not-at-top

  @jax.jit
  def regions(qs, caches, lengths):
    return sum(attend(q, k, v, lengths) for q, (k, v) in zip(qs, caches))

  @jax.jit
  def paged(qs, pools, table, lengths):
    # The table is in range by construction: no clamping in the gather.
    return sum(attend_pages(q, pk.at[table].get(mode="promise_in_bounds"),
                            pv.at[table].get(mode="promise_in_bounds"),
                            lengths)
               for q, (pk, pv) in zip(qs, pools))
  return regions, paged


def measure(slots, *, columns=576, page=16, layers=NUM_LAYERS,
            heads=NUM_HEADS, kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM,
            dtype="float32", repeats=5) -> dict:
  """Best seconds of one step's attention both ways at `slots` slots."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  key = jax.random.key(0)
  caches = region_caches(key, layers=layers, slots=slots, kv_heads=kv_heads,
                         head_dim=head_dim, columns=columns, dtype=dtype)
  table = page_table(slots, columns, page)
  pools = to_pages(caches, table, page)
  table = jnp.asarray(table)
  qs = tuple(jax.random.normal(jax.random.fold_in(key, 1000 + layer),
                               (slots, kv_heads, heads // kv_heads,
                                head_dim), dtype)
             for layer in range(layers))
  # Rows at different points of their completions, as slots are.
  lengths = jnp.asarray(np.random.default_rng(1).integers(
      1, columns + 1, slots), jnp.int32)
  regions, paged = step_functions()
  ours, theirs = regions(qs, caches, lengths), paged(qs, pools, table,
                                                     lengths)
  if not np.allclose(np.asarray(ours, np.float32),
                     np.asarray(theirs, np.float32), rtol=1e-3, atol=1e-3):
    raise AssertionError("the paged attention differs from the regions'")
  cache_bytes = sum(k.nbytes + v.nbytes for k, v in caches)
  regions_s = machine.best_jax_seconds(regions, qs, caches, lengths,
                                       repeats=repeats)
  paged_s = machine.best_jax_seconds(paged, qs, pools, table, lengths,
                                     repeats=repeats)
  return dict(slots=slots, columns=columns, page=page, layers=layers,
              dtype=dtype, cache_bytes=cache_bytes, regions_s=regions_s,
              paged_s=paged_s, ratio=paged_s / regions_s)


def table(rows) -> str:
  lines = ["| slots | cache (MB) | regions (ms) | paged (ms) | paged / "
           "regions |", "|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['slots']} | {r['cache_bytes'] / 1e6:.0f} | "
                 f"{1e3 * r['regions_s']:.3f} | {1e3 * r['paged_s']:.3f} | "
                 f"{r['ratio']:.2f}x |")
  return "\n".join(lines)


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--slots", default="8,32", type=machine.positive_ints)
  p.add_argument("--columns", type=int, default=576,
                 help="cache columns per slot (prompt + new tokens)")
  p.add_argument("--page", type=int, default=16, help="columns per page")
  p.add_argument("--layers", type=int, default=NUM_LAYERS)
  p.add_argument("--dtype", default="float32",
                 choices=("float32", "bfloat16"))
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--json", default=None)
  args = p.parse_args(argv)
  if not args.slots:
    p.error("--slots needs at least one count")
  for name in ("columns", "page", "layers", "repeats"):
    if getattr(args, name) < 1:
      p.error(f"--{name} must be >= 1")
  if args.columns % args.page:
    p.error(f"--columns={args.columns} must be a multiple of "
            f"--page={args.page}")
  return args


def main(argv=None):
  args = parse_args(argv)
  import jax  # pylint: disable=g-import-not-at-top
  rows = []
  for slots in args.slots:
    rows.append(measure(slots, columns=args.columns, page=args.page,
                        layers=args.layers, dtype=args.dtype,
                        repeats=args.repeats))
    print(f"# {rows[-1]}", flush=True)
  device = jax.devices()[0]
  print(f"\n{device.platform} {device.device_kind}; one decode step's "
        f"attention over {args.layers} layers ({NUM_HEADS} query heads, "
        f"{NUM_KV_HEADS} key/value heads of {HEAD_DIM}), {args.columns} "
        f"columns a slot, pages of {args.page}, {args.dtype}, best of "
        f"{args.repeats}\n")
  print(table(rows))
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(rows, indent=2))
  return rows


if __name__ == "__main__":
  main()
