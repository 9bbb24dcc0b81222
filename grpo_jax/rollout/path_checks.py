"""Config checks shared by the steps whose rows are not P x G groups:
ragged groups (a budget stage's draw, `rollout.budgets`), RePO's G + K
rows (`rollout.repo`) and replayed rows (`rollout.replay`), all stages of
`rollout.generate`.

Each fills only some of the group data, and the stages that read a
round's own fields per row do not see the added rows yet; these checks
refuse the rest before any compute, naming the field and the fix
(``why`` says which layout refuses).
"""

from grpo_jax import advantages
from grpo_jax.config import errors as config_errors
from grpo_jax import credit
from grpo_jax import objectives
from grpo_jax import strategies

fail = config_errors.fail  # the paths' check_config use it as path_checks.fail


def check_estimator_reads(c, why: str, filled) -> None:
  """The estimator reads only the GroupData fields the path fills."""
  reads = advantages.meta(c.advantage.name, **c.advantage.kwargs).reads
  extra = [f for f in reads if f not in filled]
  if extra:
    fail("advantage.name", f"estimator {c.advantage.name!r} reads "
         f"GroupData.{extra[0]}, which {why} does not fill",
         "use grpo, dr_grpo or rloo")


def check_fixed_budget(c, why: str) -> None:
  """The budget stage is off (``fixed``): the path's groups are not ragged."""
  if c.get("budget", {}).get("name", "fixed") != "fixed":
    fail("budget.name", f"{c.budget.name!r} draws ragged groups, which "
         f"{why} does not combine with", "set --config.budget.name=fixed")


def check_plain_stages(c, why: str, *, rows: bool = True,
                       shapers: bool = True, credit_reads=(),
                       fix: str = "") -> None:
  """No member filter, no per-member temperatures, no sampler top-K or
  temperature rule and no objective reading `entropy_hat`; a credit rule
  that reads only `credit_reads` (the per-row arrays the path keeps); with `shapers`, no reward shapers; with `rows`, a row
  strategy that reads no round field. `fix` is appended to each fix
  (", or budget.name=fixed").
  """
  r = c.rollout
  if c.get("filter", {}).get("name", "none") != "none":
    fail("filter.name", f"{c.filter.name!r} is not carried with {why}",
         f"set --config.filter.name=none{fix}")
  rule = credit.meta(c.credit.name)
  unkept = [name for name in rule.reads if name not in credit_reads]
  if unkept:  # a rule of the advantages and mask alone runs on any rows
    fail("credit.name", f"credit rule {c.credit.name!r} reads "
         f"{unkept[0]!r}, which {why} does not keep",
         f"set --config.credit.name=uniform{fix}")
  if rows and strategies.ROW_STRATEGIES.entry(c.rows.name).meta.reads:
    fail("rows.name", f"row strategy {c.rows.name!r} reads round fields "
         f"{why} does not keep", f"set --config.rows.name=all_rows{fix}")
  for field, value, off in (
      ("rewards.shapers", dict(c.rewards.shapers) if shapers else {}, {}),
      ("rollout.member_temperatures", tuple(r.member_temperatures), ()),
      ("rollout.record_topk", r.record_topk, 0),
      ("rollout.temperature_tau", r.temperature_tau, 0.0)):
    if value != off:
      fail(field, f"{value!r} is not carried with {why}",
           f"set {field}={off!r}{fix}")
  if "entropy_hat" in objectives.OBJECTIVES.entry(
      c.objective.name).meta.reads:
    fail("objective.name", f"objective {c.objective.name!r} reads "
         f"entropy_hat, which is not carried with {why}",
         f"choose another objective{fix}")
