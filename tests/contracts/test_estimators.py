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

from configs import quickstart
from grpo_jax import advantages
from grpo_jax import train as train_lib
from grpo_jax import groups
from grpo_jax import registry
from grpo_jax.testing import estimator_laws as laws
from grpo_jax.advantages import _kit

CASES = [pytest.param(entry.name, options, id=f"{entry.name}-{i}")
         for entry in advantages.ESTIMATORS.entries()
         for i, options in enumerate(entry.examples)]
LAWS = [pytest.param(law, flag, id=law.__name__[len("check_"):])
        for law, flag in laws.ESTIMATOR_LAWS]
STATEFUL_CASES = [case for case in CASES
                  if advantages.meta(case.values[0]).state is not None]
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
  if flag is not None and not getattr(advantages.meta(name, **options), flag):
    pytest.skip(f"metadata: {flag} is False")
  run_law(law, advantages.make(name, **options))


@pytest.mark.parametrize("law,flag", WARM_LAWS)
@pytest.mark.parametrize("name,options", STATEFUL_CASES)
def test_law_from_a_warm_state(name, options, law, flag):
  """A stateful estimator obeys its laws from the state a history of
  batches leaves (not only from ``init()``, where EBPO and AVSPO are
  GRPO), on groups of which two are collapsed."""
  if flag is not None and not getattr(advantages.meta(name, **options), flag):
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
  assert entry.meta.input in ("PG", "PGK")
  assert entry.meta.output in ("group", "token")
  assert entry.meta.paper
  assert set(advantages.meta(name, **options).reads) <= set(
      advantages.GroupData._fields)
  estimator = advantages.make(name, **options)
  assert (estimator.name, estimator.input, estimator.output) == (
      name, entry.meta.input, entry.meta.output)
  if entry.meta.state is None:
    assert estimator.init() == ()
  else:  # a NamedTuple of arrays (law check_state_keeps_its_shapes)
    assert jax.tree.leaves(estimator.init())
  # Every example option is an option of the function (none dropped).
  advantages.check_options(name, options)


@pytest.mark.parametrize("name,options", CASES)
def test_min_group_size_says_whether_groups_of_one_ever_train(name, options):
  """Metadata ``min_group_size`` 2 (which `train.validate` holds
  rollout.num_generations to): a run of groups of one, its state carried
  from batch to batch, gives every advantage exactly 0; 1: some advantage
  is nonzero, so G = 1 trains."""
  estimator = advantages.make(name, **options)
  state, nonzero = estimator.init(), []
  for i in range(3):
    one = laws.estimator_groups(jax.random.PRNGKey(i), g=1)
    out, state = estimator.estimate(state, one)
    nonzero.append(bool(np.any(np.asarray(out) != 0)))
  needed = advantages.meta(name, **options).min_group_size
  assert needed in (1, 2)
  assert any(nonzero) == (needed == 1), (needed, nonzero)


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


NAN, INF = float("nan"), float("inf")
# (estimator, options, the option named, the message after the field): a
# value outside the option's domain, which would otherwise compute something
# silently wrong (a NaN, a flipped sign, a gate that never opens) or fail
# late, in the jitted step.
BAD_OPTIONS = [
    ("grpo", {"scale": "batches"}, "scale", r"scale='batches' is unknown; "
     r"choose one of group, batch, none"),
    ("grpo", {"eps": -1e-6}, "eps", r"eps must be >= 0; got -1e-06: set a "
     r"value >= 0"),
    ("grpo", {"eps": NAN}, "eps", r"eps must be >= 0; got nan"),
    ("grpo", {"ddof": 0.5}, "ddof", r"ddof must be an integer >= 0; got "
     r"0\.5: set an integer >= 0"),
    ("grpo", {"ddof": -1}, "ddof", r"ddof must be an integer >= 0; got -1"),
    ("pass_at_k", {"scale": "batch"}, "scale", r"scale='batch' is unknown; "
     r"choose one of group, none"),
    ("mdp_grpo", {"mix": 1.5}, "mix", r"mix must be in \[0, 1\]; got 1\.5: "
     r"set a value in \[0, 1\]"),
    ("mdp_grpo", {"anchor": INF}, "anchor", r"anchor must be finite; got inf"),
    ("mdp_grpo", {"bound": 0.0}, "bound", r"bound must be > 0; got 0\.0"),
    ("gpg", {"f_norm": 0.0}, "f_norm", r"f_norm must be > 0; got 0\.0"),
    ("bnpo", {"r_min": 1.0}, "r_max", r"r_max=1\.0 must exceed r_min=1\.0.*"
     r"set r_max above r_min"),
    ("bnpo", {"max_weight": 0.0}, "max_weight", r"max_weight must be > 0"),
    ("bnpo", {"decompose": "no"}, "decompose", r"decompose='no' must be True "
     r"\(one Beta per reward column\) or False"),
    ("reinforce_plus_plus", {"eps": -1e-8}, "eps", r"eps must be >= 0"),
    ("reinforce_plus_plus_baseline", {"ddof": 1.5}, "ddof",
     r"ddof must be an integer >= 0"),
    ("gdpo", {"eps": -1.0}, "eps", r"eps must be >= 0"),
    ("dvao", {"floor": 1.5}, "floor", r"floor must be in \[0, 1\]"),
    ("dvao", {"weight_power": NAN}, "weight_power",
     r"weight_power must be a real number, not NaN; set a finite value"),
    ("ngrpo", {"n_virtual": 0}, "n_virtual", r"n_virtual must be an integer "
     r">= 1 \(the paper's add_max_reward_num, default 1\); got 0"),
    ("ngrpo", {"r_max": INF}, "r_max", r"r_max must be finite; got inf"),
    ("seed_grpo", {"alpha": 1.5}, "alpha", r"alpha must be in \[0, 1\] "
     r"\(the factor 1 - alpha SE / SE_max stays in \[0, 1\].*\); got 1\.5"),
    ("lampo", {"beta": -1.0}, "beta", r"beta must be >= 0 \(0 is RLOO.*; got "
     r"-1\.0"),
    ("lampo", {"score": "max"}, "score", r"score='max' is unknown; choose "
     r"one of mean, sum"),
    ("edge_grpo", {"normalizer": "microbatch"}, "normalizer",
     r"normalizer='microbatch' is unknown; choose one of batch, group"),
    ("edge_grpo", {"min_entropy": 0.0}, "min_entropy", r"min_entropy must be "
     r"> 0 \(the floor H_i is clamped to"),
    ("grpo_lead", {"low": 2.0}, "high", r"low=2\.0 and high=1\.5 must "
     r"satisfy low <= high.*set high >= low"),
    ("grpo_lead", {"k": -1.0}, "k", r"k must be >= 0"),
    ("grpo_lead", {"x0": NAN}, "x0", r"x0 must be a real number, not NaN"),
    ("sd_grpo", {"lam": 1.5}, "lam", r"lam must be in \[0, 1\]"),
    ("sd_grpo", {"blend_at": "token"}, "blend_at", r"blend_at='token' is "
     r"unknown; choose one of reward, advantage"),
    ("sd_grpo", {"unsegmented": "drop"}, "unsegmented", r"unsegmented="
     r"'drop' is unknown; choose one of holistic, zero"),
    ("hapo_token_mean", {"fallback_threshold": 0.0}, "fallback_threshold",
     r"fallback_threshold must be > 0"),
    ("ebpo", {"scale": "batch"}, "scale", r"scale='batch' is unknown; choose "
     r"one of global_std, group_std, none"),
    ("ebpo", {"tau2_min": 0.0}, "tau2_min", r"tau2_min must be > 0"),
    ("avspo", {"momentum": 1.5}, "momentum", r"momentum must be in \[0, 1\]"),
    ("avspo", {"acr_threshold": 1.0}, "acr_threshold", r"acr_threshold must "
     r"be in \[0, 1\)"),
    ("avspo", {"n_virtual": 0}, "n_virtual", r"n_virtual must be an integer "
     r">= 1"),
    ("avspo", {"r_lo": 1.0}, "r_hi", r"r_lo=1\.0 must be below r_hi=1\.0.*"
     r"set r_hi above r_lo"),
    ("riskpo", {"alpha": 1.5}, "alpha", r"alpha must be in \(0, 1\) \(a "
     r"quantile level.*\); got 1\.5: set a value in \(0, 1\)"),
    ("riskpo", {"alpha": 0.0}, "alpha", r"alpha must be in \(0, 1\)"),
    ("riskpo", {"beta": 1.0}, "beta", r"beta must be in \(0, 1\)"),
    ("riskpo", {"alpha": 0.9, "beta": 0.2}, "beta", r"alpha=0\.9 and "
     r"beta=0\.2 must satisfy 0 < alpha < beta < 1.*set beta above alpha"),
    ("riskpo", {"w_mix": -1.0}, "w_mix", r"w_mix must be >= 0"),
    ("riskpo", {"lr_q": -0.1}, "lr_q", r"lr_q must be >= 0"),
    ("riskpo", {"bundle_size": 0}, "bundle_size", r"bundle_size must be an "
     r"integer >= 1"),
    ("riskpo", {"quantiles": "ema"}, "quantiles", r"quantiles='ema' is "
     r"unknown; choose one of track, batch"),
    # SPO's own table: tests/test_estimators_trackers.py.
    ("spo", {"rho_value": 2.0}, "rho_value", r"rho_value=2\.0 must lie in "
     r"\(0, 1\]; set the constant forgetting factor"),
]


@pytest.mark.parametrize("name,options,key,match", BAD_OPTIONS,
                         ids=[f"{n}-{k}-{i}" for i, (n, _, k, _)
                              in enumerate(BAD_OPTIONS)])
def test_bad_option_values_fail_at_validation_naming_the_field(
    name, options, key, match):
  """The estimator's metadata ``check`` refuses the value before any
  compute: `advantages.make` with an `OptionError` naming the option, and
  `train.validate` as ``config.advantage.kwargs.<option>: ...``, with the
  values to set."""
  with pytest.raises(registry.OptionError, match=match) as error:
    advantages.make(name, **options)
  assert error.value.key == key
  with pytest.raises(ValueError, match=rf"^advantage\.kwargs\.{key}: "
                     + match):
    advantages.check_options(name, options, field="advantage.kwargs")
  config = quickstart.get_config()
  config.advantage.name, config.advantage.kwargs = name, options
  with pytest.raises(ValueError, match=rf"^config\.advantage\.kwargs\.{key}: "
                     + match):
    train_lib.validate(config)


def test_every_estimator_with_options_checks_their_values():
  """An estimator that takes options declares a ``check`` (its values'
  domains, `_kit.register`); the table above holds a bad value of each."""
  for name in advantages.names():
    if _kit.option_defaults(name):
      assert callable(advantages.meta(name).check), name
      assert name in {case[0] for case in BAD_OPTIONS}, name


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
