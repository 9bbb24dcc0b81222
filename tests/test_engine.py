"""Tests for the generation engine (`sampling.sample(..., slots=S)`): rows
decoded a few slots at a time, each slot refilled as its row ends."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import logprobs as logprobs_lib
from grpo_jax import models
from grpo_jax import sampling
from grpo_jax import testing
from grpo_jax.sampling import entropy_norm

PROMPTS = ([1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11])
G, T = 4, 10
EOS = (5, 6, 7, 8, 9, 10, 11, 12)  # ids that come up: rows end early
ROWS = len(PROMPTS) * G
FIELDS = ("tokens", "mask", "lengths", "truncated", "logprobs",
          "tempered_logprobs", "entropies")


@pytest.fixture(scope="module")
def model():
  # Mildly peaked logits: rows end by EOS at different steps, some run to T.
  return testing.peaked_tiny_model(3.0)


@pytest.fixture(scope="module")
def prompts():
  return sampling.pad_prompts(PROMPTS, buckets=(8,))


def run(model, prompts, key=0, **kwargs):
  config, params = model
  kwargs = dict(dict(num_samples=G, max_new_tokens=T, eos_ids=EOS),
                **kwargs)
  return jax.device_get(sampling.sample(params, config, *prompts,
                                        jax.random.key(key), **kwargs))


def assert_same_rows(got, want, fields=FIELDS):
  for name in fields:
    np.testing.assert_allclose(getattr(got, name), getattr(want, name),
                               atol=2e-5, rtol=0, err_msg=name)


def test_lengths_are_long_tailed_enough_to_refill(model, prompts):
  """The workload of the tests below: rows end at different steps, some by
  EOS, some cut at T, so slots are refilled mid-loop."""
  out = run(model, prompts, temperature=1.0)
  assert out.truncated.any() and not out.truncated.all()
  assert len(set(out.lengths.tolist())) >= 4


@pytest.mark.parametrize("slots", [1, 3, ROWS - 1])
@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_slots_give_the_static_batch_rows(model, prompts, slots, temperature):
  """Each row draws from its own keys, so S slots refilled as rows end give
  the rows of one batch of N: tokens, lengths, truncation, both log-probs
  and entropies, sampled and greedy."""
  want = run(model, prompts, temperature=temperature)
  got = run(model, prompts, temperature=temperature, slots=slots)
  np.testing.assert_array_equal(got.tokens, want.tokens)
  assert_same_rows(got, want)


def test_slots_with_row_temperatures_top_p_and_recorded_fields(model,
                                                               prompts):
  """Per-row temperatures (greedy rows among them), nucleus sampling, the
  recorded top-K and HAPO's per-token temperatures all follow their rows
  through the slots."""
  temperature = np.tile(np.array([0.7, 1.3, 0.0, 1.0], np.float32),
                        len(PROMPTS))
  stats = entropy_norm.entropy_stats(np.array([[0.5, 1.0, 2.0, 3.0]]),
                                     np.ones((1, 4)))
  kwargs = dict(temperature=temperature, top_p=0.9, record_topk=3,
                temperature_rule=entropy_norm.TemperatureRule(
                    jnp.float32(0.3), stats))
  want = run(model, prompts, **kwargs)
  got = run(model, prompts, slots=5, **kwargs)
  assert_same_rows(got, want, FIELDS + ("topk_ids", "topk_logprobs",
                                        "temperatures", "base_entropies"))


def test_ragged_rows_and_padding_rows(model, prompts):
  """`row_prompt` (a budget strategy's ragged groups): each row continues
  its own prompt; a -1 row is padding, ended before its first token."""
  row_prompt = np.array([2, 0, -1, 0, 1, 1, 1, -1, 2], np.int32)
  kwargs = dict(num_samples=1, row_prompt=row_prompt, temperature=1.0)
  want = run(model, prompts, **kwargs)
  got = run(model, prompts, slots=2, **kwargs)
  assert_same_rows(got, want)
  padding = row_prompt < 0
  assert (got.lengths[padding] == 0).all()
  assert not got.truncated[padding].any()


def test_logits_hook_forces_each_rows_end(model, prompts):
  """A hook sees each logit row's output row and step: forcing EOS at a
  drawn step per row gives exactly those lengths, in slots as in a batch;
  without the hook the lengths differ."""
  ends = np.random.default_rng(0).integers(1, T + 1, ROWS)
  end_at = jnp.asarray(ends - 1)  # the step that draws the end id

  def force_end(logits, rows, steps):
    forced = jnp.full_like(logits, -jnp.inf).at[:, EOS[0]].set(0.0)
    banned = logits.at[:, jnp.asarray(EOS)].set(-jnp.inf)
    return jnp.where((steps == end_at[rows])[:, None], forced, banned)

  for slots in (None, 3):
    out = run(model, prompts, temperature=1.0, slots=slots,
              logits_hook=force_end)
    np.testing.assert_array_equal(out.lengths, ends)
    assert not out.truncated.any()
  assert not np.array_equal(run(model, prompts, temperature=1.0).lengths,
                            ends)


def test_slot_rows_score_as_the_trainer_does(model, prompts):
  """The sampler/trainer gap across slot reuse: every row's recorded
  tempered log-probs equal a teacher-forced uncached forward over its
  prompt and tokens (`token_logprobs` at its temperature), including rows
  decoded in a slot after others ended there."""
  config, params = model
  temperature = np.tile(np.array([0.7, 1.3, 0.0, 1.0], np.float32),
                        len(PROMPTS))
  out = run(model, prompts, temperature=temperature, slots=2)
  length = max(map(len, PROMPTS)) + T
  tokens = np.zeros((ROWS, length), np.int32)
  starts = np.zeros((ROWS,), np.int32)
  for row in range(ROWS):
    prompt = PROMPTS[row // G]
    sequence = list(prompt) + list(out.tokens[row])
    tokens[row, :len(sequence)] = sequence
    starts[row] = len(prompt) - 1  # this position predicts the first token
  ones = jnp.ones_like(jnp.asarray(tokens))
  hidden, _ = models.forward(params, config, jnp.asarray(tokens),
                             models.positions_from_mask(ones),
                             models.causal_attention_mask(ones))
  index = jnp.asarray(starts[:, None] + np.arange(T)[None, :])
  hidden = jnp.take_along_axis(hidden, index[..., None], axis=1)
  trainer = logprobs_lib.token_logprobs(
      hidden, models.unembedding(params, config), jnp.asarray(out.tokens),
      temperature=jnp.asarray(temperature)).logp
  np.testing.assert_allclose(out.tempered_logprobs,
                             testing.numpy(trainer) * out.mask, atol=1e-4)


@pytest.mark.parametrize("slots", [0, -1, 2.5, True])
def test_bad_slots_raise(model, prompts, slots):
  with pytest.raises(ValueError, match="slots"):
    run(model, prompts, slots=slots)


def _tiny_rollout(slots):
  import importlib  # pylint: disable=g-import-not-at-top
  from grpo_jax import train  # pylint: disable=g-import-not-at-top
  config = importlib.import_module("configs.grpo").get_config("tiny")
  config.rollout.slots = slots
  config.rewards.workers = 0
  batch, measurements, _ = testing.rollout_step(train.build(config))
  return jax.device_get(batch), measurements


def test_a_run_with_slots_trains_on_the_same_rows(monkeypatch):
  """`rollout.slots` reaches the sampler of a run (the engine decodes its
  rows), and the step's batch (tokens, masks, advantages, behaviour
  log-probs) is the one without slots."""
  want, _ = _tiny_rollout(0)
  calls = []
  engine_fn = sampling.engine.sample_slots
  monkeypatch.setattr(sampling.engine, "sample_slots",
                      lambda *a, **k: calls.append(k) or engine_fn(*a, **k))
  got, _ = _tiny_rollout(3)
  assert [k["num_slots"] for k in calls] == [3]
  np.testing.assert_array_equal(got.tokens, want.tokens)
  np.testing.assert_array_equal(got.completion_mask, want.completion_mask)
  np.testing.assert_allclose(got.advantages, want.advantages, atol=1e-6)
  np.testing.assert_allclose(got.sampler_logp, want.sampler_logp, atol=2e-5)


@pytest.mark.parametrize("bad", [-1, True])
def test_config_rejects_bad_slots(bad):
  from grpo_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from grpo_jax import train  # pylint: disable=g-import-not-at-top
  c = config_lib.get_base_config()
  c.rollout.slots = bad
  with pytest.raises(ValueError, match=r"config\.rollout\.slots"):
    train.validate(c)
