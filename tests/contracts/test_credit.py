"""Contract suite of the credit rules, parametrised from the registry.

Every registered rule, with each of its example options, runs under every
law of `grpo_jax.testing.credit_laws` its metadata asks for; registering a
rule (one decorator) is enough to put it here.
"""

import jax
import pytest

from grpo_jax import credit
from grpo_jax.testing import credit_laws as laws

CASES = [pytest.param(entry.name, options, id=f"{entry.name}-{i}")
         for entry in credit.CREDIT.entries()
         for i, options in enumerate(entry.examples)]
LAWS = [pytest.param(law, flag, id=law.__name__[len("check_"):])
        for law, flag in laws.CREDIT_LAWS]


def flags(name):
  m = credit.meta(name)
  return dict(m._asdict(), token_advantages=not m.row_advantages)


@pytest.mark.parametrize("law,flag", LAWS)
@pytest.mark.parametrize("name,options", CASES)
def test_law(name, options, law, flag):
  if flag is not None and not flags(name)[flag]:
    pytest.skip(f"metadata: {flag} is False")
  batch = laws.credit_batch(jax.random.PRNGKey(0))
  law(credit.make(name, **options), batch)


@pytest.mark.parametrize("name", credit.names())
def test_neutral_options_give_uniform(name):
  neutral = credit.meta(name).neutral
  if neutral is None:
    pytest.skip("no neutral setting")
  for key in (0, 1):
    laws.check_neutral_is_uniform(credit.make(name, **neutral),
                                  laws.credit_batch(jax.random.PRNGKey(key)))


@pytest.mark.parametrize("name,options", CASES)
def test_metadata_and_options(name, options):
  m = credit.meta(name)
  assert set(m.reads) <= set(credit.READS)
  if name != "uniform":
    assert m.paper and callable(m.check)
  credit.check_options(name, options)  # every example is a valid option set
  rule = credit.make(name, **options)
  assert (rule.name, rule.reads, rule.init()) == (name, tuple(m.reads), ())
  with pytest.raises(ValueError, match="reads"):
    if rule.reads:
      rule.apply((), None, None)
    else:
      raise ValueError("reads nothing")
