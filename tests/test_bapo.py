"""BAPO (objectives.bapo): VARIANTS.md 2.3's vector, hand-derived values and
gradients, the search against a plain sequential loop, one search per
minibatch under microbatching, option checks.

Expected values are VARIANTS.md's or worked out by hand in the comments;
the random cases compare with `np_bapo` below, a float64 numpy
implementation of the spec's two while-loops and of the clipped loss and
its per-token gradient, written from the formulas and sharing no code with
the implementation (which evaluates every candidate bound at once).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import bapo as bapo_config
from grpo_jax.train import batch as batch_lib
from grpo_jax import train as train_lib
from grpo_jax import measures
from grpo_jax import models
from grpo_jax import objectives
from grpo_jax.runtime import sharding
from grpo_jax import testing
from grpo_jax.train import update as update_lib

DEFAULTS = dict(low_start=0.6, low_max=0.9, low_step=0.05, high_start=1.2,
                high_max=3.0, high_step=0.05, rho0=0.5, balance="share_grad",
                dual_clip=3.0)


# ------------------------------------------------- the independent reference


def np_bapo(r, a, mask, **options):
  """(c_low, c_high, rho_start, rho, loss, grad) in float64 for token_mean,
  with the search as VARIANTS.md's sequential loops.

  r, a, mask: [N, T] float64 (a broadcast already); grad: d loss / d logp.
  """
  o = dict(DEFAULTS, **options)
  real = mask > 0
  rr, aa = r[real], a[real]

  def share(c_low, c_high):
    pos, neg = aa > 0, aa < 0
    if o["balance"] == "share_grad":
      p = np.sum((rr * aa)[pos & (rr <= c_high)])
      n = np.sum((rr * -aa)[neg & (rr >= c_low)])
    else:  # the recipe's clipped values
      p = np.sum(np.minimum(rr, c_high)[pos] * aa[pos])
      n = np.sum(np.maximum(rr, c_low)[neg] * -aa[neg])
    return 1.0 if n == 0 else p / (p + n)

  # Bounds from integer step counts, rounded so that 0.6 + 6 * 0.05 is 0.9.
  bound = lambda start, step, k: round(start + k * step, 9)
  k_low = k_high = 0
  c_low = bound(o["low_start"], o["low_step"], 0)
  c_high = bound(o["high_start"], o["high_step"], 0)
  rho = rho_start = share(c_low, c_high)
  while (rho < o["rho0"] and bound(o["low_start"], o["low_step"], k_low + 1)
         <= o["low_max"] + 1e-9):
    k_low += 1
    c_low = bound(o["low_start"], o["low_step"], k_low)
    rho = share(c_low, c_high)
  while (rho < o["rho0"] and bound(o["high_start"], o["high_step"],
                                   k_high + 1) <= o["high_max"] + 1e-9):
    k_high += 1
    c_high = bound(o["high_start"], o["high_step"], k_high)
    rho = share(c_low, c_high)
  # The loss: -min(r A, clip(r) A), then min(., -c A) for A < 0.
  clipped = np.clip(r, c_low, c_high)
  term = -np.minimum(r * a, clipped * a)
  cut = ((a > 0) & (r > c_high)) | ((a < 0) & (r < c_low))
  if o["dual_clip"] is not None:
    cap = -o["dual_clip"] * a
    cut |= (a < 0) & (term > cap)
    term = np.where(a < 0, np.minimum(term, cap), term)
  tokens = mask.sum()
  loss = np.sum(np.where(real, term, 0.0)) / tokens
  # d(-r A)/d logp = -r A where the token is not cut, else 0.
  grad = np.where(real & ~cut, -r * a, 0.0) / tokens
  return c_low, c_high, rho_start, rho, loss, grad


def inputs(r, a, mask=None):
  """(logp, old_logp, advantages, mask) float32 with exp(logp - old) = r."""
  r = np.asarray(r, np.float64).reshape(-1, np.shape(r)[-1])
  old = np.full(r.shape, -1.0)
  a = np.asarray(a, np.float64)
  mask = np.ones(r.shape) if mask is None else np.asarray(mask, np.float64)
  return tuple(jnp.asarray(x, jnp.float32)
               for x in (old + np.log(r), old, a.reshape(-1, r.shape[1])
                         if a.size == r.size else a, mask))


def value_grad_aux(logp, old, adv, mask, **options):
  (loss, aux), g = jax.value_and_grad(
      lambda lp: objectives.bapo(lp, old, adv, mask, **options),
      has_aux=True)(logp)
  return loss, g, aux


def found(aux):
  """(c_low, c_high, rho_start, rho) from the objective's records."""
  v = measures.values(aux.extra)
  return tuple(float(v[f"bapo_{k}"])
               for k in ("c_low", "c_high", "rho_start", "rho"))


# ------------------------------------------------------ VARIANTS.md 2.3

# A = +1 at r = [1.1, 1.3, 1.5]; A = -1 at r = [.65, .7, .9, 1.0, 1.2].
VEC_R = [1.1, 1.3, 1.5, 0.65, 0.7, 0.9, 1.0, 1.2]
VEC_A = [1.0, 1.0, 1.0, -1.0, -1.0, -1.0, -1.0, -1.0]


def test_variants_vector_search():
  """Start (0.6, 1.2): P = 1.1, N = 4.45, rho = 1.1 / 5.55 = 0.198198.
  The low loop drops .65 and .7 from N (3.1) and stops at its max 0.9 with
  rho = 1.1 / 4.2 = 0.261905; the high loop admits 1.3 at 1.3 (rho =
  2.4 / 5.5 = 0.436) and 1.5 at 1.5: rho = 3.9 / 7.0 = 0.557143."""
  args = inputs([VEC_R], [VEC_A])
  _, aux = objectives.bapo(*args)
  testing.assert_close(found(aux), (0.9, 1.5, 0.198198, 0.557143),
                       rtol=2e-6)
  # No high loop (its max is its start): the state after the low loop.
  _, aux = objectives.bapo(*args, high_max=1.2)
  testing.assert_close(found(aux), (0.9, 1.2, 0.198198, 0.261905),
                       rtol=2e-6)
  # The reference agrees.
  r, a = np.array([VEC_R]), np.array([VEC_A])
  testing.assert_close(np_bapo(r, a, np.ones_like(r))[:4],
                       (0.9, 1.5, 0.198198, 0.557143), rtol=2e-6)


def test_variants_vector_value_and_gradient():
  """Bounds (0.9, 1.5): no A > 0 token is cut (1.5 sits on c_high), the
  A < 0 tokens at .65 and .7 are (r < 0.9) and keep 0.9 |A| each.
  loss = (-(1.1 + 1.3 + 1.5) + 0.9 + 0.9 + 0.9 + 1.0 + 1.2) / 8 = 0.125;
  d loss / d logp = -r A / 8 on the uncut tokens, 0 on the cut ones."""
  loss, g, aux = value_grad_aux(*inputs([VEC_R], [VEC_A]))
  testing.assert_close(loss, 0.125, rtol=1e-5)
  testing.assert_close(
      g * 8, jnp.asarray([[-1.1, -1.3, -1.5, 0.0, 0.0, 0.9, 1.0, 1.2]]),
      atol=1e-5)
  testing.assert_close(aux.clip_fraction, 2 / 8)


def test_ratio_value_balance_is_the_recipes():
  """The recipe's clipped values. Start: P = 1.1 + 1.2 + 1.2 = 3.5,
  N = 4.45, rho = 3.5 / 7.95 = 0.440252. Raising c_low raises N (4.9 at
  0.9), so the low loop runs to its max; c_high then lifts P to 3.9 at 1.5
  and no further: rho 3.9 / 8.8 = 0.443182 < 0.5, c_high ends at 3.0.
  The loss at (0.9, 3.0) equals share_grad's at (0.9, 1.5) here."""
  args = inputs([VEC_R], [VEC_A])
  loss, g, aux = value_grad_aux(*args, balance="ratio_value")
  testing.assert_close(found(aux), (0.9, 3.0, 0.440252, 0.443182),
                       rtol=2e-6)
  testing.assert_close(loss, 0.125, rtol=1e-5)
  # The example script's adv_ratio_target 0.5 is rho0 = 1/3: reached at
  # the start, no search. Bounds (0.6, 1.2): 1.3 and 1.5 cut to 1.2, no
  # A < 0 token below 0.6: loss = (-(1.1 + 1.2 + 1.2) + 4.45) / 8.
  loss, g, aux = value_grad_aux(*args, balance="ratio_value", rho0=1 / 3)
  testing.assert_close(found(aux)[:2], (0.6, 1.2), rtol=1e-6)
  testing.assert_close(loss, 0.95 / 8, rtol=1e-5)
  testing.assert_close(
      g * 8, jnp.asarray([[-1.1, 0.0, 0.0, 0.65, 0.7, 0.9, 1.0, 1.2]]),
      atol=1e-5)


def test_no_negative_tokens_no_search():
  """rho = 1 without A < 0 tokens: the bounds stay (0.6, 1.2). Ratios
  [1.1, 1.3, 0.5, 2.0], A = +1: 1.3 and 2.0 are cut to 1.2, 0.5 is not
  (A > 0 below the band keeps r A): loss = -(1.1 + 1.2 + 0.5 + 1.2) / 4."""
  loss, g, aux = value_grad_aux(*inputs([[1.1, 1.3, 0.5, 2.0]], [1.0]))
  testing.assert_close(found(aux), (0.6, 1.2, 1.0, 1.0), rtol=1e-6)
  testing.assert_close(loss, -1.0, rtol=1e-5)
  testing.assert_close(g * 4, jnp.asarray([[-1.1, 0.0, -0.5, 0.0]]),
                       atol=1e-5)
  # A = 0 tokens neither count nor move the bounds.
  _, aux = objectives.bapo(*inputs([[0.5, 2.0]], [[1.0, 0.0]]))
  testing.assert_close(found(aux), (0.6, 1.2, 1.0, 1.0), rtol=1e-6)


def test_only_negative_tokens_take_both_bounds_to_their_max_and_dual_clip():
  """P = 0: rho = 0 whatever the bounds, so c_low = 0.9 and c_high = 3.0.
  A = -1 at r = [0.8, 1.1, 4.0]: 0.8 is cut to 0.9 (loss 0.9), 1.1 keeps
  r |A| (gradient +1.1), 4.0 is capped by the dual clip at 3 (loss 3, no
  gradient): loss = (0.9 + 1.1 + 3) / 3, clip fraction 2 / 3."""
  args = inputs([[0.8, 1.1, 4.0]], [-1.0])
  loss, g, aux = value_grad_aux(*args)
  testing.assert_close(found(aux), (0.9, 3.0, 0.0, 0.0), rtol=1e-6,
                       atol=1e-7)
  testing.assert_close(loss, 5.0 / 3, rtol=1e-5)
  testing.assert_close(g * 3, jnp.asarray([[0.0, 1.1, 0.0]]), atol=1e-5)
  testing.assert_close(aux.clip_fraction, 2 / 3)
  # Without the dual clip the large ratio keeps r |A| and its gradient.
  loss, g, _ = value_grad_aux(*args, dual_clip=None)
  testing.assert_close(loss, (0.9 + 1.1 + 4.0) / 3, rtol=1e-5)
  testing.assert_close(g * 3, jnp.asarray([[0.0, 1.1, 4.0]]), atol=1e-5)


# --------------------------------------------- against the sequential loops


def random_case(seed, n=12, t=10, spread=0.5, negative_bias=0.0,
                token_advantages=False):
  k = jax.random.split(jax.random.PRNGKey(seed), 4)
  logp = -jnp.abs(jax.random.normal(k[0], (n, t)))
  old = logp + spread * jax.random.normal(k[1], (n, t))
  shape = (n, t) if token_advantages else (n,)
  adv = jax.random.normal(k[2], shape) - negative_bias
  mask = testing.random_mask(k[3], (n, t))
  return logp, old, adv, mask


SEARCH_CASES = [
    (seed, bias, options) for seed in range(4) for bias, options in [
        (0.0, {}),
        (0.8, {}),
        (0.8, {"balance": "ratio_value"}),
        (1.5, {"rho0": 0.3, "high_step": 0.1, "high_max": 2.0}),
        (0.5, {"low_start": 0.8, "low_max": 0.95, "high_max": 2.0,
               "dual_clip": None}),
        (-0.5, {"rho0": 0.7}),
        (-1.5, {}),
    ]] + [(3, 0.0, {"rho0": 0.45})]  # the low loop stops inside


@pytest.mark.parametrize("seed,bias,options", SEARCH_CASES)
def test_the_one_step_search_is_the_sequential_loops(seed, bias, options):
  """Bounds, shares, loss and gradient against `np_bapo`'s while-loops on
  random ragged batches, balanced or skewed toward A < 0 (or A > 0)."""
  logp, old, adv, mask = random_case(seed, negative_bias=bias,
                                     token_advantages=seed % 2 == 1)
  r = np.exp(np.float64(logp) - np.float64(old))
  a = np.broadcast_to(np.float64(adv).reshape(adv.shape[0], -1), r.shape)
  c_low, c_high, rho_start, rho, want_loss, want_grad = np_bapo(
      r, a, np.float64(mask), **options)
  loss, g, aux = value_grad_aux(logp, old, adv, mask, **options)
  testing.assert_close(found(aux), (c_low, c_high, rho_start, rho),
                       rtol=1e-5, atol=1e-6)
  testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-6)
  testing.assert_close(g, want_grad, rtol=1e-4, atol=1e-6)


def test_the_random_cases_move_the_bounds():
  """The cases above exercise the search: some stop inside each loop, some
  run a loop to its max, some never start."""
  outcomes = set()
  for seed, bias, options in SEARCH_CASES:
    logp, old, adv, mask = random_case(seed, negative_bias=bias,
                                       token_advantages=seed % 2 == 1)
    o = dict(DEFAULTS, **options)
    c_low, c_high, *_ = found(objectives.bapo(logp, old, adv, mask,
                                              **options)[1])
    at = lambda x, y: math.isclose(x, y, abs_tol=1e-6)
    outcomes.add(("low", "start" if at(c_low, o["low_start"]) else
                  "max" if at(c_low, o["low_max"]) else "inside"))
    outcomes.add(("high", "start" if at(c_high, o["high_start"]) else
                  "max" if at(c_high, o["high_max"]) else "inside"))
  assert outcomes == {(side, where) for side in ("low", "high")
                      for where in ("start", "max", "inside")}, outcomes


# ------------------------------------------------- one search per minibatch


def split_vector():
  """The VARIANTS vector as two rows: row 0 the A > 0 tokens (padded),
  row 1 the A < 0 ones."""
  r = np.array([[1.1, 1.3, 1.5, 1.0, 1.0], [0.65, 0.7, 0.9, 1.0, 1.2]])
  mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.float64)
  return inputs(r, [1.0, -1.0], mask)


def test_microbatches_share_the_whole_minibatchs_bounds():
  """Row 1 alone has no positive token (rho = 0: bounds (0.9, 3.0)); with
  the pre-pass's sums of both rows every microbatch clips at the whole
  batch's (0.9, 1.5), and the accumulated loss and gradient are one shot's
  (loss 0.125, as the vector's)."""
  logp, old, adv, mask = split_vector()
  record = objectives.make("bapo")
  alone = record.loss((), logp[1:], old[1:], adv[1:], mask[1:])[1]
  testing.assert_close(found(alone)[:2], (0.9, 3.0), rtol=1e-6)
  stats = measures.merge(record.prepass(logp[:1], old[:1], adv[:1], mask[:1]),
                         record.prepass(logp[1:], old[1:], adv[1:], mask[1:]))
  count = record.count(mask)

  def accumulated(lp):
    auxes = [record.loss((), lp[s], old[s], adv[s], mask[s],
                         batch_stats=stats)[1]
             for s in (slice(0, 1), slice(1, 2))]
    return (sum(x.loss_sum for x in auxes) / count,
            measures.merge(*[x.measures() for x in auxes]))

  (loss, merged), g = jax.value_and_grad(accumulated, has_aux=True)(logp)
  one_loss, one_g, one_aux = value_grad_aux(logp, old, adv, mask)
  testing.assert_close(loss, 0.125, rtol=1e-5)
  testing.assert_close(loss, one_loss, rtol=1e-6)
  testing.assert_close(g, one_g, atol=1e-7)
  values = measures.values(merged)
  testing.assert_close(values, measures.values(one_aux.measures()),
                       rtol=1e-6)
  testing.assert_close((values["bapo_c_low"], values["bapo_c_high"]),
                       (0.9, 1.5), rtol=1e-6)


def test_the_sums_are_the_pre_pass_the_trainer_merges():
  """The pre-pass gives one Sum per candidate bound: 7 lower (0.6 .. 0.9)
  and 37 upper (1.2 .. 3.0). Hand sums for the vector: P at c_high = 1.2
  is 1.1, at 1.3 2.4, from 1.5 on 3.9; N at c_low = 0.6 is 4.45, at 0.7
  3.8, from 0.75 on 3.1."""
  stats = objectives.make("bapo").prepass(*inputs([VEC_R], [VEC_A]))
  pos, neg = stats["bapo_pos"].sum, stats["bapo_neg"].sum
  assert pos.shape == (37,) and neg.shape == (7,)
  testing.assert_close(pos[jnp.asarray([0, 1, 2, 5, 6, 36])],
                       jnp.asarray([1.1, 1.1, 2.4, 2.4, 3.9, 3.9]), rtol=1e-6)
  testing.assert_close(neg, jnp.asarray([4.45, 4.45, 3.8, 3.1, 3.1, 3.1,
                                         3.1]), rtol=1e-6)


def model_batch():
  """(model config, params, minibatch of 8 rows): rows 0-3 with A = +1,
  rows 4-7 with A = -1.3, old log-probs perturbed (ratios ~ exp(N(0,
  0.3^2))). Any split along the rows' halves sees one sign only: bounds
  (0.6, 1.2) or (0.9, 3.0); the whole batch lands elsewhere."""
  config = testing.tiny_config()
  params = models.init_params(config, jax.random.PRNGKey(0))
  rng = np.random.default_rng(0)
  n, sp, t = 8, 4, 6
  tokens = jnp.asarray(rng.integers(2, config.vocab_size, (n, sp + t)),
                       jnp.int32)
  input_mask = jnp.ones((n, sp + t), jnp.float32)
  logp, _ = batch_lib.policy_logprobs(params, config, tokens, input_mask, sp)
  batch = batch_lib.Batch(
      tokens=tokens, input_mask=input_mask,
      completion_mask=jnp.ones((n, t), jnp.float32),
      advantages=jnp.asarray([1.0] * 4 + [-1.3] * 4, jnp.float32),
      old_logp=logp + 0.3 * jnp.asarray(rng.normal(size=(n, t)),
                                        jnp.float32),
      ref_logp=None, sampler_logp=None, temperature=jnp.ones((n,)))
  return config, params, batch, logp


def test_one_search_for_every_device_and_microbatch():
  """The trainer's update on a (data 2, fsdp 2) mesh in microbatches of 2
  rows (each holding one sign) clips at the bounds of one shot on one
  device, and those are `np_bapo`'s on the whole batch's ratios."""
  config, params, batch, logp = model_batch()
  fns = update_lib.make_loss_functions(model_config=config,
                                       objective=objectives.make("bapo"),
                                       chunk_size=64)
  gradient = lambda micro: jax.jit(
      lambda p, b: update_lib.minibatch_gradient(
          fns, p, {"objective": ()}, b, microbatch_size=micro))
  grads, loss, records = gradient(0)(params, batch)
  one = measures.values(records)
  r = np.exp(np.float64(logp) - np.float64(batch.old_logp))
  a = np.broadcast_to(np.float64(batch.advantages)[:, None], r.shape)
  want = np_bapo(r, a, np.ones_like(r))
  testing.assert_close((one["bapo_c_low"], one["bapo_c_high"]), want[:2],
                       rtol=1e-6)
  assert (want[0], want[1]) not in ((0.6, 1.2), (0.9, 3.0)), want
  mesh = sharding.make_mesh((2, 2, 1))
  with jax.set_mesh(mesh):
    s_grads, s_loss, s_records = gradient(2)(
        sharding.shard_params(params, mesh),
        sharding.shard_batch(batch, mesh))
  testing.assert_close(measures.values(s_records), one, rtol=1e-5,
                       atol=1e-6)
  testing.assert_close(s_loss, loss, rtol=1e-5)
  testing.assert_close(jax.device_get(s_grads), jax.device_get(grads),
                       rtol=1e-4, atol=1e-7)


# --------------------------------------------------------- REINFORCE and PPO


def test_on_policy_gradient_is_reinforce():
  """r = 1 lies inside every band the options allow (c_low <= 1 <=
  c_high) and below the dual clip: REINFORCE's gradient, -A / M."""
  logp, _, adv, mask = random_case(0, negative_bias=1.0,
                                   token_advantages=True)
  for options in ({}, {"balance": "ratio_value"}, {"low_max": 1.0}):
    _, g, _ = value_grad_aux(logp, logp, adv, mask, **options)
    testing.assert_close(g, -np.float64(adv) * np.float64(mask)
                         / float(mask.sum()), atol=1e-7)


def test_off_policy_differs_from_reinforce_and_from_the_start_band():
  """On the vector the search moved the bounds: the gradient is neither
  REINFORCE's nor that of PPO's clip fixed at the start band [0.6, 1.2]
  (which cuts 1.3 and 1.5 and keeps .65 and .7)."""
  args = inputs([VEC_R], [VEC_A])
  _, g, _ = value_grad_aux(*args)
  grad = lambda name, **kw: jax.grad(lambda lp: objectives.get(name)(
      lp, *args[1:], aggregation="token_mean", **kw)[0])(args[0])
  reinforce = grad("reinforce")
  fixed = grad("ppo_clip", clip_low=0.4, clip_high=0.2, dual_clip=3.0)
  assert float(jnp.abs(g - reinforce).max()) > 0.05
  assert float(jnp.abs(g - fixed).max()) > 0.05


# ------------------------------------------------------------- bad options


@pytest.mark.parametrize("options,field", [
    ({"low_start": 0.95}, "low_start"),  # a- > b-
    ({"high_start": 3.5}, "high_start"),  # a+ > b+
    ({"low_step": 0.0}, "low_step"),
    ({"high_step": -0.05}, "high_step"),
    ({"rho0": 0.0}, "rho0"),
    ({"rho0": 1.0}, "rho0"),
    ({"rho0": 1.5}, "rho0"),
    ({"rho0": float("nan")}, "rho0"),
    ({"low_start": 0.0}, "low_start"),
    ({"low_max": 1.1}, "low_max"),
    ({"high_start": 0.9}, "high_start"),
    ({"low_step": 1e-6}, "low_step"),  # 300001 candidates
    ({"balance": "share"}, "balance"),
    ({"low_start": "0.6"}, "low_start"),
    ({"dual_clip": 1.0}, "dual_clip"),
])
def test_bad_options_fail_at_make_and_in_the_config(options, field):
  with pytest.raises(ValueError, match=field):
    objectives.make("bapo", **options)
  c = bapo_config.get_config("tiny")
  c.objective.kwargs = dict(c.objective.kwargs, **options)
  with pytest.raises(ValueError, match=f"config.objective.kwargs.*{field}"):
    train_lib.validate(c)


def test_the_trainer_supplies_the_sums():
  with pytest.raises(ValueError, match="pos_sums"):
    objectives.make("bapo", pos_sums=jnp.zeros(37))
  logp, old, adv, mask = inputs([VEC_R], [VEC_A])
  with pytest.raises(ValueError, match="one per candidate"):
    objectives.bapo(logp, old, adv, mask, pos_sums=jnp.zeros(3),
                    neg_sums=jnp.zeros(7))


def test_the_config_is_off_policy_and_valid():
  c = bapo_config.get_config()
  train_lib.validate(c)
  assert c.train.num_iterations * c.train.num_minibatches == 8
  assert c.objective.kwargs.aggregation == "token_mean"
  train_lib.validate(bapo_config.get_config("tiny"))
