"""Tests for grpo_jax.sampling: cache exactness, log-probs, EOS, groups, jit."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax.sampling import decoding
from grpo_jax.sampling import draw
from grpo_jax import logprobs as logprobs_lib
from grpo_jax import models
from grpo_jax import sampling
from grpo_jax.runtime import sharding
from grpo_jax import testing

T = 6
PROMPTS = ([1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11])


@pytest.fixture(scope="module")
def model():
  # Larger weights than the init: peaked logits, so argmax has no near-ties.
  return testing.peaked_tiny_model(20.0)


@pytest.fixture(scope="module")
def prompts():
  return sampling.pad_prompts(PROMPTS, buckets=(8, 16))


REFERENCE_LENGTH = 16


@functools.partial(jax.jit, static_argnums=1)
def full_forward(params, config, tokens):
  """Uncached hidden states [1, S, D] of one right-padded sequence [1, S]."""
  ones = jnp.ones_like(tokens)
  hidden, _ = models.forward(params, config, tokens,
                             models.positions_from_mask(ones),
                             models.causal_attention_mask(ones))
  return hidden


def reference_logits(params, config, sequence):
  """[len(sequence), V] float32 logits of a full uncached forward, in numpy.

  Right padding to one length keeps a single compile; causal attention makes
  it invisible to the real positions.
  """
  tokens = np.zeros((1, REFERENCE_LENGTH), np.int32)
  tokens[0, :len(sequence)] = sequence
  hidden = full_forward(params, config, jnp.asarray(tokens))
  logits = testing.numpy(models.logits(params, config, hidden))[0]
  return logits[:len(sequence)]


def run(model, prompts, key=0, **kwargs):
  config, params = model
  kwargs.setdefault("max_new_tokens", T)
  kwargs.setdefault("eos_ids", ())
  return jax.device_get(sampling.sample(
      params, config, *prompts, jax.random.key(key), **kwargs))


def log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


# --- pad_prompts ---------------------------------------------------------------


def test_pad_prompts_left_pads_to_smallest_bucket():
  tokens, mask = sampling.pad_prompts([[5, 6], [7, 8, 9]], buckets=(2, 4, 8),
                                      pad_id=3)
  np.testing.assert_array_equal(tokens, [[3, 3, 5, 6], [3, 7, 8, 9]])
  np.testing.assert_array_equal(mask, [[0, 0, 1, 1], [0, 1, 1, 1]])


def test_pad_prompts_rejects_empty_and_too_long():
  with pytest.raises(ValueError, match="token_lists"):
    sampling.pad_prompts([[1], []])
  with pytest.raises(ValueError, match="buckets"):
    sampling.pad_prompts([[1] * 9], buckets=(4, 8))


# --- exactness -----------------------------------------------------------------


def test_greedy_cached_decoding_equals_full_forward(model, prompts):
  config, params = model
  out = run(model, prompts, greedy=True)
  for row, prompt in enumerate(PROMPTS):
    sequence = list(prompt)
    for step in range(T):
      logits = reference_logits(params, config, sequence)[-1]
      expected = int(np.argmax(logits))
      assert out.tokens[row, step] == expected, (row, step)
      # Greedy: tempered log-prob at temperature 1, truncated log-prob 0.
      np.testing.assert_allclose(out.tempered_logprobs[row, step],
                                 log_softmax(logits)[expected], atol=1e-4)
      sequence.append(expected)
  np.testing.assert_array_equal(out.logprobs, 0.0)


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("model_type", ["qwen2", "qwen3"])
def test_decode_step_equals_full_forward_with_bias_and_qk_norm(
    model_type, fused, tied, prompts, monkeypatch):
  """The feature-major decode step re-derives the block; Qwen2's q/k/v
  biases and Qwen3's q/k norms (both made non-trivial) must match the
  uncached model too, with q/k/v and gate/up as separate dots (CPU) or
  stacked (`decoding.fuse_projections`, GPU and TPU), and the logits from
  the tied embedding or an untied lm_head (`decoding.output_rows`)."""
  monkeypatch.setattr(decoding, "fuse_projections", lambda: fused)
  jax.clear_caches()  # `sample` is cached by shapes, not by this choice
  config = testing.tiny_config(model_type, tie_word_embeddings=tied,
                               max_position_embeddings=64)
  params = models.init_params(config, jax.random.key(1))
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(2), len(leaves))
  # Peaked logits (no argmax near-ties); biases and norm scales off 0 / 1.
  params = jax.tree.unflatten(tree, [
      x * 20.0 if x.ndim == 3 or config.vocab_size in x.shape
      else x + 0.5 * jax.random.normal(k, x.shape)
      for x, k in zip(leaves, keys)])
  out = run((config, params), prompts, greedy=True)
  for row, prompt in enumerate(PROMPTS):
    sequence = list(prompt)
    for step in range(T):
      logits = reference_logits(params, config, sequence)[-1]
      assert out.tokens[row, step] == int(np.argmax(logits)), (row, step)
      np.testing.assert_allclose(out.tempered_logprobs[row, step],
                                 log_softmax(logits)[out.tokens[row, step]],
                                 atol=1e-4)
      sequence.append(int(out.tokens[row, step]))


def test_projections_are_stacked_off_the_cpu_unless_heads_are_split(
    monkeypatch):
  # The backend is set here, so the test holds on any machine.
  monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
  assert not decoding.fuse_projections()  # CPU: five dots
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  assert decoding.fuse_projections()
  for shape, fused in [((1, 2, 1), True), ((1, 1, 2), False)]:
    with jax.set_mesh(sharding.make_mesh(shape, devices=jax.devices()[:2])):
      assert decoding.fuse_projections() == fused, shape


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_tempered_logprobs_match_teacher_forced_token_logprobs(
    model, prompts, temperature):
  config, params = model
  out = run(model, prompts, key=3, temperature=temperature)
  np.testing.assert_array_equal(out.logprobs, out.tempered_logprobs)
  for row, prompt in enumerate(PROMPTS):
    sequence = list(prompt) + list(out.tokens[row])
    tokens = np.zeros((1, REFERENCE_LENGTH), np.int32)
    tokens[0, :len(sequence)] = sequence
    hidden = full_forward(params, config, jnp.asarray(tokens))
    # The hidden state at position i predicts token i + 1.
    start = len(prompt) - 1
    recomputed = logprobs_lib.token_logprobs(
        hidden[:, start:start + T], models.unembedding(params, config),
        jnp.asarray(tokens[:, start + 1:start + 1 + T]),
        temperature=temperature).logp
    np.testing.assert_allclose(out.tempered_logprobs[row],
                               testing.numpy(recomputed)[0], atol=1e-4)


def truncated_reference(logits, token, temperature, top_k, top_p):
  """log q(token), q = tempered softmax kept to the top-k / top-p set."""
  scaled = logits / temperature
  order = np.argsort(-scaled, kind="stable")
  keep = np.zeros(scaled.shape, bool)
  keep[order[:top_k or len(scaled)]] = True
  if top_p is not None:
    probs = np.exp(log_softmax(np.where(keep, scaled, -np.inf)))
    mass_before = np.cumsum(probs[order]) - probs[order]
    keep[order[mass_before >= top_p]] = False
  kept = np.where(keep, scaled, -np.inf)
  return log_softmax(kept)[token], keep[token]


@pytest.mark.parametrize("top_k,top_p", [(5, None), (None, 0.6), (8, 0.7)])
def test_truncated_logprobs_renormalise_over_the_kept_set(
    model, prompts, top_k, top_p):
  config, params = model
  temperature = 0.8
  out = run(model, prompts, key=5, temperature=temperature, top_k=top_k,
            top_p=top_p)
  for row, prompt in enumerate(PROMPTS):
    logits = reference_logits(params, config,
                              list(prompt) + list(out.tokens[row]))
    for step in range(T):
      token = out.tokens[row, step]
      expected, kept = truncated_reference(
          logits[len(prompt) - 1 + step], token, temperature, top_k, top_p)
      assert kept, (row, step)
      np.testing.assert_allclose(out.logprobs[row, step], expected, atol=1e-4)
  assert (out.logprobs >= out.tempered_logprobs - 1e-6).all()
  assert (out.logprobs > out.tempered_logprobs + 1e-3).any()


def test_top_k_one_equals_greedy(model, prompts):
  greedy = run(model, prompts, greedy=True)
  top1 = run(model, prompts, key=9, temperature=0.7, top_k=1)
  np.testing.assert_array_equal(top1.tokens, greedy.tokens)
  np.testing.assert_array_equal(top1.logprobs, 0.0)


def test_tiny_top_p_equals_greedy(model, prompts):
  greedy = run(model, prompts, greedy=True)
  nucleus = run(model, prompts, key=9, temperature=1.5, top_p=1e-6)
  np.testing.assert_array_equal(nucleus.tokens, greedy.tokens)


def test_same_key_same_completions_other_key_differs(model, prompts):
  first = run(model, prompts, key=11)
  again = run(model, prompts, key=11)
  other = run(model, prompts, key=12)
  np.testing.assert_array_equal(first.tokens, again.tokens)
  assert (first.tokens != other.tokens).any()


# --- end of sequence -----------------------------------------------------------


def test_two_eos_ids_end_rows_and_set_mask_lengths_truncated(model, prompts):
  free = run(model, prompts, greedy=True)
  # Two end ids taken from the unconstrained greedy run: row 0's 3rd token and
  # row 1's 5th, so those rows must stop there (or earlier, where the other id
  # shows up first); row 2 runs on unless it produces one of them.
  eos = (int(free.tokens[0, 2]), int(free.tokens[1, 4]))
  out = run(model, prompts, greedy=True, eos_ids=eos)
  for row in range(len(PROMPTS)):
    hits = [t for t in range(T) if free.tokens[row, t] in eos]
    length = hits[0] + 1 if hits else T
    expected_mask = (np.arange(T) < length).astype(np.float32)
    np.testing.assert_array_equal(out.mask[row], expected_mask)
    assert out.lengths[row] == length
    assert out.truncated[row] == (not hits)
    np.testing.assert_array_equal(out.tokens[row, :length],
                                  free.tokens[row, :length])
    np.testing.assert_array_equal(out.tokens[row, length:], 0)
    np.testing.assert_array_equal(out.tempered_logprobs[row, length:], 0.0)
  assert out.lengths[0] <= 3 and out.lengths[1] <= 5
  assert not out.truncated[0] and not out.truncated[1]


def test_max_new_tokens_respected_without_eos(model, prompts):
  out = run(model, prompts, greedy=True, max_new_tokens=3)
  assert out.tokens.shape == (len(PROMPTS), 3)
  np.testing.assert_array_equal(out.lengths, 3)
  np.testing.assert_array_equal(out.mask, 1.0)
  assert out.truncated.all()


def test_all_rows_ended_early_pads_the_rest(model, prompts):
  free = run(model, prompts, greedy=True)
  eos = tuple(int(t) for t in free.tokens[:, 0])
  out = run(model, prompts, greedy=True, eos_ids=eos)
  np.testing.assert_array_equal(out.lengths, 1)
  np.testing.assert_array_equal(out.tokens[:, 1:], 0)
  assert not out.truncated.any()


# --- groups --------------------------------------------------------------------


def test_groups_prefill_once_and_repeat_prompt_major(model, monkeypatch):
  calls = []

  def recording(name, function):
    def wrapped(*args, **kwargs):
      tokens = next(a for a in args if getattr(a, "dtype", None) == jnp.int32)
      calls.append((name, tokens.shape))
      return function(*args, **kwargs)
    return wrapped

  monkeypatch.setattr(models, "forward", recording("prefill", models.forward))
  monkeypatch.setattr(decoding, "forward",
                      recording("decode", decoding.forward))
  # Bucket 16: a shape no other test uses, so the sampler is traced here.
  prompts = sampling.pad_prompts(PROMPTS, buckets=(16,))
  groups = 3
  greedy = run(model, prompts, greedy=True, num_samples=groups)
  # One prefill over the P prompts, one traced decode step over N = P*G rows.
  assert calls == [("prefill", (len(PROMPTS), 16)),
                   ("decode", (len(PROMPTS) * groups,))]
  single = run(model, prompts, greedy=True)
  np.testing.assert_array_equal(greedy.tokens,
                                np.repeat(single.tokens, groups, axis=0))
  sampled = run(model, prompts, key=4, num_samples=groups)
  for p in range(len(PROMPTS)):
    group = sampled.tokens[p * groups:(p + 1) * groups]
    assert len({tuple(r) for r in group}) > 1, group


def test_sampled_groups_continue_their_own_prompt(model, prompts):
  config, params = model
  out = run(model, prompts, key=6, num_samples=2, temperature=1.0)
  for row in range(out.tokens.shape[0]):
    prompt = PROMPTS[row // 2]
    logits = reference_logits(params, config,
                              list(prompt) + list(out.tokens[row]))
    expected = [log_softmax(logits[len(prompt) - 1 + t])[out.tokens[row, t]]
                for t in range(T)]
    np.testing.assert_allclose(out.tempered_logprobs[row], expected,
                               atol=1e-4)


# --- per-row temperature -------------------------------------------------------

G = 2
# Rows p*G + g: each prompt gets two different temperatures, 0 a greedy row.
ROW_TEMPERATURES = np.array([0.6, 1.4, 0.0, 0.6, 1.4, 0.0], np.float32)


def teacher_forced_hidden(params, config, out):
  """[N, T, D] hidden states of a full uncached forward over prompt + tokens,
  at the positions that predict each completion token (all rows at once)."""
  rows = out.tokens.shape[0]
  tokens = np.zeros((rows, REFERENCE_LENGTH), np.int32)
  starts = np.zeros((rows,), np.int32)
  for row in range(rows):
    prompt = PROMPTS[row // G]
    sequence = list(prompt) + list(out.tokens[row])
    tokens[row, :len(sequence)] = sequence
    starts[row] = len(prompt) - 1  # position len - 1 predicts the first token
  ones = jnp.ones_like(jnp.asarray(tokens))
  hidden, _ = models.forward(params, config, jnp.asarray(tokens),
                             models.positions_from_mask(ones),
                             models.causal_attention_mask(ones))
  index = starts[:, None] + np.arange(T)[None, :]
  return jnp.take_along_axis(hidden, jnp.asarray(index)[..., None], axis=1)


@pytest.mark.parametrize("top_k,top_p", [(None, None), (5, 0.9)])
def test_row_temperatures_equal_each_row_at_its_own_scalar(
    model, prompts, top_k, top_p):
  """Row n of a run at [N] temperatures is row n of a run with every row at
  temperature[n]: same key, same N, and the draw of step t is one
  categorical over [N, V] from fold_in(key, t), so each row sees the same
  noise in both runs and the comparison is exact."""
  common = dict(key=7, num_samples=G, top_k=top_k, top_p=top_p)
  mixed = run(model, prompts, temperature=ROW_TEMPERATURES, **common)
  scalar = {value: run(model, prompts, temperature=float(value), **common)
            for value in (0.6, 1.4)}
  scalar[0.0] = run(model, prompts, greedy=True, **common)
  for value, whole in scalar.items():
    rows = np.flatnonzero(ROW_TEMPERATURES == np.float32(value))
    for field in ("tokens", "logprobs", "tempered_logprobs", "mask"):
      np.testing.assert_array_equal(getattr(mixed, field)[rows],
                                    getattr(whole, field)[rows],
                                    err_msg=f"{field} at {value}")
  # The check can fail: the scalar runs differ from each other.
  assert (scalar[0.6].tokens != scalar[1.4].tokens).any()
  assert (scalar[0.6].tokens != scalar[0.0].tokens).any()


def test_scalar_temperature_zero_is_greedy(model, prompts):
  greedy = run(model, prompts, greedy=True)
  zero = run(model, prompts, key=3, temperature=0.0)
  for field in ("tokens", "logprobs", "tempered_logprobs"):
    np.testing.assert_array_equal(getattr(zero, field), getattr(greedy, field))


def test_greedy_rows_take_argmax_while_other_rows_sample(model, prompts):
  config, params = model
  first = run(model, prompts, key=1, num_samples=G,
              temperature=ROW_TEMPERATURES)
  other = run(model, prompts, key=2, num_samples=G,
              temperature=ROW_TEMPERATURES)
  greedy_rows = np.flatnonzero(ROW_TEMPERATURES == 0)
  sampled_rows = np.flatnonzero(ROW_TEMPERATURES > 0)
  for row in greedy_rows:
    prompt = PROMPTS[row // G]
    logits = reference_logits(params, config,
                              list(prompt) + list(first.tokens[row]))
    for step in range(T):
      step_logits = logits[len(prompt) - 1 + step]
      assert first.tokens[row, step] == np.argmax(step_logits), (row, step)
      # A greedy row: logprobs 0, tempered_logprobs at temperature 1.
      np.testing.assert_allclose(
          first.tempered_logprobs[row, step],
          log_softmax(step_logits)[first.tokens[row, step]], atol=1e-4)
  np.testing.assert_array_equal(first.logprobs[greedy_rows], 0.0)
  np.testing.assert_array_equal(first.tokens[greedy_rows],
                                other.tokens[greedy_rows])
  # The sampled rows follow the key, and draw their log-probs at their own
  # temperature (nonzero).
  assert (first.tokens[sampled_rows] != other.tokens[sampled_rows]).any()
  assert (first.logprobs[sampled_rows] < 0).all()


def test_sampler_and_trainer_agree_per_row(model, prompts):
  """`tempered_logprobs` recorded by the sampler at [N] temperatures equal
  `token_logprobs` of the teacher-forced forward pass given the same [N]
  temperatures (greedy rows included, both at 1), row by row, eager and
  with the temperatures traced under jit."""
  config, params = model
  out = run(model, prompts, key=8, num_samples=G, temperature=ROW_TEMPERATURES)
  hidden = teacher_forced_hidden(params, config, out)
  unembedding = models.unembedding(params, config)
  score = lambda tau: logprobs_lib.token_logprobs(
      hidden, unembedding, jnp.asarray(out.tokens), temperature=tau).logp
  trainer = testing.numpy(score(jnp.asarray(ROW_TEMPERATURES)))
  np.testing.assert_allclose(out.tempered_logprobs, trainer, atol=1e-4)
  traced = testing.numpy(jax.jit(score)(jnp.asarray(ROW_TEMPERATURES)))
  # Jit and eager round differently (peaked logits: |z| is large here).
  np.testing.assert_allclose(traced, trainer, atol=1e-5)
  # The check can fail: one temperature for all rows disagrees on the rows
  # sampled at another.
  at_one = testing.numpy(score(1.0))
  other = (ROW_TEMPERATURES > 0) & (ROW_TEMPERATURES != 1)
  assert np.abs(at_one - out.tempered_logprobs)[other].max() > 1e-2


def test_row_temperatures_compile_once(model):
  """Temperature is traced: new [N] values, greedy rows among them, and a
  float (normalised to [N] before the jit) reuse one compile."""
  # Bucket 32 and P = 1: a shape no other test uses.
  prompts = sampling.pad_prompts([[1, 2, 3]], buckets=(32,))
  kwargs = dict(num_samples=3, max_new_tokens=3)
  run(model, prompts, temperature=np.array([0.5, 1.0, 2.0]), **kwargs)
  before = sampling.trace_count()
  changed = run(model, prompts, temperature=np.array([0.0, 0.9, 1.3]),
                **kwargs)
  run(model, prompts, temperature=0.8, **kwargs)
  assert sampling.trace_count() == before
  assert (changed.logprobs[0] == 0).all()  # the new values took effect


# --- compilation ---------------------------------------------------------------


def test_compiles_once_per_bucket(model):
  before = sampling.trace_count()
  for token_lists in ([[1, 2]], [[3, 4, 5, 6, 7]], [[8]]):
    run(model, sampling.pad_prompts(token_lists, buckets=(8,)),
        max_new_tokens=5, greedy=True, eos_ids=(2,))
  assert sampling.trace_count() - before == 1
  # A new bucket compiles again.
  run(model, sampling.pad_prompts([[1] * 9], buckets=(8, 16)),
      max_new_tokens=5, greedy=True, eos_ids=(2,))
  assert sampling.trace_count() - before == 2


# --- bad input -----------------------------------------------------------------


@pytest.mark.parametrize("kwargs,name", [
    (dict(num_samples=0), "num_samples"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(temperature=-0.5), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=np.array([1.0, -1.0, 1.0])), "temperature"),
    (dict(temperature=np.ones(2)), "temperature"),  # N = 3 rows
    (dict(temperature=np.ones(3), num_samples=2), "temperature"),
    (dict(temperature=np.ones((3, T))), "temperature"),  # per token: not yet
    (dict(temperature="hot"), "temperature"),
    (dict(top_k=0), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(max_new_tokens=60), "max_new_tokens"),
])
def test_bad_arguments_raise(model, prompts, kwargs, name):
  with pytest.raises(ValueError, match=name):
    run(model, prompts, **kwargs)


def test_empty_prompt_row_raises(model):
  tokens = np.ones((2, 4), np.int32)
  mask = np.array([[0, 0, 1, 1], [0, 0, 0, 0]])
  with pytest.raises(ValueError, match="prompt_mask"):
    run(model, (tokens, mask))


def test_right_padded_or_misshaped_prompts_raise(model):
  tokens = np.ones((1, 4), np.int32)
  with pytest.raises(ValueError, match="left-padded"):
    run(model, (tokens, np.array([[1, 1, 0, 0]])))
  with pytest.raises(ValueError, match="prompt_mask"):
    run(model, (tokens, np.ones((1, 5))))
  with pytest.raises(ValueError, match="prompt_tokens"):
    run(model, (tokens[0], np.ones(4)))


def test_prompt_longer_than_positions_raises(model):
  tokens, mask = sampling.pad_prompts([[1] * 62], buckets=(64,))
  with pytest.raises(ValueError, match="prompt_tokens"):
    run(model, (tokens, mask), max_new_tokens=4)


# --- the real model --------------------------------------------------------------


@pytest.mark.real_model
def test_greedy_smollm2_matches_transformers_generate():
  import torch
  import transformers
  config, params, tokenizer = models.load("smollm2-135m-instruct")
  questions = ("What is 2 + 3?", "Name a colour.",
               "Write one sentence about the moon.")
  token_lists = [
      list(tokenizer.apply_chat_template(
          [{"role": "user", "content": q}], add_generation_prompt=True,
          tokenize=True, return_dict=True)["input_ids"])
      for q in questions]
  new_tokens = 24
  eos = models.eos_ids(tokenizer)
  out = jax.device_get(sampling.sample(
      params, config, *sampling.pad_prompts(token_lists), jax.random.key(0),
      max_new_tokens=new_tokens, greedy=True, eos_ids=eos))

  path = models.loading.embedded_model_path("smollm2-135m-instruct")
  hf_model = transformers.AutoModelForCausalLM.from_pretrained(
      str(path.parent), gguf_file=path.name, dtype=torch.float32)
  for row, ids in enumerate(token_lists):
    with torch.inference_mode():
      generated = hf_model.generate(
          torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                                                         dtype=torch.long),
          max_new_tokens=new_tokens, do_sample=False, eos_token_id=list(eos),
          pad_token_id=0)[0, len(ids):].tolist()
    # transformers pads finished rows; compare up to and including the end id.
    hf_tokens = []
    for token in generated:
      hf_tokens.append(token)
      if token in eos:
        break
    length = int(out.lengths[row])
    assert out.tokens[row, :length].tolist() == hf_tokens, questions[row]


@pytest.mark.parametrize("block", [4, 256])
def test_argmax_in_blocks_takes_the_first_maximum(block):
  """As np.argmax: the first of tied maxima (within a block of 4 and across
  blocks), the first NaN, 0 for a row of -inf, and an id in the padded last
  block (10 ids in blocks of 4)."""
  logits = np.random.default_rng(0).normal(size=(6, 10)).astype(np.float32)
  logits[1, [2, 7]] = 5.0
  logits[2, [1, 2]] = 5.0
  logits[3, [3, 8]] = np.nan
  logits[4] = -np.inf
  logits[5, 9] = 9.0
  got = jax.jit(functools.partial(draw.argmax, block=block))(logits)
  assert got.dtype == jnp.int32
  np.testing.assert_array_equal(got[1:], [2, 1, 3, 0, 9])
  assert got[0] == np.argmax(logits[0])
  wide = np.random.default_rng(1).normal(size=(8, 1000)).astype(np.float32)
  np.testing.assert_array_equal(draw.argmax(wide, block=block),
                                np.argmax(wide, axis=-1))


@pytest.mark.parametrize("block", [4, 256])
def test_categorical_draws_the_softmax_distribution(block):
  """Frequencies of 40000 draws are within 5 sigma of softmax(logits), ids
  of -inf logits never come up, and blocks of 4 over 10 ids (padded to 12)
  spread the mass over several blocks."""
  probs = np.array([0.05, 0.0, 0.3, 0.0, 0.15, 0.02, 0.0, 0.4, 0.08, 0.0])
  logits = np.where(probs > 0, np.log(np.maximum(probs, 1e-30)), -np.inf)
  rows = 40000
  draws = np.asarray(jax.jit(functools.partial(
      draw.categorical, block=block))(
          jax.random.key(3), jnp.asarray(np.tile(logits, (rows, 1)),
                                         jnp.float32)))
  counts = np.bincount(draws, minlength=len(probs)) / rows
  assert len(counts) == len(probs)  # no padded id
  np.testing.assert_array_equal(counts[probs == 0], 0.0)
  sigma = np.sqrt(probs * (1 - probs) / rows)
  assert (np.abs(counts - probs) <= 5 * sigma + 1e-12).all(), counts
  # One-hot rows always give their id.
  one_hot = jnp.full((3, 600), -jnp.inf).at[jnp.arange(3),
                                            jnp.array([0, 299, 599])].set(0.0)
  np.testing.assert_array_equal(
      draw.categorical(jax.random.key(0), one_hot, block=block),
      [0, 299, 599])
