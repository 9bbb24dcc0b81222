"""The budget stage (config.budget; strategies.allocation): ragged rows,
the sampler's row_prompt, Knapsack-RL, Pilot-Commit, the profiling pass
and sGPO, with hand-derived expectations (VARIANTS.md 4.1-4.3); the
pipeline's trace count and determinism; the config errors."""

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import advantages
from grpo_jax.runtime import checkpoint
from grpo_jax import config as config_lib
from grpo_jax import groups as groups_lib
from grpo_jax import measures
from grpo_jax import models
from grpo_jax.data import profiling
from grpo_jax import rollout
from grpo_jax import sampling
from grpo_jax import strategies
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.train import update as update_lib
from grpo_jax.strategies import allocation
from grpo_jax.strategies import ragged
from grpo_jax.testing import budgets as fixtures

# ------------------------------------------------------------ ragged rows


def test_rows_join_drop_and_view_by_hand():
  ex = [fixtures.Example(10, "a", "1"), fixtures.Example(11, "b", "2")]
  # Draw 1: 2 + 1 rows in 4; draw 2: 0 + 2 rows in 3.
  one = fixtures.fake_rows(ex, [2, 1], 4, lambda g, m: g == 0 and m == 0)
  two = fixtures.fake_rows(ex, [0, 2], 3, lambda g, m: True)
  joined = ragged.join_rows([one, two], 6)
  np.testing.assert_array_equal(joined.group, [0, 0, 1, 1, 1, -1])
  np.testing.assert_array_equal(joined.total, [1, 0, 0, 1, 1, 0])
  np.testing.assert_array_equal(joined.prompt_index, [10, 10, 11, 11, 11, -1])
  assert joined.scored == 5
  dropped = ragged.drop_groups(joined, np.array([True, False]))
  np.testing.assert_array_equal(dropped.group, [-1, -1, 1, 1, 1, -1])
  assert dropped.mask[:2].sum() == 0 and dropped.mask[2:5].sum() == 6
  with pytest.raises(ValueError, match="num_rows=4"):
    ragged.join_rows([one, two], 4)
  # The view and back: slot (g, member); members mark the real ones.
  group = np.array([1, 0, 1, -1, 0, 1])
  np.testing.assert_array_equal(ragged.member_index(group),
                                [0, 0, 1, -1, 1, 2])
  view, members = ragged.scatter_view(np.arange(6.0) + 1, group, 2, 3)
  np.testing.assert_array_equal(view, [[2, 5, 0], [1, 3, 6]])
  np.testing.assert_array_equal(members, [[1, 1, 0], [1, 1, 1]])
  np.testing.assert_array_equal(ragged.gather_rows(view, group),
                                [1, 2, 3, 0, 5, 6])
  with pytest.raises(ValueError, match="largest group size 2"):
    ragged.scatter_view(np.zeros(6), group, 2, 2)


@pytest.mark.parametrize("name,expected", [
    # Groups [1, 0, 1] and [0, 1]: mean 2/3, std (ddof 1) sqrt(1/3); mean
    # 1/2, std sqrt(1/2). RLOO: R_j - mean of the others.
    ("grpo", [3**-0.5, -2 * 3**-0.5, 3**-0.5, -0.5**0.5, 0.5**0.5, 0, 0]),
    ("dr_grpo", [1 / 3, -2 / 3, 1 / 3, -0.5, 0.5, 0, 0]),
    ("rloo", [0.5, -1.0, 0.5, -1.0, 1.0, 0, 0]),
])
def test_estimators_over_the_view_take_only_real_members(name, expected):
  rewards = np.array([1, 0, 1, 0, 1, 0, 0], np.float32)
  group = np.array([0, 0, 0, 1, 1, -1, -1])
  view, members = ragged.scatter_view(rewards[:, None], group, 2, 4)
  est = advantages.make(name)
  adv, _ = est.estimate(est.init(), groups_lib.GroupData(
      rewards=view, weights=np.ones(1, np.float32), valid=members.any(1),
      lengths=np.zeros((2, 4), np.int32), members=members))
  got = ragged.gather_rows(np.asarray(adv), group)
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
  if name == "grpo":  # the segment-sum form agrees
    np.testing.assert_allclose(
        got, ragged.ragged_grpo(rewards, group, group >= 0, 2), atol=1e-6)


# ---------------------------------------------------- the sampler's rows


@pytest.fixture(scope="module")
def model():
  config = testing.tiny_config(max_position_embeddings=64)
  return config, models.init_params(config, jax.random.key(0))


def test_row_prompt_repeats_like_num_samples_and_pads(model):
  config, params = model
  prompts = sampling.pad_prompts([[1, 2, 3], [4, 5]], buckets=(8,))
  kwargs = dict(max_new_tokens=3, eos_ids=(), pad_id=0)
  key = jax.random.PRNGKey(3)
  # Rows 0 and 2 greedy (temperature 0): prompt 0's and prompt 1's argmax.
  tau = np.array([0.0, 1.0, 0.0, 1.0], np.float32)
  grouped = sampling.sample(params, config, *prompts, key, num_samples=2,
                            temperature=tau, **kwargs)
  rows = sampling.sample(params, config, *prompts, key, temperature=tau,
                         row_prompt=np.array([0, 0, 1, 1]), **kwargs)
  np.testing.assert_array_equal(rows.tokens, grouped.tokens)
  np.testing.assert_allclose(rows.tempered_logprobs,
                             grouped.tempered_logprobs, atol=1e-6)
  # Any arrangement, padding included (the same program: row_prompt is
  # traced): a greedy row continues its own prompt.
  mixed = sampling.sample(params, config, *prompts, key, temperature=tau,
                          row_prompt=np.array([1, -1, 0, 1]), **kwargs)
  np.testing.assert_array_equal(mixed.tokens[0], grouped.tokens[2])
  np.testing.assert_array_equal(mixed.tokens[2], grouped.tokens[0])
  np.testing.assert_array_equal(mixed.lengths, [3, 0, 3, 3])
  np.testing.assert_array_equal(mixed.mask[1], 0)
  np.testing.assert_array_equal(mixed.tempered_logprobs[1], 0)
  assert not bool(mixed.truncated[1])
  with pytest.raises(ValueError, match="beyond the 2 prompts"):
    sampling.sample(params, config, *prompts, key,
                    row_prompt=np.array([0, 2]), **kwargs)


# ------------------------------------------------------------ strategies


def bind(name, num_prompts, num_rows, **options):
  return strategies.make_budget(name, num_prompts=num_prompts,
                                num_rows=num_rows, **options)


def test_knapsack_warms_up_uniform_then_allocates_by_the_tracker():
  budget = bind("knapsack", 4, 16, n_min=2, n_max=8, warmup_steps=1,
                capacity=8)
  ex = [fixtures.Example(i, str(i), "0") for i in (5, 1, 2, 7)]
  calls = []

  def draw(examples, sizes, num_rows, r):
    calls.append((list(sizes), num_rows, r))
    # Prompt p solves its first k_p rows: rates .5, .25, .75, 0 at warm-up.
    k = {0: 2, 1: 1, 2: 3, 3: 0}
    return fixtures.fake_rows(examples, sizes, num_rows, lambda g, m: m < k[g])

  state = budget.init()
  plan, state = budget.apply(state, draw=draw, select=lambda: ex, step=0,
                             task=None, profile=None)
  assert calls[0] == ([4, 4, 4, 4], 16, 0)
  assert plan.measures["budget/warmup"] == 1.0
  assert plan.measures["budget/seen_prompts"] == 0.0
  np.testing.assert_array_equal(np.asarray(state.trials)[[5, 1, 2, 7]], 4)
  np.testing.assert_array_equal(np.asarray(state.successes)[[5, 1, 2, 7]],
                                [2, 1, 3, 0])
  # Step 1: p = [.5, .25, .75, 0]; the DP by hand over n in [2, 8] with 8
  # spare: value(n, .5) = (1 - 2^(1-n)) / 8, value(n, .25) =
  # (1 - .25^n - .75^n) 9/64, value(n, .75) = (1 - .75^n - .25^n) 3/64;
  # p = 0 is worth nothing and keeps n_min. The best of every split of
  # the 8 extra rows over the first three is [5, 7, 2] (checked by brute
  # force below).
  values = lambda n, p: (1 - p**n - (1 - p)**n) * p * (1 - p)**2
  best = max(((a, b, c) for a in range(2, 9) for b in range(2, 9)
              for c in range(2, 9) if a + b + c <= 14),
             key=lambda n: (round(values(n[0], .5) + values(n[1], .25)
                                  + values(n[2], .75), 12), -sum(n)))
  plan, state = budget.apply(state, draw=draw, select=lambda: ex, step=1,
                             task=None, profile=None)
  assert calls[1][0] == list(best) + [2]
  assert plan.measures["budget/warmup"] == 0.0
  assert plan.measures["budget/seen_prompts"] == 1.0
  assert plan.measures["budget/group_size_max"] == max(best)
  # The tracker now holds this visit's counts (a new visit replaces).
  np.testing.assert_array_equal(np.asarray(state.trials)[[5, 1, 2, 7]],
                                list(best) + [2])


def test_knapsack_matches_the_variants_vector():
  # VARIANTS.md 4.3: p = [.5, .1, .9, 0], budget 16, n in [2, 8] ->
  # n = [5, 7, 2, 2]; the tracker gives those rates.
  tracker = allocation.SuccessTracker(
      successes=jnp.asarray([1., 1., 9., 0.]),
      trials=jnp.asarray([2., 10., 10., 3.]))
  budget = bind("knapsack", 4, 16, n_min=2, n_max=8, warmup_steps=0,
                capacity=4)
  seen = []
  plan, _ = budget.apply(
      tracker, select=lambda: [fixtures.Example(i, "", "") for i in range(4)],
      draw=lambda ex, sizes, n, r: (
          seen.append(list(sizes))
          or fixtures.fake_rows(ex, sizes, n, lambda g, m: False)),
      step=0, task=None, profile=None)
  assert seen == [[5, 7, 2, 2]]
  np.testing.assert_allclose(plan.measures["budget/value"], 0.161065,
                             atol=1e-6)


def test_pilot_commit_draws_twice_and_drops_skipped_pilots():
  # VARIANTS.md 4.2: pilot_R = [[1,1,1,1],[1,0,0,0],[1,1,0,0],[0,0,0,0]],
  # n0 = 4, B = 32, g_max = 12: s = [0, .433, .5, 0], extra [0, 8, 8, 0].
  pilot = [[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
  budget = bind("pilot_commit", 4, 32, n0=4, g_max=12, min_std=0.1)
  calls = []

  def draw(examples, sizes, num_rows, r):
    calls.append((list(sizes), num_rows, r))
    if r == 0:
      return fixtures.fake_rows(examples, sizes, num_rows,
                                lambda g, m: pilot[g][m])
    return fixtures.fake_rows(examples, sizes, num_rows, lambda g, m: m % 2)

  plan, state = budget.apply((), draw=draw, step=0, task=None, profile=None,
                             select=lambda: [fixtures.Example(i, "", "")
                                             for i in range(4)])
  assert state == ()
  assert calls == [([4, 4, 4, 4], 16, 0), ([0, 8, 8, 0], 16, 1)]
  rows = plan.rows
  np.testing.assert_array_equal(rows.group, [1] * 12 + [2] * 12 + [-1] * 8)
  # Prompt 1: its pilot [1, 0, 0, 0], then its committed rows 0,1,0,1,...
  np.testing.assert_array_equal(rows.total[:12], [1, 0, 0, 0] + [0, 1] * 4)
  assert plan.measures["budget/skipped_prompts"] == 2.0
  assert plan.measures["budget/group_size_max"] == 12.0
  assert plan.measures["budget/rows_used"] == 24 / 32
  np.testing.assert_allclose(plan.measures["budget/pilot_std_mean"],
                             (0.4330127 + 0.5) / 4, atol=1e-6)


def test_sgpo_profiles_once_then_schedules_easy_to_hard():
  # VARIANTS.md 4.1: p = [1, .5, .1, 0, .3, .02], G in [2, 16], the zero
  # kept: G = [-, 2, 10, 16, 4, 16], order [1, 4, 2, 5, 3].
  solved = [8, 4, 0.8, 0, 2.4, 0.16]
  budget = bind("sgpo", 3, 32, num_samples=8, g_min=2, g_max=16,
                zero_keep_frac=1.0, capacity=8)
  profiles, draws = [], []

  def profile(indices, n, signal):
    profiles.append((list(indices), n, signal))
    return profiling.Profile(index=np.asarray(indices),
                             successes=np.asarray(solved, np.float32),
                             trials=np.full(6, 8.0, np.float32))

  def draw(examples, sizes, num_rows, r):
    draws.append(([e.index for e in examples], list(sizes), num_rows))
    return fixtures.fake_rows(examples, sizes, num_rows, lambda g, m: False)

  state = budget.init()
  plan, state = budget.apply(state, draw=draw, select=None,
                             task=fixtures.Task(), profile=profile, step=0)
  assert profiles == [([0, 1, 2, 3, 4, 5], 8, "")]
  # The first three of the order fit: 2 + 4 + 10 = 16 <= 32 rows.
  assert draws[0] == ([1, 4, 2], [2, 4, 10], 32)
  assert int(state.cursor) == 3 and int(state.profiled) == 1
  assert plan.measures["budget/profiled_prompts"] == 6.0
  plan, state = budget.apply(state, draw=draw, select=None,
                             task=fixtures.Task(), profile=profile, step=1)
  assert len(profiles) == 1  # profiled once
  # 5 (16 rows) and 3 (16 rows) fill the 32; a third slot is padding.
  assert draws[1] == ([5, 3, 5], [16, 16, 0], 32)
  assert int(state.cursor) == 0  # the order starts over
  assert plan.measures["budget/skipped_prompts"] == 1.0


def test_profile_problems_pads_the_last_batch():
  seen = []

  def solve(batch, b):
    seen.append((list(batch), b))
    return np.asarray(batch)[:, None] % np.array([2, 3]) == 0

  prof = profiling.profile_problems(solve, [4, 3, 6], num_samples=2,
                                    batch_size=2)
  assert seen == [([4, 3], 0), ([6, 6], 1)]
  np.testing.assert_array_equal(prof.successes, [1, 1, 2])
  np.testing.assert_array_equal(prof.rates, [.5, .5, 1])


@pytest.mark.parametrize("name,options", [
    pytest.param(e.name, dict(o), id=f"{e.name}-{i}")
    for e in strategies.BUDGETS.entries() if e.name != "fixed"
    for i, o in enumerate(e.examples)])
def test_every_budget_keeps_its_rows_and_state_shapes(name, options):
  budget = bind(name, 4, 16, **options)
  state = budget.init()
  prof = lambda idx, n, s: profiling.Profile(
      np.asarray(idx), np.asarray(idx, np.float32) % (n + 1),
      np.full(len(idx), float(n), np.float32))
  plan, new = budget.apply(
      state, step=7, task=fixtures.Task(), profile=prof,
      select=lambda: [fixtures.Task().example(i) for i in (0, 2, 4, 5)],
      draw=lambda ex, sizes, n, r: fixtures.fake_rows(ex, sizes, n,
                                             lambda g, m: (g + m) % 2))
  sizes = ragged.group_sizes(plan.rows.group, 4)
  assert plan.rows.group.shape == (16,) and sizes.sum() <= 16
  assert sizes.max() <= budget.width
  assert jax.tree.structure(new) == jax.tree.structure(state)
  for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(state)):
    assert np.shape(a) == np.shape(b)
  assert all(np.isfinite(v) for v in plan.measures.values())


def test_budget_states_survive_a_checkpoint(tmp_path):
  states = {"knapsack": allocation.tracker_init(capacity=5),
            "sgpo": allocation.sgpo_init(capacity=5)}
  leaves, tree = jax.tree.flatten(states)
  distinct = jax.tree.unflatten(tree, [jnp.asarray(x) + i + 1
                                       for i, x in enumerate(leaves)])
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(1, distinct)
  restored, _ = ckpt.restore(jax.tree.map(jnp.zeros_like, distinct))
  ckpt.close()
  testing.assert_close(restored, distinct, rtol=0, atol=0)


# ------------------------------------------------------- config errors


def quick(name):
  import importlib  # pylint: disable=g-import-not-at-top
  return importlib.import_module(f"configs.{name}").get_config()


@pytest.mark.parametrize("change,field", [
    # Less than n_min = 2 rows for each of the 2 prompts.
    (lambda c: c.rollout.update(num_generations=1), "budget.kwargs.n_min"),
    (lambda c: c.budget.kwargs.update(n_max=9), "budget.kwargs.n_max"),
    (lambda c: c.budget.kwargs.update(capacity=50),
     "budget.kwargs.capacity"),
    (lambda c: setattr(c, "advantage", config_lib.ml_collections.ConfigDict(
        dict(name="opo", kwargs={}))), "advantage.name"),
    (lambda c: c.groups.update(name="dynamic_sampling"), "groups.name"),
    # GTPO reads G: equal groups in blocks of rows.
    (lambda c: c.credit.update(name="gtpo"), "credit.name"),
    (lambda c: c.rollout.update(record_topk=2), "rollout.record_topk"),
    (lambda c: c.budget.update(name="nope"), "budget.name"),
])
def test_knapsack_config_errors_name_the_field(change, field):
  c = quick("knapsack_rl")
  change(c)
  with pytest.raises(ValueError, match=f"config.{field}:"):
    train.validate(c)


def test_pilot_and_sgpo_config_errors_name_the_field():
  c = quick("pilot_commit")
  c.budget.kwargs.n0 = 4  # 2 x 4 pilots fill the 8 rows
  with pytest.raises(ValueError, match="config.budget.kwargs.n0:"):
    train.validate(c)
  c = quick("sgpo")
  c.select.name = "prioritized"
  with pytest.raises(ValueError, match="config.select.name:"):
    train.validate(c)
  c = quick("sgpo")
  c.budget.kwargs.g_max = 9
  with pytest.raises(ValueError, match="config.budget.kwargs.g_max:"):
    train.validate(c)


# ------------------------------------------------ the pipeline, :tiny


def coin(name):
  """0 or 1 by a hash of (name, completion): the tiny model earns no
  reward, and a budget needs both kinds."""
  def fn(prompts, completions, answers):
    del prompts, answers
    return [float(hashlib.blake2b(f"{name}|{c}".encode()).digest()[0] % 2)
            for c in completions]
  return fn


def tiny_run(name, change=lambda c: None, **budget_options):
  import importlib  # pylint: disable=g-import-not-at-top
  config = importlib.import_module(f"configs.{name}").get_config("tiny")
  config.budget.kwargs.update(budget_options)
  change(config)
  config.rewards.workers = 0
  run = train.build(config)
  pipeline = run.rollout_fn.keywords["pipeline"]
  pipeline = pipeline._replace(verifiers={
      n: (coin(n), w) for n, (_, w) in pipeline.verifiers.items()})
  return run, pipeline


def rollout_once(run, pipeline, states, step, key=3):
  with jax.set_mesh(run.mesh):
    return rollout.generate(run.state.params, run.ref_params, step,
                            jax.random.PRNGKey(key), states,
                            pipeline=pipeline)


@pytest.fixture(scope="module")
def knapsack_run():
  return tiny_run("knapsack_rl", warmup_steps=0)


def seeded(run, rates):
  """The run's stage states with the knapsack tracker at `rates` for
  every problem (10 trials each)."""
  states = {n: run.state.states[n] for n in rollout.STAGES}
  capacity = states["budget"].trials.shape[0]
  rates = np.resize(np.asarray(rates, np.float32), capacity)
  states["budget"] = allocation.SuccessTracker(
      successes=jnp.asarray(10 * rates), trials=jnp.full(capacity, 10.0))
  return states


def test_knapsack_acts_in_a_tiny_step(knapsack_run):
  run, pipeline = knapsack_run
  # Rates 0.5 / 0 alternating by problem: the step's two prompts differ
  # (uniform then gives 4 + 4, the knapsack 6 + 2) or agree.
  states = seeded(run, [0.5, 0.0, 0.0, 0.5])
  found = False
  for step in range(4):
    batch, m, new = rollout_once(run, pipeline, states, step)
    # Two prompts at p = 0 are worth nothing: 2 + 2 rows, the rest unused.
    assert batch.tokens.shape[0] == 8 and 0.5 <= m["budget/rows_used"] <= 1
    found |= m["budget/group_size_max"] > m["budget/group_size_min"]
    if m["budget/group_size_max"] > m["budget/group_size_min"]:
      assert m["rollout/nonzero_gradient_share"] > 0, m
      # Padding-free here (8 of 8 rows) and every advantage on real rows.
      assert float(jnp.abs(batch.advantages).max()) > 0
      # train.build's update shares no prompt per block of rows: on policy
      # it scores the ragged rows as the sampler did (~1e-2 off with
      # blocks of G rows sharing the first row's prompt).
      records = [run.update_fn(jax.tree.map(jnp.copy, run.state), mb)[1]
                 for mb in update_lib.minibatches(batch,
                                                  run.loop.num_minibatches)]
      gap = measures.values(measures.merge_all(jax.device_get(records)))[
          "logprob/sampler_trainer_max_abs_diff"]
      assert float(gap) < 1e-5, gap
  assert found
  assert not np.array_equal(new["budget"].trials, states["budget"].trials)


def test_a_credit_rule_of_each_rows_tokens_runs_on_ragged_rows(knapsack_run):
  # AH-GRPO: A_t = exp(-alpha C_t) A, C_t the row's entropy before t. The
  # same step under the identity rule gives A; the ratio is 1 at each row's
  # first token and falls along it where the sampler was uncertain.
  run, pipeline = tiny_run("knapsack_rl", lambda c: c.credit.update(
      name="ah_grpo", kwargs={"alpha": 0.5}), warmup_steps=0)
  states = seeded(run, [0.5, 0.0, 0.0, 0.5])
  for step in range(4):
    batch, m, _ = rollout_once(run, pipeline, states, step)
    plain, _, _ = rollout_once(knapsack_run[0], knapsack_run[1], seeded(
        knapsack_run[0], [0.5, 0.0, 0.0, 0.5]), step)
    np.testing.assert_array_equal(batch.tokens, plain.tokens)
    a, a0 = np.asarray(batch.advantages), np.asarray(plain.advantages)
    moved = np.abs(a0) > 0
    if not moved.any():
      continue
    ratio = a[moved] / a0[moved][:, None]
    mask = np.asarray(batch.completion_mask)[moved]
    np.testing.assert_allclose(ratio[:, 0], 1.0, rtol=1e-6)
    assert np.all(np.diff(ratio, axis=1)[mask[:, 1:] > 0] <= 1e-6)
    assert m["credit/ah_grpo/discounted_fraction"] > 0
    assert ratio[mask > 0].min() < 0.99
    return
  pytest.fail("no step with a nonzero advantage")


def test_allocation_changes_every_step_traces_once(knapsack_run):
  run, pipeline = knapsack_run
  update = update_lib.make_update_fn(
      model_config=run.model_config, optimizer=optax_sgd(),
      objective=run_objective(run), group_size=1, jit=False)
  traces = []

  def counted(state, batch):
    traces.append(1)
    return update(state, batch)
  jitted = jax.jit(counted)
  state = run.state
  rollout_once(run, pipeline, seeded(run, [0.5]), 0)  # compiled before
  before = sampling.trace_count()
  sizes = set()
  for step, rates in enumerate([[0.5, 0.0], [0.1, 0.9, 0.5], [0.2]]):
    batch, m, _ = rollout_once(run, pipeline, seeded(run, rates), step)
    sizes.add((m["budget/group_size_min"], m["budget/group_size_max"]))
    state, _ = jitted(state, batch)
  assert len(sizes) > 1  # the allocation changed
  assert sampling.trace_count() == before
  assert len(traces) == 1


def optax_sgd():
  import optax  # pylint: disable=g-import-not-at-top
  return optax.sgd(1e-3)


def run_objective(run):
  from grpo_jax import objectives  # pylint: disable=g-import-not-at-top
  c = run.config
  return objectives.make(c.objective.name, **c.objective.kwargs)


def test_a_budget_step_is_determined_by_its_key(knapsack_run):
  run, pipeline = knapsack_run
  states = seeded(run, [0.5, 0.0, 0.3])
  one, m1, s1 = rollout_once(run, pipeline, states, 2, key=5)
  two, m2, s2 = rollout_once(run, pipeline, states, 2, key=5)
  np.testing.assert_array_equal(one.tokens, two.tokens)
  np.testing.assert_array_equal(one.advantages, two.advantages)
  testing.assert_close(s1["budget"], s2["budget"], rtol=0, atol=0)
  assert {k: v for k, v in m1.items() if not k.startswith("time/")} == {
      k: v for k, v in m2.items() if not k.startswith("time/")}
  other, _, _ = rollout_once(run, pipeline, states, 2, key=6)
  assert not np.array_equal(one.tokens, other.tokens)


def test_pilot_commit_acts_in_a_tiny_step():
  run, pipeline = tiny_run("pilot_commit", min_std=0.0)
  states = {n: run.state.states[n] for n in rollout.STAGES}
  batch, m, _ = rollout_once(run, pipeline, states, 0)
  assert batch.tokens.shape[0] == 8
  assert m["budget/committed_rows"] > 0, m
  assert m["rollout/nonzero_gradient_share"] > 0, m
  # min_std 0.6 is above any {0, 1.1} pilot's std: every prompt skipped,
  # nothing trains.
  run, pipeline = tiny_run("pilot_commit", min_std=0.6)
  batch, m, _ = rollout_once(run, pipeline, states, 0)
  assert m["budget/skipped_prompts"] == 2.0
  assert float(batch.completion_mask.sum()) == 0.0


def test_sgpo_acts_in_a_tiny_step():
  run, pipeline = tiny_run("sgpo", zero_keep_frac=1.0)
  states = {n: run.state.states[n] for n in rollout.STAGES}
  batch, m, new = rollout_once(run, pipeline, states, 0)
  problems = len(pipeline.task.train_indices())
  assert m["budget/profiled_prompts"] == problems
  assert int(new["budget"].profiled) == 1
  assert float(new["budget"].trials.sum()) == problems * 2
  assert m["budget/rows_used"] > 0 and batch.tokens.shape[0] == 4
  _, m2, newer = rollout_once(run, pipeline, new, 1)
  assert "budget/profiled_prompts" not in m2  # profiled once
  assert int(newer["budget"].cursor) != int(new["budget"].cursor) or (
      m2["budget/kept_problems"] <= 2)


@pytest.mark.slow
def test_the_knapsack_tracker_resumes_exactly(tmp_path):
  import importlib  # pylint: disable=g-import-not-at-top
  config = importlib.import_module("configs.knapsack_rl").get_config("tiny")
  config.budget.kwargs.warmup_steps = 1
  config.rewards.workers = 0
  config.train.num_steps = 3
  config.checkpoint.every = 1
  straight = train.train(config, str(tmp_path / "a"))
  config.train.num_steps = 2
  train.train(config, str(tmp_path / "b"))
  config.train.num_steps = 3
  resumed = train.train(config, str(tmp_path / "b"))
  testing.assert_close(resumed.states["budget"], straight.states["budget"],
                       rtol=0, atol=0)
  assert float(straight.states["budget"].trials.sum()) > 0
  testing.assert_close(resumed.params, straight.params, rtol=0, atol=0)


@pytest.mark.slow
def test_an_sgpo_run_resumes_exactly(tmp_path):
  """configs/sgpo.py:tiny through train.train: crash after step 2's
  metrics, resume from step 2's checkpoint; the profile flag and the
  curriculum cursor come back (no second pass: step 0's record alone has
  budget/profiled_prompts), and states and every metric but timing equal
  the straight run's, bit for bit (`testing.check_resume_is_exact`)."""
  import importlib  # pylint: disable=g-import-not-at-top
  config = importlib.import_module("configs.sgpo").get_config("tiny")
  # The random tiny model solves nothing (p = 0 everywhere): keep them all.
  config.budget.kwargs.zero_keep_frac = 1.0
  config.rewards.workers = 0
  config.metrics.tensorboard = config.metrics.plot = False
  config.eval.every = 0
  config.train.num_steps, config.checkpoint.every = 4, 1
  straight, records = testing.check_resume_is_exact(config, str(tmp_path))
  budget = straight.states["budget"]
  assert int(budget.profiled) == 1
  assert [r["step"] for r in records
          if "budget/profiled_prompts" in r] == [0]
  # The cursor moved on every step (one p = 0 query of g_max = 4 rows
  # fills the N = 4 rows) and the resumed run carried it on.
  assert [r["budget/cursor"] for r in records] == [1.0, 2.0, 3.0, 4.0]
  assert int(budget.cursor) == 4
