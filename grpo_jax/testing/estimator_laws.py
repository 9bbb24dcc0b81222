"""The laws every registered advantage estimator obeys, as plain functions.

Plain functions of an `advantages.Estimator` record and a `groups.GroupData`:
tests/contracts/test_estimators.py runs them on every registered estimator,
and a notebook can run them on a new one. Each raises AssertionError.
"""

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax.testing import assert_close, assert_finite, numpy



def estimator_groups(key, *, p: int = 4, g: int = 4, k: int = 2):
  """Random `groups.GroupData`: column 0 is 0/1 (an accuracy), the others
  uniform in [0, 1); weights 1, 0.5, 0.5, ...; lengths in [1, 16]."""
  from grpo_jax import groups as groups_lib  # pylint: disable=g-import-not-at-top
  keys = jax.random.split(key, 3)
  accuracy = jax.random.bernoulli(keys[0], 0.5, (p, g, 1)).astype(jnp.float32)
  rest = jax.random.uniform(keys[1], (p, g, k - 1))
  weights = jnp.asarray([1.0] + [0.5] * (k - 1), jnp.float32)
  lengths = jax.random.randint(keys[2], (p, g), 1, 17)
  return groups_lib.from_rewards(jnp.concatenate([accuracy, rest], -1),
                                 weights, lengths=lengths)


def _estimate(estimator, groups):
  advantages, _ = estimator.estimate(estimator.init(), groups)
  return advantages


def _per_group(advantages, groups):
  """[P, G] or token-level [N, T] advantages as [P, G, 1] or [P, G, T]."""
  p, g = groups.lengths.shape
  return advantages.reshape(p, g, -1)


def _slice_groups(groups, rows):
  """The groups `rows` (an index array or slice over P)."""
  return groups._replace(rewards=groups.rewards[rows],
                         valid=groups.valid[rows], lengths=groups.lengths[rows])


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
  shifted = groups._replace(rewards=groups.rewards + shift)
  assert_close(_estimate(estimator, shifted), _estimate(estimator, groups),
               atol=1e-5, rtol=1e-5)


def check_permutation_equivariance(estimator, groups, key):
  """Permuting the completions of each group permutes their advantages."""
  p, g = groups.lengths.shape
  order = jax.vmap(lambda k: jax.random.permutation(k, g))(
      jax.random.split(key, p))  # [P, G]
  take = lambda x: jnp.take_along_axis(
      x, order.reshape(order.shape + (1,) * (x.ndim - 2)), axis=1)
  permuted = groups._replace(rewards=take(groups.rewards),
                             lengths=take(groups.lengths))
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
  one = groups._replace(rewards=groups.rewards[:, :1],
                        lengths=groups.lengths[:, :1])
  out = numpy(_estimate(estimator, one))
  np.testing.assert_array_equal(out, np.zeros(out.shape))


def check_jit_matches_eager(estimator, groups):
  """``jit(estimate)`` equals eager, and the state keeps its structure."""
  state = estimator.init()
  eager, new_state = estimator.estimate(state, groups)
  jitted, jit_state = jax.jit(estimator.estimate)(state, groups)
  assert_close(jitted, eager, atol=1e-6, rtol=1e-6)
  assert (jax.tree.structure(new_state) == jax.tree.structure(jit_state)
          == jax.tree.structure(state))


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
  what they get with the fillers dropped (masked equals dropped)."""
  p = groups.lengths.shape[0]
  valid = jnp.arange(p) % 2 == 0  # groups 1, 3, ... are fillers
  # Fillers with outlandish rewards: any leak into a statistic shows.
  rewards = jnp.where(valid[:, None, None], groups.rewards,
                      100.0 * jnp.arange(groups.rewards.shape[1],
                                         dtype=jnp.float32)[None, :, None])
  masked = groups._replace(rewards=rewards, valid=valid)
  out = _per_group(_estimate(estimator, masked), groups)
  np.testing.assert_array_equal(numpy(out[1::2]), np.zeros(out[1::2].shape))
  kept = _slice_groups(masked, np.arange(0, p, 2))
  assert_close(out[::2], _per_group(_estimate(estimator, kept), kept),
               atol=1e-5, rtol=1e-5)


# Every law taking (estimator, groups) or (estimator, groups, key), with the
# metadata flag that must be True for it to apply (None: always applies).
ESTIMATOR_LAWS = (
    (check_constant_group_gives_zero, "constant_group_zero"),
    (check_shift_invariance, None),
    (check_permutation_equivariance, None),
    (check_groups_independent, "independent_groups"),
    (check_group_of_one_gives_zero, "constant_group_zero"),
    (check_jit_matches_eager, None),
    (check_float32_output, None),
    (check_fillers_are_ignored, None),
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
    if flag is not None and not meta[flag]:
      continue
    extra = (key,) if "key" in inspect.signature(law).parameters else ()
    law(estimator, groups, *extra)
    ran.append(law.__name__)
  return tuple(ran)
