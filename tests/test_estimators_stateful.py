"""The stateful estimators EBPO and AVSPO (grpo_jax.advantages.stateful):
hand-derived and from-scratch float64 values, their state through a
checkpoint and a resumed run, a state of other shapes refused on restore,
and an off-policy learning test each (every estimator config's one-step
run is in tests/test_estimators_stateless.py)."""

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import pytest

from configs import avspo as avspo_config
from configs import ebpo as ebpo_config
from grpo_jax import advantages
from grpo_jax.runtime import checkpoint
from grpo_jax import groups as groups_lib
from grpo_jax import objectives
from grpo_jax.train import optim
from grpo_jax import testing
from grpo_jax.testing import learning
from grpo_jax import train
from grpo_jax.advantages import _kit
from grpo_jax.advantages import stateful

CONFIGS = {"ebpo": ebpo_config, "avspo": avspo_config}


def welford(count, mean, variance):
  """An accumulator holding `count` values of this mean and unbiased
  variance."""
  return stateful.Welford(*(jnp.float32(x) for x in (
      count, mean, variance * (count - 1))))


def run_estimator(name, batches, **options):
  """[(advantages, state)] after each (rewards, valid) batch, from init."""
  estimator = advantages.make(name, **options)
  state, out = estimator.init(), []
  for rewards, valid in batches:
    adv, state = estimator.estimate(
        state, groups_lib.from_rewards(rewards, valid=valid))
    out.append((testing.numpy(adv).astype(np.float64), state))
  return out


# ---------------------------------------------------------------- EBPO

# VARIANTS.md 1.3: mu0 = 0.4, sigma_w^2 = 0.2, tau^2 = 0.05, sigma0 = 0.5,
# G = 4, so S = 0.05 / (0.05 + 0.05) = 0.5; Var(group means) is
# tau^2 + sigma_w^2 / G = 0.1.
SPEC_STATE = stateful.EBPOState(rewards=welford(10, 0.4, 0.25),
                                group_means=welford(10, 0.3, 0.1),
                                group_variances=welford(10, 0.2, 0.0))


def test_ebpo_spec_vector_and_the_all_fail_penalty():
  rewards = np.array([[1, 0, 0, 0], [0, 0, 0, 0]], np.float32)
  out, _ = advantages.ebpo(rewards, SPEC_STATE)
  # Group 0: b = 0.5 * 0.4 + 0.5 * 0.25 = 0.325. Group 1 (all fail):
  # b = 0.2, A = -S mu0 / sigma0 = -0.4, not 0 as in GRPO.
  expected = np.array([[0.675, -0.325, -0.325, -0.325], [-0.2] * 4]) / (
      0.5 + 1e-6)
  testing.assert_close(out, expected)
  testing.assert_close(out, np.array([
      [1.349997, -0.649999, -0.649999, -0.649999], [-0.399999] * 4]),
                       atol=1e-6)
  assert float(stateful.ebpo_shrinkage(SPEC_STATE, 4)) == pytest.approx(0.5)


def test_ebpo_scales():
  rewards = np.array([[1, 0, 0, 0], [0, 0, 0, 0]], np.float32)
  centred = np.array([[0.675, -0.325, -0.325, -0.325], [-0.2] * 4])
  none, _ = advantages.ebpo(rewards, SPEC_STATE, scale="none")
  testing.assert_close(none, centred)
  # Group std: group 0's unbiased std is 0.5; group 1's is 0, so / 1.
  group, _ = advantages.ebpo(rewards, SPEC_STATE, scale="group_std")
  testing.assert_close(group, centred / (np.array([[0.5], [1.0]]) + 1e-6))
  with pytest.raises(ValueError, match="scale"):
    advantages.ebpo(rewards, SPEC_STATE, scale="batch")


def test_ebpo_first_step_is_grpo_and_constant_groups_stay_zero():
  rewards = np.array([[1, 0, 1, 1], [0.3, 0.3, 0.3, 0.3], [2, 0, 1, 5]],
                     np.float32)
  out, _ = advantages.ebpo(rewards, stateful.ebpo_init())
  np.testing.assert_array_equal(testing.numpy(out),
                                testing.numpy(advantages.grpo(rewards)))
  out, _ = advantages.ebpo(rewards, stateful.ebpo_init(), scale="none")
  np.testing.assert_array_equal(testing.numpy(out),
                                testing.numpy(advantages.dr_grpo(rewards)))


def test_ebpo_stays_grpo_while_the_rewards_seen_have_no_spread():
  """All-fail steps leave sigma0 = 0 and S = 0: no division by ~0."""
  zeros = np.zeros((2, 4), np.float32)
  rewards = np.array([[1, 0, 0, 0], [1, 1, 0, 0]], np.float32)
  (_, state), (out, _) = run_estimator(
      "ebpo", [(zeros, None), (rewards, None)])
  assert float(state.rewards.count) == 8 and float(state.rewards.m2) == 0
  testing.assert_close(out, advantages.grpo(rewards))


def test_ebpo_welford_state_over_two_batches_matches_numpy():
  """The accumulators hold numpy's mean and unbiased variance of every
  valid reward seen, of the group means and the mean within-group
  variance; filler groups (outlandish rewards) enter none of them."""
  rng = np.random.default_rng(0)
  first = rng.integers(0, 3, (3, 4)).astype(np.float32) * 0.5
  second = rng.normal(size=(3, 4)).astype(np.float32)
  second[1] = [100.0, -50.0, 7.0, 1e3]  # a filler
  valid2 = np.array([True, False, True])
  [_, (_, state)] = run_estimator("ebpo", [(first, None), (second, valid2)])
  seen = np.concatenate([first, second[valid2]]).astype(np.float64)
  testing.assert_close(state.rewards.count, np.float32(seen.size))
  testing.assert_close(state.rewards.mean, np.float32(seen.mean()))
  testing.assert_close(stateful.welford_variance(state.rewards),
                       np.float32(seen.var(ddof=1)), rtol=1e-5)
  means = seen.mean(axis=1)
  testing.assert_close(state.group_means.count, np.float32(5))
  testing.assert_close(state.group_means.mean, np.float32(means.mean()))
  testing.assert_close(stateful.welford_variance(state.group_means),
                       np.float32(means.var(ddof=1)), rtol=1e-5)
  testing.assert_close(state.group_variances.mean,
                       np.float32(seen.var(axis=1, ddof=1).mean()), rtol=1e-5)


def ebpo_reference(history, rewards, *, scale="global_std", eps=1e-6,
                   tau2_min=1e-6):
  """EBPO from scratch in float64: the prior from every valid group seen
  (a list of (rewards, valid)), then the advantages of `rewards`."""
  g = rewards.shape[1]
  seen = np.concatenate([r[v] for r, v in history] + [np.zeros((0, g))])
  seen = seen.astype(np.float64)
  mu0 = seen.mean() if seen.size else 0.0
  sigma0 = seen.std(ddof=1) if seen.size > 1 else 0.0
  within = seen.var(axis=1, ddof=1).mean() if len(seen) and g > 1 else 0.0
  var_means = seen.mean(axis=1).var(ddof=1) if len(seen) > 1 else 0.0
  noise = within / g
  tau2 = max(var_means - noise, tau2_min)
  shrink = noise / (noise + tau2)
  rewards = rewards.astype(np.float64)
  centred = rewards - (shrink * mu0
                       + (1 - shrink) * rewards.mean(axis=1, keepdims=True))
  if scale == "none":
    return centred
  if scale == "global_std" and sigma0 > 0:
    return centred / (sigma0 + eps)
  sd = rewards.std(axis=1, ddof=1, keepdims=True) if g > 1 else np.zeros(
      (len(rewards), 1))
  return centred / (np.where(sd > 0, sd, 1.0) + eps)


@pytest.mark.parametrize("scale", ["global_std", "group_std", "none"])
def test_ebpo_over_a_run_matches_the_from_scratch_reference(scale):
  """Five steps of rewards in {0, 0.1, 1, 1.1} (accuracy plus format), some
  with filler groups: each step's advantages are those of a prior computed
  from scratch over the steps before (state from before the batch)."""
  rng = np.random.default_rng(1)
  batches = []
  for step in range(5):
    rewards = (rng.integers(0, 2, (4, 4)) + 0.1 * rng.integers(0, 2, (4, 4))
               ).astype(np.float32)
    rewards[step % 4] = 0.0  # an all-fail group
    valid = np.ones(4, bool)
    if step % 2:
      valid[(step + 1) % 4] = False
    batches.append((rewards, valid))
  out = run_estimator("ebpo", batches, scale=scale)
  for step, ((rewards, valid), (adv, _)) in enumerate(zip(batches, out)):
    expected = ebpo_reference(batches[:step], rewards, scale=scale)
    testing.assert_close(adv, np.where(valid[:, None], expected, 0.0),
                         atol=2e-5, rtol=1e-4)
    if step:  # the all-fail group's penalty (S > 0 once a prior exists)
      assert (adv[step % 4] < 0).all() or not valid[step % 4]


def test_ebpo_group_of_one():
  """G = 1: 0 on the empty state (S = 0), S (R - mu0) / sigma0 after a
  prior from groups of four."""
  ones = np.array([[1.0], [0.0]], np.float32)
  out, state = advantages.ebpo(ones, stateful.ebpo_init())
  np.testing.assert_array_equal(testing.numpy(out), np.zeros((2, 1)))
  # A group of one adds no within-group variance.
  assert float(state.group_variances.count) == 0
  out, _ = advantages.ebpo(ones, SPEC_STATE)
  # S with G = 1: 0.2 / (0.2 + max(0.1 - 0.2, 1e-6)) ~ 1.
  shrink = 0.2 / (0.2 + 1e-6)
  testing.assert_close(out, shrink * (np.array([[1.0], [0.0]]) - 0.4)
                       / (0.5 + 1e-6), atol=1e-5)


# --------------------------------------------------------------- AVSPO

SPEC_GROUPS = np.array([[0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 1, 0]], np.float32)


def test_avspo_spec_vector_with_the_gate_on():
  # acr = 2/3; 0.9 * 0.5 + 0.1 * 2/3 = 0.5167 > 0.3.
  out, state = advantages.avspo(SPEC_GROUPS, stateful.AVSPOState(
      jnp.float32(0.5)))
  # [0, 0, 0, 0] + a virtual 1: mean 0.2, unbiased var 0.8 / 4 = 0.2.
  a = 0.2 / (np.sqrt(0.2) + 1e-6)
  b = 0.5 / (np.sqrt(1 / 3) + 1e-6)
  testing.assert_close(out, np.array([[-a] * 4, [a] * 4, [b, -b, b, -b]]))
  testing.assert_close(out, np.array([
      [-0.447213] * 4, [0.447213] * 4,
      [0.866024, -0.866024, 0.866024, -0.866024]]), atol=2e-6)
  testing.assert_close(state.acr_ema, np.float32(0.45 + 0.1 * 2 / 3))


def test_avspo_below_the_threshold_is_exactly_grpo():
  out, state = advantages.avspo(SPEC_GROUPS, stateful.avspo_init())
  np.testing.assert_array_equal(testing.numpy(out),
                                testing.numpy(advantages.grpo(SPEC_GROUPS)))
  testing.assert_close(state.acr_ema, np.float32(0.1 * 2 / 3))


def test_avspo_gate_opens_after_four_collapsed_batches():
  """acr_ema = 1 - 0.9^k after k fully collapsed batches: 0.1, 0.19,
  0.271, 0.3439; only the fourth passes 0.3."""
  zeros = np.zeros((2, 4), np.float32)
  out = run_estimator("avspo", [(zeros, None)] * 4)
  for k, (adv, state) in enumerate(out, start=1):
    testing.assert_close(state.acr_ema, np.float32(1 - 0.9**k))
    expected = -0.2 / (np.sqrt(0.2) + 1e-6) if k == 4 else 0.0
    testing.assert_close(adv, np.full((2, 4), expected))


def test_avspo_virtual_values_and_fillers():
  """n_virtual = 3 in [r_lo, r_hi] = [-1, 2] (midpoint 0.5): a group at the
  midpoint gets r_lo, one below gets r_hi; fillers (collapsed or not) do
  not count in the ACR, and a batch of fillers only leaves it as it was."""
  rewards = np.array([[0.5, 0.5], [0.2, 0.2], [3.0, 3.0], [1.0, 0.0]],
                     np.float32)
  valid = np.array([True, True, False, True])
  state = stateful.AVSPOState(jnp.float32(0.4))
  out, new = advantages.avspo(rewards, state, n_virtual=3, r_lo=-1.0,
                              r_hi=2.0, valid=valid)
  testing.assert_close(new.acr_ema, np.float32(0.9 * 0.4 + 0.1 * 2 / 3))

  def lifted(value, virtual):
    x = np.array([value] * 2 + [virtual] * 3)
    return (x - x.mean())[:2] / (x.std(ddof=1) + 1e-6)
  testing.assert_close(out[0], lifted(0.5, -1.0), atol=1e-5)
  testing.assert_close(out[1], lifted(0.2, 2.0), atol=1e-5)
  np.testing.assert_array_equal(testing.numpy(out[2]), [0.0, 0.0])
  testing.assert_close(out[3], advantages.grpo(rewards[3:])[0])
  _, unchanged = advantages.avspo(rewards, state, valid=np.zeros(4, bool))
  assert float(unchanged.acr_ema) == float(state.acr_ema)


def test_avspo_group_of_one_gives_zero_with_the_gate_on():
  out, _ = advantages.avspo(np.array([[0.0], [1.0]], np.float32),
                            stateful.AVSPOState(jnp.float32(0.9)))
  np.testing.assert_array_equal(testing.numpy(out), np.zeros((2, 1)))


def avspo_reference(rewards, acr_ema, valid, *, momentum, acr_threshold,
                    n_virtual=1, r_lo=0.0, r_hi=1.0, eps=1e-6):
  """AVSPO in float64, one group at a time; (advantages, acr_ema)."""
  rewards = rewards.astype(np.float64)
  collapsed = rewards.max(axis=1) == rewards.min(axis=1)
  if valid.any():
    acr = (collapsed & valid).sum() / valid.sum()
    acr_ema = momentum * acr_ema + (1 - momentum) * acr
  z = lambda x: (x - x.mean()) / (x.std(ddof=1) + eps)
  out = np.zeros_like(rewards)
  for p, row in enumerate(rewards):
    if not valid[p] or len(row) == 1:
      continue
    if not collapsed[p]:
      out[p] = z(row)
    elif acr_ema > acr_threshold:
      virtual = r_hi if row[0] < (r_lo + r_hi) / 2 else r_lo
      out[p] = z(np.concatenate([row, [virtual] * n_virtual]))[:len(row)]
  return out, acr_ema


def test_avspo_over_a_run_matches_the_reference_as_the_gate_opens_and_shuts():
  rng = np.random.default_rng(2)
  batches = [(rng.integers(0, 2, (4, 3)).astype(np.float32),
              rng.random(4) < 0.8) for _ in range(12)]
  options = dict(momentum=0.5, acr_threshold=0.3, n_virtual=2)
  out = run_estimator("avspo", batches, **options)
  acr_ema, gates = 0.0, set()
  for (rewards, valid), (adv, state) in zip(batches, out):
    expected, acr_ema = avspo_reference(rewards, acr_ema, valid, **options)
    testing.assert_close(adv, expected, atol=1e-5)
    testing.assert_close(state.acr_ema, np.float32(acr_ema))
    gates.add(acr_ema > 0.3)
  assert gates == {True, False}  # both paths ran


@pytest.mark.parametrize("options,match", [
    ({"momentum": 1.5}, "momentum"), ({"n_virtual": 0}, "n_virtual"),
    ({"n_virtual": 1.5}, "n_virtual"), ({"r_lo": 1.0}, "r_lo")])
def test_avspo_option_errors_name_the_option(options, match):
  with pytest.raises(ValueError, match=match):
    advantages.avspo(SPEC_GROUPS, stateful.avspo_init(), **options)


# ------------------------------------------------- records and the kit


def test_records_carry_the_state_and_bind_options():
  data = groups_lib.from_rewards(SPEC_GROUPS)
  ebpo = advantages.make("ebpo", scale="none")
  adv, state = ebpo.estimate(SPEC_STATE, data)
  expected, expected_state = advantages.ebpo(SPEC_GROUPS, SPEC_STATE,
                                             scale="none")
  testing.assert_close((adv, state), (expected, expected_state))
  avspo = advantages.make("avspo", acr_threshold=0.0)
  assert isinstance(avspo.init(), advantages.AVSPOState)
  adv, _ = avspo.estimate(avspo.init(), data)
  assert float(adv[0, 0]) < 0  # the gate opened at once
  assert advantages.meta("ebpo").constant_group_zero is False
  assert advantages.meta("avspo").independent_groups is False
  with pytest.raises(ValueError, match=r"'state'.*use one of"):
    advantages.make("ebpo", state=SPEC_STATE)  # the trainer passes it


class Tracker(NamedTuple):
  seen: jnp.ndarray  # [capacity] float32


def tracker_init(*, capacity=2):
  return Tracker(seen=jnp.zeros((capacity,), jnp.float32))


def tracker(rewards, state, *, decay=0.5):
  """A toy stateful estimator whose state is sized by an option of its
  init only (as a per-prompt tracker's capacity)."""
  adv = _kit.centered(_kit.check_rewards(rewards, 2, "P, G"), -1)
  return adv, Tracker(decay * state.seen + (1 - decay) * rewards.mean())


def register_tracker():
  _kit.register(input="PG", output="group", paper="toy",
                state=_kit.StateSpec(init=tracker_init))(tracker)


def test_a_state_option_is_an_option_of_the_estimator():
  with advantages.ESTIMATORS.scoped():
    register_tracker()
    estimator = advantages.make("tracker", capacity=5, decay=0.25)
    assert estimator.init().seen.shape == (5,)
    _, state = estimator.estimate(estimator.init(),
                                  groups_lib.from_rewards(SPEC_GROUPS))
    testing.assert_close(state.seen, np.full(5, 0.75 * 0.5))  # mean R
    with pytest.raises(ValueError, match=r"'size'.*decay, capacity"):
      advantages.make("tracker", size=3)


# ------------------------------------------ checkpoints and resumption


def small_state(advantage):
  optimizer = optim.make_optimizer(learning_rate=1e-3)
  return train.init_state({"w": jnp.ones((2, 3))}, optimizer, seed=0,
                          components={"objective": objectives.make("ppo_clip"),
                                      "advantage": advantage})


def test_a_warm_state_round_trips_through_a_checkpoint(tmp_path):
  estimator = advantages.make("ebpo")
  warm = run_estimator("ebpo", [(SPEC_GROUPS, None)] * 2)[-1][1]
  state = small_state(estimator)
  state = state._replace(states=dict(state.states, advantage=warm))
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(1, state)
  restored, _ = ckpt.restore(small_state(estimator))
  ckpt.close()
  assert isinstance(restored.states["advantage"], advantages.EBPOState)
  testing.assert_close(restored.states["advantage"], warm, rtol=0, atol=0)


def test_a_state_of_other_shapes_is_refused_on_restore(tmp_path):
  """A tracker saved with capacity 2 and restored by a config of capacity
  3: an error naming both shapes (train's restore_newest), not a reset."""
  with advantages.ESTIMATORS.scoped():
    register_tracker()
    ckpt = checkpoint.Checkpointer(str(tmp_path))
    ckpt.save(2, small_state(advantages.make("tracker", capacity=2)))
    with pytest.raises(ValueError, match=r"\(2,\).*\(3,\)") as error:
      ckpt.restore_newest(small_state(advantages.make("tracker",
                                                      capacity=3)))
    ckpt.close()
  assert "advantage" in str(error.value)


def tiny_config(name):
  config = CONFIGS[name].get_config("tiny")
  config.train.num_steps = 4
  config.checkpoint.every = 2
  config.metrics.tensorboard = False
  config.metrics.plot = False
  if name == "ebpo":
    # Lengths vary within groups, so the prior has a spread and the
    # shrinkage acts whatever the verifiers give.
    config.rewards.shapers.overlong = dict(weight=1.0, max_length=8,
                                           cache_length=4)
  else:  # scored by accuracy, the random tiny model fails every group alike
    testing.ungraded(config)
  return config


@pytest.mark.parametrize("name", ["ebpo", "avspo"])
def test_resume_continues_the_estimator_state_exactly(tmp_path, name):
  """Crash after step 2's metrics, resume from checkpoint 2: the final
  state (the estimator's included) and every metric equal an
  uninterrupted run's, bit for bit."""
  config = tiny_config(name)
  straight, records = testing.check_resume_is_exact(config, str(tmp_path))
  state = straight.states["advantage"]
  rows = config.rollout.num_prompts * config.rollout.num_generations
  if name == "ebpo":
    assert float(state.rewards.count) == 4 * rows
    assert float(stateful.welford_variance(state.rewards)) > 0
  else:
    # Every tiny-model group fails alike (`testing.ungraded`), so the gate
    # opens at step 3 only: a state reset at the resume would keep it shut.
    testing.assert_close(state.acr_ema, np.float32(1 - 0.9**4))
    abs_mean = [r["advantage/abs_mean"] for r in records]
    assert abs_mean[:3] == [0.0] * 3 and abs_mean[3] > 0.4


# ------------------------------------------------------------ learning


def lifted(reward, adv, records):
  """How many collapsed groups got a nonzero advantage."""
  del records
  collapsed = ~groups_lib.has_signal(reward)
  return int((collapsed & (jnp.abs(adv).max(-1) > 0)).sum())


@pytest.mark.parametrize("name,options", [
    ("ebpo", {}),
    # The gate open whenever a group collapses: the virtual rewards act.
    ("avspo", {"momentum": 0.0, "acr_threshold": 0.0}),
])
def test_estimator_learns_a_trivial_task_off_policy(name, options):
  """The estimator's state is carried from step to step."""
  history, counts = learning.learn_trivial_task(
      advantages.make(name, **options), on_step=lifted)
  learning.check_learned(history)
  assert sum(counts) > 0  # all-equal groups got a signal
