"""The budget stage's tables by prompt id (exact and hashed, checked
against every task at config validation), sGPO's profiling calls, and the
measurements both paths define alike (rewards and collapse over every row
sampled, rollout/nonzero_gradient_share, a member filter's kept members),
with hand-derived expectations."""

import collections
import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax.rollout import budgets as budget_rollout
from grpo_jax import config as config_lib
from grpo_jax import train as train_lib
from grpo_jax import groups as groups_lib
from grpo_jax.data import profiling
from grpo_jax.rollout import measures as rollout_measures
from grpo_jax import strategies
from grpo_jax.strategies import allocation
from grpo_jax.testing import budgets as fixtures

from configs import knapsack_rl as knapsack_config
from configs import sgpo as sgpo_config

# ------------------------------------------------- tables by prompt id


@pytest.mark.parametrize("module", [knapsack_config, sgpo_config])
def test_a_budget_table_is_checked_against_every_tasks_ids(module, tmp_path):
  config = module.get_config()
  config.data.task = "gsm8k"  # ids 0 .. 7472 against 300 slots
  with pytest.raises(ValueError, match=(
      r"config\.budget\.kwargs\.capacity: 300 slots cannot hold the 7473 "
      r"problems of data\.task='gsm8k'.*--config\.budget\.kwargs\."
      r"prompt_ids=hash")):
    train_lib.validate(config)
  config.budget.kwargs.prompt_ids = "hash"
  train_lib.validate(config)
  path = tmp_path / "p.jsonl"
  path.write_text("\n".join(json.dumps(
      {"id": 50 * i, "question": f"q{i}", "answer": str(i)})
                            for i in range(20)) + "\n")
  config = module.get_config()
  config.data.task, config.data.path = "jsonl", str(path)
  config.data.heldout_fraction = 0.2
  with pytest.raises(ValueError, match=r"config\.budget\.kwargs\.capacity: "
                     r"300 slots cannot hold the \d+ problems of data\.path"):
    train_lib.validate(config)
  config.budget.kwargs.capacity = 1000
  train_lib.validate(config)


def test_knapsack_tracker_slots_exact_and_hashed():
  ex = [fixtures.Example(i, "", "") for i in (1, 5, 2, 9)]
  k = {0: 2, 1: 1, 2: 3, 3: 0}  # prompt p solves its first k[p] rows
  draw = lambda e, sizes, n, r: fixtures.fake_rows(e, sizes, n,
                                          lambda g, m: m < k[g])
  for mode in ("hash", "exact"):
    budget = strategies.make_budget("knapsack", num_prompts=4, num_rows=16,
                                    warmup_steps=1, capacity=4,
                                    prompt_ids=mode)
    _, state = budget.apply(budget.init(), draw=draw, select=lambda: ex,
                            step=0, task=None, profile=None)
    rates = allocation.tracker_rates(state, [1, 5, 9, 2, 13, 6, 3],
                                     unseen_p=-1.0, prompt_ids=mode)
    if mode == "hash":
      # Slot 1 pools ids 1, 5, 9: (2 + 1 + 0) / 12; slot 2 holds id 2:
      # 3 / 4; 13 and 6 share them; 3 (slot 3) was never seen.
      np.testing.assert_array_equal(state.trials, [0, 12, 4, 0])
      np.testing.assert_allclose(rates, [.25, .25, .25, .75, .25, .75, -1])
    else:  # ids 5, 9 have no slot: nothing written, unseen
      np.testing.assert_array_equal(state.trials, [0, 4, 4, 0])
      np.testing.assert_allclose(rates, [.5, -1, -1, .75, -1, -1, -1])


def _sgpo(capacity, prompt_ids, solved):
  budget = strategies.make_budget(
      "sgpo", num_prompts=6, num_rows=64, num_samples=8, g_min=2, g_max=8,
      zero_keep_frac=1.0, capacity=capacity, prompt_ids=prompt_ids)
  draws = []

  def draw(examples, sizes, num_rows, r):
    draws.append(([e.index for e in examples], [int(s) for s in sizes]))
    return fixtures.fake_rows(examples, sizes, num_rows, lambda g, m: False)
  profile = lambda idx, n, s: profiling.Profile(
      np.asarray(idx), np.asarray(solved, np.float32),
      np.full(6, 8.0, np.float32))
  plan, state = budget.apply(budget.init(), draw=draw, select=None,
                             task=fixtures.Task(), profile=profile, step=0)
  return plan, state, draws


def test_sgpo_reads_no_other_problems_slot():
  # Problems 0..5 against 3 slots; profiles p = [.5, 1, .5, .5, .5, .5].
  solved = [4, 8, 4, 4, 4, 4]
  # exact: problems 3..5 have no slot and stay out of the curriculum (they
  # used to read slot 2's rate); 1 is solved and dropped.
  plan, state, draws = _sgpo(3, "exact", solved)
  assert plan.measures["budget/profiled_prompts"] == 3.0
  assert plan.measures["budget/kept_problems"] == 2.0
  assert draws == [([0, 2, 0, 0, 0, 0], [2, 2, 0, 0, 0, 0])]
  # hash: slots pool {0, 3}, {1, 4}, {2, 5}: p = 8/16, 12/16, 8/16 each,
  # so every problem is kept, G = ceil(1 / p) = 2; easy to hard: the two
  # at .75 first, then the rest by index.
  plan, state, draws = _sgpo(3, "hash", solved)
  np.testing.assert_array_equal(state.successes, [8, 12, 8])
  np.testing.assert_array_equal(state.trials, [16, 16, 16])
  assert plan.measures["budget/kept_problems"] == 6.0
  assert draws == [([1, 4, 0, 2, 3, 5], [2] * 6)]


def test_sgpo_profiles_in_calls_of_at_most_n_rows(monkeypatch):
  calls = []

  def sample_round(params, examples, key, *, pipeline):
    n = pipeline.sampler.num_generations
    calls.append((len(examples), n))
    return types.SimpleNamespace(rewards=np.ones((len(examples), n, 1)))
  monkeypatch.setattr(budget_rollout.rounds, "sample_round",
                      sample_round)
  sampler = collections.namedtuple(
      "Sampler", "num_generations member_temperatures")(2, ())
  pipeline = collections.namedtuple(
      "Pipeline", "sampler num_prompts columns task")(
          sampler, 4, ("accuracy",), fixtures.Task())
  profile = budget_rollout.profile_fn(None, jax.random.PRNGKey(0), pipeline)
  for n, per_call in ((8, 1), (2, 4), (3, 2), (16, 1)):
    calls.clear()
    prof = profile(np.arange(6), n)
    # N = 4 prompts x 2 = 8 rows a step: max(1, 8 // n) problems a call,
    # the last call padded to the same size (one compile).
    assert set(calls) == {(per_call, n)}, (n, calls)
    assert len(calls) == -(-6 // per_call)
    np.testing.assert_array_equal(prof.successes, np.full(6, n))


# ------------------------------------------------------ measurements


def test_budget_rewards_and_collapse_describe_every_sampled_row():
  # VARIANTS.md 4.2's pilot: prompts 0 and 3 agree and are skipped; the
  # commit's rows alternate 0, 1.
  pilot = [[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
  budget = strategies.make_budget("pilot_commit", num_prompts=4,
                                  num_rows=32, n0=4, g_max=12, min_std=0.1)
  drawn = []

  def draw(examples, sizes, num_rows, r):
    solved = (lambda g, m: pilot[g][m]) if r == 0 else (lambda g, m: m % 2)
    drawn.append(fixtures.fake_rows(examples, sizes, num_rows, solved))
    return drawn[-1]
  plan, _ = budget.apply((), draw=draw, step=0, task=None, profile=None,
                         select=lambda: [fixtures.Example(i, "", "")
                                         for i in range(4)])
  rows = plan.rows
  real = rows.group >= 0
  adv = np.where(real, rows.total - 0.5, 0.0).astype(np.float32)
  adv[0] = 0.0  # one trained row without gradient
  batch = types.SimpleNamespace(completion_mask=rows.mask, old_logp=None)
  m = budget_rollout.describe_rows(
      rows, adv, batch, types.SimpleNamespace(weights=np.ones(1)),
      num_prompts=4, sampled=drawn)
  # Every sampled row: pilots 4 + 1 + 2 + 0, commits 4 + 4, of 32.
  assert m["reward/total"] == m["reward/accuracy"] == 15 / 32
  assert m["reward/scored"] == 32.0
  # Every sampled group: 0 (all 1) and 3 (all 0) collapsed, of 4.
  assert m["advantage/collapse_rate"] == 0.5
  # The trained view: prompts 1 and 2, pilots 1 + 2 and commits 8 of 24.
  assert m["budget/reward/total"] == m["budget/reward/accuracy"]
  assert m["budget/reward/total"] == pytest.approx(11 / 24, rel=1e-6)
  assert m["budget/collapse_rate"] == 0.0
  # Of the P = 4 prompts, 1 and 2 trained, both with signal.
  assert m["rollout/groups_with_signal"] == 2 / 4
  assert m["rollout/nonzero_gradient_share"] == pytest.approx(23 / 24)
  assert m["advantage/abs_mean"] == pytest.approx(23 * 0.5 / 24, rel=1e-6)


def test_collapse_counts_only_the_kept_members():
  rewards = jnp.asarray([[1., 0., 1., 1.], [0., 1., 0., 1.], [1., 0., 0., 0.]])
  members = np.asarray([[True, False, True, True],   # kept all 1: collapsed
                        [True, True, False, False],  # 0, 1: signal
                        [True, False, False, False]])  # one kept: collapsed
  np.testing.assert_array_equal(
      groups_lib.has_signal(rewards, per_reward=False, members=members),
      [False, True, False])
  np.testing.assert_array_equal(groups_lib.has_signal(rewards), [True] * 3)
  np.testing.assert_allclose(groups_lib.collapse_rate(
      rewards, members=members, valid=np.array([True, True, False])), 0.5)


def test_fixed_path_measures_over_kept_members():
  # 2 prompts x 4 members; a filter keeps members 0, 2 of prompt 0 (both
  # reward 1: collapsed) and 0, 1 of prompt 1 (0 and 1: signal).
  rewards = np.asarray([[1., 0., 1., 0.], [0., 1., 1., 1.]])[..., None]
  members = np.asarray([[True, False, True, False],
                        [True, True, False, False]])
  rnd = types.SimpleNamespace(
      rewards=rewards, sampled=None, lengths=np.full((2, 4), 3),
      truncated=np.zeros((2, 4), bool), columns=("accuracy",),
      errors=np.zeros(1), greedy_rewards=None, injected=None, replayed=None)
  selected = types.SimpleNamespace(rounds=[rnd], valid=np.array([True, True]),
                                   picks=[(0, 0), (0, 1)])
  pipeline = types.SimpleNamespace(
      sampler=types.SimpleNamespace(num_generations=4),
      weights=np.ones(1), shapers=(), verifiers={"accuracy": None})
  # Kept rows' advantages: prompt 0's are 0 (collapsed), prompt 1's -1, 1.
  adv = np.asarray([0, 0, 0, 0, -1, 1, 0, 0], np.float32)
  kept = members.reshape(-1)
  batch = types.SimpleNamespace(completion_mask=np.ones((8, 2)),
                                old_logp=None)
  estimator = types.SimpleNamespace(input="PG")
  m = rollout_measures.describe(selected, adv, batch, pipeline,
                                estimator=estimator, members=members,
                                kept_rows=kept)
  assert m["advantage/collapse_rate"] == 0.5  # all four members: 0
  assert m["advantage/abs_mean"] == 2 / 4  # over 4 kept rows, not 8
  assert m["rollout/nonzero_gradient_share"] == 2 / 4
  assert m["reward/total"] == 5 / 8  # the plain sample, every member
  # Of the two groups that train, prompt 1's kept members differ.
  assert m["rollout/groups_with_signal"] == 0.5
  plain = rollout_measures.describe(selected, adv, batch, pipeline,
                                    estimator=estimator)
  assert plain["advantage/collapse_rate"] == 0.0
  assert plain["rollout/nonzero_gradient_share"] == 2 / 8
  assert plain["rollout/groups_with_signal"] == 1.0
  # A filler group (valid False) trains nothing: no signal counted.
  filled = selected.__class__(rounds=selected.rounds, picks=selected.picks,
                              valid=np.array([True, False]))
  m = rollout_measures.describe(filled, adv, batch, pipeline,
                                estimator=estimator)
  assert m["rollout/groups_with_signal"] == 0.5


def test_the_planner_lays_the_update_out_as_train_build():
  from grpo_jax import planning  # pylint: disable=g-import-not-at-top
  from grpo_jax import train  # pylint: disable=g-import-not-at-top
  model = planning.model_config_from_name("tiny")[0]
  config = knapsack_config.get_config("tiny")
  training = planning.abstract_training(config, model)
  # Ragged groups: no block of rows shares a prompt (was G = 4).
  assert training.group_size == 1 == train.update_group_size(
      config, training.components)
  plain = config_lib.get_base_config()
  training = planning.abstract_training(config_lib.finalize(plain, "tiny"),
                                        model)
  assert training.group_size == plain.rollout.num_generations
