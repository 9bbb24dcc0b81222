"""Export to a Hugging Face directory: transformers loads it with our logits."""

import json
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest
import torch
import transformers

from grpo_jax import config as config_lib
from grpo_jax import models, testing
from grpo_jax.train import saved_runs
from grpo_jax import train as train_lib
from grpo_jax.models import export

REPO = pathlib.Path(__file__).resolve().parent.parent
TOKENS = np.array([[3, 17, 99, 42, 5, 64, 7, 120]], np.int32)


def _our_logits(config, params, tokens=TOKENS):
  mask = np.ones_like(tokens, bool)
  hidden, _ = models.forward(params, config, tokens,
                             models.positions_from_mask(mask),
                             models.causal_attention_mask(mask))
  return np.asarray(models.logits(params, config, hidden))


def _hf_logits(directory, tokens=TOKENS):
  model = transformers.AutoModelForCausalLM.from_pretrained(
      str(directory), dtype=torch.float32).eval()
  with torch.no_grad():
    return model(torch.tensor(tokens)).logits.numpy()


def _perturbed(params, seed=1):
  """Params that differ from any checkpoint on disk (as trained ones do)."""
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(tree, [
      x + 0.05 * jax.random.normal(k, x.shape, x.dtype)
      for x, k in zip(leaves, keys)])


@pytest.mark.parametrize("model_type,tied", [
    ("llama", False), ("llama", True), ("qwen2", False), ("qwen3", True)])
def test_transformers_loads_the_export_with_our_logits(tmp_path, model_type,
                                                       tied):
  source, _ = testing.save_tiny_hf_checkpoint(
      tmp_path / "source", model_type=model_type, tied=tied)
  config, params, tokenizer = models.load(str(source))
  params = _perturbed(params)
  out = models.save_hf_checkpoint(tmp_path / "out", params, config, tokenizer)
  np.testing.assert_allclose(_hf_logits(out), _our_logits(config, params),
                             rtol=0, atol=1e-4)
  # And back into grpo_jax, exactly.
  config_back, params_back, tokenizer_back = models.load(str(out))
  assert config_back == config
  jax.tree.map(np.testing.assert_array_equal, params_back, params)
  assert tokenizer_back.get_vocab() == tokenizer.get_vocab()


def test_large_exports_are_sharded_with_an_index(tmp_path):
  source, _ = testing.save_tiny_hf_checkpoint(tmp_path / "source",
                                              model_type="qwen2")
  config, params, tokenizer = models.load(str(source))
  out = models.save_hf_checkpoint(tmp_path / "out", params, config, tokenizer,
                                  max_shard_bytes=40_000)
  index = json.loads((out / "model.safetensors.index.json").read_text())
  shards = sorted(set(index["weight_map"].values()))
  assert len(shards) > 2 and not (out / "model.safetensors").exists()
  assert shards == sorted(p.name for p in out.glob("model-*.safetensors"))
  sizes = {name: (out / name).stat().st_size for name in shards}
  # Each shard stays under the limit unless one tensor alone exceeds it
  # (the embedding: 128 x 64 float32 = 32 KiB fits).
  assert max(sizes.values()) < 40_000 + 4_096  # + the safetensors header
  total = sum(int(np.prod(x.shape)) * 4 for x in jax.tree.leaves(params))
  assert index["metadata"]["total_size"] == total
  np.testing.assert_allclose(_hf_logits(out), _our_logits(config, params),
                             rtol=0, atol=1e-4)


def test_generation_config_lists_every_end_id(tmp_path):
  source, _ = testing.save_tiny_hf_checkpoint(tmp_path / "source")
  config, params, tokenizer = models.load(str(source))
  out = models.save_hf_checkpoint(tmp_path / "out", params, config, tokenizer,
                                  eos_ids=(1, 7))
  generation = transformers.GenerationConfig.from_pretrained(str(out))
  assert generation.eos_token_id == [1, 7]
  assert json.loads((out / "config.json").read_text())["eos_token_id"] == [1, 7]


def test_bfloat16_export_rounds_each_weight_once(tmp_path):
  source, _ = testing.save_tiny_hf_checkpoint(tmp_path / "source")
  config, params, tokenizer = models.load(str(source))
  out = models.save_hf_checkpoint(tmp_path / "out", params, config, tokenizer,
                                  dtype="bfloat16")
  assert json.loads((out / "config.json").read_text())["torch_dtype"] == (
      "bfloat16")
  _, params_back, _ = models.load(str(out))
  jax.tree.map(
      lambda back, x: np.testing.assert_array_equal(
          back, np.asarray(x).astype(jax.numpy.bfloat16).astype(np.float32)),
      params_back, params)


def test_export_refuses_a_nonempty_directory_and_leaves_nothing(tmp_path):
  source, _ = testing.save_tiny_hf_checkpoint(tmp_path / "source")
  config, params, tokenizer = models.load(str(source))
  out = tmp_path / "out"
  out.mkdir()
  (out / "keep.txt").write_text("mine")
  with pytest.raises(ValueError, match="--out=.*exists and is not empty"):
    models.save_hf_checkpoint(out, params, config, tokenizer)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "source"]
  # A failure mid-write (a leaf with no Hugging Face name) leaves no
  # temporary directory behind and no `out`.
  bad = dict(params, extra=params["final_norm"])
  with pytest.raises(ValueError, match="extra"):
    models.save_hf_checkpoint(tmp_path / "new", bad, config, tokenizer)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "source"]


def test_hf_config_reads_back_as_the_same_model_config():
  for model_type in ("llama", "qwen2", "qwen3"):
    config = testing.tiny_config(model_type, tie_word_embeddings=True,
                                 rope_theta=5e5, rms_norm_eps=1e-5)
    assert models.ModelConfig.from_hf(export.hf_config(config)) == config


def test_export_command_writes_a_trained_tiny_run(tmp_path):
  config = config_lib.get_base_config()
  config_lib.use_tiny(config)
  config.kl.beta = 0.0
  config.train.num_steps = 2
  workdir = tmp_path / "run"
  state = train_lib.train(config, str(workdir))
  out = tmp_path / "exported"
  result = subprocess.run(
      [sys.executable, "-m", "experiments.export",
       f"--checkpoint={workdir}", f"--out={out}"],
      cwd=REPO, capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "exported step 2" in result.stdout
  model_config, params, _ = models.load(str(out))
  jax.tree.map(np.testing.assert_array_equal, params,
               jax.device_get(state.params))
  tokens = TOKENS % model_config.vocab_size
  np.testing.assert_allclose(_hf_logits(out, tokens),
                             _our_logits(model_config, params, tokens),
                             rtol=0, atol=1e-4)
  # Exporting again into the same directory fails before loading anything.
  again = subprocess.run(
      [sys.executable, "-m", "experiments.export",
       f"--checkpoint={workdir}", f"--out={out}"],
      cwd=REPO, capture_output=True, text=True, check=False)
  assert again.returncode != 0 and "exists and is not empty" in again.stderr


@pytest.mark.real_model
@pytest.mark.slow  # CI time; run with -m slow
def test_trained_smollm2_exports_with_our_logits(tmp_path):
  config = config_lib.get_base_config()
  config.rollout.num_prompts = 1
  config.rollout.num_generations = 2
  config.rollout.max_new_tokens = 8
  config.data.prompt_buckets = (64,)
  config.kl.beta = 0.0
  # Decoupled weight decay moves every matrix even when the two completions
  # tie on reward (a zero advantage): the export is of trained weights. One
  # step keeps the test short.
  config.optimizer.learning_rate = 1e-4
  config.optimizer.weight_decay = 0.1
  config.train.num_steps = 1
  config.train.compilation_cache_dir = ""
  config.metrics.plot = False
  config.mesh.shape = (1, 1, 1)
  workdir = tmp_path / "run"
  state = train_lib.train(config, str(workdir))
  out = tmp_path / "exported"
  _, model_config, params, tokenizer, step = saved_runs.restore_policy(
      str(workdir))
  assert step == 1
  _, base, _ = models.load("smollm2-135m-instruct")
  assert not np.array_equal(params["embed"], base["embed"])
  models.save_hf_checkpoint(out, params, model_config, tokenizer)
  ids = np.array([tokenizer("<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
                            "<|im_start|>assistant\n")["input_ids"]], np.int32)
  # The parity test's tolerance for SmolLM2 (float32 over 30 layers).
  np.testing.assert_allclose(_hf_logits(out, ids),
                             _our_logits(model_config, params, ids),
                             rtol=0, atol=5e-4)
  jax.tree.map(np.testing.assert_array_equal, models.load(str(out))[1],
               jax.device_get(state.params))
  generation = json.loads((out / "generation_config.json").read_text())
  assert set(generation["eos_token_id"]) == set(models.eos_ids(tokenizer))
