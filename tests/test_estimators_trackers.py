"""SPO's per-prompt Beta tracker and RiskPO's tracked quantiles: the
VARIANTS.md vectors (1.4, 1.9), numpy references written as loops, edge
cases, option errors, the state through a checkpoint and a resumed run,
and an off-policy learning test each; the tasks' stable indices (every
estimator config's one-step run is in tests/test_estimators_stateless.py)."""


import inspect

import jax.numpy as jnp
import numpy as np
import pytest

from configs import riskpo as riskpo_config
from configs import spo as spo_config
from grpo_jax import advantages
from grpo_jax.data import arithmetic
from grpo_jax.runtime import checkpoint
from grpo_jax import data
from grpo_jax import groups as groups_lib
from grpo_jax import objectives
from grpo_jax.train import optim
from grpo_jax import testing
from grpo_jax.testing import learning
from grpo_jax import train
from grpo_jax.advantages import trackers

CONFIGS = {"spo": spo_config, "riskpo": riskpo_config}


def f64(x):
  return testing.numpy(x).astype(np.float64)


def close(actual, expected, *, atol=1e-6, rtol=1e-6):
  np.testing.assert_allclose(f64(actual), np.asarray(expected, np.float64),
                             atol=atol, rtol=rtol)


# ---------------------------------------------------------------- SPO

# VARIANTS.md 1.4.
SPEC_ALPHA = np.array([4.0, 1.0, 2.0, 0.5])
SPEC_BETA = np.array([4.0, 3.0, 2.0, 0.5])
SPEC_R = np.array([[1.0], [0.0], [1.0], [0.0]])


def spec_state():
  return trackers.SPOState(alpha=jnp.asarray(SPEC_ALPHA, jnp.float32),
                           beta=jnp.asarray(SPEC_BETA, jnp.float32))


def test_spo_spec_vector():
  adv, state = trackers.spo(SPEC_R, spec_state(),
                            prompt_index=jnp.arange(4))
  close((adv)[:, 0],
                       [0.848875, -0.606339, 0.848875, -1.091410], atol=1e-5)
  # By hand, rho = 0.875: 0.875 * 4 + 1 = 4.5, 0.875 * 0.5 + 1 = 1.4375, ...
  close((state.alpha), [4.5, 0.875, 2.75, 0.4375],
                       atol=1e-6)
  close((state.beta), [3.5, 3.625, 1.75, 1.4375],
                       atol=1e-6)


def test_spo_kl_adaptive_rho_update_priorities_and_prior_vectors():
  rho = trackers.spo_rho(jnp.asarray([0.0, 0.06, 0.12, 0.01]))
  close((rho), [0.96, 0.875, 0.875, 0.890899], atol=1e-6)
  state = trackers.spo_update(spec_state(), jnp.asarray(SPEC_R), jnp.arange(4),
                              rho, jnp.ones(4, bool))
  close((state.alpha), [4.84, 0.875, 2.75, 0.445449],
                       atol=1e-5)
  close((state.beta), [3.84, 3.625, 1.75, 1.445449],
                       atol=1e-5)
  close((trackers.spo_priority(spec_state())),
                       [0.55, 0.483013, 0.55, 0.55], atol=1e-6)
  close((jnp.stack(trackers.spo_prior(3, 8))),
                       [3.111111, 4.888889], atol=1e-5)
  close((jnp.stack(trackers.spo_prior(0, 0))), [0.5, 0.5])
  state = trackers.spo_init(capacity=6)
  assert state.alpha.shape == (6,)
  close((state.alpha), np.full(6, 0.5))


def spo_reference(batches, capacity, rho=0.875):
  """[advantages] of SPO over (rewards, prompt_index, valid) batches, numpy
  loops from the prior 0.5 / 0.5."""
  alpha = np.full(capacity, 0.5)
  beta = np.full(capacity, 0.5)
  out = []
  for rewards, index, valid in batches:
    rewards = np.asarray(rewards, np.float64)
    raw = np.zeros_like(rewards)
    for p, x in enumerate(index):
      if 0 <= x < capacity:
        value = alpha[x] / (alpha[x] + beta[x])
      else:
        value = 0.5
      raw[p] = rewards[p] - value
    entries = raw[np.asarray(valid)].ravel()
    if entries.size > 1:
      adv = (raw - entries.mean()) / (entries.std(ddof=1) + 1e-8)
    else:
      adv = raw
    adv[~np.asarray(valid)] = 0.0
    out.append(adv)
    decayed = set()
    for p, x in enumerate(index):
      if valid[p] and 0 <= x < capacity:
        if x not in decayed:
          alpha[x] *= rho
          beta[x] *= rho
          decayed.add(x)
        alpha[x] += rewards[p].sum()
        beta[x] += (1 - rewards[p]).sum()
  return out, alpha, beta


def test_spo_over_a_run_matches_the_loop_reference():
  """G = 2, revisits, a prompt twice in one batch, an untracked prompt
  (-1), one outside the table, a filler."""
  rng = np.random.default_rng(0)
  capacity = 5
  indices = [[0, 1, 2, -1], [0, 0, 3, 7], [1, 2, 0, 4], [4, 3, 2, 1]]
  valids = [[True] * 4, [True, True, True, True], [True, False, True, True],
            [True] * 4]
  batches = [(rng.integers(0, 2, (4, 2)).astype(float), np.array(i),
              np.array(v)) for i, v in zip(indices, valids)]
  expected, alpha, beta = spo_reference(batches, capacity)
  estimator = advantages.make("spo", capacity=capacity)
  state = estimator.init()
  for (rewards, index, valid), want in zip(batches, expected):
    adv, state = estimator.estimate(state, groups_lib.from_rewards(
        rewards, valid=valid, prompt_index=jnp.asarray(index, jnp.int32)))
    close((adv), want, atol=1e-5)
  close((state.alpha), alpha, atol=1e-5)
  close((state.beta), beta, atol=1e-5)


def test_spo_untracked_prompts_use_the_prior_and_are_never_written():
  state = trackers.SPOState(alpha=jnp.asarray([3.0, 1.0]),
                            beta=jnp.asarray([1.0, 3.0]))
  rewards = jnp.asarray([[1.0], [1.0], [1.0]])
  adv, new = trackers.spo(rewards, state, prompt_index=jnp.asarray([0, -1, 2]))
  # v = 0.75 for slot 0; the prior 0.5 for -1 and for 2 (outside the table).
  raw = np.array([0.25, 0.5, 0.5])
  close((adv)[:, 0], (raw - raw.mean()) / raw.std(ddof=1),
                       atol=1e-5)
  close((new.alpha), [0.875 * 3 + 1, 1.0])
  close((new.beta), [0.875 * 1, 3.0])


def test_spo_a_batch_of_one_gives_the_raw_advantage_and_equal_ones_zero():
  state = trackers.spo_init(capacity=3)
  adv, _ = trackers.spo(jnp.asarray([[1.0]]), state,
                        prompt_index=jnp.asarray([1]))
  np.testing.assert_array_equal(f64(adv), [[0.5]])  # 1 - 0.5, no NaN
  # Every entry the same A_raw (fresh prior, all rewards 0): exactly 0.
  adv, _ = trackers.spo(jnp.zeros((3, 2)), state,
                        prompt_index=jnp.arange(3))
  np.testing.assert_array_equal(f64(adv), np.zeros((3, 2)))
  # One valid entry among fillers: its A_raw.
  adv, _ = trackers.spo(jnp.asarray([[0.0], [1.0]]), state,
                        prompt_index=jnp.arange(2),
                        valid=jnp.asarray([False, True]))
  np.testing.assert_array_equal(f64(adv), [[0.0], [0.5]])


@pytest.mark.parametrize("options,match", [
    ({"rho": "fixed"}, r"rho='fixed'.*constant, kl_adaptive"),
    ({"rho_value": 0.0}, r"rho_value"),
])
def test_spo_option_errors_name_the_option(options, match):
  with pytest.raises(ValueError, match=match):
    trackers.spo(jnp.zeros((2, 1)), trackers.spo_init(capacity=2),
                 prompt_index=jnp.arange(2), **options)


@pytest.mark.parametrize("options,match", [
    ({"rho_value": 2.0}, r"rho_value: rho_value=2\.0 must lie in \(0, 1\]; "
     r"set the constant forgetting factor"),
    ({"rho_value": 0.0}, r"rho_value: rho_value=0\.0 must lie in"),
    ({"rho": "fixed"}, r"rho: rho='fixed' is unknown; choose one of "
     r"constant, kl_adaptive"),
    ({"rho_min": 0.0}, r"rho_min: rho_min=0\.0 and rho_max=0\.96 must "
     r"satisfy 0 < rho_min <= rho_max <= 1.*such as the paper's"),
    ({"rho_min": float("nan")}, r"rho_min: rho_min=nan and"),
    ({"rho_max": 1.5}, r"rho_max: rho_min=0\.875 and rho_max=1\.5 must"),
    ({"rho_min": 0.97}, r"rho_max: rho_min=0\.97 and rho_max=0\.96 must"),
    ({"d_half": 0.0}, r"d_half: d_half=0\.0 must be > 0.*set one such as"),
    ({"eps": -1e-8}, r"eps: eps=-1e-08 must be finite and >= 0"),
    ({"rho_value": "0.5"}, r"rho_value: rho_value='0\.5' must be a real "
     r"number"),
    ({"capacity": 0}, r"capacity: capacity=0 must be an integer >= 1.*set "
     r"the task's number of problems or more"),
    ({"capacity": True}, r"capacity: capacity=True must be an integer"),
    ({"prompt_ids": "modulo"}, r"prompt_ids: prompt_ids='modulo' is unknown"),
])
def test_spo_option_values_fail_at_validation_naming_the_field(options,
                                                               match):
  """Every SPO option (state options included) is range-checked by the
  registry's ``check`` before any compute: `train.validate` names
  ``config.advantage.kwargs.<option>``, whichever rho is in use, and
  `advantages.make` refuses it too."""
  config = spo_config.get_config()
  config.advantage.kwargs = dict(config.advantage.kwargs,
                                 **{"rho": "constant", **options})
  with pytest.raises(ValueError, match=r"^config\.advantage\.kwargs\."
                     + match):
    train.validate(config)
  with pytest.raises(ValueError, match=match.split(": ", 1)[1]):
    advantages.make("spo", **dict(config.advantage.kwargs))


def test_spo_check_takes_the_estimators_own_defaults():
  """`check_spo` repeats the defaults of the functions it checks for (its
  cross-option rules read them): they must agree."""
  def defaults(fn):
    return {k: p.default for k, p in inspect.signature(fn).parameters.items()
            if p.default is not p.empty}
  own = {**defaults(trackers.spo), **defaults(trackers.spo_init),
         **defaults(trackers.spo_offline)}
  checked = defaults(trackers.check_spo)
  assert checked == {k: own[k] for k in checked}
  assert set(checked) == set(advantages.ESTIMATORS.options("spo", exclude=(
      "valid", "prompt_index", "divergence"))) | {"capacity"}


def test_spo_capacity_errors():
  with pytest.raises(ValueError, match="capacity=0"):
    advantages.make("spo", capacity=0).init()
  estimator = advantages.make("spo", capacity=4)
  with pytest.raises(ValueError, match=r"'spo' reads GroupData.prompt_index"):
    estimator.estimate(estimator.init(), groups_lib.from_rewards(
        jnp.zeros((2, 1))))


def test_spo_config_capacity_must_cover_the_task():
  config = spo_config.get_config()
  config.data.digits = 2  # 10**4 problems
  with pytest.raises(ValueError, match=(
      r"config.advantage.kwargs.capacity: 300 slots.*10000 problems.*'spo'"
      r".*capacity=10000")):
    train.validate(config)
  config.advantage.kwargs.capacity = 10_000
  train.validate(config)


# -------------------------------------------------------------- RiskPO

SPEC_PAPERS = np.array([[0.0, 0.2, 0.5, 1.0, 1.0]])


@pytest.mark.parametrize("quantiles", ["batch", "track"])
def test_riskpo_spec_vector(quantiles):
  """bundle_size 1, credit uniform; the tracked quantiles start at the
  first batch's empirical ones, so step one is the batch vector too."""
  adv, state = trackers.riskpo(SPEC_PAPERS, trackers.riskpo_init(),
                               quantiles=quantiles, credit="uniform")
  close((adv)[0],
                       [-2.104928, -1.002348, -0.626468, 0.0, 0.0],
                       atol=1e-5)
  if quantiles == "track":
    close((state.quantiles), [0.16, 1.0], atol=1e-6)


def test_riskpo_parts_by_hand():
  """The spec's a_R and a_C, w_mix = 0 (RVaR only) and the std credit."""
  papers = jnp.asarray(SPEC_PAPERS)
  sd = np.std(SPEC_PAPERS, ddof=1)
  a_r = np.array([-1.2, -1.142857, -0.714286, 0.0, 0.0])
  adv, _ = trackers.riskpo(papers, trackers.riskpo_init(), quantiles="batch",
                           credit="uniform", w_mix=0.0)
  close((adv)[0], a_r / sd, atol=1e-5)
  adv, _ = trackers.riskpo(papers, trackers.riskpo_init(), quantiles="batch",
                           credit="std")
  # One question: credit "std" divides by its own reward std once more.
  testing.assert_close(
      f64(adv)[0], np.array([-2.104928, -1.002348, -0.626468, 0, 0]) / sd,
      atol=1e-5)
  # q_beta - q_alpha = 0.84 instead of beta - alpha = 0.7.
  adv, _ = trackers.riskpo(papers, trackers.riskpo_init(), quantiles="batch",
                           credit="uniform", w_mix=0.0,
                           rvar_denominator="quantiles")
  close((adv)[0], a_r * 0.7 / 0.84 / sd, atol=1e-5)


def riskpo_reference(batches, *, bundle_size, alpha=0.2, beta=0.9, w=1.5,
                     lr=0.1, eps=1e-6):
  """[advantages] of tracked RiskPO, credit std, numpy loops."""
  q, out = None, []
  for rewards in batches:
    p, g = rewards.shape
    papers = [rewards[b:b + bundle_size].sum(0)
              for b in range(0, p, bundle_size)]
    every = np.concatenate(papers)
    if q is None:
      q = np.array([np.quantile(every, alpha), np.quantile(every, beta)])
      first = True
    else:
      first = False
    adv = np.zeros((p, g))
    for b, s in enumerate(papers):
      sd = np.std(s, ddof=1) if g > 1 else 0.0
      for j in range(g):
        a_r = (min(max(s[j], q[0]), q[1]) - q[1]) / (beta - alpha + eps)
        a_c = -max(q[0] - s[j], 0.0) / (alpha + eps)
        a = (w * a_c + a_r) / (w + 1) / ((sd if sd > 0 else 1.0) + eps)
        for k in range(bundle_size):
          question = rewards[b * bundle_size + k]
          sq = np.std(question, ddof=1)
          adv[b * bundle_size + k, j] = a / ((1.0 if sq <= 1e-3 else sq)
                                             + eps)
    out.append(adv)
    if not first:
      q = q + lr * (np.array([alpha, beta])
                    - np.array([(every < q[0]).mean(), (every < q[1]).mean()]))
  return out, q


def test_riskpo_tracked_bundles_over_a_run_match_the_loop_reference():
  rng = np.random.default_rng(1)
  batches = [rng.integers(0, 2, (4, 3)).astype(float) for _ in range(5)]
  expected, q = riskpo_reference(batches, bundle_size=2)
  estimator = advantages.make("riskpo", bundle_size=2)
  state = estimator.init()
  for rewards, want in zip(batches, expected):
    adv, state = estimator.estimate(state, groups_lib.from_rewards(rewards))
    close((adv), want, atol=1e-5)
    assert (f64(adv) <= 0).all()
  close((state.quantiles), q, atol=1e-5)


def test_riskpo_bundle_papers_by_hand():
  """Two questions per bundle: papers are the column sums."""
  rewards = jnp.asarray([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0],
                         [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
  papers = trackers.riskpo_papers(rewards, jnp.ones(4, bool), 2)
  np.testing.assert_array_equal(f64(papers), [[2, 1, 0], [1, 1, 1]])
  adv, _ = trackers.riskpo(rewards, trackers.riskpo_init(), bundle_size=2,
                           quantiles="batch", credit="uniform")
  # Bundle 1: papers all equal: 0. Bundle 0: S = [2, 1, 0], q_0.2 = 0.4,
  # q_0.9 = 1.8, std 1: a_R = (clip(S) - 1.8) / 0.7, a_C = -(0.4 - S)^+ / 0.2.
  a_r = (np.array([1.8, 1.0, 0.4]) - 1.8) / 0.7
  a_c = np.array([0.0, 0.0, -2.0])
  want = (1.5 * a_c + a_r) / 2.5
  close((adv)[:2], np.stack([want, want]), atol=1e-5)
  np.testing.assert_array_equal(f64(adv)[2:], np.zeros((2, 3)))


def test_riskpo_edge_cases_never_nan():
  init = trackers.riskpo_init()
  # One paper: 0 (batch quantiles equal S).
  adv, _ = trackers.riskpo(jnp.asarray([[0.3], [1.0]]), init,
                           quantiles="batch")
  np.testing.assert_array_equal(f64(adv), np.zeros((2, 1)))
  # All-equal papers: 0, both credit modes.
  for credit in ("uniform", "std"):
    adv, _ = trackers.riskpo(jnp.full((2, 4), 0.5), init, quantiles="batch",
                             credit=credit)
    np.testing.assert_array_equal(f64(adv), np.zeros((2, 4)))
  # Tracked: an all-equal first batch is 0 too (its quantiles equal S).
  adv, state = trackers.riskpo(jnp.full((2, 4), 0.5), init)
  np.testing.assert_array_equal(f64(adv), np.zeros((2, 4)))
  close((state.quantiles), [0.5, 0.5])
  # Only fillers: the state does not start.
  _, state = trackers.riskpo(jnp.ones((2, 2)), init,
                             valid=jnp.zeros(2, bool))
  assert float(state.started) == 0.0


@pytest.mark.parametrize("options,match", [
    ({"bundle_size": 3}, r"bundle_size=3 does not divide the P=4"),
    ({"quantiles": "ema"}, r"quantiles='ema'"),
    ({"credit": "rank"}, r"credit='rank'"),
    ({"rvar_denominator": "x"}, r"rvar_denominator='x'"),
    ({"alpha": 0.9, "beta": 0.2}, r"alpha=0.9 and beta=0.2"),
])
def test_riskpo_option_errors_name_the_option(options, match):
  with pytest.raises(ValueError, match=match):
    trackers.riskpo(jnp.zeros((4, 2)), trackers.riskpo_init(), **options)


def test_riskpo_config_bundle_must_divide_the_prompts():
  config = riskpo_config.get_config()
  config.advantage.kwargs.bundle_size = 3
  with pytest.raises(ValueError, match=(
      r"config.advantage.kwargs.bundle_size: 3 does not divide "
      r"rollout.num_prompts=2 \(estimator 'riskpo'")):
    train.validate(config)


# ------------------------------------------------------- checkpoints


def small_state(advantage):
  optimizer = optim.make_optimizer(learning_rate=1e-3)
  return train.init_state({"w": jnp.ones((2, 3))}, optimizer, seed=0,
                          components={"objective": objectives.make("ppo_clip"),
                                      "advantage": advantage})


def test_a_warm_tracker_round_trips_and_another_capacity_is_refused(
    tmp_path):
  estimator = advantages.make("spo", capacity=3)
  _, warm = estimator.estimate(estimator.init(), groups_lib.from_rewards(
      jnp.asarray([[1.0], [0.0]]), prompt_index=jnp.asarray([0, 2])))
  state = small_state(estimator)
  state = state._replace(states=dict(state.states, advantage=warm))
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(1, state)
  restored, _ = ckpt.restore(small_state(estimator))
  assert isinstance(restored.states["advantage"], trackers.SPOState)
  testing.assert_close(restored.states["advantage"], warm, rtol=0, atol=0)
  with pytest.raises(ValueError, match=r"\(3,\).*\(5,\)") as error:
    ckpt.restore_newest(small_state(advantages.make("spo", capacity=5)))
  ckpt.close()
  assert "advantage" in str(error.value)


@pytest.mark.parametrize("name", ["spo", "riskpo"])
def test_resume_continues_the_tracker_exactly(tmp_path, name):
  """Crash after step 2's metrics, resume from checkpoint 2: the tracker
  and every metric equal an uninterrupted run's, bit for bit."""
  config = CONFIGS[name].get_config("tiny")
  config.train.num_steps = 4
  config.checkpoint.every = 2
  config.metrics.tensorboard = False
  config.metrics.plot = False
  straight, _ = testing.check_resume_is_exact(config, str(tmp_path))
  tracker = straight.states["advantage"]
  if name == "spo":  # 4 steps x 4 samples counted in the table
    total = f64(tracker.alpha + tracker.beta)
    assert (total > 1.0).any() and total.sum() > 100.0 + 4 * 4 * 0.5


# ------------------------------------------------------------ learning


@pytest.mark.parametrize("name,options", [
    ("spo", {"capacity": 2}),
    ("riskpo", {"bundle_size": 2}),
])
def test_estimator_learns_a_trivial_task_off_policy(name, options):
  """The tracker's state is carried, each prompt at its own slot."""
  history, _ = learning.learn_trivial_task(advantages.make(name, **options))
  learning.check_learned(history)


# --------------------------------------------------------- task indices


def test_arithmetic_indices_are_stable_and_invert():
  task = arithmetic.ArithmeticTask(digits=1, ops=("+", "*"), operands=3, seed=4)
  assert task.num_problems == 1000 * 4
  # 3 + 5 * 2: digits (3, 5, 2), then ops (+ = 0, * = 1).
  assert task.index((3, 5, 2), ("+", "*")) == ((3 * 10 + 5) * 10 + 2) * 4 + 1
  for example in task.train(0, 16) + task.heldout(4):
    assert 0 <= example.index < task.num_problems
    assert task.example(example.index) == example
  other_seed = arithmetic.ArithmeticTask(digits=1, ops=("+", "*"), operands=3,
                                   seed=9)
  assert other_seed.example(123) == task.example(123)
  assert len({task.example(i).question
              for i in range(task.num_problems)}) == task.num_problems
  with pytest.raises(ValueError, match=r"index=4000 is outside \[0, 4000\)"):
    task.example(4000)


def test_list_dataset_indices_are_positions():
  examples = [data.Example(f"q{i}", str(i)) for i in range(5)]
  dataset = data.ListDataset(examples, seed=3)
  assert dataset.num_problems == 5
  for example in dataset.train(0, 5) + dataset.train(1, 3):
    assert example.question == f"q{example.index}"
    assert dataset.example(example.index) == example
  with pytest.raises(ValueError, match=r"index=5 is not the id"):
    dataset.example(5)


def test_arithmetic_train_indices_are_the_problems_not_held_out():
  task = arithmetic.ArithmeticTask(seed=1)
  trainable = set(task.train_indices().tolist())
  held = {e.index for e in task.heldout(18)}
  assert len(trainable) == 82 and not trainable & held  # 18 held out
  assert {e.index for e in task.train(0, 64)} <= trainable


def test_prioritized_draw_follows_the_tracker():
  """Problems the tracker has solved (p near 1) get weight ~0.05, the
  uncertain ones ~0.55: over many draws the uncertain ones dominate, in
  proportion, and a draw is a pure function of (seed, index)."""
  from grpo_jax.strategies import select  # pylint: disable=g-import-not-at-top
  task = data.ListDataset([data.Example(f"q{i}", str(i)) for i in range(4)],
                          seed=5)
  state = trackers.SPOState(alpha=jnp.asarray([1e6, 1.0, 1e6, 1.0]),
                            beta=jnp.asarray([1e-6, 1.0, 1e-6, 1.0]))
  priorities = trackers.spo_priority(state)
  close(priorities, [0.05, 0.55, 0.05, 0.55], atol=1e-3)
  first = [select.draw_by_priority(task, i, 1, priorities)[0].index
           for i in range(2000)]
  share = np.bincount(first, minlength=4) / 2000
  close(share, np.array([0.05, 0.55, 0.05, 0.55]) / 1.2, atol=0.03)
  again = select.draw_by_priority(task, 7, 3, priorities)
  assert again == select.draw_by_priority(task, 7, 3, priorities)
  assert len({e.index for e in again}) == 3
  with pytest.raises(ValueError, match="num_prompts=5 exceeds the 4"):
    select.draw_by_priority(task, 0, 5, priorities)
  with pytest.raises(ValueError, match="priorities must be"):
    select.draw_by_priority(task, 0, 1, np.ones((2, 2)))
