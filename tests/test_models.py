"""Tests for grpo_jax.models: parity with transformers, KV cache, loading."""

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.test_util import check_grads
from safetensors.numpy import load_file, save_file

from grpo_jax import models, testing
from grpo_jax.models import transformer

PARITY_ATOL = 1e-4

# (model_type, tied, config_style): every family tied and untied, both
# config.json key styles.
CHECKPOINTS = [
    ("llama", False, "4.x"),
    ("llama", True, "5.x"),
    ("qwen2", True, "4.x"),
    ("qwen2", False, "5.x"),
    ("qwen3", False, "4.x"),
    ("qwen3", True, "5.x"),
]


@functools.lru_cache(maxsize=None)
def _checkpoint(tmp_root, model_type, tied, config_style):
  directory = tmp_root / f"{model_type}-{'tied' if tied else 'untied'}-{config_style}"
  return testing.save_tiny_hf_checkpoint(
      directory, model_type=model_type, tied=tied, config_style=config_style)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  root = tmp_path_factory.mktemp("checkpoints")
  return functools.partial(_checkpoint, root)


def _left_padded(lengths, width, *, seed=0):
  """Random tokens [B, S] left-padded to `width`, and their mask [B, S]."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(3, 128, size=(len(lengths), width)).astype(np.int32)
  mask = np.arange(width)[None, :] >= width - np.asarray(lengths)[:, None]
  return np.where(mask, tokens, 0).astype(np.int32), mask


@functools.partial(jax.jit, static_argnums=0)
def _full_logits(config, params, tokens, mask):
  hidden, cache = models.forward(
      params, config, tokens, models.positions_from_mask(mask),
      models.causal_attention_mask(mask))
  assert cache is None
  return models.logits(params, config, hidden)


def _jax_logits(config, params, tokens, mask):
  return np.asarray(_full_logits(config, params, jnp.asarray(tokens),
                                 jnp.asarray(mask)))


def _torch_logits(model, row_tokens):
  with torch.no_grad():
    return model(torch.tensor(row_tokens[None], dtype=torch.long)).logits[0].numpy()


@pytest.mark.parametrize("model_type,tied,config_style", CHECKPOINTS)
def test_logits_match_transformers_on_left_padded_batch(
    checkpoint, model_type, tied, config_style):
  directory, hf_model = checkpoint(model_type, tied, config_style)
  config, params, tokenizer = models.load(str(directory))
  assert config.rope_theta == testing.TINY_ROPE_THETA
  assert config.tie_word_embeddings == tied
  assert ("lm_head" in params) == (not tied)
  assert tokenizer is not None

  lengths = [7, 4, 1]
  tokens, mask = _left_padded(lengths, 7)
  got = _jax_logits(config, params, tokens, mask)
  for row, length in enumerate(lengths):
    # The reference sees each row alone and unpadded.
    expected = _torch_logits(hf_model, tokens[row, -length:])
    np.testing.assert_allclose(got[row, -length:], expected, rtol=0,
                               atol=PARITY_ATOL)
  assert np.isfinite(got).all()  # Padding queries included.


def test_config_key_styles_give_the_same_config(checkpoint):
  old, _ = checkpoint("llama", False, "4.x")
  new, _ = checkpoint("llama", False, "5.x")
  old_json = json.loads((old / "config.json").read_text())
  new_json = json.loads((new / "config.json").read_text())
  assert "rope_theta" in old_json and "torch_dtype" in old_json
  assert "rope_parameters" in new_json and "rope_theta" not in new_json
  assert (models.ModelConfig.from_hf(old_json)
          == models.ModelConfig.from_hf(new_json))


def _decode_step_mask(mask, index, length):
  """[B, 1, L]: the new query at slot `index` sees real slots <= index."""
  slots = jnp.arange(length)
  return (mask & (slots <= index)[None, :])[:, None, :]


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_cached_decoding_equals_full_forward(checkpoint, model_type):
  directory, _ = checkpoint(model_type, False, "5.x")
  config, params, _ = models.load(str(directory))
  prompt_len, new_tokens, cache_len = 5, 3, 10
  full_len = prompt_len + new_tokens
  tokens, prompt_mask = _left_padded([5, 2], prompt_len, seed=1)
  extra = np.random.default_rng(2).integers(3, 128, (2, new_tokens))
  all_tokens = jnp.asarray(np.concatenate([tokens, extra], 1), jnp.int32)
  full_mask = jnp.asarray(np.concatenate(
      [prompt_mask, np.ones((2, new_tokens), bool)], 1))
  full_positions = models.positions_from_mask(full_mask)
  expected, _ = jax.jit(models.forward, static_argnums=1)(
      params, config, all_tokens, full_positions,
      models.causal_attention_mask(full_mask))

  cache_mask = jnp.zeros((2, cache_len), bool).at[:, :full_len].set(full_mask)
  prefill_mask = models.causal_attention_mask(cache_mask)[:, :prompt_len, :]
  cache = models.init_cache(config, 2, cache_len)
  hidden, cache = jax.jit(models.forward, static_argnums=1)(
      params, config, all_tokens[:, :prompt_len],
      full_positions[:, :prompt_len], prefill_mask, cache=cache, cache_index=0)
  steps = [hidden]

  @jax.jit
  def decode(token, position, index, cache):
    # cache_index traced: one compilation serves every step.
    return models.forward(
        params, config, token, position,
        _decode_step_mask(cache_mask, index, cache_len), cache=cache,
        cache_index=index)

  for t in range(prompt_len, full_len):
    hidden, cache = decode(all_tokens[:, t:t + 1], full_positions[:, t:t + 1],
                           jnp.int32(t), cache)
    steps.append(hidden)
  got = jnp.concatenate(steps, axis=1)
  real = np.asarray(full_mask)
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(expected)[real],
                             rtol=0, atol=1e-5)
  assert decode._cache_size() == 1
  # Slots past the written ones stay empty.
  assert not np.asarray(cache.k[:, :, full_len:]).any()


def test_bfloat16_runs_and_is_close_to_float32(checkpoint):
  directory, _ = checkpoint("qwen3", False, "5.x")
  config32, params32, _ = models.load(str(directory))
  config16, params16, _ = models.load(str(directory), dtype="bfloat16")
  assert params16["layers"]["attn"]["q"].dtype == jnp.bfloat16
  _, params_mixed, _ = models.load(str(directory), dtype="bfloat16",
                                   param_dtype="float32")
  assert params_mixed["layers"]["attn"]["q"].dtype == jnp.float32
  tokens, mask = _left_padded([6, 3], 6)
  want = _jax_logits(config32, params32, tokens, mask)
  got = _jax_logits(config16, params16, tokens, mask)
  assert got.dtype == np.float32 and np.isfinite(got).all()
  scale = np.abs(want[mask]).max()
  assert np.abs(got[mask] - want[mask]).max() <= 0.05 * scale
  assert np.abs(got[mask] - want[mask]).max() > 0  # really ran in bf16


def _rewrite_checkpoint(src, dst, edit):
  import shutil  # pylint: disable=g-import-not-at-top
  shutil.copytree(src, dst)
  tensors = load_file(str(dst / "model.safetensors"))
  edit(tensors)
  save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
  return dst


def test_missing_tensor_raises_naming_it(checkpoint, tmp_path):
  src, _ = checkpoint("llama", False, "5.x")
  name = "model.layers.1.mlp.up_proj.weight"
  dst = _rewrite_checkpoint(src, tmp_path / "missing",
                            lambda t: t.pop(name))
  with pytest.raises(ValueError, match=name.replace(".", r"\.")):
    models.load(str(dst))


def test_missing_lm_head_of_untied_model_raises(checkpoint, tmp_path):
  src, _ = checkpoint("qwen2", False, "5.x")
  dst = _rewrite_checkpoint(src, tmp_path / "no_head",
                            lambda t: t.pop("lm_head.weight"))
  with pytest.raises(ValueError, match=r"lm_head\.weight"):
    models.load(str(dst))


def test_misshaped_tensor_raises_naming_it(checkpoint, tmp_path):
  src, _ = checkpoint("qwen2", True, "5.x")
  name = "model.layers.0.self_attn.k_proj.bias"

  def edit(tensors):
    tensors[name] = np.zeros((7,), tensors[name].dtype)

  dst = _rewrite_checkpoint(src, tmp_path / "misshaped", edit)
  with pytest.raises(ValueError, match=name.replace(".", r"\.")):
    models.load(str(dst))


def test_sharded_checkpoint_loads_like_single_file(checkpoint, tmp_path):
  directory, hf_model = checkpoint("qwen2", False, "5.x")
  hf_model.save_pretrained(str(tmp_path), safe_serialization=True,
                           max_shard_size="40KB")
  assert (tmp_path / "model.safetensors.index.json").is_file()
  _, single, _ = models.load(str(directory))
  _, sharded, tokenizer = models.load(str(tmp_path))
  assert tokenizer is None  # no tokenizer files were written there
  testing.assert_close(sharded, single, rtol=0, atol=0)


def test_unknown_model_type_lists_supported_types():
  with pytest.raises(ValueError, match="llama, qwen2, qwen3"):
    models.ModelConfig.from_hf({"model_type": "gpt2"})
  with pytest.raises(ValueError, match="llama, qwen2, qwen3"):
    testing.tiny_config(model_type="mistral")


def test_rope_scaling_default_accepted_others_rejected():
  base = {"model_type": "llama", "vocab_size": 8, "hidden_size": 8,
          "intermediate_size": 8, "num_hidden_layers": 1,
          "num_attention_heads": 2}
  assert models.ModelConfig.from_hf(
      {**base, "rope_scaling": None, "rope_theta": 5.0}).rope_theta == 5.0
  assert models.ModelConfig.from_hf(
      {**base, "rope_parameters": {"rope_type": "default",
                                   "rope_theta": 7.0}}).rope_theta == 7.0
  assert models.ModelConfig.from_hf(base).rope_theta == 10000.0
  with pytest.raises(ValueError, match="'llama3'"):
    models.ModelConfig.from_hf(
        {**base, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})
  with pytest.raises(ValueError, match="'yarn'"):
    models.ModelConfig.from_hf(
        {**base, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1.0}})


def test_config_is_hashable_and_normalises_dtypes():
  a = testing.tiny_config(dtype=jnp.bfloat16)
  b = testing.tiny_config(dtype="bfloat16")
  assert a == b and hash(a) == hash(b) and a.dtype == "bfloat16"


def test_init_params_tree_layout():
  config = testing.tiny_config("qwen3", tie_word_embeddings=True)
  params = models.init_params(config, jax.random.key(0))
  shapes = jax.tree_util.tree_map(lambda x: x.shape, params)
  assert shapes == {
      "embed": (128, 64),
      "final_norm": (64,),
      "layers": {
          "attn_norm": (2, 64), "mlp_norm": (2, 64),
          "attn": {"q": (2, 64, 64), "k": (2, 64, 32), "v": (2, 64, 32),
                   "o": (2, 64, 64), "q_norm": (2, 16), "k_norm": (2, 16)},
          "mlp": {"gate": (2, 64, 96), "up": (2, 64, 96), "down": (2, 96, 64)},
      },
  }
  np.testing.assert_array_equal(models.unembedding(params, config),
                                params["embed"].T)
  # Layers get different random weights (split rngs over the scan).
  q = params["layers"]["attn"]["q"]
  assert not np.allclose(q[0], q[1])


def test_mask_helpers_by_hand():
  mask = jnp.array([[0, 1, 1], [1, 1, 1]], bool)
  np.testing.assert_array_equal(models.positions_from_mask(mask),
                                [[0, 0, 1], [0, 1, 2]])
  np.testing.assert_array_equal(
      models.causal_attention_mask(mask)[0],
      [[False, False, False], [False, True, False], [False, True, True]])
  np.testing.assert_array_equal(models.causal_attention_mask(mask)[1],
                                np.tril(np.ones((3, 3), bool)))


def test_swiglu_gradient_is_silu_times_up():
  """The written-out backward of ``silu(g) * u``: the finite differences
  agree, and so does autodiff through jax.nn.silu; by hand at g = 0,
  silu'(0) = 1/2 and silu(0) = 0."""
  gate, up = jax.random.normal(jax.random.key(0), (2, 3, 5))
  check_grads(transformer.swiglu, (gate, up), order=1, modes=["rev"])
  weight = jax.random.normal(jax.random.key(1), (3, 5))
  loss = lambda f: lambda g, u: (f(g, u) * weight).sum()
  testing.assert_close(
      jax.grad(loss(transformer.swiglu), argnums=(0, 1))(gate, up),
      jax.grad(loss(lambda g, u: jax.nn.silu(g) * u), argnums=(0, 1))(
          gate, up), rtol=1e-6)
  d_gate, d_up = jax.grad(loss(transformer.swiglu), argnums=(0, 1))(
      jnp.zeros((3, 5)), up)
  testing.assert_close(d_gate, weight * up / 2)
  testing.assert_close(d_up, jnp.zeros((3, 5)))


def test_masked_softmax_gradient_matches_autodiff():
  """The written-out backward ``p * (g - sum(g p))`` against autodiff of
  the plain formula, masked keys and a row with no key getting zero
  gradient; and against finite differences with every key visible."""
  scores = jax.random.normal(jax.random.key(0), (2, 3, 4))
  mask = jnp.array([[True, True, False, True]] * 3 + [[True] * 4,
                    [False] * 4, [True, False, False, False]])
  mask = mask.reshape(2, 3, 4)

  def plain(x):
    x = jnp.where(mask, x, -jnp.inf)
    top = jnp.max(jnp.where(mask, x, 0.0), axis=-1, keepdims=True)
    e = jnp.where(mask, jnp.exp(x - top), 0.0)
    total = e.sum(-1, keepdims=True)
    return e / jnp.where(total > 0, total, 1.0)

  weight = jax.random.normal(jax.random.key(1), (2, 3, 4))
  loss = lambda f: lambda x: (f(x) * weight).sum()
  ours = jax.grad(loss(lambda x: transformer.masked_softmax(x, mask)))(scores)
  testing.assert_close(ours, jax.grad(loss(plain))(scores), atol=1e-6)
  np.testing.assert_array_equal(np.asarray(ours)[~np.asarray(mask)], 0.0)
  full = jnp.ones((2, 3, 4), bool)
  check_grads(lambda x: transformer.masked_softmax(x, full), (scores,),
              order=1, modes=["rev"])


def test_fully_masked_query_rows_give_finite_values_and_grads():
  config = testing.tiny_config("llama")
  params = models.init_params(config, jax.random.key(1))
  tokens = jnp.array([[0, 0, 5, 6]], jnp.int32)
  mask = jnp.array([[0, 0, 1, 1]], bool)

  def loss(params):
    # remat also exercises the rematerialised scan body.
    hidden, _ = models.forward(params, config.replace(remat=True), tokens,
                               models.positions_from_mask(mask),
                               models.causal_attention_mask(mask))
    return jnp.sum(models.logits(params, config, hidden) ** 2)

  value, grads = jax.jit(jax.value_and_grad(loss))(params)
  testing.assert_finite((value, grads))


def test_forward_rejects_bad_shapes():
  config = testing.tiny_config()
  params = models.init_params(config, jax.random.key(0))
  tokens = jnp.zeros((2, 3), jnp.int32)
  with pytest.raises(ValueError, match="attention_mask"):
    models.forward(params, config, tokens, tokens, jnp.ones((2, 3, 4), bool))
  with pytest.raises(ValueError, match="positions"):
    models.forward(params, config, tokens, tokens[:, :2],
                   jnp.ones((2, 3, 3), bool))
  with pytest.raises(ValueError, match="tokens"):
    models.forward(params, config, tokens[0], tokens[0],
                   jnp.ones((2, 3, 3), bool))


@pytest.mark.parametrize("model_type,adapted", [
    ("llama", False), ("qwen2", False), ("qwen3", False), ("llama", True)])
def test_shared_prompt_scan_gives_the_full_forwards_values_and_gradient(
    model_type, adapted):
  """`forward_shared_prompts` (through `batch.completion_hidden`), two
  layers, each family's extra weights (q/k/v biases, q/k norms) and LoRA
  adapters, every weight perturbed so that each one matters: the hidden
  states of the full forward over the P*G rows, and its gradient. Prompts
  left-padded to unequal lengths, completions ragged."""
  from grpo_jax.train import batch as batch_lib  # pylint: disable=g-import-not-at-top
  from grpo_jax.models import lora  # pylint: disable=g-import-not-at-top
  config = testing.tiny_config(model_type)
  keys = iter(jax.random.split(jax.random.key(3), 64))
  params = models.init_params(config, next(keys))
  if adapted:
    params = lora.combine(params, lora.init_adapters(
        params, rank=2, targets=("q", "v", "gate", "down"), key=next(keys)))
  params = jax.tree.map(
      lambda x: x + 0.05 * jax.random.normal(next(keys), x.shape), params)
  g, sp, sc = 3, 4, 3
  prompts = jax.random.randint(next(keys), (2, sp), 1, config.vocab_size)
  prompt_mask = jnp.array([[1, 1, 1, 1], [0, 0, 1, 1]])
  tokens = jnp.concatenate(
      [jnp.repeat(prompts, g, axis=0),
       jax.random.randint(next(keys), (2 * g, sc), 1, config.vocab_size)], 1)
  completion_mask = jnp.array([[1, 1, 1], [1, 1, 0], [1, 0, 0]] * 2)
  input_mask = jnp.concatenate(
      [jnp.repeat(prompt_mask, g, axis=0), completion_mask], 1)
  weights = jax.random.normal(next(keys), (2 * g, sc, config.hidden_size))

  def loss(params, group_size):
    hidden = batch_lib.completion_hidden(params, config, tokens, input_mask,
                                         sp, group_size=group_size)
    hidden = hidden * completion_mask[..., None]
    return (weights * hidden).sum(), hidden

  grad = jax.jit(jax.grad(loss, has_aux=True), static_argnums=1)
  full_grad, full = grad(params, 1)
  shared_grad, shared = grad(params, g)
  assert float(jnp.abs(full).max()) > 0.1
  testing.assert_close(shared, full, rtol=1e-5, atol=1e-5)
  testing.assert_close(shared_grad, full_grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("group_size", [1, 4])
def test_remat_keeps_the_gradient_with_fewer_temporaries(group_size):
  """`ModelConfig.remat` on both paths of `batch.completion_hidden` (Flax's
  scan at G=1, the shared-prompt scan at G>1): the same gradient, and
  XLA's memory analysis of the compiled gradient counts fewer temporaries
  (each layer keeps its inputs alone; about half at 4 layers here)."""
  from grpo_jax.train import batch as batch_lib  # pylint: disable=g-import-not-at-top
  config = testing.tiny_config(num_layers=4)
  keys = iter(jax.random.split(jax.random.key(5), 4))
  params = models.init_params(config, next(keys))
  p, g, sp, sc = 2, 4, 8, 24
  tokens = jax.random.randint(next(keys), (p * g, sp + sc), 1,
                              config.vocab_size)
  tokens = tokens.at[:, :sp].set(jnp.repeat(tokens[::g, :sp], g, axis=0))
  input_mask = jnp.ones_like(tokens)
  weights = jax.random.normal(next(keys), (p * g, sc, config.hidden_size))

  def gradient(config):
    loss = lambda params: (weights * batch_lib.completion_hidden(
        params, config, tokens, input_mask, sp, group_size=group_size)).sum()
    return jax.jit(jax.grad(loss))

  plain, remat = gradient(config), gradient(config.replace(remat=True))
  expected = plain(params)
  scale = max(float(jnp.abs(x).max()) for x in jax.tree.leaves(expected))
  testing.assert_close(remat(params), expected, rtol=1e-5, atol=1e-5 * scale)
  temp = lambda fn: fn.lower(params).compile().memory_analysis(
      ).temp_size_in_bytes
  assert temp(remat) < 0.6 * temp(plain)


def test_shared_prompt_scan_rejects_inconsistent_shapes():
  config = testing.tiny_config()
  params = models.init_params(config, jax.random.key(0))
  prompt = (jnp.zeros((2, 4), jnp.int32),) * 2 + (jnp.ones((2, 4, 7), bool),)
  completion = ((jnp.zeros((6, 3), jnp.int32),) * 2
                + (jnp.ones((6, 3, 7), bool),))
  run = functools.partial(models.forward_shared_prompts, params, config)
  with pytest.raises(ValueError, match="group_size"):
    run(prompt, completion, group_size=2)
  with pytest.raises(ValueError, match=r"completion attention_mask .*\(6, 3, 7\)"):
    run(prompt, completion[:2] + (jnp.ones((6, 3, 8), bool),), group_size=3)
  with pytest.raises(ValueError, match="positions"):
    run(prompt[:1] + (prompt[1][:, :3],) + prompt[2:], completion,
        group_size=3)
  hidden_p, hidden_c = run(prompt, completion, group_size=3)
  assert hidden_p.shape == (2, 4, 64) and hidden_c.shape == (6, 3, 64)


def test_unpermute_rope_rows_inverts_llama_cpp_permutation():
  rng = np.random.default_rng(0)
  heads, head_dim, width = 3, 8, 5
  weight = rng.normal(size=(heads * head_dim, width))
  # llama.cpp convert_hf_to_gguf: rows of each head (first half, second half)
  # are interleaved pairwise.
  permuted = np.empty_like(weight)
  for h in range(heads):
    block = weight[h * head_dim:(h + 1) * head_dim]
    permuted[h * head_dim:(h + 1) * head_dim:2] = block[:head_dim // 2]
    permuted[h * head_dim + 1:(h + 1) * head_dim:2] = block[head_dim // 2:]
  np.testing.assert_array_equal(
      models.loading.unpermute_rope_rows(permuted, heads), weight)


def test_eos_ids_collects_end_of_turn_tokens():
  tokenizer = testing.tiny_tokenizer()
  assert models.eos_ids(tokenizer) == (tokenizer.eos_token_id,)
  tokenizer.add_special_tokens(
      {"additional_special_tokens": ["<|im_end|>"]})
  im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
  assert models.eos_ids(tokenizer) == tuple(
      sorted({tokenizer.eos_token_id, im_end}))


@pytest.mark.real_model
def test_smollm2_matches_transformers_gguf_loading():
  import transformers  # pylint: disable=g-import-not-at-top
  config, params, tokenizer = models.load("smollm2-135m-instruct")
  assert config.rope_theta == 100000.0
  assert config.tie_word_embeddings and config.num_layers == 30
  im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
  assert im_end in models.eos_ids(tokenizer)
  text = tokenizer.apply_chat_template(
      [{"role": "user", "content": "What is 2+3?"}], tokenize=False,
      add_generation_prompt=True)
  assert text.endswith("<|im_start|>assistant\n")
  ids = np.array([tokenizer(text)["input_ids"]], np.int32)
  got = _jax_logits(config, params, ids, np.ones_like(ids, bool))

  path = models.loading.embedded_model_path("smollm2-135m-instruct")
  hf_model = transformers.AutoModelForCausalLM.from_pretrained(
      str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
  expected = _torch_logits(hf_model, ids[0])
  # Both dequantise the same Q4_1 file; differences are float32 rounding over
  # 30 layers on logits of magnitude ~20.
  np.testing.assert_allclose(got[0], expected, rtol=0, atol=5e-4)
  np.testing.assert_array_equal(got[0].argmax(-1), expected.argmax(-1))


@pytest.mark.real_model
def test_bundled_smollm2_tokenizer_equals_the_gguf_conversion():
  # The bundled tokenizer lets the library load SmolLM2 without torch; it must
  # be exactly what transformers derives from the GGUF file itself.
  from grpo_jax.models import loading  # pylint: disable=g-import-not-at-top
  path = loading.embedded_model_path("smollm2-135m-instruct")
  bundled = loading._gguf_tokenizer(path)  # pylint: disable=protected-access
  reference = loading.load_tokenizer(path.parent, gguf_file=path.name)
  messages = [{"role": "system", "content": "Answer in \\boxed{}."},
              {"role": "user", "content": "What is 17 + 25? Ünïcödé, tabs\t!"}]
  for render in (
      lambda t: t.apply_chat_template(messages, tokenize=False,
                                      add_generation_prompt=True),
      lambda t: t("  spaces, digits 12345 and <|im_end|>")["input_ids"],
      lambda t: t.apply_chat_template(messages, tokenize=True,
                                      add_generation_prompt=True),
  ):
    assert render(bundled) == render(reference)
  # The special ids from the file's own metadata: transformers before 5.25
  # (what pip picks beside Tunix's pins) reads this file's eos as
  # <|im_start|> and its pad as none.
  import gguf  # pylint: disable=g-import-not-at-top
  fields = gguf.GGUFReader(str(path)).fields
  special = lambda kind: int(
      fields[f"tokenizer.ggml.{kind}_token_id"].contents())
  assert bundled.eos_token_id == special("eos")
  assert bundled.bos_token_id == special("bos")
  assert bundled.pad_token_id == special("padding")
  vocab = reference.get_vocab()
  end_tokens = loading._END_TOKENS  # pylint: disable=protected-access
  ends = {vocab[t] for t in end_tokens if t in vocab}
  assert models.eos_ids(bundled) == tuple(sorted(ends | {special("eos")}))
