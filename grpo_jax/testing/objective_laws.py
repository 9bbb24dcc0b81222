"""The laws every registered objective obeys, as plain functions.

Each law takes an objective's name and options (an entry of its registry
examples), builds the record with `objectives.make`, and raises an
AssertionError when the law fails. `tests/contracts/test_objectives.py`
runs every law on every (entry, example); a notebook can run them on a new
objective the moment it is registered (`run_objective_laws`).
"""

import jax
import jax.numpy as jnp
import numpy as np

from grpo_jax import measures
from grpo_jax import objectives

RTOL = 1e-5
ATOL = 1e-6


def _close(actual, expected, *, rtol=RTOL, atol=ATOL, what=""):
  """Trees of arrays equal within tolerance, leaf by leaf."""
  jax.tree.map(
      lambda a, e: np.testing.assert_allclose(
          np.asarray(a, np.float64), np.asarray(e, np.float64), rtol=rtol,
          atol=atol, err_msg=what),
      jax.device_get(actual), jax.device_get(expected))


def _finite(tree, what=""):
  for leaf in jax.tree.leaves(tree):
    assert np.all(np.isfinite(np.asarray(leaf))), f"not finite: {what}"


def off_policy_batch(seed=0, n=4, t=5, spread=0.4, token_advantages=False):
  """logp, old_logp, advantages ([N], or [N, T]), mask (right-padded, rows
  of 1 to T tokens): a batch whose ratios leave 1."""
  k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(seed), 4)
  logp = -jnp.abs(jax.random.normal(k1, (n, t)))
  old = logp + spread * jax.random.normal(k2, (n, t))
  adv = jax.random.normal(k3, (n, t) if token_advantages else (n,))
  lengths = jax.random.randint(k4, (n,), 1, t + 1)
  mask = (jnp.arange(t)[None, :] < lengths[:, None]).astype(jnp.float32)
  return logp, old, adv, mask


def _reads(objective, logp, old):
  """The arrays the objective reads that cannot be None (DPPO's top-K
  log-probs), built from these rows' own log-probs (`record.example_reads`),
  so that padding and row slices carry over to them."""
  return objectives.record.example_reads(objective.name, logp, old)


def loss_and_aux(objective, logp, old, adv, mask, state=None):
  """The record's loss with its pre-pass statistics over these rows."""
  stats = (None if objective.prepass is None
           else objective.prepass(logp, old, adv, mask))
  state = objective.init() if state is None else state
  return objective.loss(state, logp, old, adv, mask, batch_stats=stats,
                        **_reads(objective, logp, old))


def grad_logp(objective, logp, old, adv, mask):
  return jax.grad(lambda lp: loss_and_aux(objective, lp, old, adv, mask)[0])(
      logp)


def law_contract(name, options):
  """Float32 scalar loss = loss_sum / loss_count = its declared count; a
  nonzero gradient off policy; shares in [0, 1]; jit equals eager."""
  objective = objectives.make(name, **options)
  logp, old, adv, mask = off_policy_batch()
  loss, aux = jax.jit(lambda *a: loss_and_aux(objective, *a))(
      logp, old, adv, mask)
  eager = loss_and_aux(objective, logp, old, adv, mask)
  _close((loss, aux), eager, what="jit vs eager")
  assert isinstance(aux, objectives.ObjectiveAux)
  assert loss.shape == () and loss.dtype == jnp.float32
  _finite((loss, aux), "loss and aux")
  _close(aux.loss_sum / aux.loss_count, loss, what="loss_sum / loss_count")
  _close(objective.count(mask), aux.loss_count, what="declared count")
  g = grad_logp(objective, logp, old, adv, mask)
  _finite(g, "gradient")
  assert float(jnp.abs(g).sum()) > 0.0, "zero gradient off policy"
  assert 0.0 <= float(aux.clip_fraction) <= 1.0


def law_finite_at_extremes(name, options):
  """Log-ratios of +-50 and -inf/NaN padding give a finite loss and
  gradient, and padding gets no gradient."""
  objective = objectives.make(name, **options)
  logp, _, adv, mask = off_policy_batch()
  swing = jnp.where(jnp.arange(logp.shape[1])[None, :] % 2 == 0, 50.0, -50.0)
  old = jnp.where(mask > 0, logp + swing, -jnp.inf)
  logp = jnp.where(mask > 0, logp, jnp.nan)
  loss, aux = loss_and_aux(objective, logp, old, adv, mask)
  _finite((loss, aux), "loss at +-50")
  g = grad_logp(objective, logp, old, adv, mask)
  _finite(g, "gradient at +-50")
  _close(jnp.where(mask > 0, 0.0, g), jnp.zeros_like(g),
         what="gradient under padding")


def law_masked_equals_dropped(name, options):
  """Padding columns (NaN logp, -inf old_logp) change nothing."""
  objective = objectives.make(name, **options)
  logp, old, adv, mask = off_policy_batch()
  n = logp.shape[0]
  pad = lambda x, v: jnp.concatenate([x, jnp.full((n, 2), v)], axis=1)
  padded = (pad(logp, jnp.nan), pad(old, -jnp.inf), adv, pad(mask, 0.0))
  _close(loss_and_aux(objective, *padded),
         loss_and_aux(objective, logp, old, adv, mask), what="padded")
  g = grad_logp(objective, *padded)
  _close(g[:, :-2], grad_logp(objective, logp, old, adv, mask),
         what="padded gradient")
  _close(g[:, -2:], jnp.zeros((n, 2)), what="gradient under padding")


def whole_minibatch(name, options) -> bool:
  """Whether `name` with `options` needs the minibatch's rows whole (meta
  ``whole_minibatch``: Clip-Cov's random draw); config validation then
  rejects a microbatch size that splits them."""
  flag = objectives.OBJECTIVES.entry(name).meta.whole_minibatch
  return bool(flag(**options)) if callable(flag) else bool(flag)


def law_microbatched_equals_one_shot(name, options):
  """Rows in two microbatches, each loss_sum divided by the whole batch's
  count (pre-pass statistics over the whole batch): the same loss, gradient
  and merged diagnostics as one shot. An objective that needs the rows
  whole must refuse them split (ValueError)."""
  objective = objectives.make(name, **options)
  logp, old, adv, mask = off_policy_batch(n=6)
  mask = mask.at[0, 1:].set(0.0)  # microbatches with unequal token counts
  stats = (None if objective.prepass is None else measures.merge(
      objective.prepass(logp[:3], old[:3], adv[:3], mask[:3]),
      objective.prepass(logp[3:], old[3:], adv[3:], mask[3:])))
  state = objective.init()
  count = objective.count(mask)
  if whole_minibatch(name, options):
    try:
      objective.loss(state, logp[:3], old[:3], adv[:3], mask[:3],
                     batch_stats=stats, **_reads(objective, logp[:3],
                                                 old[:3]))
    except ValueError:
      return
    raise AssertionError(f"{name} needs whole minibatches but took 3 rows "
                         "of a 6-row pool")

  def micro(lp, rows):
    _, aux = objective.loss(state, lp, old[rows], adv[rows], mask[rows],
                            batch_stats=stats,
                            **_reads(objective, lp, old[rows]))
    return aux.loss_sum / count, aux

  def accumulated(lp):
    (l1, a1), (l2, a2) = micro(lp[:3], slice(0, 3)), micro(lp[3:],
                                                            slice(3, 6))
    return l1 + l2, measures.merge(a1.measures(), a2.measures())

  loss, merged = accumulated(logp)
  one_loss, one_aux = loss_and_aux(objective, logp, old, adv, mask, state)
  _close(loss, one_loss, what="microbatched loss")
  _close(measures.values(merged), measures.values(one_aux.measures()),
         what="merged diagnostics")
  _close(jax.grad(lambda lp: accumulated(lp)[0])(logp),
         grad_logp(objective, logp, old, adv, mask),
         what="microbatched gradient")


def law_on_policy_gradient_is_reinforce(name, options):
  """At old_logp = logp every objective's gradient is REINFORCE's with the
  same aggregation (token-level advantages for token-level objectives)."""
  objective = objectives.make(name, **options)
  logp, _, adv, mask = off_policy_batch(
      token_advantages=objective.level == "token")
  old = jnp.asarray(np.asarray(logp))
  reinforce = objectives.make("reinforce", aggregation=objective.aggregation,
                              horizon=objective.horizon)
  want = grad_logp(reinforce, logp, old, adv, mask)
  got = grad_logp(objective, logp, old, adv, mask)
  if objectives.OBJECTIVES.entry(name).meta.on_policy_mask:
    # Declared: a mask that needs no ratio (clip_cov's covariance rule)
    # drops some tokens on policy too; every other token is REINFORCE's.
    want = jnp.where(jnp.abs(got) > 0, want, 0.0)
  _close(got, want, atol=1e-6, what="on-policy gradient vs REINFORCE")
  assert float(jnp.abs(want).sum()) > 0.0


def law_off_policy_differs_from_reinforce(name, options):
  """Off policy the mechanism (clip, gate, penalty, weight, or the ratio
  itself) acts: the gradient is not REINFORCE's. Entries without one
  declare ``mechanism=None`` and are exempt."""
  mechanism = objectives.OBJECTIVES.entry(name).meta.mechanism
  if mechanism is None:
    return
  objective = objectives.make(name, **options)
  logp, old, adv, mask = off_policy_batch()
  reinforce = objectives.make("reinforce", aggregation=objective.aggregation,
                              horizon=objective.horizon)
  diff = (grad_logp(objective, logp, old, adv, mask)
          - grad_logp(reinforce, logp, old, adv, mask))
  assert float(jnp.abs(diff).max()) > 1e-4, (
      f"{name} off policy has REINFORCE's gradient ({mechanism} inert)")


def law_empty_batch_gives_zero(name, options):
  """No real token: loss 0, gradient 0, diagnostics 0 (never NaN)."""
  objective = objectives.make(name, **options)
  logp, old, adv, _ = off_policy_batch()
  mask = jnp.zeros(logp.shape)
  loss, aux = loss_and_aux(objective, logp, old, adv, mask)
  _close(loss, 0.0, what="empty loss")
  _close(measures.values(aux.measures()),
         jax.tree.map(jnp.zeros_like, measures.values(aux.measures())),
         what="empty diagnostics")
  _close(grad_logp(objective, logp, old, adv, mask), jnp.zeros(logp.shape),
         what="empty gradient")


def law_token_weights_scale_and_drop_terms(name, options):
  """An objective taking ``token_weights``: unit weights change nothing, a
  constant weight c scales the loss (and its gradient) by c, and zero
  weights on a row drop exactly that row's terms (its loss_sum alone
  subtracted); the count stays the mask's throughout. Entries without the
  keyword are exempt."""
  objective = objectives.make(name, **options)
  if objective.weighting is None:
    return
  logp, old, adv, mask = off_policy_batch()
  # Pre-pass statistics of the whole batch, for the rows alone as well.
  stats = (None if objective.prepass is None
           else objective.prepass(logp, old, adv, mask))

  def weighted(lp, weights, rows=slice(None)):
    return objective.loss(objective.init(), lp[rows], old[rows], adv[rows],
                          mask[rows], batch_stats=stats,
                          token_weights=weights,
                          **_reads(objective, lp[rows], old[rows]))

  plain = weighted(logp, mask)
  _close(plain, loss_and_aux(objective, logp, old, adv, mask),
         what="unit weights")
  half = weighted(logp, 0.5 * mask)
  _close(half[1].loss_sum, 0.5 * plain[1].loss_sum, what="weights of 0.5")
  _close(half[1].loss_count, plain[1].loss_count, what="weighted count")
  _close(jax.grad(lambda lp: weighted(lp, 0.5 * mask)[0])(logp),
         0.5 * jax.grad(lambda lp: weighted(lp, mask)[0])(logp),
         what="gradient under weights of 0.5")
  if whole_minibatch(name, options):
    return  # its rows cannot be taken alone
  first = weighted(logp, mask[:1], slice(0, 1))
  dropped = weighted(logp, mask.at[0].set(0.0))
  _close(dropped[1].loss_sum, plain[1].loss_sum - first[1].loss_sum,
         what="a zero-weight row")
  _close(dropped[1].loss_count, plain[1].loss_count,
         what="count with a zero-weight row")


OBJECTIVE_LAWS = (law_contract, law_finite_at_extremes,
                  law_masked_equals_dropped, law_microbatched_equals_one_shot,
                  law_on_policy_gradient_is_reinforce,
                  law_off_policy_differs_from_reinforce,
                  law_empty_batch_gives_zero,
                  law_token_weights_scale_and_drop_terms)


def cases(registry_):
  """(name, options) for every entry of a registry and each of its
  examples: the parameters of a contract suite."""
  return [(entry.name, dict(example)) for entry in registry_.entries()
          for example in entry.examples]


def run_objective_laws(name):
  """Every law on every example of `name`; returns the laws' names."""
  examples = objectives.OBJECTIVES.entry(name).examples
  for options in examples:
    for law in OBJECTIVE_LAWS:
      law(name, dict(options))
  return [law.__name__ for law in OBJECTIVE_LAWS]
