"""POPO wired into the step (VARIANTS.md 4.7): the group strategy ``popo``,
its state in TrainState, the config checks, a `:tiny` step with the
mechanism acting, and an exact resume. The pure parts (the draw's
probabilities, the buffer) are tested in tests/test_strategies_data.py and
tests/test_buffer.py; expected values here are hand-derived."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import popo as popo_config
from grpo_jax import objectives
from grpo_jax import rollout
from grpo_jax import strategies
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.train import update as update_lib
from grpo_jax.strategies import replay

G, T, LP = 2, 3, 4
LAYOUT = strategies.GroupLayout(num_generations=G, max_new_tokens=T,
                                prompt_len=LP, weights=(1.0, 0.1))


def make_round(accuracy, *, seed=0, step_tag=0):
  """A `rollout.Round` of P groups of G = 2 with the accuracy [P, G] given
  and format 1 everywhere; token values tagged by `step_tag`."""
  accuracy = np.asarray(accuracy, np.float32)
  p = accuracy.shape[0]
  rng = np.random.default_rng(seed)
  rewards = np.stack([accuracy, np.ones_like(accuracy)], axis=-1)
  mask = np.ones((p, G, T), np.float32)
  mask[:, 1, 2] = 0.0  # member 1 ended a token early
  return rollout.Round(
      prompt_ids=[[5 + i, 9, 11][: 2 + i % 2] for i in range(p)],
      tokens=np.full((p, G, T), 100 + step_tag, np.int32),
      mask=mask, lengths=mask.sum(-1).astype(np.int32),
      truncated=np.zeros((p, G), bool),
      sampler_logp=rng.uniform(-3, -0.1, (p, G, T)).astype(np.float32),
      rewards=rewards, columns=("accuracy", "format"),
      errors=np.zeros(1), entropies=np.ones((p, G), np.float32),
      prompt_index=np.arange(p, dtype=np.int32) + 10 * step_tag,
      token_entropies=rng.uniform(0, 2, (p, G, T)).astype(np.float32))


def strategy(**options):
  return strategies.make_group_strategy("popo", layout=LAYOUT, **options)


def stored_state(rounds_and_steps, capacity=4):
  """A PopoState holding every group of each (round, step), in order."""
  state = replay.popo_init(LAYOUT, capacity=capacity)
  for rnd, step in rounds_and_steps:
    p = len(rnd.prompt_ids)
    state = replay.popo_push(
        state, replay.round_groups(rnd, LAYOUT.weights, step, LP),
        jnp.ones(p, bool))
  return state


def test_variants_vector_through_the_wired_draw():
  """VARIANTS 4.7: ages [1, 3, 2], q = [.5, .5, .3] (reward std, ddof 1:
  a pair [0, q sqrt 2]) give first-draw probabilities [0.577435, 0.212426,
  0.210139]; the wired draw (Gumbel top-k on the stored state) matches
  them in frequency over keys."""
  q = np.array([0.5, 0.5, 0.3])
  accuracy = np.stack([np.zeros(3), q * math.sqrt(2.0)], axis=1)
  now = 10
  rnds = [(make_round(accuracy[i:i + 1], step_tag=i), now - age)
          for i, age in enumerate((1, 3, 2))]
  state = stored_state(rnds, capacity=3)
  # Total reward = accuracy + 0.1 * format: the std is the accuracy's.
  w = np.exp(-np.array([1.0, 3.0, 2.0]) / 2.0) * q
  hand = w / w.sum()
  np.testing.assert_allclose(hand, [0.577435, 0.212426, 0.210139], atol=1e-6)
  np.testing.assert_allclose(
      replay.popo_probabilities(state.groups, now), hand, atol=1e-5)
  n = 4000
  slots, replaced = jax.vmap(lambda k: replay._popo_refill(  # pylint: disable=protected-access
      state.groups, k, jnp.array([True]), now, tau_rec=2.0, quality="std"))(
          jax.random.split(jax.random.PRNGKey(0), n))
  assert bool(replaced.all())
  freq = np.bincount(np.asarray(slots[:, 0]), minlength=3) / n
  # 4 standard errors of a share near 0.5 over 4000 draws: 0.032.
  np.testing.assert_allclose(freq, hand, atol=0.032)


def test_a_zero_variance_group_is_replaced_by_a_stored_one():
  """Batch groups [signal, none, none]; the buffer holds one group (step
  3) at now = 5: the first ineffective group takes it (age 2), the second
  stays (nothing left to draw), the effective group enters the buffer at
  step 5 in the first free slot."""
  old = make_round([[1.0, 0.0]], seed=1, step_tag=7)
  state = stored_state([(old, 3)])
  rnd = make_round([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]], seed=2)
  s = strategy(capacity=4)
  selected, new = s.apply(state, lambda r: rnd, 3, step=5,
                          key=jax.random.PRNGKey(4))
  out = selected.rounds[0]
  np.testing.assert_array_equal(out.replayed, [False, True, False])
  assert out.sampled is rnd
  # Group 1 is the stored group, field by field.
  np.testing.assert_array_equal(out.tokens[1], old.tokens[0])
  np.testing.assert_array_equal(out.mask[1], old.mask[0])
  np.testing.assert_array_equal(out.sampler_logp[1], old.sampler_logp[0])
  np.testing.assert_array_equal(out.rewards[1], old.rewards[0])
  np.testing.assert_array_equal(out.token_entropies[1],
                                old.token_entropies[0])
  np.testing.assert_array_equal(out.lengths[1], [3, 2])
  assert out.prompt_ids[1] == old.prompt_ids[0] == [5, 9]
  assert out.prompt_index[1] == 70
  # entropies: each row's mean over its mask, by hand.
  e = old.token_entropies[0]
  np.testing.assert_allclose(out.entropies[1],
                             [e[0].mean(), e[1, :2].mean()], rtol=1e-6)
  # The other groups are as sampled.
  for i in (0, 2):
    np.testing.assert_array_equal(out.tokens[i], rnd.tokens[i])
    np.testing.assert_array_equal(out.sampler_logp[i], rnd.sampler_logp[i])
    assert out.prompt_ids[i] == rnd.prompt_ids[i]
  assert selected.measurements == {
      "replay/zero_variance_groups": 2 / 3,
      "replay/refilled_groups": 1 / 3,
      "replay/buffer_fill": 2 / 4,  # the stored group and group 0
      "replay/mean_age": 2.0}
  # The buffer: slot 0 as before, slot 1 group 0 of this step.
  g = new.groups
  np.testing.assert_array_equal(g.valid, [True, True, False, False])
  np.testing.assert_array_equal(g.step[:2], [3, 5])
  np.testing.assert_array_equal(g.prompt_index[:2], [70, 0])
  np.testing.assert_allclose(g.rewards[1], [1.1, 0.1], rtol=1e-6)
  np.testing.assert_array_equal(g.prompt_tokens[1], [0, 0, 5, 9])
  np.testing.assert_array_equal(g.prompt_mask[1], [0, 0, 1, 1])
  np.testing.assert_array_equal(g.behaviour_logp[1], rnd.sampler_logp[0])
  np.testing.assert_array_equal(new.columns[1], rnd.rewards[0])


def test_draws_are_without_replacement_and_fixed_by_the_key():
  """Two stored groups, two ineffective groups: both replaced, by distinct
  stored groups, for every key; the same key draws the same."""
  state = stored_state([(make_round([[1.0, 0.0], [0.0, 1.0]], step_tag=1),
                         2)])
  rnd = make_round([[0.0, 0.0], [1.0, 1.0]])
  s = strategy()
  seen = set()
  for k in range(12):
    key = jax.random.PRNGKey(k)
    a, _ = s.apply(state, lambda r: rnd, 2, step=3, key=key)
    b, _ = s.apply(state, lambda r: rnd, 2, step=3, key=key)
    ids = tuple(a.rounds[0].prompt_index)
    assert sorted(ids) == [10, 11] and ids == tuple(b.rounds[0].prompt_index)
    seen.add(ids)
  assert len(seen) == 2  # both orders occur: the key decides


def test_config_errors_name_the_field_and_the_fix():
  config = popo_config.get_config("tiny")
  train.validate(config)
  config.objective.name = "ppo_clip"
  config.objective.kwargs = dict(clip_low=0.2, clip_high=0.2)
  with pytest.raises(ValueError, match=r"config\.objective\.name: 'ppo_clip'"
                     r".*decoupled_ppo"):
    train.validate(config)
  config = popo_config.get_config("tiny")
  config.advantage.name = "spo"  # a per-prompt tracker
  config.advantage.kwargs = {}
  config.rewards.weights = (1.0,) + (0.0,) * (
      len(config.rewards.functions) - 1)  # SPO's rewards in [0, 1]
  with pytest.raises(ValueError, match=r"config\.advantage\.name: 'spo' "
                     "keeps state"):
    train.validate(config)
  config = popo_config.get_config("tiny")
  config.rollout.record_topk = 4
  with pytest.raises(ValueError, match=r"config\.rollout\.record_topk"):
    train.validate(config)


@pytest.mark.parametrize("option,value,match", [
    ("capacity", 0, r"capacity must be an integer >= 1 \(the stored "
     r"groups\); got 0: set an integer >= 1"),
    ("capacity", 8.0, r"capacity must be an integer >= 1.*got 8\.0"),
    ("tau_rec", -1.0, r"tau_rec must be > 0 \(the recency scale.*got -1\.0: "
     r"set a value > 0"),
    ("tau_rec", float("inf"), r"tau_rec must be finite; got inf"),
    ("quality", "max", r"quality='max' is unknown; choose one of std, mean"),
])
def test_option_values_fail_at_validation_naming_the_field(option, value,
                                                           match):
  """Each POPO option out of range is a `registry.OptionError`:
  train.validate names ``config.groups.kwargs.<option>`` and the fix, and
  the strategy's own build refuses it too."""
  testing.check_group_option_error(popo_config.get_config("tiny"), "popo",
                                   option, value, match)


def test_a_buffer_of_another_capacity_is_refused_naming_the_field(tmp_path):
  testing.check_a_larger_stage_state_is_refused(
      tmp_path, popo_config.get_config("tiny"), "groups", strategy(capacity=4),
      strategy(capacity=8), field="groups.kwargs.capacity")


# ------------------------------------------------------ the `:tiny` step


def _tiny_run():
  config = testing.ungraded(popo_config.get_config("tiny"))
  config.rewards.workers = 0
  config.optimizer.learning_rate = 3e-3
  return config, train.build(config)


def test_the_tiny_step_trains_replayed_groups_through_decoupled_ppo():
  """Scored by accuracy (`testing.ungraded`), the tiny model earns no
  reward: every group of step 1 is ineffective.
  The buffer holds step 0's groups with accuracy [1, 0, 0, 0] and
  behaviour log-probs 0.3 below the sampler's (an older policy): step 1
  refills both groups, their advantages are GRPO's of the stored rewards
  ([1.5, -.5, -.5, -.5] up to eps), their sampler log-probs the stored ones,
  and decoupled PPO's weight pi_old / mu = e^0.3 acts (a gradient other
  than REINFORCE's)."""
  config, run = _tiny_run()
  p, g = config.rollout.num_prompts, config.rollout.num_generations
  first = testing.sample_round(run)
  accuracy = np.zeros((p, g), np.float32)
  accuracy[:, 0] = 1.0
  seeded = first._replace(
      rewards=np.stack([accuracy, np.zeros_like(accuracy)], -1),
      sampler_logp=first.sampler_logp - 0.3)
  layout = rollout.group_layout(config)
  empty = run.state.states["groups"]
  state = replay.popo_push(
      empty, replay.round_groups(seeded, layout.weights, 0,
                                 layout.prompt_len), jnp.ones(p, bool))
  batch, m, new_states = testing.rollout_step(run, 1, groups=state)
  assert m["replay/refilled_groups"] == 1.0
  assert m["replay/zero_variance_groups"] == 1.0
  assert m["replay/mean_age"] == 1.0
  assert m["replay/buffer_fill"] == p / config.groups.kwargs.capacity
  # Both groups are step 0's (in some order), with the stored log-probs.
  sampled = np.asarray(batch.input_mask)[:, -t_of(batch):] > 0
  stored_logp = np.asarray(seeded.sampler_logp).reshape(p * g, -1)
  rows = np.asarray(batch.sampler_logp)
  blocks = [rows[i * g:(i + 1) * g] for i in range(p)]
  for block in blocks:
    assert any(np.array_equal(block, stored_logp[j * g:(j + 1) * g])
               for j in range(p))
  eps = 1e-6
  z = np.array([0.75, -0.25, -0.25, -0.25]) / (0.5 + eps)
  np.testing.assert_allclose(np.asarray(batch.advantages),
                             np.tile(z, p), rtol=1e-5)
  # The stored rows' mismatch is not counted as the sampler's numerics.
  assert m["logprob/sampler_trainer_max_abs_diff"] < 0.1
  assert sampled.any()
  # The batch marks them: on policy the update leaves them out as well.
  np.testing.assert_array_equal(np.asarray(batch.replayed), np.ones(p * g))
  # The buffer added nothing (no effective group this step).
  np.testing.assert_array_equal(new_states["groups"].groups.valid,
                                np.asarray(state.groups.valid))
  # decoupled PPO on the first minibatch: w = pi_old / mu = e^0.3 (trainer
  # and sampler agree to ~1e-5), below the cap 2.
  part = update_lib.minibatches(batch, config.train.num_minibatches)[0]
  objective = objectives.make(config.objective.name,
                              **config.objective.kwargs)
  grads, values = testing.loss_gradient(run, objective, (), run.state.params,
                                        part)
  np.testing.assert_allclose(values["is_weight_mean"], math.exp(0.3),
                             rtol=1e-3)
  _, values = testing.loss_gradient(  # on policy: no fresh row
      run, objective, (), run.state.params, part._replace(old_logp=None))
  assert values["logprob/sampler_trainer_max_abs_diff"] == 0
  # At the first step r = 1, so the only difference is the weight: the
  # gradient is e^0.3 times REINFORCE's, leaf by leaf.
  testing.assert_scaled_reinforce_gradient(run, grads, part, math.exp(0.3),
                                           aggregation="token_mean")


def t_of(batch):
  return batch.completion_mask.shape[1]


# ---------------------------------------------------------- exact resume


@pytest.mark.slow
def test_a_crashed_run_resumes_exactly_with_its_buffer(tmp_path):
  """Crash after step 2's metrics (before its checkpoint), resume: the
  state and every metric but timing equal a straight run's, bit for bit;
  the buffer was in use when the run crashed."""
  config = testing.short_run_config(popo_config.get_config("tiny"))
  # Accuracy by the coin, format 0: a third of the groups (all four
  # members wrong: (3/4)^4) have no variance.
  run = testing.coin_accuracy(train.build(config))
  _, records = testing.check_resume_is_exact(config, str(tmp_path), run=run)
  # The mechanism ran: groups stored, and refilled after step 0.
  assert records[1]["replay/buffer_fill"] > 0
  assert sum(r["replay/refilled_groups"] for r in records[1:]) > 0, records
