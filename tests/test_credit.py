"""Hand-derived tests of the token credit rules (VARIANTS.md 3.1, 3.2, 3.3,
3.5): the spec's vectors, more hand-computed cases, numpy loop derivations
of the group rules on random batches, the gradient an objective takes from
the credited advantages, the config checks, and an off-policy learning run
of each rule on the trivial task."""

import importlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import advantages
from grpo_jax import train as train_lib
from grpo_jax import credit
from grpo_jax import objectives
from grpo_jax.testing import learning


def run(name, adv, mask, **arrays):
  rule = credit.make(name, **{k: v for k, v in arrays.items()
                              if k not in credit.READS})
  out, _ = rule.apply((), jnp.asarray(adv, jnp.float32),
                      jnp.asarray(mask, jnp.float32),
                      **{k: v for k, v in arrays.items()
                         if k in credit.READS})
  return out


def close(actual, expected, atol=1e-6):
  np.testing.assert_allclose(np.asarray(actual), np.asarray(expected),
                             rtol=1e-5, atol=atol)


# ------------------------------------------------------------- AH-GRPO


def test_ah_grpo_spec_vector():
  """ent [.2, .4, 0, 1], alpha .5: C = [0, .2, .6, .6]."""
  out = run("ah_grpo", [2.0], np.ones((1, 4)),
            token_entropies=np.array([[.2, .4, 0., 1.]], np.float32))
  close(out.advantages, 2.0 * np.array([[1, .904837, .740818, .740818]]))
  assert out.mask is None
  close(out.measures["discounted_fraction"], 0.75)
  close(out.measures["weight_mean"], (1 + .904837 + 2 * .740818) / 4)


def test_ah_grpo_padding_adds_nothing_and_alpha_zero_is_grpo():
  ent = np.array([[.2, .4, 5., 7.], [1., 1., 1., 1.]], np.float32)
  mask = np.array([[1, 1, 0, 0], [1, 1, 1, 0]], np.float32)
  out = run("ah_grpo", [1.0, -3.0], mask, token_entropies=ent, alpha=1.0)
  close(out.advantages, [[1, math.exp(-.2), 0, 0],
                         [-3, -3 * math.exp(-1), -3 * math.exp(-2), 0]])
  grpo = run("ah_grpo", [1.0, -3.0], mask, token_entropies=ent, alpha=0.0)
  close(grpo.advantages, np.array([[1.0], [-3.0]]) * mask)


def test_ah_grpo_running_mean_over_the_earlier_tokens():
  """normalize="mean": C_t / (earlier tokens) = [0, .2, .6/2, .6/3]."""
  out = run("ah_grpo", [1.0], np.ones((1, 4)),
            token_entropies=np.array([[.2, .4, 0., 1.]], np.float32),
            normalize="mean")
  close(out.advantages, [[1, math.exp(-.1), math.exp(-.15), math.exp(-.1)]])


def test_sa_ah_grpo_discounts_negative_rows_only():
  ent = np.full((3, 3), 0.5, np.float32)
  out = run("sa_ah_grpo", [2.0, -1.0, 0.0], np.ones((3, 3)),
            token_entropies=ent, alpha=2.0)
  close(out.advantages, [[2, 2, 2],
                         [-1, -math.exp(-1), -math.exp(-2)],
                         [0, 0, 0]])
  close(out.measures["discounted_fraction"], 2 / 9)
  # Token advantages: the sign is each token's.
  tok = run("sa_ah_grpo", np.array([[1.0, -1.0, -1.0]]), np.ones((1, 3)),
            token_entropies=ent[:1], alpha=2.0)
  close(tok.advantages, [[1, -math.exp(-1), -math.exp(-2)]])


# --------------------------------------------------------------- EGSPO


def test_egspo_spec_vector():
  """q .8 over 5 tokens: k = 1, tau = 2."""
  out = run("egspo", [1.0], np.ones((1, 5)),
            token_entropies=np.array([[.1, 2, .5, 1.5, .05]], np.float32))
  close(out.advantages, [[.5, 1, .5, .5, .5]])
  close(out.measures["threshold"], 2.0)
  close(out.measures["gated_fraction"], 0.8)


def test_egspo_quantile_counts_the_batch_loss_tokens_only():
  """10 loss tokens (two rows), q .8: k = 2, tau = the 2nd largest (1.2);
  the padding's entropy 9 takes no part."""
  ent = np.array([[.1, .2, 1.2, .3, .4, 9.], [2., .5, .6, .7, .8, 9.]],
                 np.float32)
  mask = np.array([[1, 1, 1, 1, 1, 0]] * 2, np.float32)
  out = run("egspo", [1.0, -2.0], mask, token_entropies=ent, beta_low=0.25)
  close(out.advantages, [[.25, .25, 1, .25, .25, 0],
                         [-2, -.5, -.5, -.5, -.5, 0]])
  close(out.measures["threshold"], 1.2)
  # A fixed threshold instead; ties at tau get the full update.
  fixed = run("egspo", [1.0, -2.0], mask, token_entropies=ent,
              gate="threshold", threshold=0.6, beta_low=0.0)
  close(fixed.advantages, [[0, 0, 1, 0, 0, 0], [-2, 0, -2, -2, -2, 0]])


# -------------------------------------------------------------- T-SPMO


def t_spmo_loops(tokens, mask, values, g):
  """The spec's A[i, t] = mean_{S+} v - mean_S v, one token at a time."""
  n, t = tokens.shape
  out = np.zeros((n, t))
  for i in range(n):
    group = range(i // g * g, i // g * g + g)
    for s in range(t):
      if not mask[i, s]:
        continue
      members = [j for j in group if mask[j, s]
                 and list(tokens[j, :s]) == list(tokens[i, :s])]
      plus = [j for j in members if tokens[j, s] == tokens[i, s]]
      out[i, s] = (np.mean([values[j] for j in plus])
                   - np.mean([values[j] for j in members]))
  return out


def test_t_spmo_spec_vector():
  y = np.array([[5, 1, 2], [5, 1, 3], [5, 4, 2], [6, 1, 2]])
  out = run("t_spmo", np.zeros(4), np.ones((4, 3)), tokens=y,
            rewards=np.array([1., 0, 1, 0]), num_generations=4)
  close(out.advantages, [[1 / 6, -1 / 6, 1 / 2], [1 / 6, -1 / 6, -1 / 2],
                         [1 / 6, 1 / 3, 0], [-1 / 2, 0, 0]])
  # loss_on="nonzero": the branch tokens only.
  close(out.mask, [[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 0, 0]])
  close(out.measures["branch_fraction"], 9 / 12)
  kept = run("t_spmo", np.zeros(4), np.ones((4, 3)), tokens=y,
             rewards=np.array([1., 0, 1, 0]), num_generations=4,
             loss_on="all")
  assert kept.mask is None


def test_t_spmo_ended_members_and_edge_cases():
  """A member that has ended leaves S; equal rewards and G = 1 give 0."""
  y = np.array([[5, 1, 2], [5, 7, 0], [5, 4, 0]])
  mask = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0]], np.float32)
  out = run("t_spmo", np.zeros(3), mask, tokens=y,
            rewards=np.array([1., 0, .5]), num_generations=3)
  # t=0: all share 5 -> 0. t=1: member 2 has ended, S = {0, 1}, S+ of 0
  # and of 1 is itself. t=2: only member 0 is left -> 0.
  close(out.advantages, [[0, .5, 0], [0, -.5, 0], [0, 0, 0]])
  equal = run("t_spmo", np.zeros(3), mask, tokens=y,
              rewards=np.full(3, .3), num_generations=3)
  assert np.all(np.asarray(equal.advantages) == 0.0)
  ones = run("t_spmo", np.zeros(3), mask, tokens=y,
             rewards=np.array([1., 0, .5]), num_generations=1)
  assert np.all(np.asarray(ones.advantages) == 0.0)


@pytest.mark.parametrize("seed", [0, 1])
def test_t_spmo_matches_a_loop_over_the_spec(seed):
  rng = np.random.default_rng(seed)
  n, t, g = 12, 7, 4
  tokens = rng.integers(0, 3, (n, t))
  lengths = rng.integers(1, t + 1, n)
  mask = (np.arange(t)[None] < lengths[:, None]).astype(np.float32)
  rewards = rng.random(n).astype(np.float32)
  out = run("t_spmo", np.zeros(n), mask, tokens=tokens, rewards=rewards,
            num_generations=g)
  close(out.advantages, t_spmo_loops(tokens, mask, rewards, g), atol=1e-5)
  # signal="advantage": the rows' advantages in R's place.
  adv = rng.normal(size=n).astype(np.float32)
  by_adv = run("t_spmo", adv, mask, tokens=tokens, rewards=rewards,
               num_generations=g, signal="advantage")
  close(by_adv.advantages, t_spmo_loops(tokens, mask, adv, g), atol=1e-5)


# ---------------------------------------------------------------- GTPO


def gtpo_loops(tokens, mask, adv, ent, g, *, tau=0.7, gamma=0.1, w=2.0,
               normalize=False):
  """The spec, one token at a time: leading runs left-aligned, trailing
  runs right-aligned (position from the end), delta, entropy filter."""
  n, t = tokens.shape
  lengths = mask.sum(1).astype(int)

  def token_at(j, s, from_end):
    if s >= lengths[j]:
      return None
    return tokens[j, lengths[j] - 1 - s] if from_end else tokens[j, s]

  def conflict_runs(i, from_end):
    group = range(i // g * g, i // g * g + g)
    run_ = []
    for s in range(lengths[i]):
      y = token_at(i, s, from_end)
      pos = any(adv[j] > 0 and token_at(j, s, from_end) == y for j in group)
      neg = any(adv[j] < 0 and token_at(j, s, from_end) == y for j in group)
      if not (pos and neg):
        break
      run_.append(s)
    return run_

  out = np.zeros((n, t))
  for i in range(n):
    if lengths[i] == 0:
      continue
    h = ent[i, :lengths[i]].mean()
    a = adv[i] - gamma * h if h <= tau else 0.0
    delta = np.ones(t)
    conflicts = set()
    if adv[i] != 0:
      on = w if adv[i] > 0 else 0.0
      for s in conflict_runs(i, False):
        delta[s] *= on
        conflicts.add(s)
      for s in conflict_runs(i, True):
        delta[lengths[i] - 1 - s] *= on
        conflicts.add(lengths[i] - 1 - s)
    if normalize:
      a /= max(1, len(conflicts))
    out[i, :lengths[i]] = delta[:lengths[i]] * a
  return out


def test_gtpo_spec_vector():
  y = np.array([[7, 8, 9], [7, 5, 9], [7, 8, 4]])
  ent = np.array([[.4], [.9], [.6]], np.float32) * np.ones((3, 3), np.float32)
  out = run("gtpo", [1.0, -1.0, 1.0], np.ones((3, 3)), tokens=y,
            token_entropies=ent, num_generations=3)
  delta = np.array([[2, 1, 2], [0, 1, 0], [2, 1, 1]])
  close(out.advantages, delta * np.array([[.96], [0.0], [.94]]))
  close(out.measures["conflict_fraction"], 5 / 9)
  close(out.measures["protected_fraction"], 2 / 9)
  close(out.measures["filtered_fraction"], 1 / 3)
  # No filter and no shift: delta times A.
  raw = run("gtpo", [1.0, -1.0, 1.0], np.ones((3, 3)), tokens=y,
            token_entropies=ent, num_generations=3, entropy_threshold=1.0,
            entropy_coef=0.0)
  close(raw.advantages, delta * np.array([[1.0], [-1.0], [1.0]]))
  # The code's extra: each row over its conflict tokens (2, 2, 1).
  norm = run("gtpo", [1.0, -1.0, 1.0], np.ones((3, 3)), tokens=y,
             token_entropies=ent, num_generations=3, entropy_threshold=1.0,
             entropy_coef=0.0, normalize_by_conflicts=True)
  close(norm.advantages, delta * np.array([[.5], [-.5], [1.0]]))


def test_gtpo_both_ways_weighs_four_and_zero_rows_take_no_part():
  """A positive row whose one token conflicts both ways weighs W^2 = 4; a
  row with A = 0 keeps delta 1 and its only change is -gamma H (the
  code's), and it makes no conflict for the others."""
  y = np.array([[3, 0], [3, 0], [3, 1]])
  mask = np.array([[1, 0], [1, 0], [1, 0]], np.float32)
  ent = np.full((3, 2), 0.5, np.float32)
  out = run("gtpo", [1.0, -1.0, 0.0], mask, tokens=y, token_entropies=ent,
            num_generations=3)
  close(out.advantages, [[4 * .95, 0], [0, 0], [-0.05, 0]])
  alone = run("gtpo", [1.0, 0.0, 0.0], mask, tokens=y, token_entropies=ent,
              num_generations=3)
  close(alone.advantages, [[.95, 0], [-.05, 0], [-.05, 0]])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gtpo_matches_a_loop_over_the_spec(seed):
  rng = np.random.default_rng(seed)
  n, t, g = 12, 6, 4
  tokens = rng.integers(0, 2, (n, t))
  lengths = rng.integers(1, t + 1, n)
  lengths[-g:] = 0  # a filler group
  mask = (np.arange(t)[None] < lengths[:, None]).astype(np.float32)
  adv = rng.choice([-1.0, 0.0, 1.5], n).astype(np.float32)
  ent = (rng.random((n, t)) * 1.2).astype(np.float32)
  for normalize in (False, True):
    out = run("gtpo", adv, mask, tokens=tokens, token_entropies=ent,
              num_generations=g, normalize_by_conflicts=normalize)
    close(out.advantages, gtpo_loops(tokens, mask, adv, ent, g,
                                     normalize=normalize), atol=1e-5)
  assert float(out.measures["conflict_fraction"]) > 0


def test_row_rules_refuse_token_advantages():
  with pytest.raises(ValueError, match="one advantage per row"):
    run("gtpo", np.ones((3, 2)), np.ones((3, 2)), tokens=np.zeros((3, 2)),
        token_entropies=np.zeros((3, 2)), num_generations=3)


# ----------------------------------------------- the objective's gradient


def test_ppo_clip_gradient_is_the_weight_times_grpos():
  """ppo_clip (token mean) on A_t = w_t A: dL/dlogp_t = -w_t A r_t / n where
  the unclipped branch is taken (r A <= clip(r) A), else 0; derived by hand,
  on ratios inside and outside the band."""
  ent = np.array([[.2, .4, 1.0, .3], [.5, .5, .5, .5]], np.float32)
  mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], np.float32)
  adv = np.array([1.5, -2.0], np.float32)
  credited = run("ah_grpo", adv, mask, token_entropies=ent).advantages
  old = np.full((2, 4), -1.0, np.float32)
  logp = old + np.array([[.1, .5, -.1, 0.], [-.5, .05, .3, 0.]], np.float32)
  objective = objectives.make("ppo_clip", aggregation="token_mean")
  grad = jax.grad(lambda lp: objective.loss(
      (), lp, old, credited, mask)[0])(jnp.asarray(logp))
  r = np.exp(logp - old)
  before = np.cumsum(ent * mask, 1) - ent * mask
  w = np.exp(-0.5 * before)
  a = w * adv[:, None]
  unclipped = np.where(a >= 0, r <= 1.2, r >= 0.8)
  expected = np.where(unclipped & (mask > 0), -a * r / mask.sum(), 0.0)
  close(grad, expected, atol=1e-6)


# ------------------------------------------------------------- configs


def load(name):
  return importlib.import_module(f"configs.{name}").get_config()


@pytest.mark.parametrize("rule,key,value", [
    ("ah_grpo", "alpha", -0.1), ("sa_ah_grpo", "alpha", float("nan")),
    ("ah_grpo", "normalize", "max"), ("egspo", "quantile", 1.0),
    ("egspo", "quantile", 0.0), ("egspo", "beta_low", 1.5),
    ("egspo", "threshold", -1.0), ("egspo", "gate", "fixed"),
    ("gtpo", "entropy_threshold", 0.0),
    ("gtpo", "entropy_coef", -0.1), ("gtpo", "conflict_weight", math.inf),
    ("t_spmo", "loss_on", "some"), ("t_spmo", "signal", "value"),
    ("gtpo", "tokens", 3),  # the rollout supplies it
    ("egspo", "gamma", 0.1),  # not an option
])
def test_bad_options_name_the_field(rule, key, value):
  config = load(rule)
  config.credit.kwargs[key] = value
  with pytest.raises(ValueError, match=rf"config\.credit\.kwargs\.{key}\b"):
    train_lib.validate(config)


@pytest.mark.parametrize("rule", ["ah_grpo", "sa_ah_grpo", "t_spmo", "gtpo",
                                  "egspo"])
def test_variant_configs_validate_and_train_off_policy(rule):
  config = train_lib.validate(load(rule))
  assert config.credit.name == rule
  assert config.train.num_iterations * config.train.num_minibatches > 1
  tiny = importlib.import_module(f"configs.{rule}").get_config("tiny")
  train_lib.validate(tiny)


def test_row_rules_need_a_group_estimator_and_token_objective():
  config = load("gtpo")
  config.advantage.name = "sd_grpo"
  config.advantage.kwargs = {}
  config.data.task = "segments"
  with pytest.raises(ValueError, match=r"credit\.name.*one advantage per row"):
    train_lib.validate(config)
  config = load("ah_grpo")
  config.objective.name = "gspo"
  config.objective.kwargs = {}
  with pytest.raises(ValueError, match=r"credit\.name.*sequence-level"):
    train_lib.validate(config)
  assert advantages.ESTIMATORS.entry("sd_grpo").meta.output == "token"


# ------------------------------------------- learning off policy (trivial)


@pytest.mark.parametrize("rule,options,acts,group", [
    ("ah_grpo", {"normalize": "mean"}, "discounted_fraction", 4),
    ("sa_ah_grpo", {}, "discounted_fraction", 4),
    ("egspo", {}, "gated_fraction", 4),
    ("t_spmo", {}, "branch_fraction", 8),
    ("gtpo", {"entropy_threshold": 5.0}, "conflict_fraction", 4),
])
def test_each_rule_learns_the_trivial_task_off_policy(rule, options, acts,
                                                      group):
  """Two optimiser steps a batch on the trivial task (`testing.learning`),
  the rule applied as the rollout does; its mechanism acts (the measure
  above 0) and the second minibatch sees ratios away from 1. GTPO's filter
  is opened (tau_H 5 > log 8, the uniform policy's entropy): at 0.7 it
  would zero every completion of the random start. T-SPMO samples 8 a
  group: with 4 of 8 tokens nearly every first token is unique, so only
  the first token is credited (R_i - mean R, on a token that did not earn
  it) and the run drifts; with 8, prefixes are shared and the credit
  reaches the tokens that earned it."""
  history, hooked = learning.learn_trivial_task(
      advantages.make("grpo"), credit=credit.make(rule, **options),
      steps=25, group=group,
      on_step=lambda reward, adv, records: records)
  learning.check_learned(history)
  assert max(r[0]["credit/" + acts] for r in hooked) > 0
  assert max(r[-1]["ratio_max"] - r[-1]["ratio_min"] for r in hooked) > 1e-3
