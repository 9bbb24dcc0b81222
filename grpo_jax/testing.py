"""Helpers shared by the tests: chex asserts and small fixtures.

Tests import chex through this module so that tolerances and conventions live
in one place.
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


# ------------------------------------------- laws of advantage estimators
# Plain functions of an `advantages.Estimator` record and a `groups.GroupData`:
# tests/contracts/test_estimators.py runs them on every registered estimator,
# and a notebook can run them on a new one. Each raises AssertionError.


def estimator_groups(key, *, p: int = 4, g: int = 4, k: int = 2):
  """Random `groups.GroupData`: column 0 is 0/1 (an accuracy), the others
  uniform in [0, 1); weights 1, 0.5, 0.5, ...; lengths in [1, 16]."""
  from grpo_jax import groups as groups_lib  # pylint: disable=g-import-not-at-top
  keys = jax.random.split(key, 3)
  accuracy = jax.random.bernoulli(keys[0], 0.5, (p, g, 1)).astype(jnp.float32)
  rest = jax.random.uniform(keys[1], (p, g, k - 1))
  weights = jnp.asarray([1.0] + [0.5] * (k - 1), jnp.float32)
  lengths = jax.random.randint(keys[2], (p, g), 1, 17)
  return groups_lib.from_rewards(jnp.concatenate([accuracy, rest], -1),
                                 weights, lengths=lengths)


def _estimate(estimator, groups):
  advantages, _ = estimator.estimate(estimator.init(), groups)
  return advantages


def _per_group(advantages, groups):
  """[P, G] or token-level [N, T] advantages as [P, G, 1] or [P, G, T]."""
  p, g = groups.lengths.shape
  return advantages.reshape(p, g, -1)


def _slice_groups(groups, rows):
  """The groups `rows` (an index array or slice over P)."""
  return groups._replace(rewards=groups.rewards[rows],
                         valid=groups.valid[rows], lengths=groups.lengths[rows])


def check_constant_group_gives_zero(estimator, groups):
  """A group whose rewards are all equal, and a group where only a reward of
  weight 0 varies, both get exactly 0 (no signal, `groups.has_signal`)."""
  rewards = groups.rewards.at[0].set(0.7)
  weights = groups.weights
  if rewards.shape[-1] > 1:
    weights = weights.at[-1].set(0.0)
    rewards = rewards.at[1, :, :-1].set(0.3)
  out = _per_group(_estimate(estimator, groups._replace(
      rewards=rewards, weights=weights)), groups)
  np.testing.assert_array_equal(numpy(out[:2]), np.zeros(out[:2].shape))


def check_shift_invariance(estimator, groups, *, shift: float = 3.0):
  """Adding a constant to every reward leaves the advantages unchanged."""
  shifted = groups._replace(rewards=groups.rewards + shift)
  assert_close(_estimate(estimator, shifted), _estimate(estimator, groups),
               atol=1e-5, rtol=1e-5)


def check_permutation_equivariance(estimator, groups, key):
  """Permuting the completions of each group permutes their advantages."""
  p, g = groups.lengths.shape
  order = jax.vmap(lambda k: jax.random.permutation(k, g))(
      jax.random.split(key, p))  # [P, G]
  take = lambda x: jnp.take_along_axis(
      x, order.reshape(order.shape + (1,) * (x.ndim - 2)), axis=1)
  permuted = groups._replace(rewards=take(groups.rewards),
                             lengths=take(groups.lengths))
  assert_close(_per_group(_estimate(estimator, permuted), groups),
               take(_per_group(_estimate(estimator, groups), groups)),
               atol=1e-5, rtol=1e-5)


def check_groups_independent(estimator, groups):
  """Each group's advantages are those it gets estimated on its own."""
  whole = _per_group(_estimate(estimator, groups), groups)
  for i in range(groups.lengths.shape[0]):
    alone = _slice_groups(groups, slice(i, i + 1))
    assert_close(_per_group(_estimate(estimator, alone), alone)[0], whole[i],
                 atol=1e-5, rtol=1e-5)


def check_group_of_one_gives_zero(estimator, groups):
  """G = 1: no baseline can be formed, every advantage is exactly 0."""
  one = groups._replace(rewards=groups.rewards[:, :1],
                        lengths=groups.lengths[:, :1])
  out = numpy(_estimate(estimator, one))
  np.testing.assert_array_equal(out, np.zeros(out.shape))


def check_jit_matches_eager(estimator, groups):
  """``jit(estimate)`` equals eager, and the state keeps its structure."""
  state = estimator.init()
  eager, new_state = estimator.estimate(state, groups)
  jitted, jit_state = jax.jit(estimator.estimate)(state, groups)
  assert_close(jitted, eager, atol=1e-6, rtol=1e-6)
  assert (jax.tree.structure(new_state) == jax.tree.structure(jit_state)
          == jax.tree.structure(state))


def check_float32_output(estimator, groups):
  """Finite float32 advantages: [P, G] (output "group") or [N, ...] rows."""
  out = _estimate(estimator, groups)
  p, g = groups.lengths.shape
  assert out.dtype == jnp.float32, out.dtype
  shapes = {"group": (p, g), "token": (p * g,) + out.shape[1:]}
  assert out.shape == shapes[estimator.output], (out.shape, estimator.output)
  assert_finite(out)


def check_fillers_are_ignored(estimator, groups):
  """Filler groups (valid False) get exactly 0, and the other groups get
  what they get with the fillers dropped (masked equals dropped)."""
  p = groups.lengths.shape[0]
  valid = jnp.arange(p) % 2 == 0  # groups 1, 3, ... are fillers
  # Fillers with outlandish rewards: any leak into a statistic shows.
  rewards = jnp.where(valid[:, None, None], groups.rewards,
                      100.0 * jnp.arange(groups.rewards.shape[1],
                                         dtype=jnp.float32)[None, :, None])
  masked = groups._replace(rewards=rewards, valid=valid)
  out = _per_group(_estimate(estimator, masked), groups)
  np.testing.assert_array_equal(numpy(out[1::2]), np.zeros(out[1::2].shape))
  kept = _slice_groups(masked, np.arange(0, p, 2))
  assert_close(out[::2], _per_group(_estimate(estimator, kept), kept),
               atol=1e-5, rtol=1e-5)


# Every law taking (estimator, groups) or (estimator, groups, key), with the
# metadata flag that must be True for it to apply (None: always applies).
ESTIMATOR_LAWS = (
    (check_constant_group_gives_zero, "constant_group_zero"),
    (check_shift_invariance, None),
    (check_permutation_equivariance, None),
    (check_groups_independent, "independent_groups"),
    (check_group_of_one_gives_zero, "constant_group_zero"),
    (check_jit_matches_eager, None),
    (check_float32_output, None),
    (check_fillers_are_ignored, None),
)


def check_estimator(name: str, key=None, **options):
  """Runs every law that `name`'s metadata asks for, with `options`.

  Returns the names of the laws run.
  """
  import inspect  # pylint: disable=g-import-not-at-top
  from grpo_jax import advantages  # pylint: disable=g-import-not-at-top
  key = jax.random.PRNGKey(0) if key is None else key
  estimator = advantages.make(name, **options)
  meta = advantages.meta(name, **options)
  groups = estimator_groups(key)
  ran = []
  for law, flag in ESTIMATOR_LAWS:
    if flag is not None and not meta[flag]:
      continue
    extra = (key,) if "key" in inspect.signature(law).parameters else ()
    law(estimator, groups, *extra)
    ran.append(law.__name__)
  return tuple(ran)
