"""bfloat16 compute over float32 master weights: how far from float32."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax.train import batch as batch_lib
from grpo_jax import config as config_lib
from grpo_jax import models, objectives, sampling, testing
from grpo_jax import train as train_lib
from grpo_jax.train import update as update_lib

CONFIG32 = testing.tiny_config("qwen3")
CONFIG16 = CONFIG32.replace(dtype="bfloat16")


@pytest.fixture(autouse=True)
def default_precision():
  # conftest asks for "highest" (exact float32 comparisons elsewhere); a
  # bf16 dot at that precision asks XLA's CPU runtime for bf16 x bf16 ->
  # f32, which it lacks. Users' runs use the default, as here.
  with jax.default_matmul_precision("default"):
    yield


def _batch(params, key, n=4, t=6):
  k1, k2, k3, k4 = jax.random.split(key, 4)
  mask = testing.random_mask(k3, (n, t))
  return batch_lib.assemble_batch(
      params, None, jax.random.randint(k1, (2, 5), 1, 128),
      np.ones((2, 5), np.float32), jax.random.randint(k2, (n, t), 1, 128),
      mask, mask, jax.random.normal(k4, (n,)), model_config=CONFIG32,
      temperature=1.0, chunk_size=16)


def _loss_and_grads(config, params, batch):
  functions = update_lib.make_loss_functions(
      model_config=config, objective=objectives.make("ppo_clip"),
      chunk_size=16)
  grads, loss, _ = update_lib.minibatch_gradient(
      functions, params, {"objective": ()}, batch)
  return loss, grads


def test_bf16_update_is_close_to_float32_and_keeps_float32_masters():
  params = models.init_params(CONFIG32, jax.random.key(0))
  batch = _batch(params, jax.random.key(1))
  # Off policy, so the clipped loss has a gradient of its own.
  batch = batch._replace(old_logp=batch.old_logp - 0.1)
  loss32, grads32 = _loss_and_grads(CONFIG32, params, batch)
  loss16, grads16 = _loss_and_grads(CONFIG16, params, batch)
  assert all(g.dtype == jnp.float32 for g in jax.tree.leaves(grads16))
  assert loss16.dtype == jnp.float32
  flat32 = np.concatenate([np.ravel(g) for g in jax.tree.leaves(grads32)])
  flat16 = np.concatenate([np.ravel(g) for g in jax.tree.leaves(grads16)])
  cosine = flat16 @ flat32 / np.linalg.norm(flat16) / np.linalg.norm(flat32)
  assert cosine > 0.999
  assert abs(np.linalg.norm(flat16) / np.linalg.norm(flat32) - 1) < 0.02
  assert abs(float(loss16 - loss32)) < 0.02 * abs(float(loss32)) + 1e-3
  assert not np.array_equal(flat16, flat32)  # really computed in bf16


def test_bf16_logprobs_are_float32_and_near_float32():
  params = models.init_params(CONFIG32, jax.random.key(0))
  batch = _batch(params, jax.random.key(1))
  start = batch.tokens.shape[1] - batch.completion_mask.shape[1]
  score = lambda config: batch_lib.policy_logprobs(
      params, config, batch.tokens, batch.input_mask, start, chunk_size=16)[0]
  logp32, logp16 = score(CONFIG32), score(CONFIG16)
  assert logp16.dtype == jnp.float32
  m = np.asarray(batch.completion_mask) > 0
  gap = np.abs(np.asarray(logp16) - np.asarray(logp32))[m]
  assert 0 < gap.max() < 0.05


def test_bf16_sampler_caches_in_bf16_and_agrees_with_the_bf16_trainer():
  params = models.init_params(CONFIG32, jax.random.key(0))
  tokens, mask = sampling.pad_prompts([[5, 9, 17, 4], [33, 2]])
  out = sampling.sample(params, CONFIG16, tokens, mask, jax.random.key(3),
                        num_samples=2, max_new_tokens=6, eos_ids=())
  rows = jnp.repeat(tokens, 2, axis=0)
  full = jnp.concatenate([rows, out.tokens], axis=1)
  input_mask = jnp.concatenate(
      [jnp.repeat(mask, 2, axis=0), out.mask.astype(mask.dtype)], axis=1)
  trainer16 = batch_lib.policy_logprobs(params, CONFIG16, full, input_mask,
                                        tokens.shape[1], chunk_size=16)[0]
  gap = np.abs(np.asarray(out.logprobs - trainer16))[np.asarray(out.mask) > 0]
  # Same bf16 numerics, different programs (cached decode vs one forward).
  assert gap.max() < 0.05
  # The KV cache: [layers, P, L, K, hd] in bfloat16.
  jaxpr = str(jax.make_jaxpr(functools.partial(
      sampling._sample, config=CONFIG16, num_samples=2, max_new_tokens=6,  # pylint: disable=protected-access
      top_k=0, top_p=1.0, greedy=False, eos_ids=(), pad_id=0))(
          params, tokens, mask, jax.random.key(3), jnp.float32(1.0)))
  cache_shape = f"[2,2,{tokens.shape[1] + 6},2,16]"
  assert f"bf16{cache_shape}" in jaxpr and f"f32{cache_shape}" not in jaxpr


def test_config_model_dtype_trains_bf16_over_float32_state(tmp_path):
  c = config_lib.get_base_config()
  config_lib.use_tiny(c)
  c.model.dtype = "bfloat16"
  c.train.num_steps = 1
  run = train_lib.build(c)
  assert run.model_config.dtype == "bfloat16"
  assert run.model_config.param_dtype == "float32"
  state = train_lib.train(c, str(tmp_path), run=run)
  floats = [x for x in jax.tree.leaves((state.params, state.opt_state))
            if jnp.issubdtype(x.dtype, jnp.floating)]
  assert floats and all(x.dtype == jnp.float32 for x in floats)
