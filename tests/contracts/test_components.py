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
from grpo_jax.runtime import checkpoint
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
  return {name: logp - 0.3 for name in entry_meta.reads}


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
      mask=mask, tokens=rng.integers(0, 3, size=(n, t)), state=state)
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
    # Within the range it declares (train.validate trusts it).
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
  # What a strategy that stores groups (POPO) keeps of a round.
  prompt_ids: list = None
  tokens: np.ndarray = None  # [P, G, T]
  mask: np.ndarray = None
  lengths: np.ndarray = None  # [P, G]
  truncated: np.ndarray = None
  sampler_logp: np.ndarray = None
  token_entropies: np.ndarray = None
  entropies: np.ndarray = None
  prompt_index: np.ndarray = None  # [P]
  sampled: tuple = None
  replayed: np.ndarray = None


# What a stateful group strategy's state is shaped by (G = 3, T = 2).
_LAYOUT = strategies.GroupLayout(num_generations=3, max_new_tokens=2,
                                 prompt_len=4, weights=(1.0, 0.1))


def _draw(r):
  """Round r: prompt p's accuracy varies when (p + r) is even."""
  p, g, t = 4, 3, 2
  accuracy = np.zeros((p, g), np.float32)
  accuracy[(np.arange(p) + r) % 2 == 0, 0] = 1.0
  fmt = np.ones((p, g), np.float32)
  return _Round(
      np.stack([accuracy, fmt], axis=-1),
      prompt_ids=[[7 + i, 3] for i in range(p)],
      tokens=np.full((p, g, t), r + 1, np.int32),
      mask=np.ones((p, g, t), np.float32), lengths=np.full((p, g), t),
      truncated=np.zeros((p, g), bool),
      sampler_logp=np.full((p, g, t), -1.0 - r, np.float32),
      token_entropies=np.ones((p, g, t), np.float32),
      entropies=np.ones((p, g), np.float32),
      prompt_index=np.arange(p, dtype=np.int32) + 10 * r)


@pytest.mark.parametrize("name,options", cases(strategies.GROUP_STRATEGIES))
def test_group_strategy_keeps_p_groups_of_drawn_rounds(name, options):
  strategy = strategies.make_group_strategy(name, layout=_LAYOUT, **options)
  # The rollout's helpers a strategy reads: reference rows that no verifier
  # accepts (EDGE-GRPO's correction then keeps the round as drawn).
  helpers = {"reference": lambda rnd: strategies.groups.References(
      *[None] * 7, rewards=np.zeros(rnd.rewards.shape[::2]), errors=None),
             # GHPO's and AERO's: the same prompts drawn again (round r's
             # rewards), hinted as text, at step 6.
             "examples": lambda r: [f"q{r}.{i}" for i in range(4)],
             "resample": lambda r, examples: _draw(r),
             "hint": lambda examples, omegas: [
                 f"{e} {w}" for e, w in zip(examples, omegas)],
             "step": 6, "key": jax.random.PRNGKey(0)}  # POPO's draw
  given = {k: helpers[k] for k in strategy.reads}
  selected, state = strategy.apply(strategy.init(), _draw, 4, **given)
  init = strategy.init()
  if not jax.tree.leaves(init):
    assert state == init
  else:  # a fixed-size state (checkpointed): structure, shapes, dtypes kept
    assert jax.tree.structure(state) == jax.tree.structure(init)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(init)):
      assert a.shape == b.shape and a.dtype == b.dtype
    # Again from the state it returned: a replay strategy now draws from
    # the groups it stored.
    selected, _ = strategy.apply(state, _draw, 4, **dict(given, step=7))
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


@pytest.mark.parametrize("name,options", cases(strategies.MEMBER_FILTERS))
def test_member_filter_keeps_a_subset_and_keeps_its_state_shapes(name,
                                                                 options):
  """A member filter keeps a subset of the valid groups' members (fillers
  keep none), a token mask within the sampled tokens, finite measures
  (kept + dropped = 1), a state of unchanged layout, and is a pure
  function of its inputs."""
  from grpo_jax import groups as groups_lib  # pylint: disable=g-import-not-at-top
  member_filter = strategies.make_member_filter(
      name, group_size=6, columns=("accuracy", "format"), **options)
  assert member_filter.statistics in strategies.members.STATISTICS
  key = jax.random.PRNGKey(0)
  rewards = jax.random.bernoulli(key, 0.5, (4, 6, 2)).astype(jnp.float32)
  lengths = jax.random.randint(jax.random.fold_in(key, 1), (4, 6), 1, 6)
  mask = np.asarray(jnp.arange(5)[None, :] < lengths.reshape(-1, 1),
                    np.float32)
  data = groups_lib.from_rewards(rewards, lengths=lengths,
                                 valid=[True, True, True, False])
  state = member_filter.init()
  out, new_state = member_filter.apply(state, data, mask)
  again, _ = member_filter.apply(state, data, mask)
  testing.assert_close(again, out, rtol=0, atol=0)
  layout = lambda tree: jax.tree.map(lambda x: (x.shape, x.dtype), tree)
  assert jax.tree.structure(new_state) == jax.tree.structure(state)
  assert layout(new_state) == layout(state)
  if out.members is not None:
    members = np.asarray(out.members)
    assert members.shape == (4, 6) and members.dtype == bool
    assert not members[3].any()
    m = out.measures
    assert float(m["kept_share"]) + float(m["dropped_share"]) == (
        pytest.approx(1.0))
  if out.token_mask is not None:
    tokens = np.asarray(out.token_mask)
    assert tokens.shape == mask.shape
    assert np.all((tokens == 0) | (tokens == 1)) and np.all(tokens <= mask)
  assert all(np.isfinite(float(v)) for v in out.measures.values())


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
  example = rewards.VERIFIERS.entry(name).meta.example_answer
  answer = "3" if example is None else example()
  got = rewards.get(name)(["1+2?"] * 4, completions, [answer] * 4)
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
  states.update({f"groups/{e.name}": strategies.make_group_strategy(
      e.name, layout=_LAYOUT, **e.examples[0]).init()
                 for e in strategies.GROUP_STRATEGIES.entries()})
  states.update({f"filter/{n}/{i}": strategies.make_member_filter(
      n, group_size=6, **o).init()
                 for i, (n, o) in enumerate(
                     (c.values[0], c.values[1])
                     for c in cases(strategies.MEMBER_FILTERS))})
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
