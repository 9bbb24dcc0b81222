"""Clip-Cov's random draw (the paper's rule, verl's ``randperm(C)[:k]``).

Hand example, on policy (ratio 1: PPO's clip cuts nothing), token_mean,
2 rows x 3 real tokens, A = [1, -1], logp = [[-0.5, -1, -3], [-0.5, -2, -1]]:
mean A = 0, mean logp = -8/6, so cov = A (logp + 4/3) =
[[0.8333, 0.3333, -1.6667], [-0.8333, 0.6667, -0.3333]]. Band (0, 5): the
candidates are (0,0), (0,1), (1,1), C = 3; share 0.34: k = floor(2.04) = 2.
The draws u[i, t] = uniform(fold_in(fold_in(key, i), t)) (jax.random's
threefry values, written out below) pick the 2 candidates of smallest u.
The gradient is REINFORCE's, -A_t / 6, on the kept tokens and 0 on the
dropped ones.
"""

import importlib
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import config as config_lib
from grpo_jax import train as train_lib
from grpo_jax import objectives
from grpo_jax import testing
from grpo_jax.objectives import covariance

LOGP = np.array([[-0.5, -1.0, -3.0], [-0.5, -2.0, -1.0]], np.float32)
ADV = np.array([1.0, -1.0], np.float32)
MASK = np.ones((2, 3), np.float32)
OPTIONS = dict(clip_cov_ratio=0.34, clip_cov_lb=0.0, clip_cov_ub=5.0)
# u[i, t] for PRNGKey(0), for the key after one update (split(key)[0]), and
# for PRNGKey(1); the candidates' draws decide.
U = {
    "seed0": [[0.282720, 0.104290, 0.228485], [0.578832, 0.090836, 0.751638]],
    "seed0_next": [[0.071746, 0.082604, 0.105407],
                   [0.016333, 0.856494, 0.528397]],
    "seed1": [[0.498187, 0.828372, 0.199526], [0.019454, 0.215044, 0.263847]],
}
# Dropped tokens: the two candidates of smallest u.
DROPPED = {
    "seed0": [(0, 1), (1, 1)],       # u .1043, .0908 (not (0,0): .2827)
    "seed0_next": [(0, 0), (0, 1)],  # u .0717, .0826 (not (1,1): .8565)
    "seed1": [(0, 0), (1, 1)],       # u .4982, .2150 (not (0,1): .8284)
}


def _grad_and_aux(objective, state):
  lp = jnp.asarray(LOGP)
  g = jax.grad(lambda x: objective.loss(
      state, x, lp, jnp.asarray(ADV), jnp.asarray(MASK))[0])(lp)
  _, aux = objective.loss(state, lp, lp, jnp.asarray(ADV), jnp.asarray(MASK))
  return np.asarray(g), aux


def _expected_grad(dropped):
  keep = np.ones((2, 3), bool)
  for i, t in dropped:
    keep[i, t] = False
  return -ADV[:, None] * keep / 6.0


def test_the_draws_are_the_written_ones():
  key = jax.random.PRNGKey(0)
  testing.assert_close(covariance.token_uniforms(key, (2, 3)),
                       jnp.asarray(U["seed0"]), atol=1e-6)
  testing.assert_close(
      covariance.token_uniforms(key, (2, 5))[:, :3],  # padding columns
      jnp.asarray(U["seed0"]), atol=1e-6)
  state = covariance._clip_cov_update(covariance.clip_cov_init(0), {})
  testing.assert_close(covariance.token_uniforms(state.key, (2, 3)),
                       jnp.asarray(U["seed0_next"]), atol=1e-6)


@pytest.mark.parametrize("seed,case", [(0, "seed0"), (1, "seed1")])
def test_random_draw_by_hand(seed, case):
  objective = objectives.make("clip_cov", seed=seed, **OPTIONS)
  g, aux = _grad_and_aux(objective, objective.init())
  testing.assert_close(g, _expected_grad(DROPPED[case]), atol=1e-7)
  testing.assert_close(aux.extra["cov_selected"].value(), 2.0 / 6.0)


def test_each_optimiser_step_draws_anew():
  objective = objectives.make("clip_cov", seed=0, **OPTIONS)
  state = objective.update(objective.init(), {})
  g, _ = _grad_and_aux(objective, state)
  testing.assert_close(g, _expected_grad(DROPPED["seed0_next"]), atol=1e-7)


def test_top_rule_takes_the_highest_covariances():
  """The same batch under ``top``: cov .8333 at (0,0) and .6667 at (1,1)."""
  objective = objectives.make("clip_cov", clip_cov_rule="top", **OPTIONS)
  g, _ = _grad_and_aux(objective, objective.init())
  testing.assert_close(g, _expected_grad([(0, 0), (1, 1)]), atol=1e-7)


def test_fewer_candidates_than_k_drops_them_all():
  """Band (0.5, 5): candidates (0,0) .8333 and (1,1) .6667; share 0.5 gives
  k = 3 > C = 2: both dropped, whatever the key."""
  for seed in range(3):
    objective = objectives.make("clip_cov", seed=seed, clip_cov_ratio=0.5,
                                clip_cov_lb=0.5, clip_cov_ub=5.0)
    g, _ = _grad_and_aux(objective, objective.init())
    testing.assert_close(g, _expected_grad([(0, 0), (1, 1)]), atol=1e-7)


def test_the_draw_is_uniform_with_an_exact_count():
  """Over 2000 keys: exactly k = 2 of the C = 3 candidates each time, each
  dropped with probability 2/3 (binomial sd 0.011), non-candidates never."""
  objective = objectives.make("clip_cov", **OPTIONS)
  lp = jnp.asarray(LOGP)

  def dropped(key):
    g = jax.grad(lambda x: objective.loss(
        covariance.ClipCovState(key), x, lp, jnp.asarray(ADV),
        jnp.asarray(MASK))[0])(lp)
    return g == 0.0

  keys = jax.random.split(jax.random.PRNGKey(7), 2000)
  out = np.asarray(jax.jit(jax.vmap(dropped))(keys))
  assert (out.sum(axis=(1, 2)) == 2).all()
  share = out.mean(axis=0)
  for i, t in [(0, 0), (0, 1), (1, 1)]:
    assert abs(share[i, t] - 2.0 / 3.0) < 0.045, share
  assert share[0, 2] == share[1, 0] == share[1, 2] == 0.0


def test_split_rows_fail_and_the_config_says_so():
  objective = objectives.make("clip_cov", **OPTIONS)
  args = [jnp.asarray(v) for v in (LOGP, LOGP, ADV, MASK)]
  stats = objective.prepass(*args)
  with pytest.raises(ValueError, match="microbatch_size=0"):
    objective.loss(objective.init(), *[v[:1] for v in args],
                   batch_stats=stats)
  config = importlib.import_module("configs.clip_cov").get_config("tiny")
  assert config.objective.kwargs.get("clip_cov_rule", "random") == "random"
  train_lib.validate(config)
  rows = config.rollout.num_prompts * config.rollout.num_generations
  config.train.microbatch_size = rows // config.train.num_minibatches // 2
  with pytest.raises(ValueError, match=r"train\.microbatch_size.*"
                     r"clip_cov_rule=top"):
    train_lib.validate(config)
  config.objective.kwargs.clip_cov_rule = "top"
  train_lib.validate(config)


@pytest.mark.parametrize("options,match", [
    ({"clip_cov_rule": "highest"}, "clip_cov_rule"),
    ({"seed": 1.5}, "seed")])
def test_bad_options(options, match):
  with pytest.raises(ValueError, match=match):
    objectives.make("clip_cov", **options)


def _run_state(seed, objective):
  from grpo_jax.train import optim  # pylint: disable=g-import-not-at-top
  from grpo_jax import train  # pylint: disable=g-import-not-at-top
  return train.init_state({"w": jnp.arange(3.0)},
                          optim.make_optimizer(learning_rate=1e-3),
                          seed=seed, components={"objective": objective})


def test_a_checkpoint_from_before_the_draw_key_resumes(tmp_path, caplog):
  """A clip_cov checkpoint written when its objective kept no state
  (states/objective empty) restores with `train.INITIAL_STATES`, as the
  loop resumes it: every saved array as it was, the draw key the run's
  initial one, and a warning naming it."""
  from grpo_jax.runtime import checkpoint  # pylint: disable=g-import-not-at-top
  from grpo_jax.train import saved_runs  # pylint: disable=g-import-not-at-top
  fresh = _run_state(3, objectives.make("clip_cov", **OPTIONS))
  saved = jax.tree.map(lambda x: x + 1, fresh)._replace(
      states={"objective": ()})  # the old objective's empty state
  ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
  ckpt.save(7, saved)
  ckpt.close()
  template = jax.tree.map(jnp.zeros_like, fresh)._replace(
      states=fresh.states)  # run.state: the objective's init
  with caplog.at_level("WARNING"):
    restored, meta = saved_runs.restore(str(tmp_path), template)
  assert meta["step"] == 7
  assert "holds no states/objective" in caplog.text
  testing.assert_close(restored.params, saved.params, rtol=0, atol=0)
  testing.assert_close(restored.opt_state, saved.opt_state, rtol=0, atol=0)
  np.testing.assert_array_equal(restored.states["objective"].key,
                                fresh.states["objective"].key)


def test_an_objective_state_of_another_shape_is_still_refused(tmp_path):
  """Only a state the checkpoint lacks starts anew: a stored key of
  another shape is a StateMismatch naming it."""
  from grpo_jax.runtime import checkpoint  # pylint: disable=g-import-not-at-top
  from grpo_jax.train import saved_runs  # pylint: disable=g-import-not-at-top
  fresh = _run_state(3, objectives.make("clip_cov", **OPTIONS))
  other = fresh._replace(states={"objective": covariance.ClipCovState(
      jnp.zeros(3, jnp.uint32))})
  ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
  ckpt.save(7, other)
  ckpt.close()
  with pytest.raises(checkpoint.StateMismatch,
                     match=r"states/objective/key of shape \(3,\)"):
    saved_runs.restore(str(tmp_path), fresh)


def test_the_draw_key_follows_the_run_seed_unless_seed_is_set():
  """The configs set no seed: the run's seed keys the draw (a key of its
  own, none of the run's step keys fold_in(PRNGKey(seed), s)); an explicit
  seed gives PRNGKey(seed) whatever the run's."""
  config = importlib.import_module("configs.clip_cov").get_config("tiny")
  assert "seed" not in config.objective.kwargs
  objective = objectives.make("clip_cov", **config.objective.kwargs)
  keys = [np.asarray(_run_state(seed, objective).states["objective"].key)
          for seed in (0, 1)]
  assert not np.array_equal(keys[0], keys[1])
  base = jax.random.PRNGKey(0)
  for s in range(64):
    assert not np.array_equal(keys[0], jax.random.fold_in(base, s))
  assert not np.array_equal(keys[0], base)
  for run_seed in (0, 1):
    state = _run_state(run_seed, objectives.make("clip_cov", seed=5))
    np.testing.assert_array_equal(state.states["objective"].key,
                                  jax.random.PRNGKey(5))
  # Outside a run (no key): PRNGKey(0), the hand vectors' U["seed0"].
  np.testing.assert_array_equal(objective.init().key, jax.random.PRNGKey(0))


def test_a_checkpoint_of_another_objective_is_refused_on_resume():
  """The loop resumes an empty objective state from its init only when the
  checkpoint's config trained the same objective."""
  from grpo_jax.runtime import checkpoint  # pylint: disable=g-import-not-at-top
  from grpo_jax import train  # pylint: disable=g-import-not-at-top
  config = config_lib.get_base_config()
  config.objective.name = "clip_cov"
  state = _run_state(3, objectives.make("clip_cov", **OPTIONS))
  written_by = lambda name: {
      "config": json.dumps({"objective": {"name": name}})}
  train._check_objective_unchanged(config, written_by("clip_cov"), state, "d")
  with pytest.raises(checkpoint.StateMismatch,
                     match="written by objective 'ppo_clip'.*'clip_cov'"):
    train._check_objective_unchanged(config, written_by("ppo_clip"), state,
                                     "d")
