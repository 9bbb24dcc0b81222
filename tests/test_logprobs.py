"""Tests for grpo_jax.logprobs: chunked log-probs and entropy from hidden states."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from grpo_jax.sampling import draw
from grpo_jax import logprobs
from grpo_jax import testing

N, T, D, V = 3, 5, 8, 37  # N*T = 15 rows: most chunk sizes leave a remainder.


def _inputs(seed=0, n=N, t=T, d=D, v=V, dtype=jnp.float32):
  k_h, k_w, k_t = jax.random.split(jax.random.PRNGKey(seed), 3)
  hidden = jax.random.normal(k_h, (n, t, d)).astype(dtype)
  unembedding = jax.random.normal(k_w, (d, v)).astype(dtype)
  targets = jax.random.randint(k_t, (n, t), 0, v)
  return hidden, unembedding, targets


def _naive(hidden, unembedding, targets, temperature):
  """The reference: the full [N, T, V] log-softmax, then a gather."""
  logits = hidden.astype(jnp.float32) @ unembedding.astype(jnp.float32)
  log_p = jax.nn.log_softmax(logits / temperature, axis=-1)
  logp = jnp.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
  entropy = -(jnp.exp(log_p) * log_p).sum(axis=-1)
  return logp, entropy


def _numpy_reference(hidden, unembedding, targets, temperature):
  """float64 numpy, independent of JAX's softmax."""
  z = np.asarray(hidden, np.float64) @ np.asarray(unembedding, np.float64)
  z = z / temperature
  z = z - z.max(axis=-1, keepdims=True)
  log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
  logp = np.take_along_axis(log_p, np.asarray(targets)[..., None], -1)[..., 0]
  return logp, -(np.exp(log_p) * log_p).sum(axis=-1)


def _vjp(fn, hidden, unembedding, seed=1):
  """Gradients of <g_logp, logp> + <g_entropy, entropy> w.r.t. both inputs."""
  out, pullback = jax.vjp(fn, hidden, unembedding)
  k_1, k_2 = jax.random.split(jax.random.PRNGKey(seed))
  cotangent = (jax.random.normal(k_1, out[0].shape),
               jax.random.normal(k_2, out[1].shape))
  return pullback(cotangent)


@pytest.mark.parametrize("chunk_size, temperature", [
    (1, 1.0), (4, 0.7), (7, 0.7), (15, 1.0), (16, 0.7), (None, 0.7)])
def test_values_match_naive_and_numpy(chunk_size, temperature):
  hidden, unembedding, targets = _inputs()
  out = logprobs.token_logprobs(hidden, unembedding, targets,
                                temperature=temperature, chunk_size=chunk_size)
  testing.assert_shape(out.logp, (N, T))
  assert out.logp.dtype == jnp.float32 and out.entropy.dtype == jnp.float32
  testing.assert_close(tuple(out), _naive(hidden, unembedding, targets,
                                          temperature), rtol=1e-5, atol=1e-5)
  expected = _numpy_reference(hidden, unembedding, targets, temperature)
  np.testing.assert_allclose(out.logp, expected[0], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(out.entropy, expected[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chunk_size, temperature", [
    (1, 1.0), (4, 0.6), (7, 0.6), (64, 0.6)])
def test_gradients_match_naive(chunk_size, temperature):
  hidden, unembedding, targets = _inputs()
  chunked = lambda h, w: tuple(logprobs.token_logprobs(
      h, w, targets, temperature=temperature, chunk_size=chunk_size))
  naive = lambda h, w: _naive(h, w, targets, temperature)
  got = _vjp(chunked, hidden, unembedding)
  want = _vjp(naive, hidden, unembedding)
  # Gradients are O(10); 1e-5 relative is float32 rounding.
  testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
  assert float(jnp.abs(got[1]).max()) > 0.1  # the unembedding gets gradient


def test_logp_only_gradient_matches_naive():
  """Entropy unused: its zero cotangent must not change the logp gradient."""
  hidden, unembedding, targets = _inputs(seed=3)
  loss = lambda fn: lambda h, w: (fn(h, w)[0] * jnp.arange(T)[None, :]).sum()
  chunked = lambda h, w: logprobs.token_logprobs(h, w, targets, chunk_size=4)
  naive = lambda h, w: _naive(h, w, targets, 1.0)
  testing.assert_close(jax.grad(loss(chunked), (0, 1))(hidden, unembedding),
                       jax.grad(loss(naive), (0, 1))(hidden, unembedding),
                       rtol=1e-5, atol=1e-4)


def test_check_grads():
  hidden, unembedding, targets = _inputs(seed=2, n=2, t=3, d=4, v=11)
  hidden, unembedding = hidden * 0.5, unembedding * 0.5

  @jax.jit
  def fn(h, w):
    out = logprobs.token_logprobs(h, w, targets, temperature=0.8, chunk_size=4)
    return out.logp + 0.3 * out.entropy

  check_grads(fn, (hidden, unembedding), order=1, modes=("rev",),
              atol=2e-2, rtol=2e-2)


def test_bf16_inputs_compute_in_float32():
  hidden, unembedding, targets = _inputs(dtype=jnp.bfloat16)
  out = logprobs.token_logprobs(hidden, unembedding, targets, temperature=0.7,
                                chunk_size=4)
  assert out.logp.dtype == jnp.float32 and out.entropy.dtype == jnp.float32
  # bf16 products are exact in float32, so the float32 reference on the same
  # (upcast) values agrees to float32 rounding, not bf16 rounding.
  testing.assert_close(tuple(out), _naive(hidden, unembedding, targets, 0.7),
                       rtol=1e-5, atol=1e-5)


def test_bf16_gradients_keep_input_dtypes():
  hidden, unembedding, targets = _inputs(dtype=jnp.bfloat16)
  chunked = lambda h, w: tuple(logprobs.token_logprobs(
      h, w, targets, temperature=0.7, chunk_size=4))
  d_hidden, d_unembedding = _vjp(chunked, hidden, unembedding)
  assert d_hidden.dtype == jnp.bfloat16
  assert d_unembedding.dtype == jnp.bfloat16
  want = _vjp(lambda h, w: _naive(h, w, targets, 0.7),
              hidden.astype(jnp.float32), unembedding.astype(jnp.float32))
  # The gradient matmuls run in bf16 (float32 accumulation): bf16 tolerance.
  scale = [float(jnp.abs(w).max()) for w in want]
  testing.assert_close(d_hidden.astype(jnp.float32), want[0],
                       rtol=2e-2, atol=2e-2 * scale[0])
  testing.assert_close(d_unembedding.astype(jnp.float32), want[1],
                       rtol=2e-2, atol=2e-2 * scale[1])


def test_temperature_is_applied():
  """At temperature tau the log-probs are those of logits / tau."""
  hidden, unembedding, targets = _inputs(seed=4)
  hot = logprobs.token_logprobs(hidden, unembedding, targets, temperature=0.5)
  cold = logprobs.token_logprobs(hidden * 2.0, unembedding, targets)
  testing.assert_close(tuple(hot), tuple(cold), rtol=1e-5, atol=1e-5)
  plain = logprobs.token_logprobs(hidden, unembedding, targets)
  assert float(jnp.abs(plain.logp - hot.logp).max()) > 0.1


def test_jit_matches_eager():
  hidden, unembedding, targets = _inputs(seed=5)
  fn = lambda h, w, t: logprobs.token_logprobs(h, w, t, temperature=0.9,
                                               chunk_size=6)
  testing.assert_close(tuple(jax.jit(fn)(hidden, unembedding, targets)),
                       tuple(fn(hidden, unembedding, targets)),
                       rtol=1e-6, atol=1e-6)
  grad = jax.jit(jax.grad(lambda h, w: fn(h, w, targets).logp.sum(), (0, 1)))
  testing.assert_finite(grad(hidden, unembedding))


@pytest.mark.parametrize("temperature", [
    0.6, 1.0, np.array([0.6, 0.0, 1.7], np.float32)])
def test_sampler_step_scores_as_token_logprobs(temperature):
  """What the sampler records at one decode step (`draw.next_token` on
  `project_logits` of a hidden state, as `_sample` calls it) equals
  `token_logprobs` of the same hidden state and the drawn token, at the same
  temperature (per row; a greedy row 0 at 1). bf16 inputs, float32 maths."""
  hidden, unembedding, _ = _inputs(seed=6, t=1, dtype=jnp.bfloat16)
  logits = logprobs.project_logits(hidden[:, 0], unembedding)  # [N, V]
  assert logits.dtype == jnp.float32
  rows = jnp.broadcast_to(jnp.asarray(temperature, jnp.float32), (N,))
  tokens, drawn, tempered, entropy = draw.next_token(
      logits, jax.random.key(0), rows, greedy=False, top_k=None, top_p=None)
  got = logprobs.token_logprobs(hidden, unembedding, tokens[:, None],
                                temperature=temperature)
  testing.assert_close(tempered, got.logp[:, 0], rtol=1e-6, atol=1e-6)
  testing.assert_close(entropy, got.entropy[:, 0], rtol=1e-5, atol=1e-5)
  # Untruncated sampling draws from that same distribution; a greedy row
  # takes the argmax from a point mass.
  greedy = np.asarray(rows) == 0
  testing.assert_close(jnp.where(greedy, 0.0, tempered), drawn, rtol=0,
                       atol=0)
  np.testing.assert_array_equal(np.asarray(tokens)[greedy],
                                np.argmax(np.asarray(logits), -1)[greedy])
  # Both against an independent float64 reference at scoring temperature.
  tau = np.where(np.asarray(rows) > 0, np.asarray(rows), 1.0)
  expected, expected_entropy = _numpy_reference(
      hidden, unembedding, tokens[:, None], tau[:, None, None])
  testing.assert_close(got.logp, expected, rtol=1e-5, atol=1e-5)
  testing.assert_close(entropy, expected_entropy[:, 0], rtol=1e-5, atol=1e-5)


ROW_TEMPERATURES = np.array([0.5, 1.0, 2.5], np.float32)  # one per row, N = 3


def test_row_temperatures_match_naive_and_numpy():
  """[N] temperatures: row n of logits is divided by temperature[n]."""
  hidden, unembedding, targets = _inputs(seed=7)
  out = logprobs.token_logprobs(hidden, unembedding, targets,
                                temperature=ROW_TEMPERATURES, chunk_size=4)
  tau = ROW_TEMPERATURES[:, None, None]  # [N] -> [N, 1, 1] over [N, T, V]
  testing.assert_close(tuple(out), _naive(hidden, unembedding, targets, tau),
                       rtol=1e-5, atol=1e-5)
  testing.assert_close(tuple(out), _numpy_reference(hidden, unembedding,
                                                    targets, tau),
                       rtol=1e-5, atol=1e-5)
  # Each row equals that row scored at its own scalar temperature.
  for row, value in enumerate(ROW_TEMPERATURES):
    alone = logprobs.token_logprobs(hidden, unembedding, targets,
                                    temperature=float(value), chunk_size=4)
    testing.assert_close(tuple(x[row] for x in out),
                         tuple(x[row] for x in alone), rtol=1e-6, atol=1e-6)


def test_row_temperature_gradients_match_naive():
  hidden, unembedding, targets = _inputs(seed=8)
  tau = jnp.asarray(ROW_TEMPERATURES)
  chunked = lambda h, w: tuple(logprobs.token_logprobs(
      h, w, targets, temperature=tau, chunk_size=4))
  naive = lambda h, w: _naive(h, w, targets, tau[:, None, None])
  testing.assert_close(_vjp(chunked, hidden, unembedding),
                       _vjp(naive, hidden, unembedding), rtol=1e-4, atol=1e-5)


def test_zero_row_temperature_scores_at_one():
  """A greedy row of the sampler (temperature 0) is scored at 1, as the
  sampler records it; other rows keep theirs."""
  hidden, unembedding, targets = _inputs(seed=9)
  mixed = logprobs.token_logprobs(hidden, unembedding, targets,
                                  temperature=np.array([0.0, 0.5, 0.0]))
  at_one = logprobs.token_logprobs(hidden, unembedding, targets)
  at_half = logprobs.token_logprobs(hidden, unembedding, targets,
                                    temperature=0.5)
  testing.assert_close(mixed.logp[0::2], at_one.logp[0::2], rtol=0, atol=0)
  testing.assert_close(mixed.logp[1], at_half.logp[1], rtol=0, atol=0)
  assert float(jnp.abs(at_one.logp[1] - at_half.logp[1]).max()) > 0.1


def test_traced_row_temperatures_compile_once():
  hidden, unembedding, targets = _inputs(seed=10)
  traces = []

  @jax.jit
  def fn(temperature):
    traces.append(None)
    return logprobs.token_logprobs(hidden, unembedding, targets,
                                   temperature=temperature, chunk_size=4)

  for values in ([0.5, 1.0, 2.5], [1.5, 0.0, 0.7]):
    got = fn(jnp.asarray(values, jnp.float32))
    expected = logprobs.token_logprobs(hidden, unembedding, targets,
                                       temperature=np.asarray(values),
                                       chunk_size=4)
    testing.assert_close(tuple(got), tuple(expected), rtol=1e-6, atol=1e-6)
  assert len(traces) == 1
  # A traced scalar works too (the same rule, every row).
  scalar = jax.jit(lambda tau: logprobs.token_logprobs(
      hidden, unembedding, targets, temperature=tau).logp)(jnp.float32(0.5))
  testing.assert_close(scalar, logprobs.token_logprobs(
      hidden, unembedding, targets, temperature=0.5).logp, rtol=1e-6,
                       atol=1e-6)


def test_tempered_log_softmax_row_temperatures():
  logits = jnp.array([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0], [3.0, 0.0, 1.0]])
  got = logprobs.tempered_log_softmax(logits, np.array([0.5, 0.0, 2.0]))
  # Hand-derived: rows divided by 0.5, 1 (greedy row) and 2.
  z = np.array([[2.0, 4.0, 8.0], [1.0, 2.0, 4.0], [1.5, 0.0, 0.5]])
  expected = z - np.log(np.exp(z).sum(-1, keepdims=True))
  np.testing.assert_allclose(got, expected, rtol=1e-6)
  # [N] on [N, T, V]: broadcast as [N, 1, 1].
  stacked = logprobs.tempered_log_softmax(
      jnp.stack([logits, logits], axis=1), np.array([0.5, 0.0, 2.0]))
  np.testing.assert_allclose(stacked[:, 1], expected, rtol=1e-6)


def test_tempered_log_softmax_accepts_traced_temperature():
  logits = jnp.array([[1.0, 2.0, 4.0]])
  got = jax.jit(logprobs.tempered_log_softmax)(logits, jnp.float32(0.5))
  z = np.array([2.0, 4.0, 8.0])
  expected = z - np.log(np.exp(z).sum())
  np.testing.assert_allclose(got[0], expected, rtol=1e-6)


def test_hand_computed_uniform_case():
  """Zero hidden states: uniform over V, logp = -log V, entropy = log V."""
  hidden = jnp.zeros((2, 3, 4))
  unembedding = jnp.ones((4, 5))
  targets = jnp.array([[0, 1, 2], [3, 4, 0]])
  out = logprobs.token_logprobs(hidden, unembedding, targets, chunk_size=4)
  testing.assert_close(out.logp, jnp.full((2, 3), -np.log(5.0)))
  testing.assert_close(out.entropy, jnp.full((2, 3), np.log(5.0)))


def test_softmax_sums_by_hand():
  """Row [0, -log 2, -log 4]: exp sums to 1 + 1/2 + 1/4 = 1.75, and
  exp(s) * s to 0 - (log 2) / 2 - (log 4) / 4 = -log 2 over both axes."""
  row = np.array([0.0, -np.log(2.0), -np.log(4.0)], np.float32)
  total, weighted = logprobs.softmax_sums(jnp.asarray(np.stack([row, row])))
  testing.assert_close(total, np.full(2, 1.75))
  testing.assert_close(weighted, np.full(2, -np.log(2.0)))


def test_empty_batch():
  hidden, unembedding, _ = _inputs()
  out = logprobs.token_logprobs(hidden[:0], unembedding,
                                jnp.zeros((0, T), jnp.int32))
  testing.assert_shape(out.logp, (0, T))
  testing.assert_shape(out.entropy, (0, T))


@pytest.mark.parametrize("bad", [V, -1, -100])
def test_out_of_range_target_is_nan(bad):
  """V, and negative ids such as -100 label padding: NaN, never a clamped or
  wrapped-around token's log-prob."""
  hidden, unembedding, targets = _inputs()
  targets = targets.at[1, 2].set(bad)
  out = logprobs.token_logprobs(hidden, unembedding, targets, chunk_size=4)
  assert np.isnan(out.logp[1, 2])
  assert np.isfinite(np.delete(np.asarray(out.logp).ravel(), 1 * T + 2)).all()


def test_default_chunk_size():
  assert logprobs.default_chunk_size(49152, backend="cpu") == 1024
  assert logprobs.default_chunk_size(49152, backend="gpu") == 2688
  assert logprobs.default_chunk_size(49152, backend="gpu") % 128 == 0
  # A huge vocabulary still gets one tile of rows.
  assert logprobs.default_chunk_size(10**9, backend="tpu") == 128
  assert logprobs.default_chunk_size(10**9, backend="cpu") == 8


def test_value_and_grad_memory_is_far_below_naive():
  """Structural: XLA's temp buffers never hold the [N, T, V] float32 logits.

  Measured as the growth from V to 2V, so a fixed workspace cancels out
  (on an H200, XLA:GPU's temp buffers held 32 MiB beyond the chunks)."""
  n, t, d, v = 4, 256, 32, 8192
  naive_growth = n * t * v * 4  # the logits' 32 MiB more at 2V
  targets = jnp.zeros((n, t), jnp.int32)

  def chunked_loss(h, w):
    out = logprobs.token_logprobs(h, w, targets, chunk_size=64)
    return out.logp.sum() + out.entropy.sum()

  def naive_loss(h, w):
    logp, entropy = _naive(h, w, targets, 1.0)
    return logp.sum() + entropy.sum()

  def temp_bytes(loss, vocab):
    compiled = jax.jit(jax.value_and_grad(loss, (0, 1))).lower(
        jnp.zeros((n, t, d)), jnp.zeros((d, vocab))).compile()
    return compiled.memory_analysis().temp_size_in_bytes

  def growth(loss):
    return temp_bytes(loss, 2 * v) - temp_bytes(loss, v)

  # The check is meaningful: the naive version does hold the logits.
  assert growth(naive_loss) >= naive_growth
  # 64 rows x V x 4 bytes per chunk buffer, plus the [D, V] float32
  # gradient accumulator: 2 + 1 MiB more at 2V.
  assert growth(chunked_loss) < naive_growth / 4


@pytest.mark.parametrize("args, match", [
    (dict(hidden=jnp.zeros((N * T, D))), "hidden"),
    (dict(unembedding=jnp.zeros((D, V, 1))), "unembedding"),
    (dict(unembedding=jnp.zeros((D + 1, V))), "unembedding"),
    (dict(targets=jnp.zeros((N, T + 1), jnp.int32)), "targets"),
    (dict(targets=jnp.zeros((N * T,), jnp.int32)), "targets"),
    (dict(targets=jnp.zeros((N, T))), "targets"),
    (dict(hidden=jnp.zeros((N, T, D), jnp.int32)), "hidden"),
    (dict(temperature=-1.0), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=float("inf")), "temperature"),
    (dict(temperature=jnp.array([1.0, -1.0, 1.0])), "temperature"),
    (dict(temperature=jnp.ones(N + 1)), "temperature"),
    # Per token: [N, T] only (HAPO's sampler; tests/test_hapo.py).
    (dict(temperature=jnp.ones((N, T + 1))), "temperature"),
    (dict(temperature="hot"), "temperature"),
    (dict(chunk_size=0), "chunk_size"),
    (dict(chunk_size=2.5), "chunk_size"),
])
def test_bad_input_raises(args, match):
  hidden, unembedding, targets = _inputs()
  kwargs = dict(hidden=hidden, unembedding=unembedding, targets=targets)
  kwargs.update(args)
  with pytest.raises(ValueError, match=match):
    logprobs.token_logprobs(**kwargs)


def test_python_float_temperature_is_checked_under_jit():
  hidden, unembedding, targets = _inputs()
  fn = lambda h: logprobs.token_logprobs(h, unembedding, targets,
                                         temperature=-0.5).logp
  with pytest.raises(ValueError, match="temperature"):
    jax.jit(fn)(hidden)


def test_tempered_log_softmax_bad_temperature_raises():
  with pytest.raises(ValueError, match="temperature"):
    logprobs.tempered_log_softmax(jnp.zeros((2, 3)), -0.5)
  with pytest.raises(ValueError, match="temperature"):
    logprobs.tempered_log_softmax(jnp.zeros((2, 3)), np.ones(3))


def test_loss_benchmark_smoke(tmp_path):
  """experiments/benchmarks/loss.py at tiny shapes: every configuration computes
  the same loss, the table and the JSON come out."""
  from experiments.benchmarks import loss as bench
  path = tmp_path / "bench.json"
  results = bench.main([
      "--n", "3", "--t", "4", "--d", "8", "--v", "16", "--torch-rows", "2",
      "--temperature", "0.7", "--chunk-size", "5", "--in-process",
      "--configs", ",".join(bench.CONFIGS), "--json", str(path),
      "--runs", "2"])
  assert [r["config"] for r in results] == list(bench.CONFIGS)
  losses = [r["loss"] for r in results]
  np.testing.assert_allclose(losses, losses[0], rtol=1e-5)
  assert all(r["fits"] and r["time_s"] > 0 for r in results)
  # Two runs: each time the mean of the two, within their range.
  for r in results:
    low, high = r["time_s_range"]
    assert r["time_s"] == pytest.approx((low + high) / 2)
  line = bench.markdown_table(results, bench.parse_args([])).splitlines()[4]
  first = results[0]
  assert line.startswith(f"| {first['config']} | yes | {first['time_s']:.2f} (")
  assert len(path.read_text().splitlines()) == len(bench.CONFIGS)
  reference = next(r for r in results if r["config"] == bench.REFERENCE)
  assert reference["time_vs_torch"] == 1.0
