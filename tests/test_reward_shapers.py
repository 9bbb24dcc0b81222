"""Reward shapers (VARIANTS.md section 5): each against hand-derived values
(VARIANTS' vectors and more), its edge cases, the shape stage (reads,
failures, state updates, prompt instructions), config checks naming the
field, and HAPO's per-prompt history through a checkpoint and a resume."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax.runtime import checkpoint
from grpo_jax import data
from grpo_jax import rewards
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.rewards import length_shapers
from grpo_jax.rewards import rubric
from grpo_jax.rewards import shaping
from grpo_jax.rewards import signal_shapers

from configs import consteer as consteer_config
from configs import grpo_lead as grpo_lead_config
from configs import hapo_length as hapo_config
from configs import lcpo as lcpo_config
from configs import length_budget as budget_config
from configs import pow3r as pow3r_config


def close(actual, expected, tol=1e-6):
  np.testing.assert_allclose(np.asarray(actual, np.float64),
                             np.asarray(expected, np.float64), atol=tol,
                             rtol=0)


# ---------------------------------------------------------------- LCPO


@pytest.mark.parametrize("mode,expected", [
    ("exact", [1.0, 0.8, -0.1, 0.8]),
    ("max", [0.5, 0.0, 0.0, 1.0]),
])
def test_lcpo_gives_variants_vectors(mode, expected):
  """n* = 1000; (n, correct) = (1000, 1), (1600, 1), (700, 0), (400, 1):
  exact 1 - |n - n*| / 3000; max 1[c] clip(0.5 + (n* - n) / 1000, 0, 1)."""
  shaper = rewards.make_shaper("lcpo", mode=mode, target_range=(1000, 1000))
  correct = np.asarray([1.0, 1.0, 0.0, 1.0])
  column = shaper(np.asarray([1000, 1600, 700, 400]), correct=correct,
                  prompt_index=np.arange(4))
  close(correct + column, expected)


def test_lcpo_alpha_and_width_scale_by_hand():
  # n* = 10: exact alpha 0.05, n = 4, 13 -> -0.3, -0.15; max width 5:
  # 0.5 + (10 - 4) / 10 = 1.1 -> 1 (column 0), 0.5 + (10 - 13)/10 = 0.2.
  lengths, correct = np.asarray([4, 13]), np.asarray([1.0, 1.0])
  exact = rewards.lcpo(lengths, correct=correct, prompt_index=[0, 1],
                       target_range=(10, 10), alpha=0.05)
  close(exact, [-0.3, -0.15])
  at_most = rewards.lcpo(lengths, correct=correct, prompt_index=[0, 1],
                         mode="max", target_range=(10, 10), width=5.0)
  close(at_most, [0.0, 0.2 - 1.0])
  # Max mode never pays a wrong answer, whatever its length.
  close(rewards.lcpo([4], correct=[0.0], prompt_index=[0], mode="max",
                     target_range=(10, 10)), [0.0])


def test_lcpo_targets_are_stable_per_prompt_and_stated_in_the_prompt():
  targets = length_shapers.lcpo_target(np.arange(200), target_range=(8, 32))
  assert targets.min() >= 8 and targets.max() <= 32
  assert len(set(targets.tolist())) > 15  # spread over the range
  again = length_shapers.lcpo_target(np.arange(200), target_range=(8, 32))
  np.testing.assert_array_equal(targets, again)
  shaper = rewards.make_shaper("lcpo", target_range=(8, 32))
  assert shaper.instruction(7) == f"Think for {targets[7]} tokens."
  at_most = rewards.make_shaper("lcpo", mode="max", target_range=(8, 32))
  assert at_most.instruction(7) == f"Think for maximum {targets[7]} tokens."
  # The column measures against the same target the prompt states.
  column = shaper(np.asarray([targets[7]]), correct=[1.0], prompt_index=[7])
  close(column, [0.0])
  examples = [data.Example("What is 1 + 2?", "3", 7)]
  stage = rewards.make_shape_stage({"lcpo": dict(weight=1.0,
                                                 target_range=(8, 32))})
  out = shaping.with_instructions(examples, stage.shapers)
  assert out[0].question == (f"What is 1 + 2? Think for {targets[7]} "
                             "tokens.")
  assert out[0].index == 7 and out[0].answer == "3"


# ---------------------------------------------------------- GRPO-LEAD


def test_grpo_lead_gives_variants_vector():
  """correct [1,1,0,0], L [100,200,150,50]: over the correct pair mean 150,
  std 70.7107 (ddof 1), z = -+0.707107, R = exp(-+0.05 z)."""
  column = rewards.grpo_lead(np.asarray([100, 200, 150, 50]),
                             correct=[1.0, 1.0, 0.0, 0.0],
                             formatted=[1.0, 1.0, 1.0, 1.0], group_size=4)
  reward = column + np.asarray([1.0, 1.0, 0.0, 0.0])
  close(reward, [1.035988, 0.965262, -1.0, -1.0])
  close(reward[:2], [math.exp(0.05 * 50 / math.sqrt(5000)),
                     math.exp(-0.05 * 50 / math.sqrt(5000))])


def test_grpo_lead_edge_cases_by_hand():
  # Group 1: one correct member (std = 1, z = 0: R = 1, column 0), a
  # format failure (0) and a formatted error (-1). Group 2: three correct
  # of lengths 2, 4, 9: mean 5, std sqrt(13), alpha 0.5.
  lengths = np.asarray([7, 3, 5, 2, 4, 9])
  correct = np.asarray([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
  formatted = np.asarray([1.0, 0.0, 1.0, 1.0, 1.0, 1.0])
  column = rewards.grpo_lead(lengths, correct=correct, formatted=formatted,
                             group_size=3, alpha=0.5)
  sd = math.sqrt(((2 - 5)**2 + (4 - 5)**2 + (9 - 5)**2) / 2)
  z = [(2 - 5) / sd, (4 - 5) / sd, (9 - 5) / sd]
  close(column, [0.0, 0.0, -1.0] + [math.exp(-0.5 * x) - 1 for x in z],
        tol=1e-5)
  # Groups whose three shortest completions average below the switch keep
  # R = 1 for every correct answer.
  off = rewards.grpo_lead(lengths, correct=correct, formatted=formatted,
                          group_size=3, alpha=0.5, min_len_to_shape=6)
  close(off, [0.0, 0.0, -1.0, 0.0, 0.0, 0.0])


def test_lead_reweight_gives_variants_vector():
  """w(x) = 0.4 + 1.1 / (1 + e^{10 (x - 0.75)}); with rho = 0.5 every
  advantage is scaled by w(0.5) = 1.416556."""
  close(length_shapers.lead_weight([0.25, 0.75, 1.0]),
        [1.492638, 0.95, 0.483444])
  reward = np.asarray([[1.035988, 0.965262, -1.0, -1.0]])
  mean, sd = reward.mean(), reward.std(ddof=1)
  grpo = (reward - mean) / (sd + 1e-6)
  close(rewards.lead_reweight(grpo, reward),
        [[1.269744, 1.183034, -1.226389, -1.226389]], tol=2e-6)
  # rho = 0.25: A > 0 scaled by w(0.25), A < 0 by w(0.75).
  reward = np.asarray([[1.0, -1.0, -1.0, -1.0]])
  adv = np.asarray([[1.5, -0.5, -0.5, -0.5]])
  close(rewards.lead_reweight(adv, reward),
        [[1.5 * 1.492638, -0.5 * 0.95, -0.5 * 0.95, -0.5 * 0.95]])


# ---------------------------------------------------- HAPO (history)


def hapo_state(history, capacity=4):
  state = length_shapers.hapo_init(capacity=capacity)
  return state._replace(history=state.history.at[0].set(history))


def test_hapo_gives_variants_vector_and_update():
  """h = 100: (50,1) 1 + cos(pi/4); (100,1) 1 + 0; (180,1) 1 - 0.7
  (cos(0.9 pi) = -0.951 clipped); (50,0) min(0, 0.707) = 0; (150,0)
  cos(0.75 pi); (250,0) -1 (n >= 2h). New h = 50."""
  lengths = np.asarray([50, 100, 180, 50, 150, 250])
  correct = np.asarray([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
  state = hapo_state(100.0)
  column = rewards.hapo_length(lengths, correct=correct,
                               prompt_index=np.zeros(6, int), state=state)
  close(correct + column,
        [1.707107, 1.0, 0.3, 0.0, -0.707107, -1.0])
  new = length_shapers.hapo_update(state, lengths, correct=correct,
                                   prompt_index=np.zeros(6, int))
  close(new.history, [50.0, 0.0, 0.0, 0.0])
  close(new.count, [3.0, 0.0, 0.0, 0.0])


def test_hapo_without_history_or_slot_gives_zero_and_update_is_order_free():
  state = length_shapers.hapo_init(capacity=3)
  # No history yet (slot 0), an index outside the table (5), no id (-1).
  column = rewards.hapo_length(np.asarray([3, 9, 4]), correct=[1.0, 0.0, 1.0],
                               prompt_index=[0, 5, -1], state=state)
  close(column, [0.0, 0.0, 0.0])
  lengths = np.asarray([7, 3, 5, 2, 6, 4])
  correct = np.asarray([1.0, 0.0, 1.0, 1.0, 1.0, 1.0])
  index = np.asarray([0, 0, 0, 2, 2, 7])
  new = length_shapers.hapo_update(state, lengths, correct=correct,
                                   prompt_index=index)
  # Slot 0: correct 7, 5 -> 5 (the wrong 3 does not count); slot 2: 2;
  # index 7 has no slot.
  close(new.history, [5.0, 0.0, 2.0])
  close(new.count, [2.0, 0.0, 2.0])
  order = np.asarray([5, 3, 1, 0, 4, 2])
  shuffled = length_shapers.hapo_update(state, lengths[order],
                                        correct=correct[order],
                                        prompt_index=index[order])
  close(shuffled.history, new.history, tol=0)
  # A longer correct answer never raises the minimum.
  later = length_shapers.hapo_update(new, np.asarray([9]), correct=[1.0],
                                     prompt_index=[0])
  close(later.history, [5.0, 0.0, 2.0])


def test_hapo_mean_mode_tracks_the_mean_correct_length():
  state = length_shapers.HAPOState(
      history=jnp.asarray([100.0, 0.0]), count=jnp.asarray([2.0, 0.0]))
  new = length_shapers.hapo_update(
      state, np.asarray([50, 80, 30, 10]), correct=[1.0, 1.0, 0.0, 1.0],
      prompt_index=[0, 0, 0, 1], mode="mean")
  # Slot 0: (100 * 2 + 50 + 80) / 4 = 82.5; slot 1: 10.
  close(new.history, [82.5, 10.0])
  close(new.count, [4.0, 1.0])


def test_hapo_state_round_trips_a_checkpoint_and_refuses_another_capacity(
    tmp_path):
  shaper = rewards.make_shaper("hapo_length", capacity=4)
  warm = shaper.update(shaper.init(), np.asarray([5, 3]), correct=[1.0, 1.0],
                       prompt_index=[1, 3])
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(1, {"shape": {"hapo_length": warm}})
  restored, _ = ckpt.restore({"shape": {"hapo_length": shaper.init()}})
  assert isinstance(restored["shape"]["hapo_length"],
                    length_shapers.HAPOState)
  testing.assert_close(restored["shape"]["hapo_length"], warm, rtol=0,
                       atol=0)
  other = rewards.make_shaper("hapo_length", capacity=6)
  with pytest.raises(ValueError, match=r"\(4,\).*\(6,\)"):
    ckpt.restore_newest({"shape": {"hapo_length": other.init()}})
  ckpt.close()


# ------------------------------------------------ curriculum budget


def test_length_budget_gives_variants_vectors():
  """R = 1.0 1[c] + 0.5 clip(1 - n / B_t, 0, 1) + 0.1 1[format],
  B_t = 256 + 768 exp(-t / 100)."""
  for (t, n, c, f), (budget, reward) in [
      ((0, 512, 1, 1), (1024.0, 1.35)),
      ((100, 512, 1, 1), (538.531411, 1.124633)),
      ((1000, 512, 1, 0), (256.034867, 1.0))]:
    close(length_shapers.length_budget_at(t), budget)
    column = rewards.length_budget(np.asarray([n]), step=t)
    close(1.0 * c + 0.5 * column + 0.1 * f, [reward])


def test_length_budget_schedules_by_hand():
  linear = dict(budget_start=100.0, budget_final=20.0, decay="linear",
                decay_steps=40)
  cosine = dict(linear, decay="cosine")
  # linear: t = 10 -> 20 + 80 * 0.75 = 80; t = 50 -> 20 (floored).
  close(length_shapers.length_budget_at(10, **linear), 80.0)
  close(length_shapers.length_budget_at(50, **linear), 20.0)
  # cosine: t = 20 -> d = (1 + cos(pi / 2)) / 2 = 0.5 -> 60; t = 40 -> 20.
  close(length_shapers.length_budget_at(20, **cosine), 60.0)
  close(length_shapers.length_budget_at(40, **cosine), 20.0)
  # n = 30 against B = 60 -> 0.5; n = 90 -> 0 (clipped); n = 0 -> 1.
  close(rewards.length_budget(np.asarray([30, 90, 0]), step=20, **cosine),
        [0.5, 0.0, 1.0])


# ------------------------------------------------------ ConSteer-RL


def test_consteer_gives_variants_vector():
  """logp rows [-.1,-.2], [-1,-.5], [-.05,-.05]; c = exp(mean logp);
  R' = R + 0.5 (c if correct else -c)."""
  logp = np.asarray([[-0.1, -0.2], [-1.0, -0.5], [-0.05, -0.05]])
  correct = np.asarray([1.0, 0.0, 0.0])
  close(signal_shapers.confidence(logp, np.ones_like(logp)),
        [0.860708, 0.472367, 0.951229])
  column = rewards.consteer(np.asarray([2, 2, 2]), correct=correct,
                            sampler_logp=logp, mask=np.ones_like(logp))
  close(correct + column, [1.430354, -0.236183, -0.475615])


def test_consteer_mean_prob_padding_and_empty_rows():
  # Row 0: tokens -0.1, -0.2 then padding (-inf, ignored); row 1: empty.
  logp = np.asarray([[-0.1, -0.2, -np.inf], [-np.inf, -np.inf, -np.inf]])
  mask = np.asarray([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
  c = (math.exp(-0.1) + math.exp(-0.2)) / 2
  column = rewards.consteer(np.asarray([2, 0]), correct=[0.0, 1.0],
                            sampler_logp=logp, mask=mask, lam=1.0,
                            agg="mean_prob")
  close(column, [-c, 0.0])


# --------------------------------------------------------------- POW3R


def test_pow3r_gives_variants_vector():
  """s rows [1,1,0],[1,0,0],[1,1,0],[1,0,1], h [.5,.3,.2], categories
  [0,1,1]: sigma [0, .5, .433013], w [.5, .315841, .184159]."""
  s = np.asarray([[1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 0, 1]], np.float64)
  h = np.asarray([0.5, 0.3, 0.2])
  w = signal_shapers.pow3r_weights(s[None], h, [0, 1, 1])
  close(w, [[0.5, 0.315841, 0.184159]])
  # Independently: category 1 holds 0.5, split by h e^{sigma / 0.5}.
  e = np.asarray([0.3 * math.exp(0.5 / 0.5),
                  0.2 * math.exp(math.sqrt(3) / 4 / 0.5)])
  close(w[0, 1:], 0.5 * e / e.sum())
  column = rewards.pow3r(np.zeros(4, int), verified=s, verifier_weights=h,
                         group_size=4, categories=(0, 1, 1))
  static = s @ h
  close(static, [0.8, 0.5, 0.8, 0.7])
  close(static + column, [0.815841, 0.5, 0.815841, 0.684159])


def test_pow3r_is_the_static_rubric_without_contrast_or_at_large_temp():
  s = np.asarray([[1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 0, 1]], np.float64)
  h = np.asarray([0.5, 0.3, 0.2])
  # One criterion per category: each keeps its own mass.
  close(rewards.pow3r(np.zeros(4, int), verified=s, verifier_weights=h,
                      group_size=4, categories=(0, 1, 2)), np.zeros(4))
  close(rewards.pow3r(np.zeros(4, int), verified=s, verifier_weights=h,
                      group_size=4, categories=(0, 1, 1), temp=1e9),
        np.zeros(4))
  # Two groups: the second has no contrast at all.
  flat = np.concatenate([s, np.ones((4, 3))])
  column = rewards.pow3r(np.zeros(8, int), verified=flat, verifier_weights=h,
                         group_size=4, categories=(0, 1, 1))
  close(column[4:], np.zeros(4))
  # A tiny temperature puts all of category 1 on its most contrasted
  # criterion, without overflow.
  w = signal_shapers.pow3r_weights(s[None], h, [0, 1, 1], temp=1e-4)
  close(w, [[0.5, 0.5, 0.0]])


def test_rubric_criteria_by_hand():
  completions = ["3 + 4 = 7, so \\boxed{7}", "\\boxed{7} or \\boxed{8}",
                 "the answer " * 20 + "\\boxed{7}", "7"]
  n = len(completions)
  args = ([""] * n, completions, ["7"] * n)
  assert rubric.boxed_once(*args) == [1.0, 0.0, 1.0, 0.0]
  assert rubric.shows_work(*args) == [1.0, 0.0, 0.0, 0.0]
  assert rubric.concise(*args) == [1.0, 1.0, 0.0, 1.0]


# ---------------------------------------------------------- the stage


def round_data(**overrides):
  fields = dict(
      lengths=np.asarray([3, 5, 2, 8]),
      verified=np.asarray([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]]),
      verifier_names=("accuracy", "format"),
      verifier_weights=np.asarray([1.0, 0.0]), group_size=2, step=0,
      prompt_index=np.asarray([0, 0, 1, 1]),
      sampler_logp=np.full((4, 8), -0.5), mask=np.ones((4, 8)))
  fields.update(overrides)
  return shaping.RoundData(**fields)


def test_the_stage_passes_each_shaper_what_it_reads():
  stage = rewards.make_shape_stage({
      "grpo_lead": dict(weight=1.0),
      "length_budget": dict(weight=0.5, budget_start=10.0, budget_final=2.0,
                            tau=5.0),
      "hapo_length": dict(weight=1.0, capacity=2)})
  states = stage.init()
  data_ = round_data(step=5)
  columns, failed = shaping.shape_columns(stage.shapers, states, data_)
  assert columns.shape == (4, 3) and failed.tolist() == [0, 0, 0]
  # grpo_lead: one correct per group (column 0), the wrong formatted row
  # -1, the wrong unformatted row 0.
  close(columns[:, 0], [0.0, -1.0, 0.0, 0.0])
  budget = 2.0 + 8.0 * math.exp(-1.0)
  close(columns[:, 1], np.clip(1 - np.asarray([3, 5, 2, 8]) / budget, 0, 1))
  close(columns[:, 2], np.zeros(4))  # no history yet
  states = shaping.update_states(stage.shapers, states, [data_])
  # Correct rows: prompt 0 length 3, prompt 1 length 2.
  close(states["hapo_length"].history, [3.0, 2.0])
  assert states["grpo_lead"] == () and states["length_budget"] == ()
  columns, _ = shaping.shape_columns(stage.shapers, states, data_)
  # Now prompt 0's h = 3: the correct 3 -> cos(pi / 2) = 0, the wrong 5 ->
  # min(0, cos(5 pi / 6)); prompt 1's h = 2: the correct 2 -> 0, wrong 8 -1.
  close(columns[:, 2], [0.0, math.cos(5 * math.pi / 6), 0.0, -1.0])


def test_a_failing_shaper_costs_its_column_not_the_run():
  def broken(lengths):
    raise RuntimeError("boom")

  def partly(lengths):
    return np.where(np.asarray(lengths) > 4, np.nan, 1.0)
  columns, failed = shaping.shape_columns(
      {"broken": (broken, 1.0), "partly": (partly, 1.0)}, {}, round_data())
  close(columns, [[0.0, 1.0], [0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
  assert failed.tolist() == [4, 2]


# ------------------------------------------------------------- configs


CONFIGS = {"lcpo": lcpo_config, "grpo_lead": grpo_lead_config,
           "hapo_length": hapo_config, "length_budget": budget_config,
           "consteer": consteer_config, "pow3r": pow3r_config}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_configs_validate_at_quickstart_scale_and_tiny(name):
  for arg in (None, "tiny"):
    config = CONFIGS[name].get_config(arg)
    train.validate(config)
    assert name in config.rewards.shapers
  full = CONFIGS[name].get_config()
  assert full.rollout.num_prompts == 2 and full.rollout.max_new_tokens == 40


@pytest.mark.parametrize("name,change,match", [
    ("lcpo", lambda c: c.rewards.shapers.lcpo.update(mode="min"),
     r"rewards\.shapers\.lcpo.*mode='min'"),
    ("lcpo", lambda c: c.rewards.shapers.lcpo.update(target_range=(8, 64)),
     r"rewards\.shapers\.lcpo\.target_range.*max_new_tokens=40"),
    ("lcpo", lambda c: c.rewards.shapers.lcpo.update(alpha=-1.0),
     r"rewards\.shapers\.lcpo.*alpha"),
    ("grpo_lead", lambda c: c.rewards.update(functions=("accuracy",),
                                             weights=(1.0,)),
     r"rewards\.functions.*'formatted'.*'format'"),
    ("grpo_lead", lambda c: c.rewards.shapers.grpo_lead.update(alpha=-0.1),
     r"rewards\.shapers\.grpo_lead.*alpha"),
    ("hapo_length",
     lambda c: c.rewards.shapers.hapo_length.update(capacity=50),
     r"rewards\.shapers\.hapo_length\.capacity.*100 problems"),
    ("hapo_length",
     lambda c: c.rewards.shapers.hapo_length.update(mode="max"),
     r"rewards\.shapers\.hapo_length.*mode='max'"),
    ("hapo_length", lambda c: c.rewards.update(functions=("format",)),
     r"rewards\.functions.*'correct'.*'accuracy'"),
    ("length_budget",
     lambda c: c.rewards.shapers.length_budget.update(budget_final=80.0),
     r"rewards\.shapers\.length_budget.*budget_final"),
    ("length_budget",
     lambda c: c.rewards.shapers.length_budget.update(decay="step"),
     r"rewards\.shapers\.length_budget.*decay='step'"),
    ("consteer", lambda c: c.rewards.shapers.consteer.update(lam=-0.5),
     r"rewards\.shapers\.consteer.*lam"),
    ("consteer", lambda c: c.rewards.shapers.consteer.update(agg="max"),
     r"rewards\.shapers\.consteer.*agg='max'"),
    ("pow3r", lambda c: c.rewards.update(weights=(0.6, 0.1, 0.1, 0.1, 0.3)),
     r"rewards\.weights.*sum to 1"),
    ("pow3r", lambda c: c.rewards.shapers.pow3r.update(categories=(0, 1)),
     r"rewards\.shapers\.pow3r\.categories.*2 categories for 5"),
    ("pow3r", lambda c: c.rewards.shapers.pow3r.update(temp=0.0),
     r"rewards\.shapers\.pow3r.*temp"),
    ("consteer", lambda c: c.rewards.shapers.consteer.update(weights=1.0),
     r"rewards\.shapers\.consteer.*takes no option 'weights'"),
])
def test_bad_options_fail_at_validation_naming_the_field(name, change,
                                                         match):
  config = CONFIGS[name].get_config()
  change(config)
  with pytest.raises(ValueError, match=match):
    train.validate(config)


def test_a_shaper_without_weight_is_named():
  config = consteer_config.get_config()
  del config.rewards.shapers.consteer["weight"]
  with pytest.raises(ValueError, match=r"rewards\.shapers\.consteer.*weight"):
    train.validate(config)


# -------------------------------------------------- a real resumed run


def _with_coin_verifiers(run, history: float):
  """`run` scoring by coin verifiers (the tiny model earns nothing) in this
  process, its history seeded at `history` tokens for every problem."""
  pipeline = testing.with_verifiers(run.rollout_fn.keywords["pipeline"],
                                    testing.coin)
  table = run.state.states["shape"]["hapo_length"]
  seeded = table._replace(history=jnp.full_like(table.history, history))
  state = run.state._replace(states=dict(
      run.state.states, shape={"hapo_length": seeded}))
  return testing.with_pipeline(run, pipeline)._replace(state=state)


def test_hapo_history_resumes_exactly(tmp_path):
  """Crash after step 2's metrics, resume from checkpoint 2: the history
  table and every metric equal an uninterrupted run's, bit for bit."""
  config = testing.short_run_config(hapo_config.get_config("tiny"))
  config.rollout.num_generations = 4
  run = _with_coin_verifiers(train.build(config), history=5.0)
  straight, records = testing.check_resume_is_exact(config, str(tmp_path),
                                                    run=run)
  table = straight.states["shape"]["hapo_length"]
  assert float(table.count.sum()) > 0  # correct rows were folded in
  assert any(r["shaping/hapo_length/changed"] > 0 for r in records)
