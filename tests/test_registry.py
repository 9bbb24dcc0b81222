"""The registry's typed metadata: each kind's NamedTuple, its required keys,
its defaults, and a clear error for a key it does not know."""

from typing import NamedTuple, Optional

import pytest

from grpo_jax import advantages
from grpo_jax import aggregation
from grpo_jax import credit
from grpo_jax import data
from grpo_jax import kl
from grpo_jax import objectives
from grpo_jax import registry
from grpo_jax import strategies
from grpo_jax.advantages import _kit as estimator_kit
from grpo_jax.objectives import _kit as objective_kit
from grpo_jax.objectives import corrections
from grpo_jax.objectives import regularisers
from grpo_jax.rewards import shapers
from grpo_jax.rewards import verifiers
from grpo_jax.strategies import _kit as strategy_kit
from grpo_jax.strategies import allocation
from grpo_jax.strategies import members


class WidgetMeta(NamedTuple):
  size: int  # required
  colour: str = "red"
  label: Optional[str] = None


def widgets():
  return registry.Registry("widget", meta=WidgetMeta)


def toy(x):
  return x


def test_defaults_are_filled_and_meta_is_the_kinds_named_tuple():
  reg = widgets()
  reg.register("w", size=3)(toy)
  meta = reg.entry("w").meta
  assert type(meta) is WidgetMeta
  assert meta == WidgetMeta(size=3, colour="red", label=None)
  assert (meta.size, meta.colour, meta.label) == (3, "red", None)


def test_declared_values_replace_the_defaults():
  reg = widgets()
  reg.register("w", size=1, colour="blue", label="x")(toy)
  assert reg.entry("w").meta == WidgetMeta(1, "blue", "x")


def test_an_unknown_key_names_the_kind_the_entry_and_the_key():
  reg = widgets()
  with pytest.raises(ValueError) as e:
    reg.register("w", size=1, colr="blue")(toy)
  assert str(e.value) == ("widget 'w' registers unknown metadata 'colr'; "
                          "known: size, colour, label.")
  assert "w" not in reg  # nothing half-registered


def test_a_missing_required_key_names_it():
  reg = widgets()
  with pytest.raises(ValueError) as e:
    reg.register("w", colour="blue")(toy)
  assert str(e.value) == ("widget 'w' must declare size when it registers "
                          "(e.g. @register(size=...)).")
  assert "w" not in reg


def test_the_entry_defaults_to_the_function_name_in_messages():
  reg = widgets()
  with pytest.raises(ValueError, match="widget 'toy' registers unknown "
                     "metadata 'shape'"):
    reg.register(size=1, shape="round")(toy)


def test_a_kind_without_a_meta_type_takes_no_key():
  reg = registry.Registry("gadget")
  reg.register("plain")(toy)
  assert reg.entry("plain").meta == registry.NoMeta() == ()
  with pytest.raises(ValueError) as e:
    reg.register("g", colour="red")(toy)
  assert str(e.value) == ("gadget 'g' registers unknown metadata 'colour'; "
                          "known: (none).")


def test_a_typo_in_a_real_registry_is_an_error():
  with objectives.OBJECTIVES.scoped():
    with pytest.raises(ValueError, match=(
        "objective 'toy' registers unknown metadata 'levle'; known: level, "
        "mechanism, paper")):
      objectives.OBJECTIVES.register("toy", levle="token",
                                     mechanism=None)(toy)
    with pytest.raises(ValueError, match=(
        "objective 'toy' must declare level when it registers")):
      objectives.OBJECTIVES.register("toy", mechanism=None)(toy)
  assert "toy" not in objectives.OBJECTIVES


@pytest.mark.parametrize("reg,meta_type", [
    (objectives.OBJECTIVES, objective_kit.ObjectiveMeta),
    (advantages.ESTIMATORS, estimator_kit.EstimatorMeta),
    (credit.CREDIT, credit.CreditMeta),
    (strategies.SELECTIONS, strategy_kit.SelectionMeta),
    (strategies.GROUP_STRATEGIES, strategy_kit.GroupStrategyMeta),
    (strategies.ROW_STRATEGIES, strategy_kit.RowStrategyMeta),
    (members.MEMBER_FILTERS, members.MemberFilterMeta),
    (allocation.BUDGETS, allocation.BudgetMeta),
    (shapers.SHAPERS, shapers.ShaperMeta),
    (verifiers.VERIFIERS, verifiers.VerifierMeta),
    (corrections.CORRECTIONS, corrections.CorrectionMeta),
    (regularisers.REGULARISERS, regularisers.RegulariserMeta),
    (data.TASKS, data.TaskMeta),
    (aggregation.AGGREGATIONS, aggregation.AggregationMeta),
    (kl.KL_ESTIMATORS, registry.NoMeta),
], ids=lambda x: getattr(x, "kind", None))
def test_every_entry_carries_its_kinds_named_tuple(reg, meta_type):
  assert reg.meta_type is meta_type
  assert reg.names()
  for entry in reg.entries():
    assert type(entry.meta) is meta_type, entry.name


def test_kit_defaults_match_what_readers_assumed():
  # A group strategy that declares only its rounds: no state, no reads, no
  # extra rows; a budget's optional functions absent.
  g = strategies.GROUP_STRATEGIES.entry("all_groups").meta
  assert (g.reads, g.state, g.replays, g.extra_rows, g.replay_rows) == (
      (), None, False, None, None)
  b = allocation.BUDGETS.entry("fixed").meta
  assert (b.active, b.check, b.picks_prompts, b.profile_samples) == (
      False, None, False, None)
  assert allocation.make_budget("fixed", num_prompts=2,
                                num_rows=8).profile_samples == 0


def test_advantages_meta_resolves_the_option_dependent_fields():
  declared = advantages.ESTIMATORS.entry("grpo").meta
  assert callable(declared.independent_groups)
  resolved = advantages.meta("grpo", scale="batch")
  assert type(resolved) is estimator_kit.EstimatorMeta
  assert resolved.independent_groups is False
  assert advantages.meta("grpo").independent_groups is True
  assert resolved.check is declared.check  # the check stays a function


def test_credit_meta_is_the_rules_named_tuple():
  m = credit.meta("uniform")
  assert type(m) is credit.CreditMeta
  assert (m.identity, m.linear, m.reads, m.row_advantages) == (
      True, True, (), False)
