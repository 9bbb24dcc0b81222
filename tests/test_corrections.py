"""Token weights and masks (objectives.corrections) and the entropy bonus:
hand-derived weights of every entry, composition with ppo_clip and
reinforce (value and gradient, the denominator the mask's), sequence-level
objectives, the trainer's plumbing (sampler log-probs on and off policy, the
top-entropy pre-pass, microbatching), config errors and one real step."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from configs import grpo as grpo_config
from grpo_jax.train import batch as batch_lib
from grpo_jax import config as config_lib
from grpo_jax import measures
from grpo_jax import models
from grpo_jax import objectives
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.train import update as update_lib
from grpo_jax.objectives import _kit
from grpo_jax.objectives import corrections
from grpo_jax.objectives import entropy_mask
from grpo_jax.objectives import regularisers
from grpo_jax.testing import learning

N, T = 6, 5


def arrays(seed=0, spread=0.6):
  """Numpy float64 inputs: ragged right padding (row 5 all padding),
  -inf under padding, sampler log-probs `spread` away from old."""
  rng = np.random.default_rng(seed)
  lengths = np.array([5, 3, 1, 4, 2, 0])
  mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float64)
  old = -np.abs(rng.normal(size=(N, T)))
  sampler = old + spread * rng.normal(size=(N, T))
  logp = old + 0.3 * rng.normal(size=(N, T))
  entropy = np.abs(rng.normal(size=(N, T))) + 0.1
  adv = np.array([1.0, -1.0, -0.5, -2.0, 0.7, -1.0])
  pad = lambda x: np.where(mask > 0, x, -np.inf)
  return dict(mask=mask, old_logp=pad(old), sampler_logp=pad(sampler),
              logp=pad(logp), entropy=np.where(mask > 0, entropy, np.nan),
              advantages=adv)


def run(name, a, **options):
  out = corrections.get(name)(a["mask"], **{
      k: a[k] for k in corrections.CORRECTIONS.entry(name).meta.reads},
                              **options)
  return (np.asarray(out.weights, np.float64), np.asarray(out.truncated),
          np.asarray(out.statistic, np.float64))


def real_values(a, key):
  return np.where(a["mask"] > 0, a[key], 0.0)  # no -inf - -inf


def token_ratio(a):
  real = a["mask"] > 0
  x = real_values(a, "old_logp") - real_values(a, "sampler_logp")
  return np.where(real, np.exp(x), 0.0), real


def sequence_ratio(a, how):
  real = a["mask"] > 0
  x = real_values(a, "old_logp") - real_values(a, "sampler_logp")
  total = x.sum(-1)
  log = total if how == "product" else total / np.maximum(real.sum(-1), 1)
  return np.where(real, np.exp(log)[:, None], 0.0), real



# ------------------------------------------------- hand-derived weights


@pytest.mark.parametrize("c_min,c_max", [(0.0, 2.0), (0.8, 1.2)])
def test_tis_truncates_each_tokens_ratio(c_min, c_max):
  a = arrays()
  rho, real = token_ratio(a)
  w, truncated, stat = run("tis", a, c_min=c_min, c_max=c_max)
  np.testing.assert_allclose(w, np.where(real, np.clip(rho, c_min, c_max),
                                         0.0), rtol=1e-5)
  np.testing.assert_array_equal(truncated,
                                real & ((rho > c_max) | (rho < c_min)))
  np.testing.assert_allclose(stat, rho, rtol=1e-5)
  assert truncated.any()  # the spread reaches the bounds


@pytest.mark.parametrize("how", ["product", "geometric"])
def test_tis_sequence_truncates_the_rows_ratio(how):
  a = arrays()
  rho, real = sequence_ratio(a, how)
  w, truncated, _ = run("tis_sequence", a, c_max=1.5, c_min=0.5, ratio=how)
  np.testing.assert_allclose(w, np.where(real, np.clip(rho, 0.5, 1.5), 0.0),
                             rtol=1e-5)
  # One weight per row.
  for i in range(N):
    assert len(set(np.round(w[i][real[i]], 6))) <= 1
  np.testing.assert_array_equal(truncated, real & ((rho > 1.5) | (rho < 0.5)))


def test_mis_and_icepop_zero_tokens_outside_the_band_and_keep_rho_inside():
  a = arrays()
  rho, real = token_ratio(a)
  for name, options, lo, hi in (("mis", {}, 0.0, 3.0),
                                ("mis", {"c_min": 0.7, "c_max": 1.3}, 0.7,
                                 1.3),
                                ("icepop", {}, 0.5, 5.0),
                                ("icepop", {"low": 0.8, "high": 1.25}, 0.8,
                                 1.25)):
    w, truncated, _ = run(name, a, **options)
    inside = real & (rho >= lo) & (rho <= hi)
    np.testing.assert_allclose(w, np.where(inside, rho, 0.0), rtol=1e-5,
                               err_msg=name)
    assert not truncated.any()
  w, _, _ = run("icepop", a, low=0.8, high=1.25)
  assert ((w == 0) & real).any() and (w > 0).any()


@pytest.mark.parametrize("how", ["product", "geometric"])
def test_mis_sequence_drops_whole_rows_outside_the_band(how):
  a = arrays()
  rho, real = sequence_ratio(a, how)
  w, _, _ = run("mis_sequence", a, c_min=0.5, c_max=1.5, ratio=how)
  inside = real & (rho >= 0.5) & (rho <= 1.5)
  np.testing.assert_allclose(w, np.where(inside, rho, 0.0), rtol=1e-5)


def test_trl_default_sequence_mask_is_the_product_capped_at_3():
  a = arrays(spread=0.4)
  rho, real = sequence_ratio(a, "product")
  w, _, _ = run("mis_sequence", a)
  np.testing.assert_allclose(w, np.where(real & (rho <= 3.0), rho, 0.0),
                             rtol=1e-5)


@pytest.mark.parametrize("delta", [0.0, 0.05])
def test_opsm_drops_negative_advantage_rows_that_drifted(delta):
  a = arrays()
  real = a["mask"] > 0
  n = np.maximum(real.sum(-1), 1)
  drift = (real_values(a, "sampler_logp") - real_values(a, "logp")).sum(-1) / n
  drop = (a["advantages"] < 0) & (drift > delta)
  w, _, stat = run("opsm", a, delta=delta)
  np.testing.assert_allclose(w, np.where(real & ~drop[:, None], 1.0, 0.0))
  np.testing.assert_allclose(stat, np.where(real, drift[:, None], 0.0),
                             rtol=1e-5, atol=1e-7)
  assert drop.any() and (~drop & real.any(-1)).any()
  # A positive advantage never drops, however far the row drifted.
  assert (w[0] == 1).all()


def test_opsm_reads_token_advantages_by_their_row_mean():
  a = arrays()
  token_adv = np.repeat(a["advantages"][:, None], T, axis=1)
  token_adv[0, :] = [-3.0, 1.0, 1.0, 1.0, 1.0]  # row mean +0.2: kept
  got = corrections.CORRECTIONS.get("opsm")(
      a["mask"], logp=a["logp"] - 5.0, sampler_logp=a["sampler_logp"],
      advantages=token_adv, delta=0.0)
  assert (np.asarray(got.weights)[0] == 1).all()


@pytest.mark.parametrize("rho", [0.2, 0.5, 1.0, 0.0])
def test_top_entropy_keeps_the_top_rho_share_by_the_linear_quantile(rho):
  a = arrays()
  real = a["mask"] > 0
  tau = np.quantile(a["entropy"][real], 1.0 - rho)  # numpy: linear
  w, _, _ = run("top_entropy", a, rho=rho)
  np.testing.assert_array_equal(w, (real & (a["entropy"] >= tau)) * 1.0)
  if rho == 1.0:
    np.testing.assert_array_equal(w, real * 1.0)
  if rho == 0.0:
    assert w.sum() == 1.0  # only the highest


def test_masked_quantile_matches_numpy():
  rng = np.random.default_rng(3)
  values = rng.normal(size=(4, 7))
  mask = rng.random((4, 7)) > 0.4
  for q in (0.0, 0.13, 0.5, 0.8, 1.0):
    np.testing.assert_allclose(
        entropy_mask.masked_quantile(values, mask, q),
        np.quantile(values[mask], q), rtol=1e-6)
  assert np.isinf(entropy_mask.masked_quantile(values, 0 * mask, 0.5))


@pytest.mark.parametrize("name", corrections.names())
def test_every_correction_is_finite_and_zero_on_all_padding_rows(name):
  a = arrays()
  a["mask"][1:, :] = 0.0  # one real row, five of padding
  for key in ("old_logp", "sampler_logp", "logp"):
    a[key] = np.where(a["mask"] > 0, a[key], -np.inf)
  a["entropy"] = np.where(a["mask"] > 0, a["entropy"], np.nan)
  w, truncated, stat = run(name, a)
  assert np.isfinite(w).all() and np.isfinite(stat).all()
  assert (w[1:] == 0).all() and not truncated[1:].any()
  # No real token at all: every weight 0, nothing NaN.
  a["mask"][:] = 0.0
  w, _, stat = run(name, a)
  assert (w == 0).all() and np.isfinite(stat).all()
  record = corrections.make(name)
  weights, records = record.apply(
      jnp.zeros((N, T)), **{k: jnp.asarray(np.nan_to_num(a[k], neginf=0.0))
                            for k in record.reads})
  assert float(jnp.abs(weights).sum()) == 0.0
  for value in measures.values(records).values():
    assert np.isfinite(float(value))


def contract_cases():
  return [pytest.param(e.name, dict(o), id=f"{e.name}-{i}")
          for e in corrections.CORRECTIONS.entries()
          for i, o in enumerate(e.examples)]


@pytest.mark.parametrize("name,options", contract_cases())
def test_contract_of_every_correction(name, options):
  """Registered with its examples, each correction: non-negative finite
  weights, 0 under padding; padding columns change nothing; two halves of
  the rows with the whole batch's pre-pass statistics give the whole's
  weights; jit equals eager; no gradient reaches its inputs."""
  record = corrections.make(name, **options)
  a = arrays(seed=2)
  mask = jnp.asarray(a["mask"])
  inputs = {k: jnp.asarray(a[k]) for k in record.reads}
  stats = (None if record.prepass is None else record.prepass(
      mask, **{k: inputs[k] for k in record.prepass_reads}))
  weights, records = record.apply(mask, batch_stats=stats, **inputs)
  w = np.asarray(weights)
  assert np.isfinite(w).all() and (w >= 0).all()
  assert (w[np.asarray(mask) == 0] == 0).all()
  for value in measures.values(records).values():
    assert np.isfinite(float(value))
  # Padding columns (NaN, -inf) change nothing.
  pad = lambda x, v: (jnp.concatenate([x, jnp.full((N, 2), v)], axis=1)
                      if x.ndim == 2 else x)
  padded, _ = record.apply(pad(mask, 0.0), batch_stats=stats,
                           **{k: pad(v, -jnp.inf) for k, v in inputs.items()})
  testing.assert_close(padded[:, :T], weights)
  testing.assert_close(padded[:, T:], jnp.zeros((N, 2)))
  # Rows split, statistics of the whole: the whole's weights.
  halves = [record.apply(mask[s], batch_stats=stats,
                         **{k: v[s] for k, v in inputs.items()})[0]
            for s in (slice(0, 3), slice(3, N))]
  testing.assert_close(jnp.concatenate(halves), weights)
  jitted = jax.jit(lambda m, i: record.apply(m, batch_stats=stats, **i)[0])
  testing.assert_close(jitted(mask, inputs), weights)
  finite = {k: jnp.where(mask > 0, v, 0.0) if v.ndim == 2 else v
            for k, v in inputs.items()}
  grads = jax.grad(lambda i: record.apply(mask, batch_stats=stats,
                                          **i)[0].sum())(finite)
  for g in jax.tree.leaves(grads):
    assert float(jnp.abs(g).sum()) == 0.0


# --------------------------------------------------------- composition


def ppo_terms(logp, old, adv, clip=0.2):
  """-min(r A, clip(r) A) and its derivative in logp, by hand."""
  r = np.exp(logp - old)
  unclipped, clipped = r * adv, np.clip(r, 1 - clip, 1 + clip) * adv
  term = -np.minimum(unclipped, clipped)
  grad = np.where(unclipped <= clipped, -adv * r, 0.0)
  return term, grad


def reinforce_terms(logp, old, adv):
  del old
  return -adv * logp, -adv * np.ones_like(logp)


def coefficients(mask, aggregation):
  """c_t such that aggregate(L) = sum_t c_t L_t, and the count."""
  n = mask.sum(-1, keepdims=True)
  rows = (n[:, 0] > 0).sum()
  if aggregation == "token_mean":
    return mask / mask.sum(), mask.sum()
  return mask / np.maximum(n, 1) / rows, rows  # seq_mean_token_mean


@pytest.mark.parametrize("objective,terms", [("ppo_clip", ppo_terms),
                                             ("reinforce", reinforce_terms)])
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_weights_multiply_each_term_and_keep_the_denominator(
    objective, terms, aggregation):
  a = arrays()
  real = a["mask"] > 0
  logp = np.where(real, a["logp"], 0.0)
  old = np.where(real, a["old_logp"], 0.0)
  adv = np.repeat(a["advantages"][:, None], T, axis=1)
  w = np.where(real, np.random.default_rng(1).uniform(0, 2, (N, T)), 0.0)
  w[0, 1] = 0.0  # a masked token
  record = objectives.make(objective, aggregation=aggregation)
  term, dterm = terms(logp, old, adv)
  c, count = coefficients(a["mask"], aggregation)
  want = (c * w * term).sum()
  want_grad = c * w * dterm

  def loss(lp, weights):
    return record.loss((), lp, jnp.asarray(old), jnp.asarray(a["advantages"]),
                       jnp.asarray(a["mask"]), token_weights=weights)

  value, aux = loss(jnp.asarray(logp), jnp.asarray(w))
  np.testing.assert_allclose(value, want, rtol=1e-5)
  np.testing.assert_allclose(aux.loss_count, count)  # the mask's count
  grad = jax.grad(lambda lp: loss(lp, jnp.asarray(w))[0])(jnp.asarray(logp))
  np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-7)
  # Unit weights change nothing; zero weights give 0 and keep the count.
  plain = record.loss((), jnp.asarray(logp), jnp.asarray(old),
                      jnp.asarray(a["advantages"]), jnp.asarray(a["mask"]))
  testing.assert_close(loss(jnp.asarray(logp), jnp.asarray(real * 1.0)),
                       plain)
  zero, zero_aux = loss(jnp.asarray(logp), jnp.zeros((N, T)))
  assert float(zero) == 0.0 and float(zero_aux.loss_count) == count
  # Diagnostics describe the batch, not the weights.
  testing.assert_close(measures.values(aux.measures()),
                       measures.values(plain[1].measures()))


def test_a_sequence_objective_takes_a_row_weight():
  """A sequence-level objective built with `_kit.sequence_objective` takes a
  sequence correction's weight as its row's: sum_i w_i L_i / rows."""
  with objectives.OBJECTIVES.scoped():
    @objectives.OBJECTIVES.register(level="sequence", mechanism=None)
    def row_reinforce(logp, old_logp, advantages, mask, *,
                      token_weights=None):
      batch = _kit.prepare(logp, old_logp, advantages, mask)
      per_row = -_kit.row_advantages(batch) * _kit.sequence_log_ratio(batch)
      return _kit.sequence_objective(
          per_row, batch, ratio=measures.Moments.of(batch.ratio, batch.mask),
          clipped=jnp.zeros(batch.mask.shape, bool),
          token_weights=token_weights)

    record = objectives.make("row_reinforce")
    assert record.weighting == "row"
    a = arrays()
    real = a["mask"] > 0
    tis = corrections.make("tis_sequence", c_max=1.5)
    corrections.check_compatible(record, [tis])
    with pytest.raises(ValueError, match="'tis' weighs each token"):
      corrections.check_compatible(record, [corrections.make("tis")])
    z = lambda x: jnp.asarray(np.where(real, x, 0.0))
    w, _ = tis.apply(z(a["mask"]), old_logp=z(a["old_logp"]),
                     sampler_logp=z(a["sampler_logp"]))
    loss, _ = record.loss((), z(a["logp"]), z(a["old_logp"]),
                          jnp.asarray(a["advantages"]), z(a["mask"]),
                          token_weights=w)
    n = np.maximum(real.sum(-1), 1)
    x = np.where(real, a["logp"], 0.0) - np.where(real, a["old_logp"], 0.0)
    per_row = -a["advantages"] * x.sum(-1) / n
    row_w, _ = sequence_ratio(a, "product")
    row_w = np.clip(row_w.max(-1), 0.0, 1.5)
    rows = real.any(-1)
    np.testing.assert_allclose(loss, (row_w * per_row)[rows].sum()
                               / rows.sum(), rtol=1e-5)


def test_token_objective_reports_given_ratio_moments_and_weighs_terms():
  """A token-level objective whose ratio statistics are per row (GSPO-token's
  form) keeps them through `_kit.token_objective(..., ratio_moments=...)`
  and takes token weights there."""
  a = arrays()
  real = a["mask"] > 0
  z = lambda x: jnp.asarray(np.where(real, x, 0.0), jnp.float32)
  batch = _kit.prepare(z(a["logp"]), z(a["old_logp"]),
                       jnp.asarray(a["advantages"]), z(a["mask"]))
  rows = measures.Moments.of(jnp.arange(N, dtype=jnp.float32),
                             batch.row_mask)
  term = -batch.advantages * batch.logp
  kwargs = dict(aggregation="token_mean", horizon=None,
                clipped=jnp.zeros(batch.mask.shape, bool), ratio_moments=rows)
  _, aux = _kit.token_objective(term, batch, **kwargs)
  testing.assert_close(aux.ratio, rows)
  w = jnp.asarray(np.where(real, 0.5, 0.0), jnp.float32)
  _, weighted = _kit.token_objective(term, batch, token_weights=w, **kwargs)
  testing.assert_close(weighted.loss_sum, 0.5 * aux.loss_sum)
  testing.assert_close(weighted.loss_count, aux.loss_count)


def test_objectives_that_cannot_take_weights_say_so():
  r2vpo = objectives.make("r2vpo")
  assert r2vpo.weighting is None
  with pytest.raises(ValueError, match="cannot weight objective 'r2vpo'"):
    corrections.check_compatible(r2vpo, [corrections.make("tis")])
  ones = jnp.ones((2, 3))
  with pytest.raises(ValueError, match="'r2vpo' takes no token_weights="):
    r2vpo.loss(r2vpo.init(), -ones, -ones, jnp.ones(2), ones,
               token_weights=ones)
  with pytest.raises(ValueError, match="sequence-level"):
    corrections.check_compatible(objectives.make("gmpo"),
                                 [corrections.make("top_entropy")])


SAMPLER_CORRECTIONS = ("tis", "tis_sequence", "mis", "mis_sequence",
                       "icepop")


@pytest.mark.parametrize("objective,options", [
    ("decoupled_ppo", {}), ("f_tis", {}), ("vespo", {}),
    ("dppo", {"anchor": "behav"})])
def test_a_sampler_correction_on_a_behaviour_weighted_objective_is_refused(
    objective, options):
  """The objective weighs its terms by pi_old / mu (or pi / mu) itself: a
  sampler-mismatch correction would weigh them by the ratio again."""
  record = objectives.make(objective, **options)
  assert record.behaviour_weight
  for name in SAMPLER_CORRECTIONS:
    with pytest.raises(ValueError, match=(
        rf"correction '{name}' weighs each term by the sampler-mismatch "
        rf"ratio pi_old / mu, but objective '{objective}' already weighs "
        r"its terms by the behaviour policy.*count twice: drop "
        rf"'{name}'.*ppo_clip; dppo with anchor='old'")):
      corrections.check_compatible(record, [corrections.make(name)])
  # The other corrections weigh something else: no double count.
  corrections.check_compatible(record, [corrections.make("opsm"),
                                        corrections.make("top_entropy")])


def test_sampler_corrections_compose_with_objectives_that_do_not_weigh_by_it():
  for objective, options in (("dppo", {"anchor": "old"}), ("ppo_clip", {}),
                             ("cispo", {}), ("luspo", {})):
    record = objectives.make(objective, **options)
    assert not record.behaviour_weight
    corrections.check_compatible(
        record, [corrections.make(n) for n in SAMPLER_CORRECTIONS])


def test_the_config_refuses_a_double_sampler_correction():
  def double(c):
    c.objective.name = "decoupled_ppo"
    c.objective.kwargs = ml_collections.ConfigDict()
    c.train.num_minibatches = 2
    c.corrections = ml_collections.ConfigDict({"icepop": {}})
  bad(double, r"config\.corrections: correction 'icepop' weighs each term "
      r".*'decoupled_ppo'.*change --config\.objective\.name")


def test_make_rejects_bad_options():
  with pytest.raises(ValueError, match="takes no option 'cap'"):
    corrections.make("tis", cap=2.0)
  with pytest.raises(ValueError, match="takes no option 'entropy_threshold'"):
    corrections.make("top_entropy", entropy_threshold=1.0)
  with pytest.raises(ValueError, match="c_min=2.0 must be below c_max=1.0"):
    corrections.make("mis", c_min=2.0, c_max=1.0)
  with pytest.raises(ValueError, match="rho must be in"):
    corrections.make("top_entropy", rho=1.5)
  with pytest.raises(ValueError, match="ratio='arith' is unknown"):
    corrections.make("tis_sequence", ratio="arith")
  for name in ("tis_sequence", "mis_sequence"):  # not token-level instead
    with pytest.raises(ValueError, match="ratio=None is unknown"):
      corrections.make(name, ratio=None)
  with pytest.raises(ValueError, match="delta must be >= 0"):
    corrections.make("opsm", delta=-1.0)
  with pytest.raises(ValueError, match="correction 'nope' is unknown"):
    corrections.make("nope")


# ------------------------------------------------------------ trainer


@pytest.fixture(scope="module")
def model():
  config = learning.model_config()
  return config, models.init_params(config, jax.random.PRNGKey(0))


def tiny_batch(config, params, *, sampler_noise=0.3, on_policy=False):
  """A Batch of random tokens (2 prompts x 4), ragged completions, the
  sampler's log-probs `sampler_noise` away from the trainer's."""
  k = jax.random.split(jax.random.PRNGKey(7), 5)
  n, t = 8, 5
  prompts = jax.random.randint(k[0], (2, 4), 1, learning.VOCAB)
  tokens = jax.random.randint(k[1], (n, t), 1, learning.VOCAB)
  mask = testing.random_mask(k[2], (n, t))
  trainer = batch_lib.batched_logprobs(
      params, config, jnp.concatenate([jnp.repeat(prompts, 4, 0), tokens], 1),
      jnp.concatenate([jnp.ones((n, 4)), mask], 1), 4, temperature=0.9,
      chunk_size=16)
  sampler = trainer + sampler_noise * jax.random.normal(k[3], (n, t))
  return batch_lib.assemble_batch(
      params, None, prompts, np.ones((2, 4), np.float32), tokens, mask, mask,
      jax.random.normal(k[4], (n,)), model_config=config, temperature=0.9,
      chunk_size=16, sampler_logp=sampler, on_policy=on_policy)


def update(config, params, batch, *, corrections_=(), regs=(),
           objective="ppo_clip", microbatch_size=0):
  record = objectives.make(objective)
  optimizer = optax.sgd(1.0)
  fn = update_lib.make_update_fn(
      model_config=config, optimizer=optimizer, objective=record,
      regularisers=list(regs), corrections=list(corrections_),
      microbatch_size=microbatch_size, chunk_size=16)
  state = train.init_state(
      jax.tree.map(jnp.copy, params), optimizer, seed=0,
      components=dict(objective=record, **{r.name: r for r in regs}))
  state, records = fn(state, batch)
  return state, {k: float(v) for k, v in measures.values(records).items()}


def test_the_trainers_loss_is_the_hand_weighted_objective(model):
  """One update's loss is sum_t c_t w_t L_t over the mask's denominator,
  with w the product of the corrections' weights written out here in numpy
  from their formulas (not the code under test), from the same arrays (the
  trainer's log-probs):

    TIS:  w_t = min(exp(old_logp_t - sampler_logp_t), 1.2)
    OPSM: w_i = 0 if A_i < 0 and mean_t(sampler_logp - logp) > 0 else 1"""
  config, params = model
  batch = tiny_batch(config, params)
  chosen = [corrections.make("tis", c_max=1.2), corrections.make("opsm",
                                                                  delta=0.0)]
  _, m = update(config, params, batch, corrections_=chosen)
  logp, entropy = batch_lib.policy_logprobs(
      params, config, batch.tokens, batch.input_mask, 4,
      temperature=batch.temperature, chunk_size=16)
  del entropy
  a = {k: np.asarray(v, np.float64) for k, v in dict(
      mask=batch.completion_mask, old_logp=batch.old_logp,
      sampler_logp=batch.sampler_logp, logp=logp,
      advantages=batch.advantages).items()}
  rho, real = token_ratio(a)
  tis_w = np.where(real, np.minimum(rho, 1.2), 0.0)
  lengths = np.maximum(real.sum(-1), 1)
  drift = (real_values(a, "sampler_logp") - real_values(a, "logp")).sum(
      -1) / lengths
  drop = (a["advantages"] < 0) & (drift > 0.0)
  opsm_w = np.where(real & ~drop[:, None], 1.0, 0.0)
  assert drop.any() and not drop.all() and (rho > 1.2).any()
  w = tis_w * opsm_w
  term, _ = ppo_terms(a["logp"], a["old_logp"], a["advantages"][:, None])
  c, _ = coefficients(a["mask"], "seq_mean_token_mean")
  np.testing.assert_allclose(m["loss"], (c * w * term).sum(), rtol=1e-4,
                             atol=1e-7)
  assert 0 < m["correction/opsm/masked_fraction"] < 1
  assert m["correction/tis/truncated_fraction"] > 0


def test_off_policy_a_correction_changes_the_update_and_unit_weights_do_not(
    model):
  config, params = model
  batch = tiny_batch(config, params)
  plain, _ = update(config, params, batch)
  truncated, m = update(config, params, batch,
                        corrections_=[corrections.make("tis", c_max=1.0)])
  assert m["correction/tis/truncated_fraction"] > 0.2
  assert not np.allclose(testing.numpy(truncated.params["embed"]),
                         testing.numpy(plain.params["embed"]))
  # The sampler agreeing with the trainer gives weights 1: the same update.
  agreeing = batch._replace(sampler_logp=batch.old_logp)
  unit, m = update(config, params, agreeing,
                   corrections_=[corrections.make("tis"),
                                 corrections.make("mis_sequence")])
  plain, _ = update(config, params, agreeing)
  testing.assert_close(unit.params, plain.params, rtol=1e-6, atol=1e-7)
  assert m["correction/tis/weight_mean"] == pytest.approx(1.0)
  assert m["correction/mis_sequence/masked_fraction"] == 0.0


def test_on_policy_the_sampler_logp_reaches_the_corrections(model):
  """On policy (no old_logp) the behaviour log-probs are the update's own:
  with the sampler 1e-3 off, TIS weights are exp(+-1e-3), not missing."""
  config, params = model
  batch = tiny_batch(config, params, sampler_noise=1e-3, on_policy=True)
  assert batch.old_logp is None and batch.sampler_logp is not None
  _, m = update(config, params, batch,
                corrections_=[corrections.make("tis", c_max=10.0)])
  assert m["correction/tis/ratio_max"] == pytest.approx(1.0, abs=5e-3)
  assert m["correction/tis/ratio_var"] > 0.0
  assert m["correction/tis/weight_mean"] == pytest.approx(1.0, abs=1e-3)
  # A batch without the sampler's log-probs is a clear error.
  with pytest.raises(ValueError, match="reads sampler_logp, but the batch"):
    update(config, params, batch._replace(sampler_logp=None),
           corrections_=[corrections.make("tis")])


def test_microbatching_keeps_the_minibatch_quantile_and_the_update(model):
  """The top-entropy threshold is the whole minibatch's (a pre-pass) and
  the entropy bonus accumulates exactly: one-shot equals 8 microbatches."""
  config, params = model
  batch = tiny_batch(config, params)
  chosen = [corrections.make("top_entropy"), corrections.make("icepop",
                                                               low=0.8)]
  bonus = regularisers.make("entropy_bonus", coef=0.1,
                            aggregation="seq_mean_token_mean")
  results = [update(config, params, batch, corrections_=chosen, regs=[bonus],
                    microbatch_size=micro) for micro in (0, 1)]
  testing.assert_close(results[1][0].params, results[0][0].params,
                       rtol=1e-4, atol=1e-6)
  testing.assert_close(results[1][1], results[0][1], rtol=1e-5, atol=1e-6)
  m = results[0][1]
  assert m["correction/top_entropy/masked_fraction"] == pytest.approx(
      0.8, abs=0.1)
  assert m["correction/icepop/masked_fraction"] > 0


def test_entropy_bonus_subtracts_coef_times_the_aggregated_entropy(model):
  config, params = model
  batch = tiny_batch(config, params)
  bonus = regularisers.make("entropy_bonus", coef=0.5,
                            aggregation="token_mean")
  with_bonus, m = update(config, params, batch, regs=[bonus])
  without, m0 = update(config, params, batch)
  # token_mean over the mask: the measured entropy is the aggregated one.
  assert m["entropy_bonus"] == pytest.approx(m["entropy"], rel=1e-5)
  assert m["loss"] == pytest.approx(m0["loss"] - 0.5 * m["entropy"],
                                    rel=1e-5)
  assert not np.allclose(testing.numpy(with_bonus.params["embed"]),
                         testing.numpy(without.params["embed"]))
  # Its gradient flows through the entropy: -coef * c_t per token.
  mask = batch.completion_mask
  h = jnp.ones(mask.shape)
  g = jax.grad(lambda h: bonus.loss((), h, mask, entropy=h)[0].total)(h)
  testing.assert_close(g, -0.5 * mask)


def test_no_reference_copy_for_an_entropy_bonus_alone():
  config = grpo_config.get_config("tiny")
  config.kl.beta, config.entropy.coef = 0.0, 0.01
  components = train.make_components(config)
  assert "entropy_bonus" in components and "kl" not in components
  run_ = train.build(config)
  assert run_.ref_params is None


# -------------------------------------------------------------- config


def bad(setup, match):
  config = grpo_config.get_config("tiny")
  setup(config)
  with pytest.raises(ValueError, match=match):
    train.validate(config)


def test_config_errors_name_the_field_and_the_fix():
  def corrections_of(value):
    def setup(c):
      c.corrections = ml_collections.ConfigDict(value)
    return setup
  bad(corrections_of({"tis": {"cap": 2.0}}),
      r"config\.corrections\.tis: correction 'tis' takes no option 'cap'; "
      r"use one of c_max, c_min")
  bad(corrections_of({"tiss": {}}),
      r"config\.corrections\.tiss: correction 'tiss' is unknown; choose from")
  bad(corrections_of({"mis": {"c_max": 0.0}}),
      r"config\.corrections\.mis\.c_max: c_max must be > 0")

  def sequence_objective(c):
    c.objective.name = "gmpo"
    c.objective.kwargs = ml_collections.ConfigDict()
    c.corrections = ml_collections.ConfigDict({"icepop": {}})
  bad(sequence_objective,
      r"config\.corrections: correction 'icepop' weighs each token on its "
      r"own, but objective 'gmpo' is sequence-level.*change "
      r"--config\.objective\.name")

  def not_a_mapping(c):
    c.corrections = ml_collections.ConfigDict()
    c.corrections.tis = 2.0
  bad(not_a_mapping, r"config\.corrections\.tis: 2\.0 is not a mapping")

  def negative_coef(c):
    c.entropy.coef = -0.1
  bad(negative_coef, r"config\.entropy\.coef")
  config = grpo_config.get_config("tiny")
  config.corrections = ml_collections.ConfigDict(
      {"tis": {"c_max": 3.0}, "opsm": {}, "top_entropy": {"rho": 0.3}})
  train.validate(config)


def test_old_configs_without_the_new_fields_take_their_defaults():
  config = grpo_config.get_config("tiny")
  del config["corrections"], config["entropy"]
  filled = config_lib.with_defaults(config)
  assert not filled.corrections and filled.entropy.coef == 0.0


# ------------------------------------------------------ a real step


def test_a_real_tiny_step_shows_each_mechanism(tmp_path):
  """One step of the tiny config in two minibatches (the second off
  policy), the corrections reading the batch's sampler log-probs. The
  random tiny model earns reward 0 (every advantage 0) and its sampler
  agrees with the trainer to ~1e-6, so the rollout's batch is given here a
  sampler/trainer mismatch and advantages, by row i:

    sampler_logp += b_i,  b_i = -1 (i even) or +1 (i odd)
    A_i = +1 (i // 2 even) or -1 (i // 2 odd)

  so each row's IS ratio is exp(-b_i) (e or 1/e, up to float noise) and its
  OPSM drift about b_i. Then, over real tokens: TIS (c_max 2) truncates
  the rows of ratio e (b = -1); MIS on [0.5, 3] masks the rows of ratio
  1/e (b = +1); OPSM (delta 0.5) drops the rows with A < 0 and b = +1
  (i % 4 == 3); the top-entropy mask drops ~80% of the tokens; and the
  entropy bonus reports its entropy. The expected shares are counted here
  from the batch's mask."""
  config = grpo_config.get_config("tiny")
  config.train.num_steps, config.checkpoint.every = 1, 1
  config.train.num_minibatches = 2
  config.kl.beta = 0.0
  config.rewards.workers = 0
  config.entropy.coef = 0.01
  config.corrections = ml_collections.ConfigDict(
      {"tis": {"c_max": 2.0}, "mis": {"c_min": 0.5, "c_max": 3.0},
       "top_entropy": {}, "opsm": {"delta": 0.5}})
  run_ = train.build(config)
  seen = {}

  def mismatched(*args):
    batch, measurements, states = run_.rollout_fn(*args)
    rows = np.arange(batch.completion_mask.shape[0])
    shift = np.where(rows % 2 == 0, -1.0, 1.0).astype(np.float32)
    adv = np.where((rows // 2) % 2 == 0, 1.0, -1.0).astype(np.float32)
    seen["mask"] = np.asarray(batch.completion_mask) > 0
    seen["rows"] = rows
    batch = batch._replace(
        advantages=jnp.asarray(adv).reshape(
            (-1,) + (1,) * (batch.advantages.ndim - 1)) * jnp.ones_like(
                batch.advantages),
        sampler_logp=batch.sampler_logp + jnp.asarray(shift)[:, None])
    return batch, measurements, states

  records = []
  train.train(config, str(tmp_path), run=run_._replace(rollout_fn=mismatched),
              callback=lambda step, record: records.append(record))
  (record,) = records
  mask, rows = seen["mask"], seen["rows"]

  def share(row_selected):
    return mask[row_selected].sum() / mask.sum()

  assert 0 < share(rows % 2 == 0) < 1 and share(rows % 4 == 3) > 0
  assert record["correction/tis/truncated_fraction"] == pytest.approx(
      share(rows % 2 == 0), abs=1e-6)
  assert record["correction/tis/truncated_fraction"] > 0
  assert record["correction/tis/ratio_max"] == pytest.approx(np.e, rel=1e-3)
  assert record["correction/mis/masked_fraction"] == pytest.approx(
      share(rows % 2 == 1), abs=1e-6)
  assert record["correction/mis/masked_fraction"] > 0
  assert record["correction/opsm/masked_fraction"] == pytest.approx(
      share(rows % 4 == 3), abs=1e-6)
  assert record["correction/opsm/masked_fraction"] > 0
  assert record["correction/top_entropy/masked_fraction"] == pytest.approx(
      0.8, abs=0.1)
  assert record["correction/top_entropy/weight_mean"] > 0
  assert record["entropy_bonus"] > 0
  assert record["skipped_updates"] == 0


# ------------------------------------------------------- option values


@pytest.mark.parametrize("name,options,match", [
    ("tis", {"c_max": "2"}, "c_max must be a real number"),
    ("tis", {"c_max": None}, "c_max must be a real number"),
    ("mis", {"c_max": None}, "c_max must be a real number"),
    ("mis_sequence", {"c_min": None}, "c_min must be a real number"),
    ("icepop", {"high": float("nan")}, "high must be > 0"),
    ("opsm", {"delta": "0.5"}, "delta must be a real number"),
    ("top_entropy", {"rho": "0.2"}, "rho must be a real number"),
    ("top_entropy", {"rho": None}, "rho must be a real number"),
])
def test_a_bad_option_value_is_a_value_error_at_make(name, options, match):
  with pytest.raises(ValueError, match=match):
    corrections.make(name, **options)


def test_a_string_bound_is_a_config_field_error():
  config = grpo_config.get_config("tiny")
  config.corrections = ml_collections.ConfigDict({"tis": {"c_max": "2"}})
  with pytest.raises(ValueError, match=r"config\.corrections\.tis\.c_max: "
                     r"c_max must be a real number"):
    train.validate(config)


def test_a_level_outside_levels_fails_at_registration():
  with corrections.CORRECTIONS.scoped():
    with pytest.raises(ValueError, match="level='row'"):
      @corrections.register(level="row", reads=(), statistic="ratio")
      def odd(mask):  # pylint: disable=unused-variable
        del mask


@pytest.mark.parametrize("name,options,match", [
    ("kl", {"beta": -0.1}, "beta"),
    ("kl", {"estimator": "k9"}, "k9"),
    ("asymmetric_kl", {"beta_neg": None}, "beta_neg"),
    ("entropy_bonus", {"coef": "0.1"}, "coef"),
    ("llds", {"lam": float("nan")}, "lam"),
])
def test_a_bad_regulariser_value_fails_at_make(name, options, match):
  with pytest.raises(ValueError, match=match):
    regularisers.make(name, aggregation="token_mean", **options)
