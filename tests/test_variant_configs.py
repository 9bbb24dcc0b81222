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

from grpo_jax import credit
from grpo_jax import objectives
from grpo_jax import rollout
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.train import update as update_lib

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
# A measurement of the config's own mechanism that must be above 0 on the
# second minibatch (beside a gradient other than REINFORCE's).
MECHANISM = {
    "fipo": lambda m: m["correction/fipo/weight_mean"] - 1.0,
    "clip_cov": lambda m: m["cov_selected"],
    "kl_cov": lambda m: m["cov_selected"],
    # Tokens the top-K divergence masks (delta 0.005 at `:tiny`).
    "dppo_topk": lambda m: m["clip_fraction"],
    # The searched bounds leave their start [0.6, 1.2] (here both
    # advantages of the second minibatch are < 0: rho = 0, both at max).
    "bapo": lambda m: (m["bapo_c_low"] - 0.6) + (m["bapo_c_high"] - 1.2),
}
# Options changed for this test alone, and why.
TINY_OPTIONS = {
    # A random tiny model's log-probs barely spread (entropy ~ log V), so
    # no (A, logp) covariance reaches the paper's band (1, 5): from 0 the
    # band holds every positive covariance, and the rule must pick some.
    "clip_cov": {"clip_cov_lb": 0.0},
}


def test_the_off_policy_papers_are_off_policy():
  assert {"dapo", "gspo", "gmpo", "cfpo", "r2vpo", "sapo",
          "cispo"} <= set(OFF_POLICY)
  for name in OFF_POLICY:
    assert not rollout.is_on_policy(tiny(name))


@pytest.mark.parametrize("name", OFF_POLICY)
def test_the_mechanism_acts_on_the_second_minibatch(name):
  config = tiny(name)
  config.kl.beta = 0.0  # the objective alone
  config.optimizer.learning_rate = 3e-3
  config.objective.kwargs.update(TINY_OPTIONS.get(name, {}))
  run = train.build(config)
  state = jax.tree.map(jnp.copy, run.state)
  batch, _, _ = testing.rollout_step(run, 0, state=state)
  rows = batch.tokens.shape[0]
  sampled = batch.input_mask[:, -batch.completion_mask.shape[1]:]
  batch = batch._replace(
      advantages=jax.random.normal(jax.random.PRNGKey(1), (rows,)),
      completion_mask=sampled)  # dynamic sampling finds no signal here
  assert batch.old_logp is not None  # off policy: the old log-prob pass ran
  parts = update_lib.minibatches(batch, config.train.num_minibatches)
  state, _ = run.update_fn(state, parts[0])
  second = parts[1 % len(parts)]
  objective = objectives.make(config.objective.name,
                              **config.objective.kwargs)
  corrections = train.make_corrections(config)
  grads, m = testing.loss_gradient(run, objective, state.states["objective"],
                                   state.params, second,
                                   corrections=corrections)
  if name in MECHANISM:
    assert MECHANISM[name](m) > 0.0, (name, m)
  if corrections:  # the corrections act: not the objective's bare gradient
    bare, _ = testing.loss_gradient(run, objective,
                                    state.states["objective"], state.params,
                                    second)
    testing.assert_trees_differ(grads, bare, rtol=1e-4, msg=name)
  reinforce = objectives.make("reinforce", aggregation=objective.aggregation,
                              horizon=objective.horizon)
  grads_reinforce, _ = testing.loss_gradient(run, reinforce, (), state.params,
                                             second)
  assert m["ratio_max"] - m["ratio_min"] > 1e-3, m
  testing.assert_trees_differ(grads, grads_reinforce, rtol=1e-3, msg=name)
  if name in BINDS:
    # The clip binds where a ratio leaves the band in its advantage's
    # direction; with every advantage +1, or every one -1, one must bind.
    fractions = [float(testing.loss_gradient(
        run, objective, state.states["objective"], state.params,
        second._replace(advantages=sign * jnp.ones_like(second.advantages))
    )[1]["clip_fraction"]) for sign in (1.0, -1.0)]
    assert max(fractions) > 0.0, (fractions, m)


# ------------------------------------------------------- reward shapers

# Configs whose mechanism is a reward shaper (rewards.SHAPERS): on policy,
# so the test above does not run them; here one `:tiny` rollout must show
# the shaper changing rows' rewards.
SHAPER_CONFIGS = {"lcpo": "lcpo", "grpo_lead": "grpo_lead",
                  "hapo_length": "hapo_length",
                  "length_budget": "length_budget", "consteer": "consteer",
                  "pow3r": "pow3r", "cosine_length": "cosine_length",
                  "repetition_penalty": "repetition_penalty"}


def _coins(run):
  """`run`'s pipeline with every reward function a coin (`testing.coin`):
  the tiny model earns no reward, and the mechanisms here need both kinds."""
  return testing.with_verifiers(run.rollout_fn.keywords["pipeline"],
                                testing.coin)


def _coin_steps(run, stage, plain_component, **plain_states):
  """Step 0 of `run` with coin rewards, and the same step (the same key)
  with `stage`'s component replaced by `plain_component` and the stage
  states `plain_states`: ((batch, measures, new states), the plain batch)."""
  pipeline = _coins(run)
  plain = pipeline._replace(components=dict(
      pipeline.components, **{stage: plain_component}))
  key = jax.random.PRNGKey(3)
  return (testing.rollout_step(run, 0, key=key, pipeline=pipeline),
          testing.rollout_step(run, 0, key=key, pipeline=plain,
                               **plain_states)[0])


def _objective_gradients(run, *batches):
  """The gradient of `run`'s configured objective on each batch, at the
  initial params."""
  objective = objectives.make(run.config.objective.name,
                              **run.config.objective.kwargs)
  state = run.state.states["objective"]
  return [testing.loss_gradient(run, objective, state, run.state.params,
                                batch)[0] for batch in batches]


@pytest.mark.parametrize("name", sorted(SHAPER_CONFIGS))
def test_the_shaper_acts_in_a_tiny_step(name):
  shaper = SHAPER_CONFIGS[name]
  config = tiny(name)
  config.rollout.num_generations = 4  # groups of 4: contrast, z-scores
  run = train.build(config)
  shape = run.state.states["shape"]
  if name == "hapo_length":  # a history of 4 tokens for every problem
    table = shape[shaper]
    shape = dict(shape, **{shaper: table._replace(
        history=jnp.full_like(table.history, 4.0))})
  _, m, new_states = testing.rollout_step(
      run, 0, key=jax.random.PRNGKey(3), pipeline=_coins(run), shape=shape)
  assert m[f"shaping/{shaper}/changed"] > 0, m
  assert m[f"shaping/{shaper}/abs_mean"] > 0, m
  assert m[f"reward_errors/{shaper}"] == 0
  assert set(new_states["shape"]) == {shaper}


# ---------------------------------------------------------- credit rules

# Configs whose mechanism is a token credit rule (credit.CREDIT), and the
# measure that shows it acting. The test above replaces the batch's
# advantages, so here one `:tiny` rollout with coin rewards (the tiny model
# earns none) must show the rule acting: the measure above 0, advantages
# other than the estimator's, and a gradient other than `uniform`'s.
CREDIT_MEASURES = {
    "ah_grpo": "discounted_fraction", "sa_ah_grpo": "discounted_fraction",
    "egspo": "gated_fraction", "t_spmo": "branch_fraction",
    # A random tiny model's entropy (~log V) is far above tau_H = 0.7: the
    # filter zeroes every row (its conflicts: tests/test_credit.py).
    "gtpo": "filtered_fraction",
}


def test_every_credit_config_is_checked():
  assert {n for n in NAMES if tiny(n).credit.name != "uniform"} == set(
      CREDIT_MEASURES)


@pytest.mark.parametrize("name", sorted(CREDIT_MEASURES))
def test_the_credit_rule_acts_in_a_tiny_step(name):
  config = tiny(name)
  run = train.build(config)
  (batch, m, _), plain = _coin_steps(run, "credit", credit.make("uniform"))
  assert m[f"credit/{name}/{CREDIT_MEASURES[name]}"] > 0, m
  assert jnp.array_equal(batch.tokens, plain.tokens)  # the same sample
  mask = plain.completion_mask
  base = jnp.broadcast_to(plain.advantages[:, None], mask.shape) * mask
  assert float(jnp.abs(base).max()) > 0  # the coin gives groups signal
  assert jnp.shape(batch.advantages) == mask.shape
  assert not jnp.allclose(batch.advantages * mask, base, atol=1e-6)
  testing.assert_trees_differ(*_objective_gradients(run, batch, plain),
                              rtol=1e-3, msg=name)


# -------------------------------------------------------- member filters

# Configs whose mechanism is a member filter (strategies.MEMBER_FILTERS),
# and the measure that shows it acting. One `:tiny` rollout with coin
# rewards (the tiny model earns none) against the same step without the
# filter: the measure above 0, the dropped rows out of the loss with
# advantage 0, the kept rows' advantages over the kept subset (GFPO) or
# the full group's (BPPO), and a gradient other than the unfiltered one.
FILTER_MEASURES = {"gfpo": "dropped_share", "gfpo_adaptive": "dropped_share",
                   "bppo": "prefix_cut"}


def test_every_filter_config_is_checked():
  assert {n for n in NAMES if tiny(n).filter.name != "none"} == set(
      FILTER_MEASURES)


@pytest.mark.parametrize("name", sorted(FILTER_MEASURES))
def test_the_member_filter_acts_in_a_tiny_step(name):
  from grpo_jax import strategies  # pylint: disable=g-import-not-at-top
  config = tiny(name)
  run = train.build(config)
  (batch, m, new_states), plain = _coin_steps(
      run, "filter", strategies.make_member_filter(
          "none", group_size=config.rollout.num_generations), filter=())
  assert m[f"filter/{FILTER_MEASURES[name]}"] > 0, m
  assert m["filter/dropped_share"] > 0, m
  assert jnp.array_equal(batch.tokens, plain.tokens)  # the same sample
  kept = batch.completion_mask.sum(-1) > 0
  assert 0 < int(kept.sum()) < kept.size
  assert float(jnp.abs(batch.advantages * ~kept).max()) == 0.0
  assert float(batch.completion_mask.sum()) < float(
      plain.completion_mask.sum())
  assert float(jnp.abs(plain.advantages).max()) > 0  # coins give signal
  same = jnp.allclose(batch.advantages[kept], plain.advantages[kept],
                      atol=1e-6)
  # GFPO normalises over the kept subset; BPPO over the full group.
  assert same == (run.rollout_fn.keywords["pipeline"].components[
      "filter"].statistics == "all"), (batch.advantages, plain.advantages)
  if name == "gfpo_adaptive":  # the difficulties went into the window
    assert int(new_states["filter"].count) == config.rollout.num_prompts
  testing.assert_trees_differ(*_objective_gradients(run, batch, plain),
                              rtol=1e-3, msg=name)
