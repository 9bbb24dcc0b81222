"""The rollout-level replay buffer wired into the step (VARIANTS.md 4.6):
the group strategy ``replay`` (grpo_jax/strategies/row_replay.py), its
step's stages (grpo_jax/rollout/replay.py), the config checks, a `:tiny` step
with the mechanism acting, and an exact resume. The buffer's pure parts are
tested in tests/test_buffer.py; expected values here are hand-derived."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import replay as replay_config
from grpo_jax import objectives
from grpo_jax import rollout
from grpo_jax import strategies
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.train import update as update_lib
from grpo_jax.strategies import buffer as buffer_lib
from grpo_jax.strategies import row_replay

T, LP = 3, 4
LAYOUT = strategies.GroupLayout(num_generations=2, max_new_tokens=T,
                                prompt_len=LP, weights=(1.0, 0.1))


def strategy(**options):
  return strategies.make_group_strategy("replay", layout=LAYOUT, **options)


def variants_buffer():
  """VARIANTS.md 4.6's vector: |A| = [.5, 0, 1.5, 1], steps [10, 9, 5, 8]
  (signs mixed: only |A| counts); row j's tokens are all 100 + j."""
  state = strategy(capacity=4, rows=2).init()
  rows = buffer_lib.RolloutBuffer(
      prompt_tokens=np.array([[7, 8], [7, 9], [6, 6], [5, 4]], np.int32),
      prompt_mask=np.ones((4, 2), np.float32),
      tokens=np.repeat(100 + np.arange(4, dtype=np.int32)[:, None], T, 1),
      mask=np.ones((4, T), np.float32),
      behaviour_logp=np.full((4, T), -1.0, np.float32),
      advantages=np.array([0.5, 0.0, -1.5, -1.0], np.float32),
      rewards=np.array([1.0, 0.5, 0.0, 0.0], np.float32),
      prompt_index=np.array([3, 3, 1, 2], np.int32),
      step=np.array([10, 9, 5, 8], np.int32), valid=np.ones(4, bool))
  return row_replay.push_rows(state, rows, jnp.ones(4, bool))


class _Round:
  """The one field the strategy's draw reads from a round."""
  prompt_ids = [[1]]


def test_variants_vector_through_the_wired_draw():
  """now = 12, tau_max = 4: slot 2 (age 7) is evicted; the first draw is
  slot 0 with 1/3 and slot 3 with 2/3; A = 0 (slot 1) is never drawn."""
  buf = variants_buffer()
  selected, kept = strategy(capacity=4, rows=2, tau_max=4).apply(
      buf, lambda r: _Round(), 1, step=12, key=jax.random.PRNGKey(0))
  np.testing.assert_array_equal(np.asarray(kept.valid),
                                [True, True, False, True])
  rep = selected.replay
  np.testing.assert_array_equal(rep.drawn, [True, True])
  # Both rows of positive weight, in some order, records intact.
  assert sorted(np.asarray(rep.records.tokens)[:, 0].tolist()) == [100, 103]
  assert sorted(np.asarray(rep.records.advantages).tolist()) == [-1.0, 0.5]
  m = selected.measurements
  assert m["replay/rows_drawn"] == 2.0 and m["replay/evicted"] == 1.0
  assert m["replay/mean_age"] == ((12 - 10) + (12 - 8)) / 2
  # Three rows asked: the third slot is not drawn (A = 0 and evicted).
  selected, _ = strategy(capacity=4, rows=3, tau_max=4).apply(
      buf, lambda r: _Round(), 1, step=12, key=jax.random.PRNGKey(0))
  np.testing.assert_array_equal(selected.replay.drawn, [True, True, False])
  # The first draw's frequency over many keys: [1/3, 0, 0, 2/3].
  keys = jax.random.split(jax.random.PRNGKey(1), 6000)
  first = jax.vmap(lambda k: row_replay.draw_rows(
      buf, k, 12, rows=1, tau_max=4)[1][0])(keys)
  freq = np.bincount(np.asarray(first), minlength=4) / 6000
  np.testing.assert_allclose(freq, [1 / 3, 0, 0, 2 / 3], atol=0.02)
  # a = 2: |A|^2 = [.25, 0, -, 1] -> [1/5, 0, 0, 4/5].
  first = jax.vmap(lambda k: row_replay.draw_rows(
      buf, k, 12, rows=1, tau_max=4, power=2.0)[1][0])(keys)
  freq = np.bincount(np.asarray(first), minlength=4) / 6000
  np.testing.assert_allclose(freq, [0.2, 0, 0, 0.8], atol=0.02)


def test_draws_are_fixed_by_the_key():
  buf = variants_buffer()
  draw = lambda key: row_replay.draw_rows(buf, key, 10, rows=2,
                                          tau_max=10)[1].tolist()
  assert draw(jax.random.PRNGKey(3)) == draw(jax.random.PRNGKey(3))
  orders = {tuple(draw(jax.random.PRNGKey(i))) for i in range(40)}
  assert len(orders) > 1  # the key decides the order


def test_round_rows_are_the_rounds_rows_prompt_major():
  """P = 2 groups of G = 2: row p * G + g has prompt p (left-padded to the
  buffer's width), its member's tokens, log-probs and advantage, and the
  weighted total reward; only the kept rows enter the buffer."""
  p, g = 2, 2
  tokens = np.arange(p * g * T, dtype=np.int32).reshape(p, g, T)
  rewards = np.zeros((p, g, 2), np.float32)
  rewards[0, 1] = [1.0, 1.0]  # total 1.1 at weights (1, .1)
  rnd = rollout.Round(
      prompt_ids=[[5, 6], [9]], tokens=tokens,
      mask=np.ones((p, g, T), np.float32), lengths=np.full((p, g), T),
      truncated=np.zeros((p, g), bool),
      sampler_logp=-tokens.astype(np.float32) / 10, rewards=rewards,
      columns=("accuracy", "format"), errors=np.zeros(1),
      entropies=np.ones((p, g), np.float32),
      prompt_index=np.array([4, 7], np.int32))
  adv = np.array([[-0.7, 0.7], [0.0, 0.0]], np.float32)
  rows = row_replay.round_rows(rnd, adv, LAYOUT.weights, 5, LP)
  np.testing.assert_array_equal(rows.prompt_tokens,
                                [[0, 0, 5, 6]] * 2 + [[0, 0, 0, 9]] * 2)
  np.testing.assert_array_equal(rows.prompt_index, [4, 4, 7, 7])
  np.testing.assert_allclose(rows.rewards, [0.0, 1.1, 0.0, 0.0], rtol=1e-6)
  np.testing.assert_array_equal(rows.advantages, adv.reshape(-1))
  np.testing.assert_array_equal(rows.tokens[3], tokens[1, 1])
  np.testing.assert_array_equal(rows.step, [5] * 4)
  buf = row_replay.push_rows(strategy(capacity=3, rows=1).init(), rows,
                             jnp.asarray(adv.reshape(-1) != 0))
  np.testing.assert_array_equal(buf.valid, [True, True, False])
  np.testing.assert_array_equal(buf.tokens[:2], tokens[0])


def test_config_errors_name_the_field_and_the_fix():
  config = replay_config.get_config("tiny")
  train.validate(config)
  config.objective.name = "ppo_clip"
  config.objective.kwargs = dict(clip_low=0.2, clip_high=0.2)
  with pytest.raises(ValueError, match=r"config\.objective\.name: 'ppo_clip'"
                     r".*decoupled_ppo"):
    train.validate(config)
  config = replay_config.get_config("tiny")
  config.groups.kwargs.rows = 3  # 8 + 3 rows in 4 minibatches
  with pytest.raises(ValueError, match=r"config\.train\.num_minibatches: "
                     r"4 does not divide the N=11 .*3 replayed rows"):
    train.validate(config)
  config = replay_config.get_config("tiny")
  config.rollout.record_topk = 4
  with pytest.raises(ValueError, match=r"config\.rollout\.record_topk"):
    train.validate(config)


@pytest.mark.parametrize("option,value,match", [
    ("rows", 0, r"rows must be an integer >= 1 \(rows replayed per step\); "
     r"got 0: set an integer >= 1"),
    ("rows", 300, r"rows=300 exceeds capacity=256: a step cannot draw more "
     r"rows than the buffer holds; lower rows or raise capacity"),
    ("tau_max", -1, r"tau_max must be an integer >= 0.*got -1"),
    ("power", 0.0, r"power must be > 0.*got 0\.0: set a value > 0"),
    ("power", "1", r"power must be a real number; got '1'"),
    ("capacity", 0, r"capacity must be an integer >= 1 \(the stored rows\); "
     r"got 0"),
])
def test_option_values_fail_at_validation_naming_the_field(option, value,
                                                           match):
  """Each row-replay option out of range is a `registry.OptionError`:
  train.validate names ``config.groups.kwargs.<option>`` and the fix, and
  the strategy's own build refuses it too."""
  testing.check_group_option_error(replay_config.get_config("tiny"), "replay",
                                   option, value, match)


def test_a_buffer_of_another_capacity_is_refused_naming_the_field(tmp_path):
  testing.check_a_larger_stage_state_is_refused(
      tmp_path, replay_config.get_config("tiny"), "groups",
      strategy(capacity=4, rows=2), strategy(capacity=8, rows=2),
      field="groups.kwargs.capacity")


# ------------------------------------------------------ the `:tiny` step


def test_the_tiny_step_trains_replayed_rows_through_decoupled_ppo():
  """Scored by accuracy (`testing.ungraded`), the tiny model earns no
  reward: step 1's fresh advantages are 0. The
  buffer holds step 0's P * G = 8 rows with hand-set advantages and
  behaviour log-probs 0.3 below the sampler's (an older policy): step 1
  appends all 8 (R = 16: the other 8 slots stay empty) with their stored
  advantages, prompts and log-probs; decoupled PPO's weight pi_old / mu =
  e^0.3 acts (a gradient other than REINFORCE's)."""
  config = testing.ungraded(replay_config.get_config("tiny"))
  config.rewards.workers = 0
  run = train.build(config)
  # Rows carry their own prompts: the update's shared-prompt block is 1.
  assert train.update_group_size(config, train.make_components(config)) == 1
  p, g = config.rollout.num_prompts, config.rollout.num_generations
  n, r = p * g, config.groups.kwargs.rows
  first = testing.sample_round(run)
  stored_adv = np.array([1.5, -0.5, 1.0, -1.0, 0.25, -0.25, 2.0, -2.0],
                        np.float32).reshape(p, g)
  # Shifted on the sampled tokens only (the sampler's padding holds 0).
  seeded = first._replace(sampler_logp=(first.sampler_logp - 0.3)
                          * first.mask)
  layout = rollout.group_layout(config)
  empty = run.state.states["groups"]
  state = row_replay.push_rows(empty, row_replay.round_rows(
      seeded, stored_adv, layout.weights, 0, layout.prompt_len),
                               jnp.ones(n, bool))
  batch, m, new_states = testing.rollout_step(run, 1, groups=state)
  assert batch.tokens.shape[0] == n + r
  assert m["replay/rows_drawn"] == n and m["replay/mean_age"] == 1.0
  assert m["replay/evicted"] == 0.0
  adv = np.asarray(batch.advantages)
  np.testing.assert_array_equal(adv[:n], 0.0)  # no reward: no signal
  # The replayed rows: each a stored row (tokens, stored advantage, stored
  # log-probs), every stored row once, then 8 empty slots.
  stored_tokens = np.asarray(first.tokens).reshape(n, -1)
  stored_logp = np.asarray(seeded.sampler_logp).reshape(n, -1)
  t = batch.completion_mask.shape[1]
  tokens = np.asarray(batch.tokens)[:, -t:]
  seen = []
  for row in range(n, 2 * n):
    j = [k for k in range(n) if np.array_equal(tokens[row],
                                               stored_tokens[k])
         and adv[row] == stored_adv.reshape(-1)[k] and k not in seen][0]
    seen.append(j)
    np.testing.assert_allclose(np.asarray(batch.sampler_logp)[row],
                               stored_logp[j] * np.asarray(
                                   batch.completion_mask)[row], atol=1e-6)
    # Its own prompt: group j // G's (the rows' prompts end where the
    # completion starts).
    ids = first.prompt_ids[j // g]
    prompt = np.asarray(batch.tokens)[row, :-t]
    np.testing.assert_array_equal(prompt[len(prompt) - len(ids):], ids)
  assert sorted(seen) == list(range(n))
  np.testing.assert_array_equal(np.asarray(batch.completion_mask)[2 * n:], 0)
  np.testing.assert_array_equal(adv[2 * n:], 0.0)
  np.testing.assert_array_equal(np.asarray(batch.replayed),
                                [0.0] * n + [1.0] * r)
  # Nothing new enters (every fresh advantage is 0): the buffer is as seeded.
  np.testing.assert_array_equal(new_states["groups"].valid,
                                np.asarray(state.valid))
  assert m["replay/buffer_fill"] == n / config.groups.kwargs.capacity
  # decoupled PPO on the third minibatch (rows 12..17: 4 replayed, 2
  # empty): w = pi_old / mu = e^0.3, below the cap 2.
  part = update_lib.minibatches(batch, config.train.num_minibatches)[2]
  objective = objectives.make(config.objective.name,
                              **config.objective.kwargs)
  grads, values = testing.loss_gradient(run, objective, (), run.state.params,
                                        part)
  np.testing.assert_allclose(values["is_weight_mean"], math.exp(0.3),
                             rtol=1e-3)
  # At the first step r = 1: the gradient is e^0.3 times REINFORCE's.
  testing.assert_scaled_reinforce_gradient(run, grads, part, math.exp(0.3),
                                           aggregation="token_mean")


# ---------------------------------------------------------- exact resume


@pytest.mark.slow
def test_a_crashed_run_resumes_exactly_with_its_buffer(tmp_path):
  """Crash after step 2's metrics (before its checkpoint), resume: the
  state and every metric but timing equal a straight run's, bit for bit;
  the buffer was in use when the run crashed."""
  config = testing.short_run_config(replay_config.get_config("tiny"))
  run = testing.coin_accuracy(train.build(config))
  _, records = testing.check_resume_is_exact(config, str(tmp_path), run=run)
  # The buffer was in use: rows were replayed at steps after the first.
  assert max(rec.get("replay/rows_drawn", 0.0) for rec in records) > 0


def test_reward_shapers_reach_the_stored_rows():
  """Row replay is a stage of the one generate, which shapes rewards: a row
  pushed to the buffer keeps its total over every column, the repetition
  column included (scored by accuracy, `testing.ungraded`, the tiny model
  earns no verifier reward)."""
  config = testing.with_repetition_shaper(
      testing.ungraded(replay_config.get_config("tiny")))
  train.validate(config)  # shapers are carried with replayed rows
  run = train.build(config)
  _, m, states = testing.rollout_step(run, 0)
  buf = jax.device_get(states["groups"])
  valid = np.asarray(buf.valid, bool)
  assert valid.any()  # rows of nonzero advantage were pushed
  want = [0.5 * testing.repetition_by_hand(row[:int(n)]) for row, n in
          zip(np.asarray(buf.tokens)[valid], np.asarray(buf.mask)[valid].sum(-1))]
  np.testing.assert_allclose(np.asarray(buf.rewards)[valid], want,
                             rtol=1e-6)
  assert min(want) < 0 and m["shaping/repetition_penalty/changed"] > 0
