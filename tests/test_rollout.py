"""Tests for the rollout stage: dynamic sampling and its signal reward,
filler groups, the estimator record and its state, truncation masking,
sampler/trainer log-prob agreement, tasks, `from_config` (grpo_jax.rollout)."""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import dapo as dapo_config
from configs import grpo as grpo_config
from grpo_jax import advantages
from grpo_jax.data import arithmetic
from grpo_jax.train import batch as batch_lib
from grpo_jax import credit
from grpo_jax import data
from grpo_jax import groups
from grpo_jax import measures
from grpo_jax import models
from grpo_jax import objectives
from grpo_jax import rollout
from grpo_jax.rollout import build as rollout_build
from grpo_jax.rollout import fields as rollout_fields
from grpo_jax import strategies
from grpo_jax import testing
from grpo_jax.rewards import verifiers
from grpo_jax import train
from grpo_jax.train import update as update_lib


@pytest.fixture(scope="module")
def tiny_rollout():
  config_, params, tokenizer = models.load_model("tiny")
  return config_, params, tokenizer


def make_pipeline(tiny_rollout, reward_fns, *, dynamic, weights=None,
                  mask_truncated=False, temperature=0.7, on_policy=False,
                  estimator="grpo", shapers=None, signal_reward=""):
  """A `rollout.Pipeline` with P = G = 2, 4 new tokens; `reward_fns` is one
  function (named "r") or name -> function; `dynamic` picks DAPO's group
  strategy (3 rounds at most) over every group of one round."""
  config, _, tokenizer = tiny_rollout
  if callable(reward_fns):
    reward_fns = {"r": reward_fns}
  weights = weights or [1.0] * len(reward_fns)
  group_strategy = (
      strategies.make_group_strategy("dynamic_sampling", max_rounds=3,
                                     signal_reward=signal_reward)
      if dynamic else strategies.make_group_strategy("all_groups"))
  if isinstance(estimator, str):
    estimator = advantages.make(estimator)
  eos_ids, pad_id = models.eos_and_pad(tokenizer)
  return rollout.Pipeline(
      num_prompts=2,
      sampler=rollout.Sampler(
          num_generations=2, max_new_tokens=4, temperature=temperature,
          top_k=0, top_p=1.0, prompt_buckets=(80,), system_prompt="",
          eos_ids=eos_ids, pad_id=pad_id),
      model_config=config, tokenizer=tokenizer,
      task=data.make_task(dapo_config.get_config("tiny").data, seed=0),
      format_prompt=data.format_prompt,
      verifiers={name: (fn, w) for (name, fn), w in zip(reward_fns.items(),
                                                        weights)},
      shapers={name: (fn, 1.0) for name, fn in (shapers or {}).items()},
      components=dict(
          select=strategies.make_selection(
              "uniform", rounds_per_step=group_strategy.rounds_per_step),
          groups=group_strategy, advantage=estimator,
          credit=credit.make("uniform"),
          rows=strategies.make_row_strategy(
              "mask_truncated" if mask_truncated else "all_rows")),
      assemble=functools.partial(
          batch_lib.assemble_batch, model_config=config,
          temperature=temperature, chunk_size=64, on_policy=on_policy))


def generate_with_state(tiny_rollout, reward_fns, *, estimator_state=None,
                        seed=0, **options):
  """(batch, measurements, estimator state) of step 0 of `make_pipeline`."""
  _, params, _ = tiny_rollout
  pipeline = make_pipeline(tiny_rollout, reward_fns, **options)
  states = {name: c.init() for name, c in pipeline.components.items()}
  if estimator_state is not None:
    states["advantage"] = estimator_state
  batch, m, states = rollout.generate(params, None, 0,
                                      jax.random.PRNGKey(seed), states,
                                      pipeline=pipeline)
  return batch, m, states["advantage"]


def run_generate(*args, **kwargs):
  """(batch, measurements) of `generate_with_state`."""
  return generate_with_state(*args, **kwargs)[:2]


def constant_reward(prompts, completions, answers):
  return [0.0] * len(completions)


def test_dynamic_sampling_changes_the_batch(tiny_rollout):
  plain, m_plain = run_generate(tiny_rollout, constant_reward, dynamic=False)
  dynamic, m_dyn = run_generate(tiny_rollout, constant_reward, dynamic=True)
  # Every group lacks signal: without the filter they train (with A = 0),
  # with it the sampler tries max_rounds times and masks them all out.
  assert float(plain.completion_mask.sum()) > 0
  assert float(dynamic.completion_mask.sum()) == 0
  assert m_plain["rollout/rounds"] == 1 and m_dyn["rollout/rounds"] == 3
  assert m_dyn["rollout/groups_with_signal"] == 0
  # Without the filter the groups train, but none has signal.
  assert m_plain["rollout/groups_with_signal"] == 0
  assert m_plain["advantage/collapse_rate"] == 1


def test_groups_with_signal_and_collapse_add_up_on_the_plain_path(
    tiny_rollout):
  """Every group trains (all_groups): the share of groups with signal is
  1 - collapse rate, counted by hand from the rewards: for each group
  whether its members' rewards differ."""
  def signal_in_group_zero(prompts, completions, answers):
    # P = G = 2, rows prompt-major: group 0 scores (1, 0), group 1 (0, 0).
    return [float(i == 0) for i in range(len(completions))]

  batch, m = run_generate(tiny_rollout, signal_in_group_zero, dynamic=False)
  expected_with_signal = np.mean([1.0 != 0.0, 0.0 != 0.0])  # 0.5
  assert m["rollout/groups_with_signal"] == expected_with_signal
  assert m["advantage/collapse_rate"] == 1 - expected_with_signal
  # Both groups train; group 1's advantages are 0.
  assert float(batch.completion_mask.sum()) > 0
  np.testing.assert_array_equal(np.asarray(batch.advantages)[2:], [0, 0])


def test_dynamic_sampling_resamples_until_groups_have_signal(tiny_rollout):
  """Round 0 scores every completion alike (no signal), round 1 varies:
  sampling stops after round 1 and every group of the batch has signal
  (nonzero advantages) and stays in the loss."""
  calls = []

  def varies_from_round_one(prompts, completions, answers):
    calls.append(list(completions))
    if len(calls) == 1:
      return [0.0] * len(completions)
    return [float(i % 2) for i in range(len(completions))]

  batch, m = run_generate(tiny_rollout, varies_from_round_one, dynamic=True)
  assert len(calls) == 2 and m["rollout/rounds"] == 2
  assert m["rollout/groups_with_signal"] == 1.0
  # The loss sees every sampled token of round 1's completions.
  np.testing.assert_array_equal(
      np.asarray(batch.completion_mask),
      np.asarray(batch.input_mask)[:, -batch.completion_mask.shape[1]:])
  assert np.abs(np.asarray(batch.advantages)).min() > 0


def test_dynamic_sampling_keeps_groups_with_signal_first():
  """Round 0 has signal in group 1 only, round 1 in group 1 only: the batch
  is round 0's group 1, then round 1's; with one round the filler is round
  0's group 0 (valid False)."""
  class FakeRound(NamedTuple):
    rewards: np.ndarray
    columns: tuple = ("r",)
  rounds = [FakeRound(np.asarray([[1, 1], [0, 1]], np.float32)[..., None]),
            FakeRound(np.asarray([[0, 0], [1, 0]], np.float32)[..., None])]
  got = strategies.dynamic_sampling(lambda r: rounds[r], 2, max_rounds=2)
  assert got.picks == [(0, 1), (1, 1)] and got.valid.tolist() == [True, True]
  got = strategies.dynamic_sampling(lambda r: rounds[r], 2, max_rounds=1)
  assert got.picks == [(0, 1), (0, 0)] and got.valid.tolist() == [True, False]


def test_signal_is_in_the_weighted_rewards_that_advantages_see():
  # [P=3, G=2, K=2]: group 0 varies only in a weight-0 reward; group 1's
  # rewards vary but their sum does not; group 2's sum varies.
  rewards = np.asarray([[[0, 1], [0, 0]], [[1, 0], [0, 1]],
                        [[1, 1], [0, 0]]], np.float32)
  summed = groups.has_signal(rewards, [1.0, 0.0], per_reward=False)
  np.testing.assert_array_equal(summed, [False, True, True])
  summed = groups.has_signal(rewards, [1.0, 1.0], per_reward=False)
  np.testing.assert_array_equal(summed, [True, False, True])
  # GDPO normalises each reward alone: group 1 has signal there.
  gdpo = groups.has_signal(rewards, [1.0, 1.0], per_reward=True)
  np.testing.assert_array_equal(gdpo, [True, True, True])
  # Summed, signal is exactly where GRPO's advantages are nonzero.
  adv, _ = advantages.make("grpo").estimate(
      (), groups.from_rewards(rewards, [1.0, 1.0]))
  np.testing.assert_array_equal(np.abs(np.asarray(adv)).max(-1) > 0, summed)


def test_truncated_completions_leave_mask_and_denominator(tiny_rollout):
  def varied(prompts, completions, answers):
    return [float(len(c) % 3) for c in completions]
  # The tiny model rarely ends within 4 tokens: the first seed whose
  # sample has both ended and truncated rows (asserted below).
  for seed in range(32):
    dropped, m = run_generate(tiny_rollout, varied, dynamic=False,
                              mask_truncated=True, seed=seed)
    if 0 < m["truncation_rate"] < 1:
      break
  kept, _ = run_generate(tiny_rollout, varied, dynamic=False, seed=seed)
  kept_rows = np.asarray(kept.completion_mask)
  dropped_rows = np.asarray(dropped.completion_mask)
  assert 0 < m["truncation_rate"] < 1  # both kinds of rows occur
  # Same sample (same key): rows survive whole or vanish whole; the ones that
  # vanish are exactly the truncated share, so the denominator shrinks too.
  survived = (dropped_rows == kept_rows).all(axis=-1)
  vanished = (dropped_rows == 0).all(axis=-1) & (kept_rows.sum(-1) > 0)
  assert np.all(survived | vanished)
  assert vanished.mean() == pytest.approx(m["truncation_rate"])


def test_sampler_and_trainer_logprobs_agree(tiny_rollout):
  _, m = run_generate(tiny_rollout, constant_reward, dynamic=False,
                      temperature=0.6)
  assert m["logprob/sampler_trainer_max_abs_diff"] < 1e-4


def test_on_policy_rollout_skips_the_old_logprob_pass(tiny_rollout):
  """On policy the old log-prob pass is skipped (the sampler's log-probs
  travel on and off policy), and the update measures the sampler/trainer
  gap from its own forward pass."""
  config, params, _ = tiny_rollout
  off, _ = run_generate(tiny_rollout, constant_reward, dynamic=False,
                        temperature=0.6)
  on, m_on = run_generate(tiny_rollout, constant_reward, dynamic=False,
                          temperature=0.6, on_policy=True)
  assert on.old_logp is None and off.old_logp is not None
  assert off.sampler_logp is not None
  np.testing.assert_array_equal(np.asarray(on.sampler_logp),
                                np.asarray(off.sampler_logp))
  assert "logprob/sampler_trainer_max_abs_diff" not in m_on
  mask = np.asarray(on.completion_mask)
  testing.assert_close(np.asarray(on.sampler_logp) * mask,
                       np.asarray(off.old_logp) * mask, atol=1e-4)
  optimizer = optax.sgd(0.0)
  objective = objectives.make("ppo_clip")
  fn = update_lib.make_update_fn(model_config=config, optimizer=optimizer,
                                 objective=objective,
                                 chunk_size=64)
  state = train.init_state(jax.tree.map(jnp.copy, params), optimizer, seed=0,
                           components={"objective": objective})
  _, records = fn(state, on)
  gap = measures.values(records)["logprob/sampler_trainer_max_abs_diff"]
  assert 0 < float(gap) < 1e-4


# ------------------------------------------ signal, fillers, state, config


def alternating_reward(prompts, completions, answers):
  return [float(i % 2) for i in range(len(completions))]


def test_dynamic_sampling_signal_is_the_verifier_not_the_shaped_sum(
    tiny_rollout):
  """DAPO keeps a group when its accuracy varies. A format bonus (or the
  overlong ramp) that varies while accuracy does not is no signal, unless
  the strategy's signal_reward names it."""
  fns = {"accuracy": constant_reward, "format": alternating_reward}
  batch, m = run_generate(tiny_rollout, fns, dynamic=True, weights=[1.0, 0.1])
  assert m["rollout/rounds"] == 3 and m["rollout/groups_with_signal"] == 0
  assert float(batch.completion_mask.sum()) == 0
  # The plain sample's weighted total varies in every group: the estimator
  # would have had signal there (collapse 0), the batch of fillers has none.
  assert m["advantage/collapse_rate"] == 0
  # A varying shaper column is no signal either.
  ramp = lambda lengths: np.arange(len(lengths), dtype=np.float32) % 2
  _, m = run_generate(tiny_rollout, {"accuracy": constant_reward},
                      dynamic=True, shapers={"overlong": ramp})
  assert m["rollout/groups_with_signal"] == 0
  # Named, the format reward (or the shaper) is the signal.
  _, m = run_generate(tiny_rollout, fns, dynamic=True, weights=[1.0, 0.1],
                      signal_reward="format")
  assert m["rollout/rounds"] == 1 and m["rollout/groups_with_signal"] == 1
  _, m = run_generate(tiny_rollout, {"accuracy": constant_reward},
                      dynamic=True, shapers={"overlong": ramp},
                      signal_reward="overlong")
  assert m["rollout/groups_with_signal"] == 1


def test_filler_groups_get_zero_and_stay_out_of_batch_statistics(
    tiny_rollout):
  """Round 0: group 0's accuracy varies, group 1's does not; later rounds
  have none. Group 1 fills the batch (masked out): its advantage is 0 though
  its format reward varies, the batch std of scale="batch" and
  advantage/abs_mean are over group 0 alone."""
  calls = []

  def accuracy_of_group_zero_in_round_zero(prompts, completions, answers):
    calls.append(1)
    return [float(len(calls) == 1 and i == 0) for i in range(len(completions))]

  fns = {"accuracy": accuracy_of_group_zero_in_round_zero,
         "format": alternating_reward}
  batch, m = run_generate(tiny_rollout, fns, dynamic=True, weights=[1.0, 0.5],
                          estimator=advantages.make("grpo", scale="batch"))
  assert m["rollout/rounds"] == 3 and m["rollout/groups_with_signal"] == 0.5
  adv = np.asarray(batch.advantages)  # [N = 4]; group 1 is the filler
  np.testing.assert_array_equal(adv[2:], [0.0, 0.0])
  assert float(batch.completion_mask[2:].sum()) == 0
  # Group 0's weighted rewards are [1, 0.5].
  testing.assert_close(
      adv[:2], advantages.grpo(np.array([[1.0, 0.5]]), scale="batch")[0])
  assert m["advantage/abs_mean"] == pytest.approx(np.abs(adv[:2]).mean())


def test_collapse_rate_reads_the_weights(tiny_rollout):
  """A varying reward of weight 0 gives no signal: the advantages are all 0
  and every group counts as collapsed, for PG and PGK estimators alike."""
  fns = {"accuracy": constant_reward, "unused": alternating_reward}
  for name in ("grpo", "gdpo"):
    batch, m = run_generate(tiny_rollout, fns, dynamic=False,
                            weights=[1.0, 0.0], estimator=name)
    np.testing.assert_array_equal(np.asarray(batch.advantages), np.zeros(4))
    assert m["advantage/collapse_rate"] == 1.0
    batch, m = run_generate(tiny_rollout, fns, dynamic=False,
                            weights=[1.0, 0.5], estimator=name)
    assert np.abs(np.asarray(batch.advantages)).min() > 0
    assert m["advantage/collapse_rate"] == 0.0


def test_the_estimator_state_is_carried_by_the_caller(tiny_rollout):
  """generate takes the estimator state and returns the new one."""
  grpo = advantages.make("grpo")

  def estimate(state, group_data):
    adv, _ = grpo.estimate((), group_data)
    return adv, state + group_data.valid.sum()

  counting = advantages.Estimator(name="counting", input="PG", output="group",
                                  init=lambda: jnp.zeros((), jnp.int32),
                                  estimate=estimate)
  _, _, state = generate_with_state(tiny_rollout, alternating_reward,
                                    dynamic=False, estimator=counting)
  assert int(state) == 2
  _, _, state = generate_with_state(tiny_rollout, alternating_reward,
                                    dynamic=False, estimator=counting,
                                    estimator_state=state)
  assert int(state) == 4
  _, _, state = generate_with_state(tiny_rollout, alternating_reward,
                                    dynamic=False)
  assert state == ()


def test_from_config_builds_the_stage_once(tiny_rollout):
  model_config, params, tokenizer = tiny_rollout
  config = grpo_config.get_config("tiny")
  config.advantage.name, config.advantage.kwargs = "gdpo", {"eps": 1e-4}
  components = rollout_build.make_components(config)
  assert set(components) == set(rollout.STAGES)
  generate = rollout_build.from_config(config, model_config, tokenizer,
                                       components)
  states = {name: c.init() for name, c in components.items()}
  batch, m, new_states = generate(params, params, 0, jax.random.PRNGKey(0),
                                  states)
  assert new_states == states
  n = config.rollout.num_prompts * config.rollout.num_generations
  assert batch.advantages.shape == (n,) and batch.sampler_logp is not None
  assert {"reward/accuracy", "reward/format",
          "advantage/collapse_rate"} <= set(m)
  config.advantage.kwargs = {"scale": "batch"}  # GDPO takes no scale
  with pytest.raises(ValueError, match="scale"):
    rollout_build.make_components(config)


def test_make_task_reads_the_registered_task():
  config = grpo_config.get_config("tiny")
  config.data.digits, config.data.ops = 2, ("+", "*")
  task = data.make_task(config.data, seed=3)
  assert isinstance(task, arithmetic.ArithmeticTask)
  assert (task.digits, task.ops, task.seed) == (2, ("+", "*"), 3)
  assert set(data.TASKS.names()) == {"arithmetic", "gsm8k", "jsonl",
                                     "segments", "hf", "reasoning_gym"}
  config.data.task = "nope"
  with pytest.raises(ValueError, match="arithmetic, gsm8k, hf, jsonl"):
    data.make_task(config.data, seed=0)


def test_generate_fills_the_group_data_an_estimator_reads(tiny_rollout):
  """The sequence log-probs are the sampler's tempered log-probs summed over
  each completion, the entropies the trainer's teacher-forced entropies
  averaged over it (an independent pass), the answer ids the classes of the
  completions the verifier saw, the prompt index the examples' index."""
  model_config, params, _ = tiny_rollout
  seen, texts = [], []
  grpo = advantages.make("grpo")

  def estimate(state, group_data):
    seen.append(group_data)
    return grpo.estimate((), group_data)[0], state

  def recording_reward(prompts, completions, answers):
    texts.extend(completions)
    return [0.0] * len(completions)

  reads = ("sequence_logprobs", "entropies", "answer_ids", "prompt_index")
  spy = advantages.Estimator(name="spy", input="PG", output="group",
                             init=lambda: (), estimate=estimate, reads=reads)
  batch, _ = run_generate(tiny_rollout, recording_reward, dynamic=False,
                          estimator=spy, temperature=0.8)
  got = seen[0]
  t = batch.sampler_logp.shape[1]
  mask = np.asarray(batch.input_mask)[:, -t:]
  testing.assert_close(
      got.sequence_logprobs.reshape(-1),
      (np.asarray(batch.sampler_logp) * mask).sum(-1), atol=1e-6, rtol=1e-6)
  _, entropy = batch_lib.policy_logprobs(
      params, model_config, batch.tokens, batch.input_mask,
      batch.tokens.shape[1] - t, temperature=batch.temperature)
  expected = (np.asarray(entropy) * mask).sum(-1) / np.maximum(
      mask.sum(-1), 1)
  testing.assert_close(got.entropies.reshape(-1), expected, atol=1e-4,
                       rtol=1e-4)
  assert got.answer_ids.shape == (2, 2) and got.answer_ids.dtype == jnp.int32
  np.testing.assert_array_equal(
      got.answer_ids, [verifiers.answer_classes(texts[:2]),
                       verifiers.answer_classes(texts[2:])])
  assert got.prompt_index.shape == (2,)
  # An estimator that reads none of them gets no answer ids (no parsing).
  seen.clear()
  plain = spy._replace(reads=())
  run_generate(tiny_rollout, recording_reward, dynamic=False, estimator=plain)
  assert seen[0].answer_ids is None


def test_optional_round_fields_come_from_what_a_stage_reads():
  """The round computes a registered optional field only when a stage
  reads one of the names it fills, and each field once."""
  segments = rollout_fields.ROUND_FIELDS["segment_rewards"]
  assert rollout_fields.round_fields(
      ("rewards", "segment_rewards", "segment_ids", "lengths")) == [segments]
  assert rollout_fields.round_fields(("rewards", "lengths", "valid")) == []
  greedy, = rollout_fields.round_fields(("greedy_rewards",))
  assert greedy.greedy_row and not segments.greedy_row
  assert len(rollout_fields.round_fields(
      ("answer_ids", "greedy_rewards", "segment_valid"))) == 3

