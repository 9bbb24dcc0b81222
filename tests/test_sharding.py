"""Sharding on 8 simulated CPU devices (tests/conftest.py sets the XLA flag).

Every sharded computation is compared with the same computation on one
device: sharding must change where numbers live, never the numbers.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from grpo_jax.train import batch as batch_lib
from grpo_jax.runtime import checkpoint as checkpoint_lib
from grpo_jax import models
from grpo_jax import objectives
from grpo_jax import sampling
from grpo_jax.runtime import sharding
from grpo_jax import testing
from grpo_jax.train import optim
from grpo_jax import train
from grpo_jax.train import update as update_lib
from grpo_jax.objectives import regularisers

MESHES = [(1, 8, 1), (2, 4, 1), (2, 2, 2), (1, 1, 8)]
# Heads, kv heads, F and V all divisible by 8, so that tensor=8 is legal.
CONFIG = testing.tiny_config(num_heads=8, num_kv_heads=8, head_dim=8,
                             intermediate_size=128)
N, SP, T = 16, 6, 6  # rows, prompt columns, completion columns
TOL = dict(rtol=2e-5, atol=2e-6)


def setup_module():
  if jax.device_count() != 8:
    pytest.fail("tests/conftest.py must force 8 host devices before jax is "
                f"imported; found {jax.device_count()}.")


@functools.lru_cache(maxsize=None)
def params():
  return models.init_params(CONFIG, jax.random.PRNGKey(0))


@functools.lru_cache(maxsize=None)
def batch():
  """A minibatch with left padding, ragged completions and off-policy
  old log-probs (so that clipping is active)."""
  rng = np.random.default_rng(0)
  tokens = rng.integers(2, CONFIG.vocab_size, (N, SP + T)).astype(np.int32)
  prompt_len = rng.integers(2, SP + 1, N)
  completion_len = rng.integers(1, T + 1, N)
  cols = np.arange(SP + T)
  input_mask = ((cols[None] >= SP - prompt_len[:, None])
                & (cols[None] < SP + completion_len[:, None]))
  completion_mask = input_mask[:, SP:].astype(np.float32)
  logp, _ = jax.jit(functools.partial(
      batch_lib.policy_logprobs, config=CONFIG, completion_start=SP))(
          params(), tokens=jnp.asarray(tokens),
          input_mask=jnp.asarray(input_mask, jnp.float32))
  logp = np.asarray(logp)
  return batch_lib.Batch(
      tokens=jnp.asarray(tokens), input_mask=jnp.asarray(input_mask,
                                                         jnp.float32),
      completion_mask=jnp.asarray(completion_mask),
      advantages=jnp.asarray(rng.normal(size=N), jnp.float32),
      old_logp=jnp.asarray(logp + 0.3 * rng.normal(size=logp.shape),
                           jnp.float32),
      ref_logp=jnp.asarray(logp + 0.1 * rng.normal(size=logp.shape),
                           jnp.float32),
      sampler_logp=None, temperature=jnp.ones((N,), jnp.float32))


# No clipping, so that Adam's first moment after one step is exactly
# (1 - b1) * gradient: comparing opt_state compares the gradients. A larger
# eps keeps the first Adam step (~ g / |g|) well conditioned for tiny g.
B1 = 0.9
OPTIMIZER = optim.make_optimizer(learning_rate=1e-2, max_grad_norm=1e6,
                                 b1=B1, eps=1e-4)


OBJECTIVE = objectives.make("ppo_clip", aggregation="token_mean")
KL = regularisers.make("kl", beta=0.04, aggregation="token_mean")


def init_state():
  # A copy: placing a leaf replicated may reuse its device-0 buffer, which
  # the sharded update then donates.
  return train.init_state(jax.tree.map(jnp.copy, params()), OPTIMIZER,
                          seed=0, components={"objective": OBJECTIVE,
                                              "kl": KL})


TRACES = {}


def counted_update_fn(key):
  """The trainer's update_fn (not jitted) that counts its traces."""
  update_fn = update_lib.make_update_fn(
      model_config=CONFIG, optimizer=OPTIMIZER, objective=OBJECTIVE,
      regularisers=[KL], microbatch_size=N // 2, chunk_size=64, jit=False)

  def counted(state, minibatch):
    TRACES[key] = TRACES.get(key, 0) + 1
    return update_fn(state, minibatch)
  return counted


@functools.lru_cache(maxsize=None)
def mesh(shape):
  return sharding.make_mesh(shape)


@functools.lru_cache(maxsize=None)
def sharded_update(shape):
  return sharding.jit_sharded(counted_update_fn(shape), init_state(),
                              mesh(shape))


@functools.lru_cache(maxsize=None)
def single_device_step():
  """(new state, measurements) of one update on one device, as numpy."""
  out = jax.jit(counted_update_fn("single"))(init_state(), batch())
  return jax.device_get(out)


def sharded_state(shape):
  state = init_state()
  return sharding.shard_tree(state, state.params, mesh(shape))


def adam_mu(opt_state):
  """(1 - b1) * gradient after the first step (optax.ScaleByAdamState.mu)."""
  found = [node.mu for node in jax.tree.leaves(
      opt_state, is_leaf=lambda x: hasattr(x, "mu")) if hasattr(node, "mu")]
  assert len(found) == 1
  return found[0]


def assert_tree_close(actual, expected):
  testing.assert_close(jax.device_get(actual), jax.device_get(expected),
                       **TOL)


# ------------------------------------------------------------- the mesh


def test_make_mesh_fills_minus_one():
  m = sharding.make_mesh((2, -1, 1))
  assert dict(m.shape) == {"data": 2, "fsdp": 4, "tensor": 1}
  assert sorted(d.id for d in m.devices.flat) == list(range(8))


def test_make_mesh_on_given_devices():
  m = sharding.make_mesh((1, 2, 2), devices=jax.devices()[:4])
  assert m.devices.shape == (1, 2, 2)


def test_mesh_on_a_divisor_of_the_device_count_uses_the_first_devices():
  m = sharding.make_mesh((1, 2, 1))
  assert [d.id for d in m.devices.flat] == [0, 1]


@pytest.mark.parametrize("shape", [(3, 1, 1), (3, -1, 1), (4, 4, 1)])
def test_bad_mesh_shape_names_shape_and_device_count(shape):
  with pytest.raises(ValueError, match=r"mesh shape .* device count") as e:
    sharding.make_mesh(shape)
  assert "8" in str(e.value)


def test_mesh_shape_and_axis_names_must_agree():
  with pytest.raises(ValueError, match="axis_names"):
    sharding.make_mesh((8, 1))


# ------------------------------------------------------------ the rules


def test_rules_cover_every_parameter_of_every_family():
  for family in ("llama", "qwen2", "qwen3"):
    cfg = testing.tiny_config(family, tie_word_embeddings=family == "qwen3")
    shapes = jax.eval_shape(
        lambda k, cfg=cfg: models.init_params(cfg, k), jax.random.PRNGKey(0))
    specs = sharding.param_specs(shapes)
    flat = {sharding.path_string(path): spec for path, spec in
            jax.tree_util.tree_leaves_with_path(
                specs, is_leaf=lambda x: isinstance(x, P))}
    assert flat["layers/attn/q"] == P(None, "fsdp", "tensor")
    assert flat["layers/attn/o"] == P(None, "tensor", "fsdp")
    assert flat["layers/mlp/down"] == P(None, "tensor", "fsdp")
    assert flat["embed"] == P("tensor", "fsdp")
    if family == "qwen2":
      assert flat["layers/attn/k_bias"] == P(None, "tensor")


def test_unmatched_parameter_path_is_an_error():
  with pytest.raises(ValueError, match="no partition rule matches .*extra"):
    sharding.param_specs({"extra": np.zeros(3)})


def test_non_divisible_dimension_names_array_dim_and_axis():
  cfg = testing.tiny_config(intermediate_size=36)
  shapes = jax.eval_shape(lambda k: models.init_params(cfg, k),
                          jax.random.PRNGKey(0))
  with pytest.raises(ValueError) as e:
    sharding.param_shardings(shapes, mesh((1, 1, 8)))
  assert str(e.value).startswith(
      "params['layers']['mlp']['down'] dim 1 (size 36) is not divisible by "
      "mesh axis 'tensor' (size 8)")


def test_batch_rows_not_divisible_is_an_error():
  with pytest.raises(ValueError, match=r"batch.* dim 0 \(size 12\) .*"
                     r"'data' x 'fsdp' \(size 8\)"):
    sharding.shard_batch({"tokens": np.zeros((12, 3))}, mesh((2, 4, 1)))


def test_optimizer_state_mirrors_param_specs():
  state = init_state()
  specs = sharding.tree_specs(state, state.params)
  flat = jax.tree_util.tree_leaves_with_path(
      specs.opt_state, is_leaf=lambda x: isinstance(x, P))
  q_spec = P(None, "fsdp", "tensor")
  # Adam's mu and nu each hold one q; count and learning rate are scalars.
  q_specs = [s for path, s in flat
             if sharding.path_string(path) == "layers/attn/q"]
  assert q_specs == [q_spec, q_spec]
  scalars = [s for path, s in flat
             if not sharding.path_string(path).startswith(("layers", "embed",
                                                           "lm_head",
                                                           "final_norm"))]
  assert scalars and all(s == P() for s in scalars)
  assert specs.step == P() and specs.key == P()
  assert specs.params["layers"]["attn"]["q"] == q_spec


# ---------------------------------------------------- memory under FSDP


def test_fsdp_stores_about_one_eighth_of_the_params_per_device():
  placed = sharding.shard_params(params(), mesh((1, 8, 1)))
  total = sum(x.nbytes for x in jax.tree.leaves(params()))
  per_device = {}
  for leaf in jax.tree.leaves(placed):
    for shard in leaf.addressable_shards:
      per_device[shard.device] = (per_device.get(shard.device, 0)
                                  + shard.data.nbytes)
  assert len(per_device) == 8
  # Only the norms are replicated: 2 x [Lyr, D] + [D] float32.
  replicated = 4 * (2 * 2 * 64 + 64)
  for nbytes in per_device.values():
    assert nbytes == (total - replicated) / 8 + replicated
    assert nbytes < 1.03 * total / 8
  q = placed["layers"]["attn"]["q"]
  assert q.addressable_shards[0].data.shape == (2, 64 // 8, 64)


def test_tensor_parallel_splits_heads_and_mlp_hidden():
  placed = sharding.shard_params(params(), mesh((1, 1, 8)))
  attn, mlp = placed["layers"]["attn"], placed["layers"]["mlp"]
  assert attn["q"].addressable_shards[0].data.shape == (2, 64, 8)
  assert attn["o"].addressable_shards[0].data.shape == (2, 8, 64)
  assert mlp["gate"].addressable_shards[0].data.shape == (2, 64, 16)
  assert mlp["down"].addressable_shards[0].data.shape == (2, 16, 64)


# ------------------------------------------- numbers equal one device's


@pytest.mark.parametrize("shape", MESHES)
def test_update_fn_matches_single_device(shape):
  """Loss, gradients (Adam's mu) and updated params of the trainer's own
  update_fn (ppo_clip over token_logprobs, k3 KL, 2 microbatches)."""
  expected_state, expected_measurements = single_device_step()
  m = mesh(shape)
  state, measurements = sharded_update(shape)(
      sharded_state(shape), sharding.shard_batch(batch(), m))
  assert_tree_close(measurements, expected_measurements)
  assert_tree_close(adam_mu(state.opt_state), adam_mu(
      expected_state.opt_state))
  assert_tree_close(state, expected_state)
  # The step really moved the params (so equality means something).
  assert not np.allclose(expected_state.params["layers"]["attn"]["q"],
                         params()["layers"]["attn"]["q"])
  assert state.params["layers"]["attn"]["q"].sharding == NamedSharding(
      m, P(None, "fsdp", "tensor"))


def test_update_fn_compiles_once_and_stays_on_device():
  shape = (2, 2, 2)
  m = mesh(shape)
  update = sharded_update(shape)
  state = sharded_state(shape)
  minibatch = sharding.shard_batch(batch(), m)
  jax.block_until_ready((state, minibatch))
  before = TRACES.get(shape, 0)
  with jax.transfer_guard("disallow"):
    state, _ = update(state, minibatch)
    state, measurements = update(state, minibatch)
  assert TRACES[shape] - before <= 1  # (conftest may clear jax's caches
  # between tests, so the count before is not always 1)
  testing.assert_finite(jax.device_get((state.params, measurements)))


PROMPTS = sampling.pad_prompts([[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]],
                               buckets=(8,))
SAMPLE_KWARGS = dict(num_samples=2, max_new_tokens=4, greedy=True, eos_ids=())


@functools.lru_cache(maxsize=None)
def single_device_sample():
  return jax.device_get(sampling.sample(
      params(), CONFIG, *PROMPTS, jax.random.PRNGKey(1), **SAMPLE_KWARGS))


@pytest.mark.parametrize("shape", MESHES)
def test_greedy_sampling_matches_single_device(shape):
  """Under the mesh the 8 rows are decoded split over ('data', 'fsdp')."""
  m = mesh(shape)
  with jax.set_mesh(m):
    got = sampling.sample(sharding.shard_params(params(), m), CONFIG,
                          *PROMPTS, jax.random.PRNGKey(1), **SAMPLE_KWARGS)
  expected = single_device_sample()
  np.testing.assert_array_equal(np.asarray(got.tokens), expected.tokens)
  assert_tree_close(got.tempered_logprobs, expected.tempered_logprobs)
  rows = m.shape["data"] * m.shape["fsdp"]
  assert got.tokens.addressable_shards[0].data.shape == (8 // rows, 4)


@pytest.mark.parametrize("slots", [None, 4])
def test_sampled_decoding_matches_single_device(slots):
  """Temperature sampling draws the same tokens with rows split over the
  mesh (threefry random bits do not depend on the sharding); with 4 slots
  for the 8 rows (rows end at id 9, slots refill) the engine's slots and
  caches split over the rows' axes and heads, and match one device
  decoding all rows at once."""
  kwargs = dict(SAMPLE_KWARGS, greedy=False, temperature=0.8, top_k=20,
                eos_ids=(9,))
  key = jax.random.PRNGKey(3)
  expected = sampling.sample(params(), CONFIG, *PROMPTS, key, **kwargs)
  m = mesh((2, 2, 2))
  with jax.set_mesh(m):
    got = sampling.sample(sharding.shard_params(params(), m), CONFIG,
                          *PROMPTS, key, slots=slots, **kwargs)
  np.testing.assert_array_equal(np.asarray(got.tokens),
                                np.asarray(expected.tokens))
  assert_tree_close(got.logprobs, expected.logprobs)
  assert_tree_close(got.tempered_logprobs, expected.tempered_logprobs)


def test_grouped_query_attention_update_matches_single_device():
  """4 KV heads for 8 query heads, split over tensor=2: loss and params."""
  config = testing.tiny_config(num_heads=8, num_kv_heads=4, head_dim=8,
                               intermediate_size=128)
  model_params = models.init_params(config, jax.random.PRNGKey(0))
  update_fn = update_lib.make_update_fn(
      model_config=config, optimizer=OPTIMIZER, objective=OBJECTIVE,
      chunk_size=64, jit=False)
  minibatch = batch()._replace(ref_logp=None)

  def state():
    return train.init_state(jax.tree.map(jnp.copy, model_params), OPTIMIZER,
                            seed=0, components={"objective": OBJECTIVE})

  expected = jax.device_get(jax.jit(update_fn)(state(), minibatch))
  m = mesh((2, 2, 2))
  sharded = sharding.jit_sharded(update_fn, state(), m)
  placed = sharding.shard_tree(state(), model_params, m)
  got = sharded(placed, sharding.shard_batch(minibatch, m))
  assert_tree_close(got, expected)


def test_decode_loop_keeps_the_kv_cache_split():
  """The while loop's carry holds each layer's cache (keys [N, K, hd, L],
  values [N, K, L, hd]) as [N/4, K/2, ...] per device on a 2x2x2 mesh
  (rows over data x fsdp, kv heads over tensor), never whole."""
  m = mesh((2, 2, 2))
  tokens, mask = PROMPTS
  args = (sharding.shard_params(params(), m), jnp.asarray(tokens),
          jnp.asarray(mask) > 0, jax.random.PRNGKey(1), jnp.float32(1.0))
  static = dict(config=CONFIG, num_samples=2, max_new_tokens=4, greedy=True,
                top_k=None, top_p=None, eos_ids=(), pad_id=0)

  def loop_carry():
    hlo = sampling._sample.lower(*args, **static).compile().as_text()  # pylint: disable=protected-access
    loops = [line for line in hlo.splitlines() if " while(" in line]
    return loops[-1].split(" while(")[0]  # the decode loop's carry types

  length, kv_heads, head_dim = 8 + 4, CONFIG.num_kv_heads, CONFIG.head_dim
  def layouts(rows, heads):
    return (f"f32[{rows},{heads},{head_dim},{length}]",
            f"f32[{rows},{heads},{length},{head_dim}]")
  whole, split = layouts(8, kv_heads), layouts(2, kv_heads // 2)
  with jax.set_mesh(m):
    carry = loop_carry()
  for layout in split:  # keys, values: one per layer each
    assert carry.count(layout) == CONFIG.num_layers, layout
  assert not any(layout in carry for layout in whole)
  # Without the mesh context the rows stay whole (the check can fail).
  assert not any(layout in loop_carry() for layout in split)


def test_chunked_logprobs_keep_rows_on_their_devices():
  """Value and gradient of `token_logprobs` with rows split over 8 devices:
  each device computes logits of its own 2 rows only (no all-gather; the
  unembedding gradient is summed across devices)."""
  from grpo_jax import logprobs  # pylint: disable=g-import-not-at-top
  m = mesh((1, 8, 1))
  rows, columns, width, vocab = 16, 12, 32, 64
  split = NamedSharding(m, P(sharding.BATCH_AXES))
  hidden = jax.device_put(jnp.ones((rows, columns, width)), split)
  targets = jax.device_put(jnp.zeros((rows, columns), jnp.int32), split)
  unembedding = jax.device_put(jnp.ones((width, vocab)), NamedSharding(m, P()))

  def loss(h, w):
    out = logprobs.token_logprobs(h, w, targets, chunk_size=32)
    return out.logp.sum() + out.entropy.sum()

  hlo = jax.jit(jax.value_and_grad(loss, (0, 1))).lower(
      hidden, unembedding).compile().as_text()
  assert "all-gather" not in hlo
  assert "all-reduce" in hlo
  # chunk_size 32 = 16 rows x 2 columns; per device 2 rows x 2 columns.
  assert f"f32[2,2,{vocab}]" in hlo


# ------------------------------------------------------------ checkpoints


def test_checkpoint_restores_onto_another_mesh(tmp_path):
  source, target = (2, 4, 1), (1, 1, 8)
  checkpointer = checkpoint_lib.Checkpointer(str(tmp_path))
  try:
    checkpointer.save(0, sharded_state(source))
    template = sharded_state(target)
    restored, _ = checkpointer.restore(template, 0)
  finally:
    checkpointer.close()
  q = restored.params["layers"]["attn"]["q"]
  assert q.sharding == NamedSharding(mesh(target), P(None, "fsdp", "tensor"))
  assert_tree_close(restored, init_state())
  expected_state, expected_measurements = single_device_step()
  state, measurements = sharded_update(target)(
      restored, sharding.shard_batch(batch(), mesh(target)))
  assert_tree_close(state, expected_state)
  assert_tree_close(measurements, expected_measurements)


# ------------------------------------------------------------- multi-host


def test_process_rows_split_prompts_in_contiguous_blocks():
  slices = [sharding.process_rows(8, process_index=i, process_count=4)
            for i in range(4)]
  assert [list(range(8))[s] for s in slices] == [[0, 1], [2, 3], [4, 5],
                                                  [6, 7]]
  assert sharding.process_rows(8) == slice(0, 8)
  with pytest.raises(ValueError, match="3 processes"):
    sharding.process_rows(8, process_index=0, process_count=3)



def test_constrain_splits_a_layer_cache_under_a_mesh_only():
  """`HEADS` on one layer's cache [B, L, K, hd], as the model applies it."""
  m = mesh((2, 2, 2))
  cache = models.init_cache(CONFIG, batch=4, length=8).k[0]  # [B, L, K, hd]
  constrain = jax.jit(lambda c: sharding.constrain(c, sharding.HEADS))
  with jax.set_mesh(m):
    out = constrain(cache)
  assert out.sharding.is_equivalent_to(
      NamedSharding(m, P(("data", "fsdp"), None, "tensor", None)), 4)
  assert out.addressable_shards[0].data.shape == (1, 8, 4, 8)
  # No mesh: the identity.
  assert sharding.constrain(cache, sharding.HEADS) is cache
  # 3 rows do not split over 4 devices: the constraint steps aside.
  odd = cache[:3]
  with jax.set_mesh(m):
    assert sharding.constrain(odd, sharding.HEADS) is odd
  # A custom mesh without 'fsdp' and 'tensor': rows over 'data' alone.
  data_only = sharding.make_mesh((4,), axis_names=("data",))
  with jax.set_mesh(data_only):
    out = constrain(cache)
  assert out.addressable_shards[0].data.shape == (1, 8, 8, 8)


def test_trainer_builds_and_steps_on_a_mesh():
  """train.build lays state and reference params out by config.mesh; one
  training step (rollout + sharded update) keeps the layout."""
  from configs import grpo as grpo_config  # pylint: disable=g-import-not-at-top
  config = grpo_config.get_config("tiny")
  config.mesh.shape = (2, 2, 2)
  config.kl.beta = 0.04
  run = train.build(config)
  q_sharding = NamedSharding(mesh((2, 2, 2)), P(None, "fsdp", "tensor"))
  assert run.state.params["layers"]["attn"]["q"].sharding == q_sharding
  assert run.ref_params["layers"]["attn"]["q"].sharding == q_sharding
  state, measurements = train.train_step(
      run, jax.tree.map(jnp.copy, run.state), 0)
  assert state.params["layers"]["attn"]["q"].sharding == q_sharding
  assert measurements["skipped_updates"] == 0.0
  testing.assert_finite(jax.device_get(state.params))
  # A second step under the same mesh reuses the compiled sampler.
  traces = sampling.trace_count()
  state, _ = train.train_step(run, state, 1)
  assert sampling.trace_count() == traces
  assert state.params["layers"]["attn"]["q"].sharding == q_sharding
