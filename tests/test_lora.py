"""LoRA: the adapted model, its gradients, training with the base frozen."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax.train import batch as batch_lib
from grpo_jax import config as config_lib
from grpo_jax import models, sampling, testing
from grpo_jax.train import saved_runs
from grpo_jax import train as train_lib
from grpo_jax.models import lora

SCALE = 2.5


def _model(model_type="qwen2"):
  config = testing.tiny_config(model_type).replace(lora_scale=SCALE)
  return config, models.init_params(config, jax.random.key(0))


def _randomised(adapters, seed=3):
  """Adapters with B nonzero too (as after training)."""
  leaves, tree = jax.tree.flatten(adapters)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(tree, [0.05 * jax.random.normal(k, x.shape)
                                   for x, k in zip(leaves, keys)])


def _hidden(params, config, tokens):
  mask = np.ones_like(tokens, bool)
  hidden, _ = models.forward(params, config, jnp.asarray(tokens),
                             models.positions_from_mask(mask),
                             models.causal_attention_mask(mask))
  return hidden


TOKENS = np.array([[5, 9, 17, 33, 2, 101], [7, 7, 64, 12, 88, 3]], np.int32)


def test_fresh_adapters_leave_the_model_unchanged():
  config, params = _model()
  adapters = lora.init_adapters(params, rank=4, targets=tuple(lora.TARGETS),
                                key=jax.random.key(1))
  np.testing.assert_array_equal(
      _hidden(lora.combine(params, adapters), config, TOKENS),
      _hidden(params, config, TOKENS))
  a = adapters["layers"]["attn"]["q_lora_a"]
  assert a.shape == (2, 64, 4) and np.abs(a).max() <= 64 ** -0.5
  assert not np.any(adapters["layers"]["mlp"]["down_lora_b"])


@pytest.mark.parametrize("targets", [("q", "v"), tuple(lora.TARGETS)])
def test_adapted_forward_equals_the_merged_matrices(targets):
  config, params = _model()
  adapters = _randomised(lora.init_adapters(
      params, rank=3, targets=targets, key=jax.random.key(1)))
  # W + scale A B by hand in numpy, layer by layer.
  merged = jax.tree.map(np.array, params)
  for module, leaves in adapters["layers"].items():
    for name in targets:
      matrix = lora.TARGETS[name][1]
      if lora.TARGETS[name][0] != module:
        continue
      a = np.asarray(leaves[matrix + "_lora_a"])
      b = np.asarray(leaves[matrix + "_lora_b"])
      merged["layers"][module][matrix] += SCALE * np.stack(
          [a[i] @ b[i] for i in range(a.shape[0])])
  want = _hidden(jax.tree.map(jnp.asarray, merged), config, TOKENS)
  got = _hidden(lora.combine(params, adapters), config, TOKENS)
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
  assert np.abs(got - _hidden(params, config, TOKENS)).max() > 1e-3
  # lora.merge gives the same matrices.
  np.testing.assert_allclose(
      _hidden(lora.merge(lora.combine(params, adapters), SCALE), config,
              TOKENS), want, rtol=0, atol=1e-5)


def test_adapter_gradients_follow_the_chain_rule():
  # L(W + s A B): dL/dA = s G B^T and dL/dB = s A^T G, G = dL/dW at the
  # merged weights.
  config, params = _model("llama")
  adapters = _randomised(lora.init_adapters(
      params, rank=2, targets=("o", "up"), key=jax.random.key(1)))

  def loss(p):
    return jnp.sum(jnp.sin(_hidden(p, config, TOKENS)))

  grads = jax.grad(lambda ad: loss(lora.combine(params, ad)))(adapters)
  g_full = jax.grad(loss)(lora.merge(lora.combine(params, adapters), SCALE))
  for module, matrix in (("attn", "o"), ("mlp", "up")):
    a = adapters["layers"][module][f"{matrix}_lora_a"]
    b = adapters["layers"][module][f"{matrix}_lora_b"]
    g = g_full["layers"][module][matrix]
    for name, expected in (
        ("a", SCALE * jnp.einsum("lio,lro->lir", g, b)),
        ("b", SCALE * jnp.einsum("lir,lio->lro", a, g))):
      # The two paths sum in different orders: float32 rounding is relative
      # to the largest entry (up to ~50 here), not to each small one.
      np.testing.assert_allclose(
          grads["layers"][module][f"{matrix}_lora_{name}"], expected,
          rtol=1e-4, atol=1e-5 * float(jnp.max(jnp.abs(expected))))


def test_sampler_with_adapters_equals_sampler_on_merged_weights():
  config, params = _model()
  adapters = _randomised(lora.init_adapters(
      params, rank=4, targets=tuple(lora.TARGETS), key=jax.random.key(1)))
  tokens, mask = sampling.pad_prompts([[5, 9, 17], [33, 2]])
  kwargs = dict(max_new_tokens=6, greedy=True, eos_ids=())
  with_adapters = sampling.sample(lora.combine(params, adapters), config,
                                  tokens, mask, jax.random.key(0), **kwargs)
  merged = sampling.sample(lora.merge(lora.combine(params, adapters), SCALE),
                           config, tokens, mask, jax.random.key(0), **kwargs)
  np.testing.assert_array_equal(with_adapters.tokens, merged.tokens)
  plain = sampling.sample(params, config, tokens, mask, jax.random.key(0),
                          **kwargs)
  assert not np.array_equal(with_adapters.tokens, plain.tokens)


def _lora_config(**lora_fields):
  c = config_lib.get_base_config()
  config_lib.use_tiny(c)
  c.lora.rank = 4
  c.lora.update(lora_fields)
  c.kl.beta = 0.04
  c.optimizer.learning_rate = 1e-2
  c.train.num_steps = 2
  return c


def _random_batch(run, key, *, prompts=2, group=2, t=5):
  """Random completions with random advantages, scored by the run's policy
  (whose every update then has a gradient)."""
  k1, k2, k3, k4 = jax.random.split(key, 4)
  vocab, n = run.model_config.vocab_size, prompts * group
  mask = testing.random_mask(k3, (n, t))
  return batch_lib.assemble_batch(
      train_lib.policy_params(run, run.state.params), run.ref_params,
      jax.random.randint(k1, (prompts, 4), 1, vocab),
      np.ones((prompts, 4), np.float32), jax.random.randint(k2, (n, t), 1,
                                                            vocab),
      mask, mask, jax.random.normal(k4, (n,)), model_config=run.model_config,
      temperature=1.0, chunk_size=16, beta=0.04)


def test_lora_updates_move_only_the_adapters():
  run = train_lib.build(_lora_config(targets=("q", "v", "down")))
  assert run.ref_params is run.frozen  # the base is the reference: no copy
  base = jax.tree.map(np.array, run.frozen)
  state = jax.tree.map(jnp.copy, run.state)
  for i in range(2):
    state, records = run.update_fn(state, _random_batch(run, jax.random.key(i)))
    assert float(records["skipped_updates"].sum) == 0
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(run.frozen),
               base)
  assert set(state.params["layers"]["attn"]) == {
      "q_lora_a", "q_lora_b", "v_lora_a", "v_lora_b"}
  # B starts at zero: trained, it is not.
  for module, name in (("attn", "q"), ("attn", "v"), ("mlp", "down")):
    assert np.any(state.params["layers"][module][name + "_lora_b"])
  # The optimiser holds two moments of the adapters only.
  adapter_size = sum(x.size for x in jax.tree.leaves(state.params))
  opt_size = sum(x.size for x in jax.tree.leaves(state.opt_state)
                 if x.ndim > 0)
  assert opt_size == 2 * adapter_size
  assert adapter_size < 0.2 * sum(x.size for x in jax.tree.leaves(base))


def test_lora_run_restores_merged_for_evaluation_and_export(tmp_path):
  run = train_lib.build(_lora_config())
  records = []
  state = train_lib.train(run.config, str(tmp_path), run=run,
                          callback=lambda step, record: records.append(record))
  # B = 0 at step 0: the policy is its reference, the KL exactly 0.
  assert records[0]["kl"] == pytest.approx(0.0, abs=1e-7)
  _, model_config, params, _, step = saved_runs.restore_policy(str(tmp_path))
  assert step == 2 and not lora.has_adapters(params)
  tokens = TOKENS % model_config.vocab_size
  np.testing.assert_allclose(
      _hidden(params, model_config, tokens),
      _hidden(lora.combine(run.frozen, state.params), run.model_config,
              tokens), rtol=0, atol=1e-5)


def test_lora_runs_sharded_over_fsdp(tmp_path):
  c = _lora_config()
  c.mesh.shape = (1, 2, 1)
  c.train.num_steps = 1
  run = train_lib.build(c)
  spec = run.state.params["layers"]["attn"]["q_lora_a"].sharding.spec
  assert tuple(spec)[:2] == (None, "fsdp")
  state = train_lib.train(c, str(tmp_path), run=run)
  assert all(np.isfinite(x).all() for x in jax.tree.leaves(state.params))


@pytest.mark.parametrize("field,value,named", [
    ("lora.targets", ("q", "qproj"), "'qproj' names no module; choose from q"),
    ("lora.targets", (), "config.lora.targets"),
    ("lora.targets", ("q", "q"), "repeats a name"),
    ("lora.rank", -1, "config.lora.rank"),
    ("lora.alpha", 0.0, "config.lora.alpha"),
])
def test_bad_lora_options_name_the_field(field, value, named):
  c = _lora_config()
  section, key = field.split(".")
  c[section][key] = value
  with pytest.raises(ValueError, match=named):
    train_lib.validate(c)
