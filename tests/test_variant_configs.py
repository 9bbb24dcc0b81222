"""Each variant config whose paper trains off policy does so here, and its
mechanism acts in a real step (`:tiny` keeps the minibatch structure).

One step of each such config: the first minibatch's update moves the
policy, so on the second the ratios leave 1; there the config's objective
must give a gradient other than REINFORCE's on the same minibatch and
params (the clip, gate, penalty, weight or the ratio itself acting). The
tiny model earns no reward on the task, so the batch's advantages are
replaced by random ones: this checks the mechanism, not the learning.
"""

import glob
import importlib
import os

import jax
import jax.numpy as jnp
import pytest

from grpo_jax import measures
from grpo_jax import objectives
from grpo_jax import rollout
from grpo_jax import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny(name):
  return importlib.import_module(f"configs.{name}").get_config("tiny")


def steps_per_batch(config):
  return config.train.num_iterations * config.train.num_minibatches


NAMES = sorted(os.path.basename(p)[:-3]
               for p in glob.glob(os.path.join(ROOT, "configs", "*.py"))
               if not os.path.basename(p).startswith("_"))
OFF_POLICY = [n for n in NAMES if steps_per_batch(tiny(n)) > 1]
# Where the paper's own band binds at any real step size.
BINDS = {"gspo"}


def test_the_off_policy_papers_are_off_policy():
  assert {"dapo", "gspo", "gmpo", "cfpo", "r2vpo", "sapo",
          "cispo"} <= set(OFF_POLICY)
  for name in OFF_POLICY:
    assert not rollout.is_on_policy(tiny(name))


def _gradient(run, objective, objective_state, params, minibatch):
  fns = train.make_loss_functions(
      model_config=run.model_config, objective=objective,
      chunk_size=run.config.train.chunk_size)
  grads, _, records = train.minibatch_gradient(
      fns, params, {"objective": objective_state}, minibatch)
  return grads, measures.values(records)


@pytest.mark.parametrize("name", OFF_POLICY)
def test_the_mechanism_acts_on_the_second_minibatch(name):
  config = tiny(name)
  config.kl.beta = 0.0  # the objective alone
  config.optimizer.learning_rate = 3e-3
  run = train.build(config)
  state = jax.tree.map(jnp.copy, run.state)
  with jax.set_mesh(run.mesh):
    batch, _, _ = run.rollout_fn(
        state.params, run.ref_params, 0, jax.random.fold_in(state.key, 0),
        {name: state.states[name] for name in rollout.STAGES})
  rows = batch.tokens.shape[0]
  sampled = batch.input_mask[:, -batch.completion_mask.shape[1]:]
  batch = batch._replace(
      advantages=jax.random.normal(jax.random.PRNGKey(1), (rows,)),
      completion_mask=sampled)  # dynamic sampling finds no signal here
  assert batch.old_logp is not None  # off policy: the old log-prob pass ran
  parts = train.minibatches(batch, config.train.num_minibatches)
  state, _ = run.update_fn(state, parts[0])
  second = parts[1 % len(parts)]
  objective = objectives.make(config.objective.name,
                              **config.objective.kwargs)
  grads, m = _gradient(run, objective, state.states["objective"],
                       state.params, second)
  reinforce = objectives.make("reinforce", aggregation=objective.aggregation,
                              horizon=objective.horizon)
  grads_reinforce, _ = _gradient(run, reinforce, (), state.params, second)
  assert m["ratio_max"] - m["ratio_min"] > 1e-3, m
  diff = max(float(jnp.abs(a - b).max()) for a, b in zip(
      jax.tree.leaves(grads), jax.tree.leaves(grads_reinforce)))
  scale = max(float(jnp.abs(b).max()) for b in jax.tree.leaves(
      grads_reinforce))
  assert diff > 1e-3 * scale, (name, diff, scale)
  if name in BINDS:
    # The clip binds where a ratio leaves the band in its advantage's
    # direction; with every advantage +1, or every one -1, one must bind.
    fractions = [float(_gradient(
        run, objective, state.states["objective"], state.params,
        second._replace(advantages=sign * jnp.ones_like(second.advantages))
    )[1]["clip_fraction"]) for sign in (1.0, -1.0)]
    assert max(fractions) > 0.0, (fractions, m)
