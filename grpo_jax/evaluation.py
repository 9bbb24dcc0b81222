"""Held-out evaluation: greedy accuracy and pass@k of a policy.

pass@k here samples exactly k completions per problem at the config's
temperature, so the unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al.,
arXiv 2107.03374) with n = k reduces to "at least one of the k is correct".
"""

from typing import Optional

import jax
import numpy as np

from grpo_jax import data as data_lib
from grpo_jax import models
from grpo_jax import rewards
from grpo_jax import rollout
from grpo_jax import sampling
from grpo_jax import optim
from grpo_jax import train


def completions(params, model_config, tokenizer, examples, key, *,
                num_samples: int, max_new_tokens: int, temperature: float,
                greedy: bool, buckets, system_prompt: str = "",
                batch_size: int = 16) -> list:
  """Texts of `num_samples` completions per example, example-major."""
  eos_ids, pad_id = models.eos_and_pad(tokenizer)
  texts = []
  for start in range(0, len(examples), batch_size):
    chunk = examples[start:start + batch_size]
    ids = rollout.encode_prompts(tokenizer, chunk,
                                 format_prompt=data_lib.format_prompt,
                                 system_prompt=system_prompt)
    tokens, mask = sampling.pad_prompts(ids, buckets=buckets, pad_id=pad_id)
    out = sampling.sample(
        params, model_config, tokens, mask, jax.random.fold_in(key, start),
        num_samples=num_samples, max_new_tokens=max_new_tokens,
        temperature=temperature, greedy=greedy, eos_ids=eos_ids,
        pad_id=pad_id)
    out = jax.device_get(out)
    texts += rollout.decode_completions(tokenizer, out.tokens, out.lengths)
  return texts


def correct(examples, texts, num_samples: int) -> np.ndarray:
  """[problems, num_samples] accuracy rewards (1 correct, 0 not)."""
  questions = [e.question for e in examples for _ in range(num_samples)]
  answers = [e.answer for e in examples for _ in range(num_samples)]
  scores = rewards.accuracy(questions, texts, answers)
  return np.asarray(scores, np.float32).reshape(len(examples), num_samples)


def evaluate(config, *, checkpoint: Optional[str] = None,
             num_problems: int = 64, k: int = 4, seed: int = 0) -> dict:
  """Greedy accuracy and pass@k on ``num_problems`` held-out problems.

  Args:
    config: a training config (model, data, rollout lengths).
    checkpoint: a training workdir whose latest checkpoint to evaluate;
      None evaluates the base model.
    num_problems: held-out problems.
    k: samples per problem for pass@k.
    seed: sampling seed.

  Returns:
    dict with greedy_accuracy, pass_at_k, k, num_problems, step.
  """
  model_config, params, tokenizer = models.load_model(
      config.model.name, seed=config.seed)
  step = 0
  if checkpoint:
    optimizer = optim.make_optimizer(**config.optimizer)
    template = train.init_state(params, optimizer, seed=config.seed,
                                components=train.make_components(config))
    state, metadata = train.restore(checkpoint, template)
    params, step = state.params, metadata["step"]
  examples = data_lib.make_task(config.data, seed=config.seed).heldout(
      num_problems)
  common = dict(max_new_tokens=config.rollout.max_new_tokens,
                buckets=tuple(config.data.prompt_buckets),
                system_prompt=config.data.system_prompt)
  key = jax.random.PRNGKey(seed)
  greedy = correct(examples, completions(
      params, model_config, tokenizer, examples, key, num_samples=1,
      temperature=1.0, greedy=True, **common), 1)
  sampled = correct(examples, completions(
      params, model_config, tokenizer, examples, key, num_samples=k,
      temperature=config.rollout.temperature, greedy=False, **common), k)
  return {
      "greedy_accuracy": float(greedy.mean()),
      "pass_at_k": float((sampled.max(axis=1) > 0).mean()),
      "sample_accuracy": float(sampled.mean()),
      "k": int(k),
      "num_problems": len(examples),
      "step": int(step),
  }
