"""SPO's offline initialisation (VARIANTS.md 1.4; advantage.kwargs.
offline_init): the tracker set from n samples per training problem at step
0, with hand-computed Beta parameters; the option's checks; a real `:tiny`
step; a checkpoint of before still resumes, and a run resumes exactly."""

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import spo as spo_config
from grpo_jax import advantages
from grpo_jax.runtime import checkpoint
from grpo_jax.train import optim
from grpo_jax import objectives
from grpo_jax.data import profiling
from grpo_jax import rollout
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.advantages import trackers


def close(a, b):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6,
                             atol=1e-6)


# ------------------------------------------------- the Beta parameters


def test_offline_state_is_the_hand_computed_beta():
  # N_init = 1 / (1 - 0.875) = 8; n = 8. Problem 0: k = 3 ->
  # (8 * 3.5 / 9, 8 * 5.5 / 9); problem 2: k = 0 -> (8 * .5 / 9, 8 * 8.5 / 9);
  # problem 3: k = 8 -> the mirror. Slots 1 and 4 were not profiled: 0.5.
  state = trackers.spo_offline_state(
      trackers.spo_init(capacity=5), [0, 2, 3], [3.0, 0.0, 8.0],
      [8.0, 8.0, 8.0])
  close(state.alpha, [3.111111, 0.5, 0.444444, 7.555556, 0.5])
  close(state.beta, [4.888889, 0.5, 7.555556, 0.444444, 0.5])
  # rho_min 0.5: N_init = 2; n = 2, k = 1 -> (2 * 1.5 / 3, 2 * 1.5 / 3).
  half = trackers.spo_offline_state(trackers.spo_init(capacity=2), [1],
                                    [1.0], [2.0], rho_min=0.5)
  close(half.alpha, [0.5, 1.0])
  close(half.beta, [0.5, 1.0])


def test_hashed_ids_pool_their_counts_and_exact_ids_past_the_table_drop():
  # capacity 2, hash: ids 0 and 2 share slot 0 (k = 3 of n = 16:
  # 8 * 3.5 / 17, 8 * 13.5 / 17); id 3 -> slot 1 (k = 8 of 8).
  state = trackers.spo_offline_state(
      trackers.spo_init(capacity=2), [0, 2, 3], [3.0, 0.0, 8.0],
      [8.0, 8.0, 8.0], prompt_ids="hash")
  close(state.alpha, [1.647059, 7.555556])
  close(state.beta, [6.352941, 0.444444])
  exact = trackers.spo_offline_state(
      trackers.spo_init(capacity=2), [0, 2, 3], [3.0, 0.0, 8.0],
      [8.0, 8.0, 8.0])
  close(exact.alpha, [3.111111, 0.5])


def test_the_hook_profiles_once_with_n_and_off_samples_nothing():
  calls = []

  def profile(indices, n):
    calls.append((list(indices), n))
    return profiling.Profile(index=np.asarray(indices),
                             successes=np.asarray([2.0, 0.0], np.float32),
                             trials=np.full(2, n, np.float32))
  estimator = advantages.make("spo", capacity=4, offline_init=4)
  state, measures = estimator.offline(estimator.init(), profile, [1, 3])
  assert calls == [([1, 3], 4)]
  # N_init 8, n 4: k = 2 -> (8 * 2.5 / 5, 8 * 2.5 / 5); k = 0 ->
  # (8 * .5 / 5, 8 * 4.5 / 5).
  close(state.alpha, [0.5, 4.0, 0.5, 0.8])
  close(state.beta, [0.5, 4.0, 0.5, 7.2])
  assert measures == {"advantage/offline_problems": 2.0,
                      "advantage/offline_success_mean": 0.25}
  off = advantages.make("spo", capacity=4)
  kept, measures = off.offline(off.init(), profile, [1, 3])
  assert len(calls) == 1 and measures == {}
  testing.assert_close(kept, off.init(), rtol=0, atol=0)
  assert advantages.make("grpo").offline is None


# ------------------------------------------------------ config errors


@pytest.mark.parametrize("kwargs,match", [
    (dict(offline_init=-1), r"offline_init=-1 must be an integer >= 0"),
    (dict(offline_init=1.5), r"offline_init=1.5 must be"),
    (dict(offline_init=True), r"offline_init=True must be"),
    (dict(offline_init=8, rho_min=1.0, rho_max=1.0), r"N_init.*infinite"),
])
def test_bad_offline_init_names_the_field(kwargs, match):
  config = spo_config.get_config()
  config.advantage.kwargs = dict(config.advantage.kwargs, **kwargs)
  with pytest.raises(ValueError, match=(
      r"config.advantage.kwargs.offline_init: .*" + match)):
    train.validate(config)
  with pytest.raises(ValueError, match=match):  # and the estimator's own
    trackers.spo(jnp.zeros((2, 1)), trackers.spo_init(capacity=2),
                 prompt_index=jnp.asarray([0, 1]), **kwargs)


def test_the_config_uses_the_papers_eight_samples():
  assert spo_config.get_config().advantage.kwargs.offline_init == 8
  assert spo_config.get_config("tiny").advantage.kwargs.offline_init == 1


# ------------------------------------------------------- checkpoints


def small_state(capacity=3):
  return train.init_state(
      {"w": jnp.ones((2, 3))}, optim.make_optimizer(learning_rate=1e-3),
      seed=0, components={"objective": objectives.make("ppo_clip"),
                          "advantage": advantages.make("spo",
                                                       capacity=capacity)})


def test_a_checkpoint_from_before_offline_init_restores(tmp_path):
  """A tracker saved by a run without the option (same SPOState) restores
  under a config that sets it: the state has the same arrays."""
  saved = small_state()
  warm = trackers.SPOState(alpha=jnp.asarray([1.0, 2.0, 3.0]),
                           beta=jnp.asarray([4.0, 5.0, 6.0]))
  saved = saved._replace(states=dict(saved.states, advantage=warm))
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(1, saved)
  template = train.init_state(
      {"w": jnp.ones((2, 3))}, optim.make_optimizer(learning_rate=1e-3),
      seed=0, components={"objective": objectives.make("ppo_clip"),
                          "advantage": advantages.make(
                              "spo", capacity=3, offline_init=8)})
  restored, _ = ckpt.restore(template)
  ckpt.close()
  testing.assert_close(restored.states["advantage"], warm, rtol=0, atol=0)


# ------------------------------------------------- a real :tiny step


def solved_by_hash(prompts, completions, answers):
  """1 for about half the completions (a hash): the tiny model solves none."""
  del prompts, answers
  return [float(hashlib.blake2b(c.encode()).digest()[0] % 2)
          for c in completions]


@pytest.mark.slow
def test_step_zero_initialises_the_tracker_from_the_profile():
  config = spo_config.get_config("tiny")
  config.advantage.kwargs.offline_init = 2
  config.rewards.workers = 0
  run = train.build(config)
  pipeline = run.rollout_fn.keywords["pipeline"]
  pipeline = pipeline._replace(verifiers={
      n: (solved_by_hash, w) for n, (_, w) in pipeline.verifiers.items()})
  states = {n: run.state.states[n] for n in rollout.STAGES}
  key = jax.random.PRNGKey(3)
  with jax.set_mesh(run.mesh):
    _, m, new = rollout.generate(run.state.params, run.ref_params, 0, key,
                                 states, pipeline=pipeline)
    _, m1, later = rollout.generate(run.state.params, run.ref_params, 1,
                                    key, states, pipeline=pipeline)
    # The same pass, by hand: its counts, and the Beta parameters of each.
    from grpo_jax.rollout import budgets as budget_rollout  # pylint: disable=g-import-not-at-top
    prof = budget_rollout.profile_fn(
        run.state.params, jax.random.fold_in(key, rollout._OFFLINE_KEY),  # pylint: disable=protected-access
        pipeline)(pipeline.task.train_indices(), 2)
  indices = pipeline.task.train_indices()
  assert m["advantage/offline_problems"] == len(indices)
  assert 0 < m["advantage/offline_success_mean"] < 1
  assert "advantage/offline_problems" not in m1  # step 0 only
  k = np.asarray(prof.successes, np.float64)
  alpha, beta = 8 * (k + 0.5) / 3, 8 * (2 - k + 0.5) / 3
  # The problems step 0 did not draw hold the offline prior; step 1 (no
  # pass) leaves them at 0.5.
  a = np.asarray(new["advantage"].alpha, np.float64)[indices]
  b = np.asarray(new["advantage"].beta, np.float64)[indices]
  untouched = np.isclose(a, alpha, atol=1e-5) & np.isclose(b, beta,
                                                           atol=1e-5)
  assert untouched.sum() >= len(indices) - config.rollout.num_prompts
  assert len(set(np.round(alpha[untouched], 5))) > 1  # both kinds
  later_a = np.asarray(later["advantage"].alpha)[indices]
  assert (later_a == 0.5).sum() >= len(indices) - config.rollout.num_prompts


@pytest.mark.slow
def test_an_spo_run_with_offline_init_resumes_exactly(tmp_path):
  """configs/spo.py:tiny: crash after step 2, resume; the pass ran once
  (step 0's record alone), and states and metrics equal the straight
  run's bit for bit."""
  config = spo_config.get_config("tiny")
  config.rewards.workers = 0
  config.metrics.tensorboard = config.metrics.plot = False
  config.eval.every = 0
  config.train.num_steps, config.checkpoint.every = 4, 1
  _, records = testing.check_resume_is_exact(config, str(tmp_path))
  profiled = [r["step"] for r in records if "advantage/offline_problems" in r]
  assert profiled == [0]
