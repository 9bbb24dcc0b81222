"""Writing a policy out as a Hugging Face checkpoint directory.

    save_hf_checkpoint(out_dir, params, config, tokenizer)

gives ``config.json``, ``generation_config.json`` (with every end id),
``model.safetensors`` (or shards ``model-0000i-of-0000n.safetensors`` and
``model.safetensors.index.json`` past `max_shard_bytes`) and the tokenizer's
files: what ``transformers.AutoModelForCausalLM.from_pretrained`` and
`loading.load` read. The directory appears whole or not at all: everything is
written into a temporary sibling that is renamed into place.
"""

import json
import os
import pathlib
import shutil
import tempfile
from typing import Dict, Optional, Sequence

import jax
import numpy as np

from grpo_jax.models import loading
from grpo_jax.models.config import ModelConfig, dtype_name

# transformers' class for each family.
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM"}
DEFAULT_MAX_SHARD_BYTES = 5 * 2**30


def hf_config(config: ModelConfig, *, dtype: str = "float32",
              bos_id: Optional[int] = None, eos_ids: Sequence[int] = (),
              pad_id: Optional[int] = None) -> dict:
  """The ``config.json`` dict transformers (4.x and 5.x) reads `config` from.

  RoPE is written both ways (top-level ``rope_theta`` for 4.x,
  ``rope_parameters`` for 5.x); `ModelConfig.from_hf` reads either.
  """
  eos = list(eos_ids)
  return {
      "architectures": [ARCHITECTURES[config.model_type]],
      "model_type": config.model_type,
      "vocab_size": config.vocab_size,
      "hidden_size": config.hidden_size,
      "intermediate_size": config.intermediate_size,
      "num_hidden_layers": config.num_layers,
      "num_attention_heads": config.num_heads,
      "num_key_value_heads": config.num_kv_heads,
      "head_dim": config.head_dim,
      "hidden_act": "silu",
      "max_position_embeddings": config.max_position_embeddings,
      "rms_norm_eps": config.rms_norm_eps,
      "rope_theta": config.rope_theta,
      "rope_scaling": None,
      "rope_parameters": {"rope_type": "default",
                          "rope_theta": config.rope_theta},
      "tie_word_embeddings": config.tie_word_embeddings,
      # Llama's flag also adds an o_proj bias, which ModelConfig rejects, and
      # Qwen2 always has q/k/v biases: only the default is ever right here.
      "attention_bias": False,
      "use_cache": True,
      "torch_dtype": dtype,
      "dtype": dtype,
      "bos_token_id": bos_id,
      "eos_token_id": eos[0] if len(eos) == 1 else (eos or None),
      "pad_token_id": pad_id,
  }


def hf_tensors(params, config: ModelConfig, *, dtype: str = "float32"
               ) -> Dict[str, np.ndarray]:
  """Hugging Face-named numpy tensors of our params tree (the inverse of
  `loading.params_from_hf_tensors`): Linear weights back to [out, in],
  layers unstacked, no lm_head when the embeddings are tied."""
  target = np.dtype(jax.numpy.dtype(dtype_name(dtype)))
  tensors = {}

  def put(name, value, transpose):
    value = np.asarray(value)
    tensors[name] = np.ascontiguousarray(
        (value.T if transpose else value).astype(target))

  flat = jax.tree_util.tree_flatten_with_path(jax.device_get(params))[0]
  for path, leaf in flat:
    keys = tuple(p.key for p in path)
    if keys not in loading.HF_NAMES:
      raise ValueError(f"params leaf {'/'.join(keys)} has no Hugging Face name "
                       "(merge LoRA adapters before exporting).")
    template, transpose = loading.HF_NAMES[keys]
    if keys[0] == "layers":
      if leaf.shape[0] != config.num_layers:
        raise ValueError(f"params leaf {'/'.join(keys)} has {leaf.shape[0]} "
                         f"layers; the config says {config.num_layers}.")
      for i in range(config.num_layers):
        put(template.format(i=i), leaf[i], transpose)
    else:
      put(template, leaf, transpose)
  return tensors


def shard_tensors(tensors: Dict[str, np.ndarray], max_shard_bytes: int):
  """Splits tensors, in name order, into shards of at most
  `max_shard_bytes` (a tensor larger than that gets a shard of its own)."""
  shards, current, size = [], {}, 0
  for name in sorted(tensors):
    nbytes = tensors[name].nbytes
    if current and size + nbytes > max_shard_bytes:
      shards.append(current)
      current, size = {}, 0
    current[name] = tensors[name]
    size += nbytes
  if current:
    shards.append(current)
  return shards


def check_out_dir(out_dir) -> pathlib.Path:
  """`out_dir` as a path; ValueError if it exists and is not an empty
  directory (an export never overwrites)."""
  out = pathlib.Path(out_dir).expanduser()
  if out.exists() and (not out.is_dir() or any(out.iterdir())):
    raise ValueError(f"--out={out} exists and is not empty; choose a new "
                     "directory (an export never overwrites one).")
  return out


def save_hf_checkpoint(out_dir, params, config: ModelConfig, tokenizer, *,
                       eos_ids: Sequence[int] = (), dtype: str = "float32",
                       max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
                       ) -> pathlib.Path:
  """Writes a Hugging Face checkpoint directory (atomically); returns it.

  Args:
    out_dir: the directory to create; must not exist or be empty.
    params: our params tree (merged: no LoRA leaves).
    config: its ModelConfig.
    tokenizer: a transformers tokenizer (saved alongside), or None.
    eos_ids: every id that ends a completion (generation_config.json);
      default: `loading.eos_ids(tokenizer)`.
    dtype: the tensors' dtype ('float32' or 'bfloat16').
    max_shard_bytes: the largest safetensors file before sharding.
  """
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  out = check_out_dir(out_dir)
  dtype = dtype_name(dtype)
  tensors = hf_tensors(params, config, dtype=dtype)
  if tokenizer is not None and not eos_ids:
    eos_ids = loading.eos_ids(tokenizer)
  bos_id = getattr(tokenizer, "bos_token_id", None)
  pad_id = getattr(tokenizer, "pad_token_id", None)
  if pad_id is None and eos_ids:
    pad_id = eos_ids[0]
  out.parent.mkdir(parents=True, exist_ok=True)
  tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
  try:
    shards = shard_tensors(tensors, max_shard_bytes)
    # transformers refuses safetensors files without a known format tag.
    metadata = {"format": "pt"}
    if len(shards) == 1:
      save_file(shards[0], str(tmp / "model.safetensors"), metadata=metadata)
    else:
      weight_map = {}
      for i, shard in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(tmp / name), metadata=metadata)
        weight_map.update({tensor: name for tensor in shard})
      index = {"metadata": {"total_size": sum(t.nbytes for t in
                                              tensors.values())},
               "weight_map": weight_map}
      (tmp / "model.safetensors.index.json").write_text(
          json.dumps(index, indent=2))
    (tmp / "config.json").write_text(json.dumps(hf_config(
        config, dtype=dtype, bos_id=bos_id, eos_ids=eos_ids, pad_id=pad_id),
        indent=2))
    generation = {"bos_token_id": bos_id, "eos_token_id": list(eos_ids),
                  "pad_token_id": pad_id}
    (tmp / "generation_config.json").write_text(json.dumps(
        {k: v for k, v in generation.items() if v not in (None, [])},
        indent=2))
    if tokenizer is not None:
      tokenizer.save_pretrained(str(tmp))
    # mkdtemp's 0700 would keep other users (a serving container) out.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    if out.exists():
      out.rmdir()  # empty, checked above
    os.rename(tmp, out)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return out
