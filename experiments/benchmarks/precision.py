r"""bf16 against float32: the sampler/trainer log-prob gap on a real model.

Samples P prompts x G completions from the embedded SmolLM2 (or --model) in
each compute dtype (float32 master weights either way), then scores the same
tokens with the trainer's log-prob pass (`batch.policy_logprobs`) in both
dtypes, and prints, over every sampled token:

- sampler vs trainer in the same dtype (what an on-policy ratio sees: 1
  exactly would need the two programs to round alike);
- trainer bf16 vs trainer float32 (what bf16 changes in the loss).

    python -m experiments.benchmarks.precision --prompts 4 --samples 4
"""

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax.train import batch as batch_lib
from grpo_jax.runtime import allocator
from grpo_jax import data, models, sampling

QUESTIONS = ("What is 7 + 5?", "Name three colours.",
             "Write one sentence about the sea.", "What is 12 * 3?")


def gaps(a, b, mask) -> dict:
  diff = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))[mask]
  return {"max": float(diff.max()), "mean": float(diff.mean()),
          "p99": float(np.quantile(diff, 0.99))}


def measure(model: str, *, prompts: int, samples: int, new_tokens: int,
            seed: int = 0, chunk_size: int = 512) -> dict:
  config32, params, tokenizer = models.load_model(model)
  config16 = config32.replace(dtype="bfloat16")
  questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(prompts)]
  ids = [tokenizer(data.format_prompt(tokenizer, q))["input_ids"]
         for q in questions]
  tokens, mask = sampling.pad_prompts(ids)
  eos, pad = models.eos_and_pad(tokenizer)
  result = {"model": model, "prompts": prompts, "samples": samples,
            "new_tokens": new_tokens}
  for name, config in (("float32", config32), ("bfloat16", config16)):
    out = jax.device_get(sampling.sample(
        params, config, tokens, mask, jax.random.key(seed),
        num_samples=samples, max_new_tokens=new_tokens, eos_ids=eos,
        pad_id=pad))
    full = np.concatenate([np.repeat(tokens, samples, 0), out.tokens], 1)
    input_mask = np.concatenate(
        [np.repeat(mask, samples, 0), out.mask.astype(mask.dtype)], 1)
    score = lambda c: np.asarray(batch_lib.policy_logprobs(
        params, c, jnp.asarray(full), jnp.asarray(input_mask),
        tokens.shape[1], chunk_size=chunk_size)[0])
    trainer = {"float32": score(config32), "bfloat16": score(config16)}
    sampled = out.mask > 0
    result[name] = {
        "tokens": int(sampled.sum()),
        "sampler_vs_trainer": gaps(out.logprobs, trainer[name], sampled),
        "trainer_bf16_vs_float32": gaps(trainer["bfloat16"],
                                        trainer["float32"], sampled),
        "mean_logp": float(np.asarray(out.logprobs)[sampled].mean()),
    }
  return result


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model", default="smollm2-135m-instruct")
  parser.add_argument("--prompts", type=int, default=4)
  parser.add_argument("--samples", type=int, default=4)
  parser.add_argument("--new_tokens", type=int, default=48)
  parser.add_argument("--json", default="")
  args = parser.parse_args()
  result = measure(args.model, prompts=args.prompts, samples=args.samples,
                   new_tokens=args.new_tokens)
  print(json.dumps(result, indent=2))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=2)


if __name__ == "__main__":
  allocator.enable()  # first: it re-executes this process
  main()
