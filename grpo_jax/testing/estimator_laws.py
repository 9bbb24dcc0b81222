"""The laws every registered advantage estimator obeys, as plain functions.

Plain functions of an `advantages.Estimator` record and a `groups.GroupData`:
tests/contracts/test_estimators.py runs them on every registered estimator,
and a notebook can run them on a new one. Each raises AssertionError. A law
runs from ``estimator.init()``; ``from_state(estimator, warm_up(estimator,
history_groups(key)))`` runs it from the state a history leaves.
"""

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax.testing import assert_close, assert_finite, numpy



def estimator_groups(key, *, p: int = 4, g: int = 4, k: int = 2,
                     collapsed: int = 0):
  """Random `groups.GroupData`: column 0 is 0/1 (an accuracy), the others
  uniform in [0, 1); weights 1, 0.5, 0.5, ...; lengths in [1, 16]. The
  first `collapsed` groups have all rewards equal (0, 1, 0, ...)."""
  from grpo_jax import groups as groups_lib  # pylint: disable=g-import-not-at-top
  keys = jax.random.split(key, 3)
  accuracy = jax.random.bernoulli(keys[0], 0.5, (p, g, 1)).astype(jnp.float32)
  rest = jax.random.uniform(keys[1], (p, g, k - 1))
  rewards = jnp.concatenate([accuracy, rest], -1)
  constant = (jnp.arange(p) % 2).astype(jnp.float32)[:, None, None]
  rewards = jnp.where(jnp.arange(p)[:, None, None] < collapsed, constant,
                      rewards)
  weights = jnp.asarray([1.0] + [0.5] * (k - 1), jnp.float32)
  lengths = jax.random.randint(keys[2], (p, g), 1, 17)
  return groups_lib.from_rewards(
      rewards, weights, lengths=lengths,
      **group_fields(jax.random.fold_in(key, 3), rewards, lengths))


def group_fields(key, rewards, lengths) -> dict:
  """Random values of every optional `groups.GroupData` field for rewards
  [P, G, K] and lengths [P, G]: summed log-probs (mean -0.05 .. -2 a
  token), mean entropies in [0.1, 2), answer classes of three answers and
  none, prompt indices 0 .. P-1, segment fields, greedy rewards (each
  column of member 0 halved plus 0.25, ReMax's baseline) and divergences
  in [0, 0.2) (SPO's KL-adaptive rho)."""
  p, g = lengths.shape
  keys = jax.random.split(key, 3)
  mean_logp = -jax.random.uniform(keys[0], (p, g), minval=0.05, maxval=2.0)
  return dict(
      sequence_logprobs=mean_logp * lengths,
      entropies=jax.random.uniform(keys[1], (p, g), minval=0.1, maxval=2.0),
      answer_ids=_answer_classes(np.asarray(
          jax.random.randint(keys[2], (p, g), -1, 3))),
      prompt_index=jnp.arange(p, dtype=jnp.int32),
      greedy_rewards=rewards[:, 0, :] * 0.5 + 0.25,
      divergence=jax.random.uniform(jax.random.fold_in(key, 11), (p,),
                                    maxval=0.2),
      **_segment_fields(jax.random.fold_in(key, 7), p, g))


def _segment_fields(key, p: int, g: int, *, s: int = 3, t: int = 6) -> dict:
  """SD-GRPO's segment fields: 0/1 rewards [P, G, S] (the last slot invalid
  in odd groups, and one member's first segment missing), token ids
  [P, G, T] in -1 .. S-1."""
  keys = jax.random.split(key, 2)
  valid = jnp.broadcast_to(jnp.arange(s)[None, None, :]
                           < jnp.where(jnp.arange(p) % 2 == 0, s, s - 1
                                       )[:, None, None], (p, g, s))
  return {
      "segment_rewards": jax.random.bernoulli(
          keys[0], 0.5, (p, g, s)).astype(jnp.float32),
      "segment_valid": valid.at[0, 0, 0].set(False),
      "segment_ids": jax.random.randint(keys[1], (p, g, t), -1, s),
  }


def _answer_classes(answers: np.ndarray) -> np.ndarray:
  """[P, G] raw answers (-1: none) as `GroupData.answer_ids`: the index of
  each group's first member with the same answer, -1 kept."""
  first = lambda row, a: -1 if a < 0 else int(np.argmax(row == a))
  return np.asarray([[first(row, a) for a in row] for row in answers],
                    np.int32)


def history_groups(key, *, batches: int = 6, shift: float = 0.0):
  """Batches for a stateful estimator to see before a law: three of four
  groups collapsed, as early in training (AVSPO's default gate opens after
  five); every reward plus `shift`."""
  return [_shifted(estimator_groups(jax.random.fold_in(key, i), collapsed=3),
                   shift) for i in range(batches)]


def warm_up(estimator, history):
  """The state after `estimator` has seen the batches of `history`."""
  state = estimator.init()
  for groups in history:
    _, state = estimator.estimate(state, groups)
  return state


def from_state(estimator, state):
  """`estimator` starting from `state`: the laws then run from it."""
  return estimator._replace(init=lambda: state)


def _shifted(groups, shift: float):
  return groups._replace(rewards=groups.rewards + shift)


def _estimate(estimator, groups):
  advantages, _ = estimator.estimate(estimator.init(), groups)
  return advantages


def _per_group(advantages, groups):
  """[P, G] or token-level [N, T] advantages as [P, G, 1] or [P, G, T]."""
  p, g = groups.lengths.shape
  return advantages.reshape(p, g, -1)


def _map_members(groups, fn):
  """`groups` with `fn` applied to each per-member field ([P, G, ...]:
  rewards, lengths, sequence log-probs, ...)."""
  p, g = groups.lengths.shape
  return groups._replace(**{
      field: fn(value) for field, value in groups._asdict().items()
      if value is not None and value.ndim >= 2 and value.shape[:2] == (p, g)})


def _slice_groups(groups, rows):
  """The groups `rows` (an index array or slice over P)."""
  return groups._replace(**{
      field: value[rows] for field, value in groups._asdict().items()
      if field != "weights" and value is not None})


def check_constant_group_gives_zero(estimator, groups):
  """A group whose rewards are all equal, and a group where only a reward of
  weight 0 varies, both get exactly 0 (no signal, `groups.has_signal`)."""
  rewards = groups.rewards.at[0].set(0.7)
  weights = groups.weights
  if rewards.shape[-1] > 1:
    weights = weights.at[-1].set(0.0)
    rewards = rewards.at[1, :, :-1].set(0.3)
  out = _per_group(_estimate(estimator, groups._replace(
      rewards=rewards, weights=weights)), groups)
  np.testing.assert_array_equal(numpy(out[:2]), np.zeros(out[:2].shape))


def check_shift_invariance(estimator, groups, *, shift: float = 3.0):
  """Adding a constant to every reward leaves the advantages unchanged."""
  assert_close(_estimate(estimator, _shifted(groups, shift)),
               _estimate(estimator, groups), atol=1e-5, rtol=1e-5)


def check_shift_invariance_after_a_history(estimator, groups, key, *,
                                           shift: float = 3.0):
  """After a history of batches (`history_groups`), adding a constant to
  every reward of the history and of the batch leaves the advantages
  unchanged: a state may remember rewards, not their origin."""
  plain = from_state(estimator, warm_up(estimator, history_groups(key)))
  shifted = from_state(estimator, warm_up(
      estimator, history_groups(key, shift=shift)))
  assert_close(_estimate(shifted, _shifted(groups, shift)),
               _estimate(plain, groups), atol=1e-4, rtol=1e-4)


def check_permutation_equivariance(estimator, groups, key):
  """Permuting the completions of each group permutes their advantages."""
  p, g = groups.lengths.shape
  order = jax.vmap(lambda k: jax.random.permutation(k, g))(
      jax.random.split(key, p))  # [P, G]
  take = lambda x: jnp.take_along_axis(
      x, order.reshape(order.shape + (1,) * (x.ndim - 2)), axis=1)
  permuted = _map_members(groups, take)
  assert_close(_per_group(_estimate(estimator, permuted), groups),
               take(_per_group(_estimate(estimator, groups), groups)),
               atol=1e-5, rtol=1e-5)


def check_groups_independent(estimator, groups):
  """Each group's advantages are those it gets estimated on its own."""
  whole = _per_group(_estimate(estimator, groups), groups)
  for i in range(groups.lengths.shape[0]):
    alone = _slice_groups(groups, slice(i, i + 1))
    assert_close(_per_group(_estimate(estimator, alone), alone)[0], whole[i],
                 atol=1e-5, rtol=1e-5)


def check_group_of_one_gives_zero(estimator, groups):
  """G = 1: no baseline can be formed, every advantage is exactly 0."""
  one = _map_members(groups, lambda x: x[:, :1])
  out = numpy(_estimate(estimator, one))
  np.testing.assert_array_equal(out, np.zeros(out.shape))


def check_jit_matches_eager(estimator, groups):
  """``jit(estimate)`` equals eager, new state included."""
  state = estimator.init()
  eager, new_state = estimator.estimate(state, groups)
  jitted, jit_state = jax.jit(estimator.estimate)(state, groups)
  assert_close(jitted, eager, atol=1e-6, rtol=1e-6)
  assert_close(jit_state, new_state, atol=1e-6, rtol=1e-6)


def check_state_keeps_its_shapes(estimator, groups):
  """The state is float32 arrays (nothing leaves the device as a Python
  scalar), and estimating keeps its structure, shapes and dtypes, jitted
  or not, so that it checkpoints and compiles once; () when stateless."""
  state = estimator.init()
  layout = lambda tree: jax.tree.map(lambda x: (x.shape, x.dtype), tree)
  for leaf in jax.tree.leaves(state):
    assert isinstance(leaf, jax.Array) and leaf.dtype == jnp.float32, leaf
  for estimate in (estimator.estimate, jax.jit(estimator.estimate)):
    _, new_state = estimate(state, groups)
    assert jax.tree.structure(new_state) == jax.tree.structure(state)
    assert layout(new_state) == layout(state), (layout(new_state),
                                                layout(state))


def check_float32_output(estimator, groups):
  """Finite float32 advantages: [P, G] (output "group") or [N, ...] rows."""
  out = _estimate(estimator, groups)
  p, g = groups.lengths.shape
  assert out.dtype == jnp.float32, out.dtype
  shapes = {"group": (p, g), "token": (p * g,) + out.shape[1:]}
  assert out.shape == shapes[estimator.output], (out.shape, estimator.output)
  assert_finite(out)


def check_fillers_are_ignored(estimator, groups):
  """Filler groups (valid False) get exactly 0, and the other groups get
  what they get with the fillers dropped (masked equals dropped), and so
  does the new state."""
  p = groups.lengths.shape[0]
  valid = jnp.arange(p) % 2 == 0  # groups 1, 3, ... are fillers
  # Fillers with outlandish rewards: any leak into a statistic shows.
  rewards = jnp.where(valid[:, None, None], groups.rewards,
                      100.0 * jnp.arange(groups.rewards.shape[1],
                                         dtype=jnp.float32)[None, :, None])
  masked = groups._replace(rewards=rewards, valid=valid)
  out, masked_state = estimator.estimate(estimator.init(), masked)
  out = _per_group(out, groups)
  np.testing.assert_array_equal(numpy(out[1::2]), np.zeros(out[1::2].shape))
  kept = _slice_groups(masked, np.arange(0, p, 2))
  kept_out, kept_state = estimator.estimate(estimator.init(), kept)
  assert_close(out[::2], _per_group(kept_out, kept), atol=1e-5, rtol=1e-5)
  assert_close(masked_state, kept_state, atol=1e-5, rtol=1e-5)


def check_members_are_respected(estimator, groups, key):
  """With `GroupData.members` (a member filter's kept subset): a member
  outside it gets exactly 0 and changes no other advantage (masked equals
  dropped: member 0 left out of every group gives what the groups without
  it get), and a group of one kept member, or of equal kept rewards, gets
  exactly 0."""
  p, g = groups.lengths.shape
  # Member 0 outside every group, with outlandish rewards: a leak shows.
  members = jnp.ones((p, g), bool).at[:, 0].set(False)
  masked = groups._replace(rewards=groups.rewards.at[:, 0].set(100.0),
                           members=members)
  out = _per_group(_estimate(estimator, masked), groups)
  np.testing.assert_array_equal(numpy(out[:, 0]), np.zeros(out[:, 0].shape))
  dropped = _map_members(groups, lambda x: x[:, 1:])
  assert_close(out[:, 1:], _per_group(_estimate(estimator, dropped), dropped),
               atol=1e-5, rtol=1e-5)
  # Random subsets: one kept member in group 0, equal kept rewards in 1.
  members = jax.random.bernoulli(key, 0.6, (p, g))
  members = members.at[0].set(jnp.arange(g) == 1).at[1, :2].set(True)
  rewards = groups.rewards.at[1].set(jnp.where(members[1][:, None], 0.4,
                                               groups.rewards[1]))
  out = _per_group(_estimate(estimator, groups._replace(
      rewards=rewards, members=members)), groups)
  np.testing.assert_array_equal(numpy(out[:2]), np.zeros(out[:2].shape))
  outside = numpy(jnp.broadcast_to(~members[..., None], out.shape))
  np.testing.assert_array_equal(numpy(out)[outside], 0.0)


# Every law taking (estimator, groups) or (estimator, groups, key), with the
# metadata flag that must be True for it to apply (None: always applies).
ESTIMATOR_LAWS = (
    (check_constant_group_gives_zero, "constant_group_zero"),
    (check_shift_invariance, "shift_invariant"),
    (check_shift_invariance_after_a_history, "shift_invariant"),
    (check_permutation_equivariance, None),
    (check_groups_independent, "independent_groups"),
    (check_group_of_one_gives_zero, "constant_group_zero"),
    (check_jit_matches_eager, None),
    (check_state_keeps_its_shapes, None),
    (check_float32_output, None),
    (check_fillers_are_ignored, None),
    (check_members_are_respected, "members"),
)


def check_estimator(name: str, key=None, **options):
  """Runs every law that `name`'s metadata asks for, with `options`.

  Returns the names of the laws run.
  """
  import inspect  # pylint: disable=g-import-not-at-top
  from grpo_jax import advantages  # pylint: disable=g-import-not-at-top
  key = jax.random.PRNGKey(0) if key is None else key
  estimator = advantages.make(name, **options)
  meta = advantages.meta(name, **options)
  groups = estimator_groups(key)
  ran = []
  for law, flag in ESTIMATOR_LAWS:
    if flag is not None and not getattr(meta, flag):
      continue
    extra = (key,) if "key" in inspect.signature(law).parameters else ()
    law(estimator, groups, *extra)
    ran.append(law.__name__)
  return tuple(ran)


def sampled_groups(out, rewards, prompts: int, group: int, weights=None):
  """`groups.GroupData` of one `sampling.sample` output of `prompts` x
  `group` rows, with the fields the rollout fills from it: summed
  log-probs, mean entropies, answer classes by the last token (a toy
  task's "answer") and prompt indices."""
  from grpo_jax import groups as groups_lib  # pylint: disable=g-import-not-at-top
  pg = lambda x: jnp.reshape(x, (prompts, group))
  mask = out.mask
  last = pg(out.tokens[:, -1])
  same = last[:, :, None] == last[:, None, :]
  return groups_lib.from_rewards(
      rewards, weights, lengths=pg(out.lengths),
      sequence_logprobs=pg((out.tempered_logprobs * mask).sum(-1)),
      entropies=pg((out.entropies * mask).sum(-1)
                   / jnp.maximum(mask.sum(-1), 1.0)),
      answer_ids=jnp.argmax(same, axis=-1).astype(jnp.int32),
      prompt_index=jnp.arange(prompts, dtype=jnp.int32))
