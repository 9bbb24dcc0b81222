"""Contract suites of the smaller kinds, parametrised from their registries:
regularisers, reward shapers and verifiers, KL estimators, prompt
selections, group and row strategies; and the state of every
component through a checkpoint. Each entry runs with each of its example
options; registering one is enough to put it here. (Tasks need their data
files and have their own tests in tests/test_data.py.)"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import advantages
from grpo_jax import checkpoint
from grpo_jax import kl
from grpo_jax import objectives
from grpo_jax import rewards
from grpo_jax import strategies
from grpo_jax import testing
from grpo_jax.objectives import regularisers
from grpo_jax.testing import objective_laws


def cases(registry):
  """pytest params (name, options) of every entry and example."""
  return [pytest.param(e.name, dict(o), id=f"{e.name}-{i}")
          for e in registry.entries() for i, o in enumerate(e.examples)]


def reads(entry_meta, logp):
  """The arrays a regulariser reads, as random [N, T] log-probs."""
  return {name: logp - 0.3 for name in entry_meta.get("reads", ())}


# ---------------------------------------------------------- regularisers


@pytest.mark.parametrize("name,options", cases(regularisers.REGULARISERS))
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_regulariser_masked_equals_dropped_and_splits_exactly(
    name, options, aggregation):
  reg = regularisers.make(name, aggregation=aggregation, **options)
  logp, _, _, mask = objective_laws.off_policy_batch(n=6)
  arrays = reads(regularisers.REGULARISERS.entry(name).meta, logp)
  sc, records = reg.loss((), logp, mask, **arrays)
  assert jnp.isfinite(sc.total) and float(sc.count) > 0
  testing.assert_close(sc.count, reg.count(mask))
  # Padding columns change nothing.
  pad = lambda x, v: jnp.concatenate([x, jnp.full((6, 2), v)], axis=1)
  padded, _ = reg.loss((), pad(logp, jnp.nan), pad(mask, 0.0),
                       **{k: pad(v, -jnp.inf) for k, v in arrays.items()})
  testing.assert_close(padded, sc)
  # Two halves add up to the whole (the trainer divides once).
  halves = [reg.loss((), logp[s], mask[s],
                     **{k: v[s] for k, v in arrays.items()})[0]
            for s in (slice(0, 3), slice(3, 6))]
  testing.assert_close(halves[0].total + halves[1].total, sc.total,
                       rtol=1e-5)
  assert all(np.isfinite(np.asarray(x))
             for x in jax.tree.leaves(records))


# ------------------------------------------------------------- shapers


def shaper_reads(shaper, lengths, state):
  """Every array a shaper may read (`rewards.shapers.READS`) for 12 rows in
  4 groups of 3: mixed correctness, random criteria and log-probs (-inf
  on padding), a row without prompt id."""
  n, t = lengths.shape[0], 12
  rng = np.random.default_rng(0)
  mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.float32)
  arrays = dict(
      correct=np.tile([1.0, 0.0, 1.0], n // 3),
      formatted=np.tile([1.0, 1.0, 0.0], n // 3),
      verified=rng.uniform(size=(n, 3)).round(0),
      verifier_weights=np.asarray([0.5, 0.3, 0.2]), group_size=3, step=5,
      prompt_index=np.repeat([0, 1, 2, -1], 3),
      sampler_logp=np.where(mask > 0, -rng.exponential(size=(n, t)),
                            -np.inf),
      mask=mask, state=state)
  return {k: arrays[k] for k in shaper.reads}


@pytest.mark.parametrize("name,options", cases(rewards.SHAPERS))
def test_shaper_gives_one_finite_float_per_completion(name, options):
  lengths = np.arange(0, 12)
  shaper = rewards.make_shaper(name, **options)
  state = shaper.init()
  for _ in range(2):  # a stateful shaper: from its initial state, then after
    arrays = shaper_reads(shaper, lengths, state)
    column = shaper(lengths, **arrays)
    assert column.shape == lengths.shape and column.dtype == np.float32
    assert np.all(np.isfinite(column))
    # Within the range it declares (config.validate trusts it).
    lo, hi = rewards.shaper_range(name, **options)
    assert np.all((lo <= column) & (column <= hi)), (column, lo, hi)
    arrays.pop("state", None)
    new = shaper.update(state, lengths, **arrays)
    # The state keeps its structure, shapes and dtypes (it is checkpointed).
    assert jax.tree.structure(new) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(state)):
      assert a.shape == b.shape and a.dtype == b.dtype
    state = new


# ------------------------------------------------ group and row strategies


class _Round(NamedTuple):
  rewards: np.ndarray  # [P, G, K]
  columns: tuple = ("accuracy", "format")


def _draw(r):
  """Round r: prompt p's accuracy varies when (p + r) is even."""
  p, g = 4, 3
  accuracy = np.zeros((p, g), np.float32)
  accuracy[(np.arange(p) + r) % 2 == 0, 0] = 1.0
  fmt = np.ones((p, g), np.float32)
  return _Round(np.stack([accuracy, fmt], axis=-1))


@pytest.mark.parametrize("name,options", cases(strategies.GROUP_STRATEGIES))
def test_group_strategy_keeps_p_groups_of_drawn_rounds(name, options):
  strategy = strategies.make_group_strategy(name, **options)
  # The rollout's helpers a strategy reads: reference rows that no verifier
  # accepts (EDGE-GRPO's correction then keeps the round as drawn).
  helpers = {"reference": lambda rnd: strategies.groups.References(
      *[None] * 7, rewards=np.zeros(rnd.rewards.shape[::2]), errors=None)}
  selected, state = strategy.apply(strategy.init(), _draw, 4,
                                   **{k: helpers[k] for k in strategy.reads})
  assert state == strategy.init()
  assert len(selected.picks) == 4 and selected.valid.shape == (4,)
  assert 1 <= len(selected.rounds) <= strategy.rounds_per_step
  assert len(set(selected.picks)) == 4  # no group twice
  for r, i in selected.picks:
    assert 0 <= r < len(selected.rounds) and 0 <= i < 4
  # Valid groups come first: fillers only pad the batch.
  valid = selected.valid.tolist()
  assert valid == sorted(valid, reverse=True)


@pytest.mark.parametrize("name,options", cases(strategies.ROW_STRATEGIES))
def test_row_strategy_only_removes_tokens(name, options):
  strategy = strategies.make_row_strategy(name, **options)
  mask = np.asarray(testing.random_mask(jax.random.PRNGKey(0), (6, 5)))
  arrays = {"truncated": np.array([True, False] * 3)}
  out, _ = strategy.apply(strategy.init(), mask,
                          **{k: arrays[k] for k in strategy.reads})
  out = np.asarray(out)
  assert out.shape == mask.shape
  assert np.all((out == 0) | (out == mask))  # a subset of the tokens


# Credit rules have their own suite: tests/contracts/test_credit.py.


# ------------------------------------------------ KL estimators, verifiers


@pytest.mark.parametrize("name", kl.names())
def test_kl_estimator_is_zero_at_the_reference_and_finite_far_from_it(name):
  logp, _, _, _ = objective_laws.off_policy_batch()
  estimator = kl.get(name)
  testing.assert_close(estimator(logp, logp), jnp.zeros(logp.shape))
  swing = jnp.where(jnp.arange(logp.shape[1])[None, :] % 2 == 0, 50.0, -50.0)
  far = estimator(logp, logp + swing)
  assert far.shape == logp.shape and far.dtype == jnp.float32
  testing.assert_finite(far)


@pytest.mark.parametrize("name", rewards.names())
def test_verifier_gives_one_finite_float_per_completion(name):
  completions = ["", "The answer is \\boxed{3}.", "7", "no idea"]
  got = rewards.get(name)(["1+2?"] * 4, completions, ["3"] * 4)
  assert len(got) == 4 and all(np.isfinite(float(x)) for x in got)


@pytest.mark.parametrize("name,options", cases(strategies.SELECTIONS))
def test_prompt_selection_is_a_pure_function_of_step_and_round(name,
                                                                options):
  class Task:
    seed = 0
    def train(self, index, batch_size):
      return [(index, i) for i in range(batch_size)]
    def train_indices(self):
      return np.arange(16)
    def example(self, index):
      return ("problem", index)
  select = strategies.make_selection(name, rounds_per_step=3, **options)
  # The stage states a selection reads: a warm per-prompt Beta tracker.
  tracker = advantages.SPOState(alpha=jnp.linspace(0.5, 9.0, 16),
                                beta=jnp.linspace(9.0, 0.5, 16))
  states = {read: {"advantage": tracker}[read] for read in select.reads}
  first = select.select(Task(), 2, 1, 4, **states)
  assert len(first) == 4 and first == select.select(Task(), 2, 1, 4,
                                                    **states)
  # another round, new prompts
  assert first != select.select(Task(), 2, 2, 4, **states)


# ------------------------------------- state round trip through a checkpoint


def _component_states():
  states = {f"objective/{n}/{i}": objectives.make(n, **o).init()
            for i, (n, o) in enumerate(
                objective_laws.cases(objectives.OBJECTIVES))}
  states.update({f"advantage/{e.name}": advantages.make(e.name).init()
                 for e in advantages.ESTIMATORS.entries()})
  states.update({f"shape/{e.name}": rewards.make_shaper(
      e.name, **e.examples[0]).init() for e in rewards.SHAPERS.entries()})
  return states


def test_every_component_state_survives_a_checkpoint(tmp_path):
  """Every registered component's initial state, with a distinct value in
  each leaf, restores exactly (R2VPO's dual variable, ...)."""
  states = _component_states()
  leaves, tree = jax.tree.flatten(states)
  distinct = jax.tree.unflatten(tree, [
      jnp.asarray(leaf) + i + 1 for i, leaf in enumerate(leaves)])
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(1, distinct)
  restored, _ = ckpt.restore(jax.tree.map(jnp.zeros_like, distinct))
  ckpt.close()
  testing.assert_close(restored, distinct, rtol=0, atol=0)
  assert jax.tree.structure(restored) == jax.tree.structure(states)
