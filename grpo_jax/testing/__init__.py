"""Helpers shared by the tests: chex asserts and small fixtures.

Tests import chex through this module so that tolerances and conventions live
in one place. The contract laws of each kind are plain functions in
`grpo_jax.testing.estimator_laws`, `grpo_jax.testing.objective_laws` and
`grpo_jax.testing.credit_laws`:
the suites in tests/contracts and the notebooks both call them.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np

# float32 tolerances used across the suite unless a test says otherwise.
RTOL = 1e-5
ATOL = 1e-6


def assert_close(actual, expected, *, rtol=RTOL, atol=ATOL):
  """Trees of arrays are equal within tolerance (chex)."""
  chex.assert_trees_all_close(actual, expected, rtol=rtol, atol=atol)


def assert_finite(tree):
  """Every leaf of `tree` is free of NaN and inf."""
  chex.assert_tree_all_finite(tree)


def assert_shape(x, shape):
  chex.assert_shape(x, shape)


def assert_jit_and_vmap_match_eager(fn, *batched, rtol=RTOL, atol=ATOL):
  """``jit(fn)`` equals ``fn`` on the first element of each [B, ...]
  argument, and ``vmap(fn)`` over B equals the eager results stacked (trees
  of outputs too). Returns the jitted output on the first elements."""
  first = [x[0] for x in batched]
  out = jax.jit(fn)(*first)
  assert_close(out, fn(*first), rtol=rtol, atol=atol)
  eager = [fn(*args) for args in zip(*batched)]
  assert_close(jax.vmap(fn)(*batched),
               jax.tree.map(lambda *xs: jnp.stack(xs), *eager),
               rtol=rtol, atol=atol)
  return out


def random_logps(key, shape, *, scale=1.0):
  """Plausible log-probs (negative) of the given shape."""
  return -jnp.abs(jax.random.normal(key, shape)) * scale


def random_mask(key, shape, *, min_length=1):
  """A right-padded [N, T] mask with lengths in [min_length, T]."""
  n, t = shape
  lengths = jax.random.randint(key, (n,), min_length, t + 1)
  return (jnp.arange(t)[None, :] < lengths[:, None]).astype(jnp.float32)


def numpy(x):
  return np.asarray(jax.device_get(x))


# A character-level chat tokenizer, built offline: every printable ASCII
# character is one token. Used by the `tiny` model option of the configs.
TINY_SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>")
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}")


def tiny_tokenizer():
  """A transformers tokenizer over single characters (100 ids, pad 0, eos 1)."""
  import string  # pylint: disable=g-import-not-at-top
  import tokenizers  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  chars = sorted(set(string.printable) - set("\x0b\x0c\r"))
  vocab = {t: i for i, t in enumerate(list(TINY_SPECIAL_TOKENS) + chars)}
  tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(
      tokenizers.Regex(r"[\s\S]"), behavior="isolated")
  tok.decoder = tokenizers.decoders.Fuse()
  tokenizer = transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
      unk_token="<unk>")
  tokenizer.chat_template = TINY_CHAT_TEMPLATE
  return tokenizer


# Tiny decoder configs and checkpoints (grpo_jax.models). The RoPE theta is
# deliberately not a library default, so that a loader ignoring it fails.
TINY_ROPE_THETA = 12345.0


def tiny_config(model_type="llama", **overrides):
  """A 2-layer, width-64 ModelConfig (4 heads, 2 kv heads, vocab 128)."""
  from grpo_jax.models import ModelConfig  # pylint: disable=g-import-not-at-top
  fields = dict(
      model_type=model_type, vocab_size=128, hidden_size=64,
      intermediate_size=96, num_layers=2, num_heads=4, num_kv_heads=2,
      head_dim=16, rope_theta=TINY_ROPE_THETA, rms_norm_eps=1e-6,
      tie_word_embeddings=False, qkv_bias=model_type == "qwen2",
      qk_norm=model_type == "qwen3", max_position_embeddings=256)
  fields.update(overrides)
  return ModelConfig(**fields)


def save_tiny_hf_checkpoint(directory, *, model_type="llama", tied=False,
                            config_style="5.x", seed=0, tokenizer=True):
  """Saves a random tiny transformers checkpoint; returns (path, torch model).

  LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM with 2 layers, width
  64, 4 heads, 2 kv heads, vocab 128, rope_theta TINY_ROPE_THETA, written with
  save_pretrained(safe_serialization=True). Norm weights and biases are
  randomised too, so that a loader dropping them fails a parity test.

  Args:
    directory: where to write (created).
    model_type: 'llama', 'qwen2' or 'qwen3'.
    tied: tie_word_embeddings (no lm_head.weight in the file).
    config_style: '5.x' keeps transformers' own config.json (rope_parameters,
      dtype); '4.x' rewrites it with top-level rope_theta / rope_scaling and
      torch_dtype, as checkpoints written by transformers 4.x have.
    seed: torch seed for the weights.
    tokenizer: also save `tiny_tokenizer()` into the directory.
  """
  import json  # pylint: disable=g-import-not-at-top
  import pathlib  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  classes = {
      "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
      "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
      "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
  }
  config_class, model_class = classes[model_type]
  hf_config = config_class(
      vocab_size=128, hidden_size=64, intermediate_size=96,
      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
      head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6,
      rope_theta=TINY_ROPE_THETA, tie_word_embeddings=tied)
  torch.manual_seed(seed)
  model = model_class(hf_config).eval()
  with torch.no_grad():
    for name, param in model.named_parameters():
      if name.endswith("norm.weight"):
        param.copy_(1.0 + 0.1 * torch.randn_like(param))
      elif name.endswith(".bias"):
        param.copy_(0.1 * torch.randn_like(param))
  directory = pathlib.Path(directory)
  model.save_pretrained(str(directory), safe_serialization=True)
  if config_style == "4.x":
    path = directory / "config.json"
    config = json.loads(path.read_text())
    rope = config.pop("rope_parameters", None) or {}
    config["rope_theta"] = rope.get("rope_theta", TINY_ROPE_THETA)
    config["rope_scaling"] = None
    config["torch_dtype"] = config.pop("dtype", None) or "float32"
    path.write_text(json.dumps(config, indent=2))
  elif config_style != "5.x":
    raise ValueError(f"config_style must be '4.x' or '5.x'; got {config_style!r}.")
  if tokenizer:
    tiny_tokenizer().save_pretrained(str(directory))
  return directory, model


def save_tiny_hub_cache(cache_dir, repo_id: str, *, revision: str = "main",
                        **checkpoint_kwargs):
  """A Hugging Face hub cache holding one tiny checkpoint, made offline.

  Lays out ``models--{org}--{name}/refs/{revision}`` and
  ``snapshots/{commit}/`` (files as `save_tiny_hf_checkpoint` writes them) as
  huggingface_hub does after a download, so that ``snapshot_download`` finds
  them with ``HF_HUB_OFFLINE=1``. Returns (snapshot path, torch model).
  """
  import hashlib  # pylint: disable=g-import-not-at-top
  import pathlib  # pylint: disable=g-import-not-at-top
  repo = pathlib.Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))
  commit = hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()
  snapshot, model = save_tiny_hf_checkpoint(
      repo / "snapshots" / commit, **checkpoint_kwargs)
  (repo / "refs").mkdir(parents=True, exist_ok=True)
  (repo / "refs" / revision).write_text(commit)
  return snapshot, model


def without_timing(records):
  """Metric records without their wall-clock entries (time/*, *per_s*)."""
  return [{k: v for k, v in r.items()
           if not k.startswith("time/") and "per_s" not in k}
          for r in records]


class _Crash(Exception):
  pass


def coin_accuracy(run):
  """`run` (a `train.Run`) with its ``accuracy`` verifier replaced by a
  coin (1 for a quarter of completions, by a hash of the completion) and
  every other verifier by 0: the tiny model earns no reward, and a
  replaying strategy needs groups with and without variance."""
  import functools  # pylint: disable=g-import-not-at-top
  import hashlib  # pylint: disable=g-import-not-at-top
  from grpo_jax import rollout  # pylint: disable=g-import-not-at-top

  def coin(prompts, completions, answers):
    del prompts, answers
    return [float(hashlib.blake2b(c.encode()).digest()[0] % 4 == 0)
            for c in completions]

  zero = lambda prompts, completions, answers: [0.0] * len(completions)
  pipeline = run.rollout_fn.keywords["pipeline"]
  pipeline = pipeline._replace(verifiers={
      name: (coin if name == "accuracy" else zero, weight)
      for name, (_, weight) in pipeline.verifiers.items()})
  return run._replace(rollout_fn=functools.partial(rollout.generate,
                                                   pipeline=pipeline))


def check_resume_is_exact(config, workdir, *, crash_at: int = 2, run=None):
  """Trains `config` straight through in ``workdir/a``, and in ``workdir/b``
  crashes after step `crash_at`'s metrics (before its checkpoint) and
  resumes: the final states and every metric but timing are equal, bit for
  bit, and each step is recorded once. `run` is ``train.build(config)``
  unless given. Returns (the straight run's state, its metric records)."""
  import os  # pylint: disable=g-import-not-at-top
  from grpo_jax import metrics  # pylint: disable=g-import-not-at-top
  from grpo_jax import train  # pylint: disable=g-import-not-at-top
  a, b = os.path.join(workdir, "a"), os.path.join(workdir, "b")
  run = train.build(config) if run is None else run
  straight = train.train(config, a, run=run)

  def crash(step, record):
    del record
    if step == crash_at:
      raise _Crash()

  try:
    train.train(config, b, run=run, callback=crash)
    raise AssertionError(f"no crash at step {crash_at}")
  except _Crash:
    pass
  assert_close(train.train(config, b, run=run), straight, rtol=0, atol=0)
  records = metrics.read(os.path.join(a, metrics.METRICS_FILE))
  resumed = metrics.read(os.path.join(b, metrics.METRICS_FILE))
  assert [r["step"] for r in resumed] == list(range(config.train.num_steps))
  assert without_timing(records) == without_timing(resumed)
  return straight, records
