"""Member filters (the ``filter`` stage: GFPO, BPPO) and the estimators'
kept members (`GroupData.members`).

Expected values are VARIANTS.md's vectors (4.4, 4.5) or derived here by
hand / separate numpy; the wired path is `strategies.make_member_filter`
-> `strategies.filter_members` -> `advantages.make(...).estimate`, as
`rollout.generate` runs it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import advantages
from grpo_jax.runtime import checkpoint
from grpo_jax import config as config_lib
from grpo_jax import groups as groups_lib
from grpo_jax import objectives
from grpo_jax.train import optim
from grpo_jax import strategies
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.advantages import _kit
from grpo_jax.strategies import filters
from grpo_jax.testing import estimator_laws as laws

from configs import bppo as bppo_config
from configs import gfpo as gfpo_config
from configs import gfpo_adaptive as gfpo_adaptive_config


def wired(name, rewards, lengths, *, estimator="grpo", mask=None, state=None,
          valid=None, estimator_options=None, **options):
  """(advantages [P, G], kept rows [N] or None, token mask, state, measures)
  of filter `name` then `estimator`, as the rollout composes them."""
  rewards = jnp.asarray(rewards, jnp.float32)
  g = rewards.shape[1]
  member_filter = strategies.make_member_filter(
      name, group_size=g, columns=("accuracy",), **options)
  data = groups_lib.from_rewards(rewards, lengths=lengths, valid=valid)
  if mask is None:
    mask = np.ones((rewards.size, 4), np.float32)
  data, rows, tokens, state, measures = strategies.filter_members(
      member_filter, member_filter.init() if state is None else state, data,
      mask)
  adv, _ = advantages.make(estimator, **(estimator_options or {})).estimate(
      (), data)
  if rows is not None:  # the rollout zeroes the dropped rows' advantages
    adv = jnp.where(jnp.reshape(rows, adv.shape), adv, 0.0)
  return np.asarray(adv), rows, tokens, state, measures


# ------------------------------------------------ VARIANTS.md vectors

R_GFPO = [[1, 1, 0, 1, 0, 1]]
L_GFPO = [[100, 50, 80, 300, 40, 60]]


def test_gfpo_by_length_keeps_the_shortest_and_normalises_over_them():
  adv, rows, tokens, _, m = wired("gfpo", R_GFPO, L_GFPO, k=3)
  np.testing.assert_allclose(
      adv, [[0, .577349, 0, 0, -1.154699, .577349]], atol=1e-5)
  np.testing.assert_array_equal(rows, [0, 1, 0, 0, 1, 1])
  assert tokens is None
  assert m == pytest.approx({"filter/kept_share": 0.5,
                             "filter/dropped_share": 0.5, "filter/k_mean": 3})


def test_gfpo_by_reward_per_token_can_leave_a_signal_free_group():
  # R/L: 1/100, 1/50, 0, 1/300, 0, 1/60: keep {1, 5, 0}, all correct.
  for estimator in ("grpo", "dr_grpo", "rloo"):
    adv, rows, _, _, _ = wired("gfpo", R_GFPO, L_GFPO, k=3,
                               score="reward_per_token", estimator=estimator)
    np.testing.assert_array_equal(rows, [1, 1, 0, 0, 0, 1])
    np.testing.assert_array_equal(adv, np.zeros((1, 6)))


def test_bppo_keeps_two_rows_with_full_group_advantages_and_a_prefix():
  lengths = np.asarray([[30, 12, 20, 25, 12]])
  mask = (np.arange(12)[None, :] < np.minimum(lengths[0], 12)[:, None]
          ).astype(np.float32)
  adv, rows, tokens, _, m = wired("bppo", [[1, 0, 1, 0, 0]], lengths,
                                  mask=mask, prefix_len=8)
  # A over all five (mean .4, std .547723); rows 2 (A = 1.095443) and 1
  # (A = -.730295; the length tie with row 4 goes to the lower index).
  np.testing.assert_allclose(adv, [[0, -.730295, 1.095443, 0, 0]],
                             atol=1e-5)
  np.testing.assert_array_equal(rows, [0, 1, 1, 0, 0])
  np.testing.assert_array_equal(np.asarray(tokens)[1],
                                (np.arange(12) < 8).astype(np.float32))
  # Kept rows' sampled tokens: 12 + 12 of which 4 + 4 are past the prefix.
  assert m == pytest.approx({"filter/kept_share": 0.4,
                             "filter/dropped_share": 0.6,
                             "filter/groups_kept": 1.0,
                             "filter/prefix_cut": 8 / 24})


def test_bppo_prefix_frac_counts_each_rows_own_tokens():
  mask = np.zeros((2, 10), np.float32)
  mask[0, :10], mask[1, :5] = 1, 1
  _, _, tokens, _, _ = wired("bppo", [[1, 0]], [[10, 5]], mask=mask,
                             prefix_len=None, prefix_frac=0.5)
  # ceil(0.5 * 10) = 5 and ceil(0.5 * 5) = 3 tokens.
  np.testing.assert_array_equal(np.asarray(tokens).sum(-1), [5, 3])


def test_bppo_groups_without_both_classes_and_fillers_keep_nothing():
  adv, rows, _, _, m = wired("bppo", [[1, 1, 1], [0, 1, 0], [1, 0, 0]],
                             [[3, 2, 1], [4, 5, 6], [1, 2, 3]],
                             valid=[True, True, False], prefix_len=4)
  np.testing.assert_array_equal(np.reshape(rows, (3, 3)),
                                [[0, 0, 0], [1, 1, 0], [0, 0, 0]])
  assert m["filter/groups_kept"] == pytest.approx(0.5)
  assert m["filter/kept_share"] == pytest.approx(2 / 6)
  np.testing.assert_array_equal(adv[2], 0.0)


# ------------------------------------- estimators over the kept members


def test_kept_members_by_hand():
  r = np.asarray([[1.0, 0.0, 0.0, 1.0], [0.5, 0.2, 0.9, 0.1]])
  kept = np.asarray([[1, 1, 1, 0], [0, 1, 1, 1]], bool)
  data = groups_lib.from_rewards(r, members=kept)
  est = lambda name, **o: np.asarray(advantages.make(name, **o).estimate(
      (), data)[0])
  centred = [[2 / 3, -1 / 3, -1 / 3, 0], [0, -0.2, 0.5, -0.3]]
  np.testing.assert_allclose(est("dr_grpo"), centred, atol=1e-6)
  np.testing.assert_allclose(est("grpo", scale="none"), centred, atol=1e-6)
  # Group std (ddof 1) of {1, 0, 0}: sqrt(1/3); of {.2, .9, .1}: sqrt(.19).
  np.testing.assert_allclose(
      est("grpo", eps=0.0),
      [[2 / 3 / np.sqrt(1 / 3), -1 / 3 / np.sqrt(1 / 3),
        -1 / 3 / np.sqrt(1 / 3), 0],
       [0, -0.2 / np.sqrt(.19), 0.5 / np.sqrt(.19), -0.3 / np.sqrt(.19)]],
      atol=1e-5)
  # Batch std over the six kept rewards {1, 0, 0, .2, .9, .1}: mean 2.2/6,
  # sum of squares 1.0533333, / 5.
  sd = np.sqrt(1.0533333 / 5)
  np.testing.assert_allclose(est("grpo", scale="batch", eps=0.0),
                             np.asarray(centred) / sd, atol=1e-5)
  # Leave-one-out over the kept: 1 - (0 + 0)/2, 0 - (1 + 0)/2, ...
  np.testing.assert_allclose(est("rloo"), [[1, -.5, -.5, 0],
                                           [0, .2 - .5, .9 - .15, .1 - .55]],
                             atol=1e-6)


def test_one_kept_member_equal_kept_rewards_and_fillers_get_zero():
  r = np.asarray([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
  kept = np.asarray([[1, 0, 0], [1, 1, 0], [1, 1, 1]], bool)
  data = groups_lib.from_rewards(r, members=kept,
                                 valid=[True, True, False])
  for name, options in (("grpo", {}), ("grpo", {"scale": "batch"}),
                        ("dr_grpo", {}), ("rloo", {})):
    out = advantages.make(name, **options).estimate((), data)[0]
    np.testing.assert_array_equal(np.asarray(out), np.zeros((3, 3)))


def test_every_member_kept_is_no_members():
  r = jax.random.uniform(jax.random.PRNGKey(0), (3, 5))
  for name in advantages.honouring_members():
    est = advantages.make(name)
    plain = est.estimate((), groups_lib.from_rewards(r))[0]
    full = est.estimate((), groups_lib.from_rewards(
        r, members=np.ones((3, 5), bool)))[0]
    testing.assert_close(full, plain, atol=1e-6, rtol=1e-6)


def test_an_estimator_that_does_not_honour_members_refuses_them():
  data = groups_lib.from_rewards(R_GFPO, members=np.ones((1, 6), bool))
  with pytest.raises(ValueError, match=r"'opo' does not honour.*dr_grpo, "
                     r"grpo, rloo"):
    advantages.make("opo").estimate((), data)
  assert set(advantages.honouring_members()) >= {"grpo", "dr_grpo", "rloo"}
  assert advantages.meta("grpo").members
  assert not advantages.meta("opo").members
  with pytest.raises(ValueError, match="members"):
    advantages.make("grpo", members=None)  # group data, not an option


def ignores_members(rewards, *, members=None):
  """Claims to honour members but normalises over every member: a defect."""
  del members
  return advantages.grpo(rewards)


def test_the_members_law_catches_an_estimator_that_ignores_them():
  with advantages.ESTIMATORS.scoped():
    _kit.register(input="PG", output="group", paper="toy",
                  members=True)(ignores_members)
    with pytest.raises(AssertionError):
      laws.check_members_are_respected(
          advantages.make("ignores_members"),
          laws.estimator_groups(jax.random.PRNGKey(0)), jax.random.PRNGKey(1))


# ------------------------------------------------- adaptive difficulty


def test_gfpo_adaptive_k_by_hand():
  # Difficulties 1 - mean R: .8, .2, .4 -> window [.8, .2, .4]; quantiles
  # 1/3, 2/3 of (.2, .4, .8) by linear interpolation: .33333, .53333; so
  # k = table[#edges <= d] = 4, 2, 3.
  r = [[1, 0, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 0, 0]]
  lengths = [[5, 4, 3, 2, 1], [1, 2, 3, 4, 5], [9, 1, 8, 2, 7]]
  _, rows, _, state, m = wired("gfpo", r, lengths, k=(2, 3, 4), window=5)
  np.testing.assert_array_equal(np.reshape(rows, (3, 5)), [
      [0, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 1, 0, 1, 1]])
  np.testing.assert_allclose(state.values, [.8, .2, .4, 0, 0], atol=1e-6)
  assert int(state.count) == 3 and m["filter/k_mean"] == pytest.approx(3)
  # A second batch: d = 0, 1, .6 fill slots 3 and 4, then overwrite slot
  # 0; the window sorted (0, .2, .4, .6, 1) has its quantiles 1/3, 2/3 at
  # positions 4/3 and 8/3: .26667 and .53333; so k = 2, 4, 4.
  r2 = [[1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [1, 1, 0, 0, 0]]
  _, rows, _, state, _ = wired("gfpo", r2, lengths, k=(2, 3, 4), window=5,
                               state=state)
  np.testing.assert_allclose(state.values, [.6, .2, .4, 0, 1], atol=1e-6)
  assert int(state.count) == 6
  np.testing.assert_array_equal(np.reshape(rows, (3, 5)).sum(-1), [2, 4, 4])


def test_fillers_stay_out_of_the_difficulty_window():
  _, rows, _, state, _ = wired("gfpo", [[1, 0, 0], [0, 0, 0]],
                               [[1, 2, 3], [1, 2, 3]], k=(2, 2), window=3,
                               valid=[True, False])
  assert int(state.count) == 1
  np.testing.assert_allclose(state.values, [2 / 3, 0, 0], atol=1e-6)
  np.testing.assert_array_equal(np.reshape(rows, (2, 3))[1], 0)


# ------------------------------------------------------ bad options


@pytest.mark.parametrize("name,options,match", [
    ("gfpo", {"k": 6}, r"2 <= k < G' = rollout.num_generations = 6"),
    ("gfpo", {"k": 1}, r"2 <= k < G'"),
    ("gfpo", {"k": True}, r"2 <= k < G'"),
    ("gfpo", {"k": (2, 6)}, r"2 <= k < G'"),
    ("gfpo", {"k": (3,)}, r"needs >= 2 buckets"),
    ("gfpo", {"k": 3, "score": "short"}, r"score='short' is unknown.*length"),
    ("gfpo", {"k": (2, 3), "window": 0}, r"window=0"),
    ("gfpo", {"k": 3, "nope": 1}, r"'nope'.*k, score, window"),
    ("bppo", {"prefix_len": 0}, r"prefix_len=0 must be an integer >= 1"),
    ("bppo", {"prefix_len": -3}, r"prefix_len=-3"),
    ("bppo", {"prefix_len": None}, r"exactly one of prefix_len"),
    ("bppo", {"prefix_frac": 0.5}, r"exactly one of prefix_len"),
    ("bppo", {"prefix_len": None, "prefix_frac": 1.5}, r"prefix_frac=1.5"),
    ("bppo", {"correct_reward": "speed"}, r"'speed' is not a configured"),
    ("sgpo", {}, r"member filter 'sgpo' is unknown.*bppo, gfpo, none"),
])
def test_bad_filter_options_fail_at_build(name, options, match):
  with pytest.raises(ValueError, match=match):
    strategies.make_member_filter(name, group_size=6, columns=("accuracy",),
                                  **options)


@pytest.mark.parametrize("module,change,match", [
    (gfpo_config, lambda c: setattr(c, "advantage",
                                    dict(name="opo", kwargs={})),
     r"config.advantage.name: 'opo' does not honour the kept members of "
     r"filter 'gfpo'.*choose one that does: dr_grpo, grpo, rloo"),
    (gfpo_config, lambda c: c.filter.kwargs.update(k=8),
     r"config.filter.kwargs: gfpo: k=8 must .* G' = "
     r"rollout.num_generations = 8"),
    (gfpo_config, lambda c: c.filter.kwargs.update(score="tokens"),
     r"config.filter.kwargs: gfpo: score='tokens'"),
    (gfpo_config, lambda c: c.filter.update(name="gfpo2"),
     r"config.filter.name: 'gfpo2' is unknown"),
    (bppo_config, lambda c: c.filter.kwargs.update(prefix_len=0),
     r"config.filter.kwargs: bppo: prefix_len=0"),
    (bppo_config, lambda c: c.filter.kwargs.update(correct_reward="x"),
     r"config.filter.kwargs: bppo: correct_reward='x'"),
])
def test_bad_filter_configs_fail_at_validation(module, change, match):
  config = module.get_config()
  change(config)
  with pytest.raises(ValueError, match=match):
    train.validate(config)


def test_bppo_takes_any_estimator_and_old_configs_get_no_filter():
  config = bppo_config.get_config()
  config.advantage.name, config.advantage.kwargs = "opo", {}
  train.validate(config)  # statistics over all: members never set
  old = config_lib.get_base_config()
  del old["filter"]
  assert config_lib.with_defaults(old).filter.name == "none"


# ---------------------------------------------- determinism, jit, state


def test_filters_are_deterministic_and_jit_equals_eager():
  key = jax.random.PRNGKey(4)
  r = jax.random.bernoulli(key, 0.5, (3, 6)).astype(jnp.float32)
  lengths = jax.random.randint(jax.random.fold_in(key, 1), (3, 6), 1, 9)
  mask = (jnp.arange(9)[None, :] < lengths.reshape(-1, 1)).astype(
      jnp.float32)
  data = groups_lib.from_rewards(r, lengths=lengths)
  for name, options in (("gfpo", {"k": 3}), ("gfpo", {"k": (2, 4)}),
                        ("bppo", {"prefix_len": 3})):
    f = strategies.make_member_filter(name, group_size=6, **options)
    first = f.apply(f.init(), data, mask)
    testing.assert_close(f.apply(f.init(), data, mask), first, rtol=0,
                         atol=0)
    entry = strategies.MEMBER_FILTERS.get(name)
    eager = entry(data, mask, f.init(), **options)
    testing.assert_close(eager, first, rtol=0, atol=0)


def test_the_default_filter_changes_nothing():
  f = strategies.make_member_filter("none", group_size=4)
  data = groups_lib.from_rewards(np.ones((2, 4)))
  out, rows, tokens, state, m = strategies.filter_members(
      f, f.init(), data, np.ones((8, 3)))
  assert out is data and rows is None and tokens is None
  assert state == () and m == {}
  assert strategies.filter_members(None, None, data, None)[0] is data


def small_state(filter_options):
  optimizer = optim.make_optimizer(learning_rate=1e-3)
  return train.init_state(
      {"w": jnp.ones((2, 3))}, optimizer, seed=0,
      components={"objective": objectives.make("ppo_clip"),
                  "filter": strategies.make_member_filter(
                      "gfpo", group_size=8, **filter_options)})


def test_the_difficulty_window_round_trips_a_checkpoint(tmp_path):
  state = small_state({"k": (2, 3, 4, 4), "window": 5})
  warm = filters.difficulty_history_update(
      state.states["filter"], jnp.asarray([.25, .5, 1.0]))
  state = state._replace(states=dict(state.states, filter=warm))
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(3, state)
  restored, _ = ckpt.restore(small_state({"k": (2, 3, 4, 4), "window": 5}))
  assert isinstance(restored.states["filter"], filters.DifficultyHistory)
  testing.assert_close(restored.states["filter"], warm, rtol=0, atol=0)
  with pytest.raises(ValueError, match=r"filter.*\(5,\).*\(7,\)"):
    ckpt.restore_newest(small_state({"k": (2, 3, 4, 4), "window": 7}))
  ckpt.close()


def test_a_checkpoint_from_before_the_filter_stage_resumes(tmp_path):
  state = small_state({"k": 4})  # a fixed k: the stage's state is ()
  older = state._replace(states={k: v for k, v in state.states.items()
                                 if k != "filter"})
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(2, older)
  restored, _ = ckpt.restore(jax.tree.map(jnp.zeros_like, state))
  ckpt.close()
  assert restored.states["filter"] == ()
  testing.assert_close(restored, state, rtol=0, atol=0)


@pytest.mark.slow
def test_gfpo_adaptive_resumes_exactly_with_its_window(tmp_path):
  """configs/gfpo_adaptive.py:tiny for 4 steps, crashed after step 2 and
  resumed: the window of difficulties and every metric equal the straight
  run's."""
  config = gfpo_adaptive_config.get_config("tiny")
  config.train.num_steps, config.checkpoint.every = 4, 2
  config.metrics.tensorboard = config.metrics.plot = False
  config.eval.every = 0
  straight, records = testing.check_resume_is_exact(config,
                                                    str(tmp_path / "run"))
  window = straight.states["filter"]
  assert int(window.count) == 4 * config.rollout.num_prompts
  assert all(r["filter/dropped_share"] > 0 for r in records)
