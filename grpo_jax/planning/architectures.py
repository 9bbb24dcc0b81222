"""The architectures a plan is for, read from config.json without weights.

`model_config_from_name` turns a config's ``model.name`` into a
`models.ModelConfig`: ``tiny``, a shipped architecture (the Hugging Face
config.json files of public models in ``grpo_jax/models/architectures``,
written from the hub's published configs; the embedded SmolLM2 ships there
too), a config.json path, or a directory holding one.
"""

import json
import math
import pathlib
from typing import Any, Mapping, Optional, Tuple

import jax

from grpo_jax import models
from grpo_jax.models import config as model_config_lib

# Hugging Face config.json files of public architectures, shipped with the
# package: `--config.model.name=qwen2.5-7b` plans one without any weights.
ARCHITECTURES_DIR = (pathlib.Path(__file__).parents[1] / "models"
                     / "architectures")


def architecture_names() -> Tuple[str, ...]:
  """The shipped architectures (`ARCHITECTURES_DIR`), by name."""
  return tuple(sorted(p.stem for p in ARCHITECTURES_DIR.glob("*.json")))


def hf_config_path(name: str) -> pathlib.Path:
  """The config.json a `model.name` stands for: a shipped architecture's
  name, a .json file, or a directory holding config.json."""
  if name in architecture_names():
    return ARCHITECTURES_DIR / f"{name}.json"
  path = pathlib.Path(name).expanduser()
  if path.is_file() and path.suffix == ".json":
    return path
  if path.is_dir() and (path / "config.json").is_file():
    return path / "config.json"
  raise ValueError(
      f"config.model.name={name!r} is neither a shipped architecture "
      f"({', '.join(architecture_names())}), 'tiny', a config.json file nor a "
      "directory holding config.json (for a hub id, its config.json); the "
      "planner reads only the config, never weights.")


def strip_rope_scaling(hf: Mapping[str, Any]) -> Tuple[dict, Optional[str]]:
  """A copy of a config.json dict without a RoPE scaling the model does not
  implement, and a note saying so (None when nothing was dropped).

  Memory and FLOPs do not depend on RoPE's frequency schedule, so such an
  architecture (Llama 3.1's ``llama3``) can be planned, though
  `models.load` refuses to train it.
  """
  hf = dict(hf)
  dropped = None
  for key in ("rope_scaling", "rope_parameters"):
    params = hf.get(key)
    if not params:
      continue
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type in model_config_lib.SUPPORTED_ROPE_TYPES:
      continue
    dropped = rope_type
    if params.get("rope_theta") is not None:
      hf["rope_theta"] = params["rope_theta"]
    hf[key] = None
  if dropped is None:
    return hf, None
  return hf, (f"RoPE scaling {dropped!r} is not implemented by the model "
              "(models.load refuses such a checkpoint); planned without it, "
              "since memory and FLOPs do not depend on it.")


def model_config_from_name(name: str, *, dtype: str = "float32",
                           param_dtype: str = "float32"
                           ) -> Tuple[models.ModelConfig, Tuple[str, ...]]:
  """(ModelConfig, notes) of a config's ``model.name`` without any weights:
  ``tiny``, a shipped architecture, the embedded model's name (it ships as an
  architecture too), a config.json path or a directory holding one.

  `dtype` is the compute dtype, `param_dtype` the params' (float32 master
  weights, as `models.load_model` loads them)."""
  built_in = models.built_in_config(name)
  if built_in is not None:
    return built_in.replace(dtype=dtype, param_dtype=param_dtype), ()
  path = hf_config_path(name)
  try:
    hf = json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise ValueError(f"{path} is not valid JSON: {e}") from e
  hf, note = strip_rope_scaling(hf)
  try:
    config = models.ModelConfig.from_hf(hf, dtype=dtype,
                                        param_dtype=param_dtype)
  except ValueError as e:
    raise ValueError(f"{path}: {e}") from e
  return config, () if note is None else (note,)


def param_count(params) -> int:
  """Number of parameters of a params tree (arrays or ShapeDtypeStructs)."""
  return int(sum(math.prod(x.shape) for x in jax.tree.leaves(params)))
