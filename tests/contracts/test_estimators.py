"""Contract suite of the advantage estimators, parametrised from the registry.

Every registered estimator, with each of its example options, runs under
every law of `grpo_jax.testing` that its metadata asks for; registering an
estimator (one decorator) is enough to put it here.
"""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from grpo_jax import advantages
from grpo_jax import groups
from grpo_jax.testing import estimator_laws as laws
from grpo_jax.advantages import _kit

CASES = [pytest.param(entry.name, options, id=f"{entry.name}-{i}")
         for entry in advantages.ESTIMATORS.entries()
         for i, options in enumerate(entry.examples)]
LAWS = [pytest.param(law, flag, id=law.__name__[len("check_"):])
        for law, flag in laws.ESTIMATOR_LAWS]
STATEFUL_CASES = [case for case in CASES
                  if advantages.meta(case.values[0])["state"] is not None]
# From a warm state every law applies but the shift ones: a state remembers
# absolute rewards (check_shift_invariance_after_a_history shifts them too).
WARM_LAWS = [case for case in LAWS if case.values[0] not in (
    laws.check_shift_invariance, laws.check_shift_invariance_after_a_history)]


def run_law(law, estimator, key=jax.random.PRNGKey(0)):
  groups = laws.estimator_groups(key)
  extra = (key,) if "key" in inspect.signature(law).parameters else ()
  law(estimator, groups, *extra)


@pytest.mark.parametrize("law,flag", LAWS)
@pytest.mark.parametrize("name,options", CASES)
def test_law(name, options, law, flag):
  if flag is not None and not advantages.meta(name, **options)[flag]:
    pytest.skip(f"metadata: {flag} is False")
  run_law(law, advantages.make(name, **options))


@pytest.mark.parametrize("law,flag", WARM_LAWS)
@pytest.mark.parametrize("name,options", STATEFUL_CASES)
def test_law_from_a_warm_state(name, options, law, flag):
  """A stateful estimator obeys its laws from the state a history of
  batches leaves (not only from ``init()``, where EBPO and AVSPO are
  GRPO), on groups of which two are collapsed."""
  if flag is not None and not advantages.meta(name, **options)[flag]:
    pytest.skip(f"metadata: {flag} is False")
  key = jax.random.PRNGKey(0)
  estimator = advantages.make(name, **options)
  warm = laws.warm_up(estimator, laws.history_groups(jax.random.PRNGKey(1)))
  assert not jax.tree.all(jax.tree.map(
      lambda a, b: bool(jnp.all(a == b)), warm, estimator.init()))
  groups = laws.estimator_groups(key, collapsed=2)
  extra = (key,) if "key" in inspect.signature(law).parameters else ()
  law(laws.from_state(estimator, warm), groups, *extra)


@pytest.mark.parametrize("name,options", CASES)
def test_metadata_and_record(name, options):
  entry = advantages.ESTIMATORS.entry(name)
  assert entry.meta["input"] in ("PG", "PGK")
  assert entry.meta["output"] in ("group", "token")
  assert entry.meta["paper"]
  assert set(advantages.meta(name, **options)["reads"]) <= set(
      advantages.GroupData._fields)
  estimator = advantages.make(name, **options)
  assert (estimator.name, estimator.input, estimator.output) == (
      name, entry.meta["input"], entry.meta["output"])
  if entry.meta["state"] is None:
    assert estimator.init() == ()
  else:  # a NamedTuple of arrays (law check_state_keeps_its_shapes)
    assert jax.tree.leaves(estimator.init())
  # Every example option is an option of the function (none dropped).
  advantages.check_options(name, options)


@pytest.mark.parametrize("name", advantages.names())
def test_unknown_option_names_the_key_and_the_allowed_ones(name):
  allowed = advantages.ESTIMATORS.options(
      name, exclude=advantages._kit.all_reads(name))  # pylint: disable=protected-access
  with pytest.raises(ValueError, match=r"'nope'.*use one of") as error:
    advantages.make(name, nope=1)
  for option in allowed:
    assert option in str(error.value)
  with pytest.raises(ValueError, match=r"advantage\.kwargs\.nope"):
    advantages.check_options(name, {"nope": 1}, field="advantage.kwargs")


def test_group_data_is_not_an_option():
  with pytest.raises(ValueError, match="valid"):
    advantages.make("grpo", valid=None)
  with pytest.raises(ValueError, match="weights"):
    advantages.make("gdpo", weights=jnp.ones(2))
  with pytest.raises(ValueError, match=r"'scale'.*eps, ddof"):
    advantages.make("gdpo", scale="batch")  # GDPO has no scale option


def test_unknown_estimator_lists_the_known_ones():
  with pytest.raises(ValueError, match="choose one of") as error:
    advantages.make("ppo")
  for name in advantages.names():
    assert name in str(error.value)


def test_pure_functions_are_the_registered_ones():
  assert advantages.get("grpo") is advantages.grpo
  assert advantages.get("gdpo") is advantages.gdpo
  assert {"dr_grpo", "gdpo", "grpo", "rloo"} <= set(advantages.names())


def range_toy(rewards):
  """A new estimator: A = (R - mean_g R) / (max_g R - min_g R + 1e-6)."""
  spread = rewards.max(-1, keepdims=True) - rewards.min(-1, keepdims=True)
  return _kit.centered(rewards, -1) / (spread + 1e-6)


def test_a_toy_estimator_registered_in_scope_runs_under_every_law():
  before = advantages.names()
  with advantages.ESTIMATORS.scoped():
    _kit.register(input="PG", output="group", paper="toy")(range_toy)
    assert "range_toy" in advantages.names()
    ran = laws.check_estimator("range_toy")
    # Every law but the members one (the toy does not declare members).
    general = [law for law, flag in laws.ESTIMATOR_LAWS if flag != "members"]
    assert ran == tuple(law.__name__ for law in general)
    for law in general:
      run_law(law, advantages.make("range_toy"))
  assert advantages.names() == before
  with pytest.raises(ValueError, match="unknown"):
    advantages.make("range_toy")


def leaky_batch_toy(rewards):
  """Divides by the std of the whole batch, fillers included: a defect."""
  return (rewards - rewards.mean(-1, keepdims=True)) / (rewards.std() + 1e-6)


def test_the_laws_catch_a_filler_leak_and_coupled_groups():
  with advantages.ESTIMATORS.scoped():
    _kit.register(input="PG", output="group", paper="toy")(leaky_batch_toy)
    estimator = advantages.make("leaky_batch_toy")
    with pytest.raises(AssertionError):
      run_law(laws.check_fillers_are_ignored, estimator)
    with pytest.raises(AssertionError):
      run_law(laws.check_groups_independent, estimator)
    run_law(laws.check_shift_invariance, estimator)


def entropy_toy(rewards, entropies=None):
  return (rewards - rewards.mean(-1, keepdims=True)) * entropies


def test_an_estimator_reading_absent_group_data_names_it():
  """Group data built without a field the estimator reads is a ValueError
  naming the estimator and the field, raised before any compute."""
  with advantages.ESTIMATORS.scoped():
    _kit.register(input="PG", output="group", paper="toy",
                  reads=("entropies",))(entropy_toy)
    estimator = advantages.make("entropy_toy")
    assert estimator.reads == ("entropies",)
    rewards = np.array([[1.0, 0.0]], np.float32)
    with pytest.raises(ValueError, match="'entropy_toy'.*entropies"):
      estimator.estimate((), groups.from_rewards(rewards))
    out, _ = estimator.estimate((), groups.from_rewards(
        rewards, entropies=np.array([[2.0, 4.0]], np.float32)))
    np.testing.assert_allclose(out, [[1.0, -2.0]])
