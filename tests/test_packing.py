"""Packed updates (`train.packing`): the plan's layout, packed log-probs equal
to the padded pass's, rows that never see each other, and gradients equal
to the padded update's for every objective and aggregation."""

import json

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from grpo_jax import aggregation
from grpo_jax import config as config_lib
from grpo_jax import measures
from grpo_jax import models
from grpo_jax import objectives
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.objectives import corrections
from grpo_jax.objectives import regularisers
from grpo_jax.testing import learning
from grpo_jax.train import batch as batch_lib
from grpo_jax.train import packing
from grpo_jax.train import update as update_lib


def mask_of(prompt_lengths, completion_lengths, sp, t):
  """[N, Sp + T] left-padded prompts, right-padded completions."""
  prompt = np.arange(sp)[None, :] >= sp - np.asarray(prompt_lengths)[:, None]
  completion = np.arange(t)[None, :] < np.asarray(completion_lengths)[:, None]
  return np.concatenate([prompt, completion], axis=1).astype(np.float32)


# ------------------------------------------------------------------ plan


def test_bucket_sizes_are_powers_of_two_and_one_and_a_half_times_them():
  assert [packing.bucket(c, 100) for c in range(1, 14)] == [
      1, 2, 3, 4, 6, 6, 8, 8, 12, 12, 12, 12, 16]
  assert packing.bucket(5, 5) == 5  # never more sequences than rows
  assert packing.bucket(0, 4) == 1


def test_plan_lays_out_units_by_first_fit_decreasing():
  """Two groups of two rows, S = 8, Sp = 3. Group 0 (prompt 2, completions
  3 and 1) is one unit of 6; group 1 (prompt 3, completions 5 and 2) does
  not fit in 8, so it splits into units of 8 and 5, each with the prompt.
  By size: 8 -> sequence 0, 6 -> sequence 1, 5 -> sequence 2."""
  mask = mask_of([2, 2, 3, 3], [3, 1, 5, 2], sp=3, t=5)
  plan = packing.plan(mask, 3, group_size=2)
  drop = 3 * 8
  np.testing.assert_array_equal(plan.destination, [
      [drop, 8, 9, 10, 11, 12, drop, drop],   # owns unit 0's prompt
      [drop, drop, drop, 13, drop, drop, drop, drop],  # shares it
      [0, 1, 2, 3, 4, 5, 6, 7],
      [16, 17, 18, 19, 20, drop, drop, drop],  # the copied prompt
  ])
  np.testing.assert_array_equal(plan.prompt_end, [9, 9, 2, 18])
  np.testing.assert_array_equal(plan.sequences.argmax(axis=1), [1, 1, 0, 2])
  assert plan.sequences.shape == (4, 3)
  # Without shared prompts every row is its own unit, of 5, 3, 8 and 5:
  # 8 -> 0, 5 -> 1, 5 -> 2, 3 -> 1 (the first with room).
  alone = packing.plan(mask, 3)
  np.testing.assert_array_equal(alone.sequences.argmax(axis=1), [1, 1, 0, 2])
  np.testing.assert_array_equal(alone.destination[1], [
      drop, 13, 14, 15, drop, drop, drop, drop])


def test_microbatches_pack_apart_into_one_shape():
  mask = mask_of([1] * 8, [1, 1, 1, 1, 6, 6, 6, 1], sp=2, t=6)
  plan = packing.plan(mask, 2, microbatch_size=4)
  # The first half (units of 2) fits in one sequence of 8, the second
  # (7, 7, 7, 2) needs 4; both get 4.
  assert plan.sequences.shape == (8, 4)
  assert plan.sequences[:4].argmax(axis=1).tolist() == [0, 0, 0, 0]
  assert plan.sequences[4:].argmax(axis=1).tolist() == [0, 1, 2, 3]
  assert (plan.destination[:4] < 4 * 8).sum() == 4 * 2
  assert plan.destination[:4][mask[:4] > 0].max() < 8  # local indices


@pytest.mark.parametrize("case,match", [
    ("right_padded_prompt", "left-padded"),
    ("gap_in_completion", "after padding"),
    ("group_prompts_differ", "share one prompt"),
])
def test_plan_refuses_a_layout_it_cannot_pack(case, match):
  mask = mask_of([2, 2], [2, 3], sp=3, t=4)
  if case == "right_padded_prompt":
    mask[0, :3] = [1, 1, 0]
  elif case == "gap_in_completion":
    mask[1, 3:] = [1, 0, 1, 0]
  else:
    mask[1, :3] = [0, 0, 1]
  with pytest.raises(ValueError, match=match):
    packing.plan(mask, 3, group_size=2)


def test_config_refuses_a_non_bool_and_a_split_mesh():
  config = config_lib.get_base_config()
  # (A typed field refuses 1 itself; a config file may build its own.)
  config.train = ml_collections.ConfigDict(
      dict(config.train.to_dict(), pack_rows="yes"))
  with pytest.raises(ValueError, match="train.pack_rows"):
    config_lib.check_fields(config)
  mesh = jax.make_mesh((1, 2, 1), ("data", "fsdp", "tensor"),
                       devices=jax.devices()[:2])
  with pytest.raises(ValueError, match="train.pack_rows.*mesh"):
    packing.check_mesh(mesh)


# ------------------------------------------------------------ log-probs

P, G, SP, T = 3, 4, 6, 16


@pytest.fixture(scope="module")
def tiny():
  config = testing.tiny_config()
  return config, models.init_params(config, jax.random.PRNGKey(0))


def long_tailed_batch(seed=0, vocab=128):
  """P x G rows with left-padded prompts and mostly short completions, one
  of them full length: (tokens, input_mask) [N, SP + T]."""
  rng = np.random.default_rng(seed)
  n = P * G
  prompt_lengths = np.repeat([SP, SP - 2, 3], G)
  lengths = rng.integers(1, 5, n)
  lengths[1], lengths[6] = T, 0  # one full row, one empty one
  prompts = np.repeat(rng.integers(1, vocab, (P, SP)), G, axis=0)
  tokens = np.concatenate([prompts, rng.integers(1, vocab, (n, T))], axis=1)
  return (jnp.asarray(tokens, jnp.int32),
          jnp.asarray(mask_of(prompt_lengths, lengths, SP, T)))


def run_packed(params, config, tokens, mask, plan, size, **kwargs):
  """`packed_logprobs` on each microbatch of `size` rows, concatenated."""
  pieces = []
  for i in range(0, tokens.shape[0], size):
    take = lambda x, i=i: x[i:i + size]
    pieces.append(packing.packed_logprobs(
        params, config, take(tokens), take(mask), SP,
        jax.tree.map(take, plan), chunk_size=16,
        **{k: take(v) for k, v in kwargs.items()}))
  return tuple(jnp.concatenate(x, axis=0) for x in zip(*pieces))


@pytest.mark.parametrize("group_size,microbatch,per_token", [
    (1, 0, False), (G, 0, False), (G, 6, True), (G, 2, False)])
def test_packed_logprobs_equal_the_padded_pass(tiny, group_size, microbatch,
                                               per_token):
  """Log-probs, entropies and top-K log-probs on the real tokens equal the
  padded forward's (row or per-token temperatures, shared prompts or not,
  microbatches packed apart); padding columns hold 0."""
  config, params = tiny
  tokens, mask = long_tailed_batch()
  n = tokens.shape[0]
  rng = np.random.default_rng(1)
  shape = (n, T) if per_token else (n,)
  temperature = jnp.asarray(rng.uniform(0.5, 1.5, shape), jnp.float32)
  topk_ids = jnp.asarray(rng.integers(0, 128, (n, T, 3)), jnp.int32)
  padded = batch_lib.policy_logprobs(
      params, config, tokens, mask, SP, temperature=temperature,
      chunk_size=16, topk_ids=topk_ids)
  plan = packing.plan(np.asarray(mask), SP, group_size=group_size,
                      microbatch_size=microbatch)
  size = microbatch or n
  # The batch really packs: fewer sequences than rows per microbatch (two
  # rows, one of them full length, need two).
  assert plan.sequences.shape[1] < size or size == 2
  packed = run_packed(params, config, tokens, mask, plan, size,
                      temperature=temperature, topk_ids=topk_ids)
  real = np.asarray(mask[:, SP:])
  for got, want in zip(packed, padded):
    weight = real.reshape(real.shape + (1,) * (got.ndim - 2))
    testing.assert_close(got * weight, want * weight, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(got) * (1 - weight), 0.0)


def _leaky_attention_mask(unit, member):
  """Causal over real keys only: rows packed together see each other."""
  del member
  length = unit.shape[1]
  causal = jnp.tril(jnp.ones((length, length), bool))[None]
  return causal & (unit[:, None, :] >= 0)


@pytest.mark.parametrize("group_size", [1, G])
def test_a_row_sees_nothing_of_the_rows_packed_beside_it(tiny, group_size,
                                                         monkeypatch):
  """Changing every other row's completion tokens (and, without shared
  prompts, their prompts) leaves a row's log-probs unchanged; with a mask
  that lets packed rows see each other the same change shows."""
  config, params = tiny
  tokens, mask = long_tailed_batch()
  plan = packing.plan(np.asarray(mask), SP, group_size=group_size)
  # A row packed after another one in its sequence.
  row = int(np.flatnonzero(plan.destination[:, SP] % (SP + T) > SP + 1)[0])
  other = np.ones(tokens.shape, bool)
  other[row] = False
  if group_size > 1:
    other[:, :SP] = False  # a group's rows share the prompt
  changed = jnp.where(jnp.asarray(other), (tokens + 7) % 128, tokens)

  def logp(tokens):
    return run_packed(params, config, tokens, mask, plan, tokens.shape[0])[0]

  real = np.asarray(mask[row, SP:]) > 0
  before, after = logp(tokens)[row], logp(changed)[row]
  np.testing.assert_array_equal(np.asarray(after)[real],
                                np.asarray(before)[real])
  monkeypatch.setattr(packing, "attention_mask", _leaky_attention_mask)
  leaky_before, leaky_after = logp(tokens)[row], logp(changed)[row]
  assert np.abs(np.asarray(leaky_after - leaky_before)[real]).max() > 1e-4


def test_assembled_old_and_ref_logprobs_equal_the_padded_ones(tiny):
  config, params = tiny
  tokens, mask = long_tailed_batch()
  prompt_tokens, prompt_mask = tokens[::G, :SP], mask[::G, :SP]
  completion, completion_mask = tokens[:, SP:], mask[:, SP:]
  adv = jnp.linspace(-1.0, 1.0, tokens.shape[0])
  build = lambda pack: batch_lib.assemble_batch(
      params, params, prompt_tokens, prompt_mask, completion,
      completion_mask, completion_mask, adv, model_config=config,
      temperature=0.8, chunk_size=16, logprob_batch_size=6, beta=0.1,
      pack_rows=pack)
  padded, packed = build(False), build(True)
  for name in ("old_logp", "ref_logp"):
    testing.assert_close(getattr(packed, name) * completion_mask,
                         getattr(padded, name) * completion_mask,
                         rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------ gradients

VOCAB = learning.VOCAB


@pytest.fixture(scope="module")
def small():
  config = learning.model_config()
  return config, models.init_params(config, jax.random.PRNGKey(0))


def off_policy_batch(config, params, *, group=4, sp=4, t=12):
  """2 x `group` rows, ragged completions (most short), old log-probs
  perturbed off policy, a reference, the sampler's top-K record and HAPO's
  normalised entropies: what every objective may read."""
  rng = np.random.default_rng(3)
  n = 2 * group
  lengths = rng.integers(1, 4, n)
  lengths[2] = t
  prompt_mask = mask_of([sp, sp - 2], [0, 0], sp, 0)
  completion_mask = mask_of([0] * n, lengths, 0, t)
  tokens = lambda *shape: rng.integers(1, VOCAB, shape)
  batch = batch_lib.assemble_batch(
      params, params, tokens(2, sp), prompt_mask, tokens(n, t),
      completion_mask, completion_mask, rng.normal(size=n),
      model_config=config, temperature=0.9, chunk_size=16, beta=0.1)
  noise = lambda scale: scale * rng.normal(size=(n, t)).astype(np.float32)
  return batch._replace(
      old_logp=batch.old_logp + noise(0.3),
      ref_logp=batch.ref_logp - noise(0.2),
      sampler_logp=batch.old_logp + noise(0.1),
      sampler_topk_ids=jnp.asarray(rng.integers(1, VOCAB, (n, t, 3)),
                                   jnp.int32),
      sampler_topk_logp=jnp.log(jnp.asarray(
          rng.uniform(0.05, 0.3, (n, t, 3)), jnp.float32)),
      entropy_hat=jnp.asarray(rng.uniform(0.0, 1.0, (n, t)), jnp.float32))


def gradient(config, params, batch, record, *, microbatch, pack,
             corrections_=(), group_size=4):
  """(grads, loss, measurement values) of `minibatch_gradient`, padded or
  packed, with a KL regulariser."""
  kl = regularisers.make("kl", beta=0.1, aggregation=record.aggregation,
                         horizon=record.horizon)
  functions = update_lib.make_loss_functions(
      model_config=config, objective=record, regularisers=[kl],
      corrections=corrections_, chunk_size=16, group_size=group_size)
  states = train.init_state(params, optax.sgd(1.0), seed=0, components=dict(
      objective=record, kl=kl)).states
  if pack:
    batch = packing.attach(batch, group_size=group_size,
                           microbatch_size=microbatch)
  grads, loss, records = jax.jit(
      lambda p, b: update_lib.minibatch_gradient(
          functions, p, states, b, microbatch_size=microbatch))(params, batch)
  return grads, loss, measures.values(records)


def check_packed_gradient(small, record, microbatch, corrections_=()):
  config, params = small
  batch = off_policy_batch(config, params)
  padded = gradient(config, params, batch, record, microbatch=microbatch,
                    pack=False, corrections_=corrections_)
  packed = gradient(config, params, batch, record, microbatch=microbatch,
                    pack=True, corrections_=corrections_)
  testing.assert_close(packed[0], padded[0], rtol=1e-4, atol=1e-6)
  testing.assert_close(packed[1], padded[1], rtol=1e-5, atol=1e-6)
  testing.assert_close(packed[2], padded[2], rtol=1e-4, atol=1e-6)
  # Off policy, and a gradient that is not 0.
  assert float(padded[2]["ratio_var"]) > 1e-3
  assert float(optax.global_norm(padded[0])) > 1e-4


AGGREGATION_CASES = [(mode, microbatch)
                     for mode in aggregation.AGGREGATIONS.names()
                     for microbatch in (0, 2)]


@pytest.mark.parametrize("mode,microbatch", AGGREGATION_CASES)
def test_packed_gradient_equals_padded_for_every_aggregation(small, mode,
                                                             microbatch):
  horizon = 12 if aggregation.AGGREGATIONS.entry(mode).meta.needs_horizon else None
  check_packed_gradient(small, objectives.make(
      "ppo_clip", aggregation=mode, horizon=horizon), microbatch)


def test_packed_gradient_equals_padded_with_a_minibatch_wide_correction(
    small):
  """The top-entropy mask's quantile spans the minibatch: a pre-pass over
  the microbatches, packed too."""
  check_packed_gradient(small, objectives.make("ppo_clip"), 2,
                        (corrections.make("top_entropy"),))


# Clip-Cov's random draw takes the minibatch whole; its `top` rule
# microbatches (tests/test_train.py's cases).
OBJECTIVE_CASES = [(name, microbatch) for name in objectives.names()
                   for microbatch in (0, 2)]


@pytest.mark.slow
@pytest.mark.parametrize("name,microbatch", OBJECTIVE_CASES)
def test_packed_gradient_equals_padded_for_every_objective(small, name,
                                                           microbatch):
  options = ({"clip_cov_rule": "top"} if name == "clip_cov" and microbatch
             else {})
  check_packed_gradient(small, objectives.make(name, **options), microbatch)


@pytest.mark.parametrize("name", ["gspo", "dppo_topk"])
def test_packed_gradient_equals_padded_fast_subset(small, name):
  """A sequence-level ratio and the top-K read, microbatched (the sweep
  over every objective is marked slow)."""
  check_packed_gradient(small, objectives.make(name), 2)


# ------------------------------------------------------------ the trainer


def test_a_packed_run_takes_the_padded_runs_steps(monkeypatch):
  """``train.pack_rows`` through `train.build` and two `train_step`s, off
  policy (two minibatches: an old log-prob pass) with a reference (KL):
  the same rollouts and, up to rounding, the same params, every pass
  planned on the host."""
  from configs import grpo as grpo_config  # pylint: disable=g-import-not-at-top
  plans = []
  plan = packing.plan
  monkeypatch.setattr(packing, "plan", lambda *a, **k: plans.append(1) or
                      plan(*a, **k))
  steps = []
  for pack in (False, True):
    config = grpo_config.get_config("tiny")
    config.mesh.shape = (1, 1, 1)
    config.train.pack_rows = pack
    config.train.num_minibatches = 2
    config.kl.beta = 0.05
    config.entropy.coef = 0.01  # a gradient whatever the tiny rewards
    run = train.build(config)
    state = run.state
    for step in range(2):  # step 0's learning rate is warm-up's 0
      state, measurements = train.train_step(run, state, step)
    steps.append((jax.device_get(state.params), measurements))
  (padded, padded_m), (packed, packed_m) = steps
  # Per step: the old and reference passes, and two minibatches' updates.
  assert len(plans) == 2 * (2 + 2)
  assert packed_m["skipped_updates"] == padded_m["skipped_updates"] == 0.0
  assert packed_m["reward/total"] == padded_m["reward/total"]
  # (Adam's first steps scale each gradient entry to about the learning
  # rate, so rounding in a tiny entry shows at 1e-6.)
  testing.assert_close(packed, padded, rtol=1e-4, atol=2e-6)
  for name in ("loss", "kl", "entropy"):
    testing.assert_close(packed_m[name], padded_m[name], rtol=1e-4,
                         atol=1e-6)


def test_a_packed_run_refuses_a_mesh_that_splits_rows():
  from configs import grpo as grpo_config  # pylint: disable=g-import-not-at-top
  config = grpo_config.get_config("tiny")
  config.mesh.shape = (1, 2, 1)
  config.train.pack_rows = True
  with pytest.raises(ValueError, match="config.train.pack_rows"):
    train.build(config)


# ------------------------------------------------------------ benchmark


def test_benchmark_draws_the_long_tail_it_names():
  from experiments.benchmarks import packing as bench  # pylint: disable=g-import-not-at-top
  args = bench.parse_args([])
  lengths = bench.completion_lengths(
      bench.parse_args(["--lengths", "long_tailed"]))
  assert lengths.shape == (64,)
  assert (lengths == 512).sum() == 6  # 10% of 64, rounded
  short = lengths[lengths < 512]
  assert short.min() >= 1 and short.max() <= 64
  np.testing.assert_array_equal(lengths, bench.completion_lengths(args))
  with pytest.raises(SystemExit):
    bench.parse_args(["--lengths", "ragged"])


def test_benchmark_runs_at_tiny_size(tmp_path):
  """Both workloads run, the packed gradient agrees, and only the
  long-tailed batch packs into fewer sequences than rows."""
  from experiments.benchmarks import packing as bench  # pylint: disable=g-import-not-at-top
  path = tmp_path / "packing.json"
  rows = bench.main([
      "--model", "tiny", "--prompts", "2", "--group", "4", "--prompt_len",
      "4", "--max_new_tokens", "24", "--short", "4", "--long_share", "0.25",
      "--repeats", "1", "--json", str(path)])
  by_name = {r["lengths"]: r for r in rows}
  assert by_name["long_tailed"]["packed_sequences"] < 8
  assert by_name["fixed"]["packed_sequences"] == 8
  for r in rows:
    assert r["gradient_rel_diff"] < 1e-5
    assert r["padded_s"] > 0 and r["packed_s"] > 0
  assert json.loads(path.read_text())["rows"][0]["lengths"] == "long_tailed"
