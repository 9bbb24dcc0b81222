"""The objective contract suite: every law on every registered objective and
each of its example options (DESIGN.md, "Tests")."""

import jax.numpy as jnp
import pytest

from grpo_jax.testing import objective_laws as laws
from grpo_jax import objectives

CASES = laws.cases(objectives.OBJECTIVES)


@pytest.mark.parametrize("law", laws.OBJECTIVE_LAWS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("name,options", CASES,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_law(law, name, options):
  law(name, options)


def _toy_clip(logp, old_logp, advantages, mask, *, eps=0.1,
              aggregation="token_mean", horizon=None):
  """A toy: PPO's clip with one symmetric band."""
  return objectives.ppo_clip(logp, old_logp, advantages, mask, clip_low=eps,
                             clip_high=eps, aggregation=aggregation,
                             horizon=horizon)


def test_a_new_objective_is_under_every_law_once_registered():
  before = objectives.names()
  with objectives.OBJECTIVES.scoped():
    objectives.OBJECTIVES.register(
        "toy_clip", level="token", mechanism="clip",
        examples=({}, {"eps": 0.3}))(_toy_clip)
    assert ("toy_clip", {"eps": 0.3}) in laws.cases(objectives.OBJECTIVES)
    ran = laws.run_objective_laws("toy_clip")
    assert ran == [law.__name__ for law in laws.OBJECTIVE_LAWS]
    loss, _ = objectives.make("toy_clip", eps=0.3).loss(
        (), *laws.off_policy_batch())
    assert jnp.isfinite(loss)
  assert objectives.names() == before


def test_a_law_fails_for_a_broken_objective():
  """The laws can fail: an objective that divides by the padded length."""
  def by_padded_length(logp, old_logp, advantages, mask, *,
                       aggregation="token_mean", horizon=None):
    loss, aux = objectives.reinforce(logp, old_logp, advantages, mask,
                                     aggregation=aggregation, horizon=horizon)
    return loss * mask.sum() / mask.size, aux
  with objectives.OBJECTIVES.scoped():
    objectives.OBJECTIVES.register("by_padded_length", level="token",
                                   mechanism=None)(by_padded_length)
    with pytest.raises(AssertionError):
      laws.law_masked_equals_dropped("by_padded_length", {})


def test_registering_without_the_required_metadata_is_an_error():
  with objectives.OBJECTIVES.scoped():
    with pytest.raises(ValueError, match="must declare mechanism"):
      objectives.OBJECTIVES.register("no_mechanism", level="token")(_toy_clip)
    objectives.OBJECTIVES.register("no_aggregation", level="token",
                                   mechanism=None)(
        lambda logp, old_logp, advantages, mask: objectives.reinforce(
            logp, old_logp, advantages, mask))
    with pytest.raises(ValueError, match="aggregation= and horizon="):
      objectives.make("no_aggregation")
