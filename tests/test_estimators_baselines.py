"""The sampler-dependent estimators MDP-GRPO, ReMax and GPG
(grpo_jax.advantages.baselines), their pieces elsewhere (the asymmetric KL
regulariser, the gpg objective, multi-temperature groups and ReMax's greedy
row in the rollout) and a learning test each (every estimator config's
one-step run is in tests/test_estimators_stateless.py).

Expected values are derived here in float64 numpy, independently of the
implementation: by hand for the small cases (VARIANTS.md 1.10's vectors
among them) and by a direct, loop-per-group transcription of each formula
for the random ones.
"""

import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import quickstart
from grpo_jax import advantages
from grpo_jax.train import batch as batch_lib
from grpo_jax import credit
from grpo_jax import data
from grpo_jax import groups as groups_lib
from grpo_jax import models
from grpo_jax import objectives
from grpo_jax import rollout
from grpo_jax import strategies
from grpo_jax import testing
from grpo_jax.testing import learning
from grpo_jax import train
from grpo_jax.advantages import baselines
from grpo_jax.objectives import regularisers


def config_with(name, **kwargs):
  c = quickstart.get_config()
  c.advantage.name = name
  c.advantage.kwargs = kwargs
  return c


# ------------------------------------------------------------- MDP-GRPO


def mdp_reference(r, *, mix=0.5, anchor=0.5, anchor_scale=0.5, a=0.88,
                  b=0.88, lam=2.25, bound=3.0, eps=1e-6, ddof=1):
  """VARIANTS.md 1.10 in float64, one group at a time."""
  r = np.asarray(r, np.float64)
  out = np.zeros_like(r)
  for p, row in enumerate(r):
    if len(row) > 1 and row.max() > row.min():
      sd = np.std(row, ddof=ddof)
      z = (row - row.mean()) / (sd + eps)
    else:
      z = np.zeros_like(row)
    x = (1 - mix) * z + mix * (row - anchor) / anchor_scale
    v = np.array([xi**a if xi >= 0 else -lam * (-xi)**b for xi in x])
    out[p] = np.clip(v, -bound, bound)
  return out


def test_mdp_grpo_variants_vectors():
  out = testing.numpy(advantages.mdp_grpo(
      np.array([[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0]], np.float32)))
  np.testing.assert_allclose(out[0], [0.543367] * 4, atol=1e-6)
  np.testing.assert_allclose(out[1], [-1.222577] * 4, atol=1e-6)
  np.testing.assert_allclose(out[2], [1.216971] + [-1.746772] * 3,
                             atol=1e-6)
  # By hand: 0.5^0.88 = exp(0.88 ln 0.5); an all-wrong group is lam times
  # an all-correct one, pushed the other way.
  assert out[0, 0] == pytest.approx(np.exp(0.88 * np.log(0.5)), abs=1e-6)
  assert out[1, 0] == pytest.approx(-2.25 * out[0, 0], abs=1e-6)


@pytest.mark.parametrize("options", [
    {}, {"mix": 0.0}, {"mix": 1.0}, {"mix": 0.3, "anchor": 0.2},
    {"gain_power": 0.5, "loss_power": 0.7, "loss_aversion": 1.5},
    {"bound": 1.0, "ddof": 0}])
def test_mdp_grpo_matches_its_definition(options):
  r = np.random.default_rng(3).uniform(0, 1, (6, 5)).astype(np.float32)
  r[0] = 0.25  # a homogeneous group
  names = {"gain_power": "a", "loss_power": "b", "loss_aversion": "lam"}
  expected = mdp_reference(r, **{names.get(k, k): v
                                 for k, v in options.items()})
  testing.assert_close(advantages.mdp_grpo(r, **options), expected,
                       atol=2e-5, rtol=1e-5)


def test_mdp_grpo_mix_zero_is_a_prospect_shaped_grpo():
  r = np.array([[1, 0, 0, 1], [0.2, 0.2, 0.2, 0.2]], np.float32)
  z = testing.numpy(advantages.grpo(r)).astype(np.float64)
  expected = np.where(z >= 0, np.abs(z)**0.88, -2.25 * np.abs(z)**0.88)
  testing.assert_close(advantages.mdp_grpo(r, mix=0.0), expected, atol=1e-5)
  # Without the anchor a homogeneous group gets exactly 0 again.
  np.testing.assert_array_equal(
      testing.numpy(advantages.mdp_grpo(r, mix=0.0))[1], np.zeros(4))


def test_mdp_grpo_small_groups_keep_the_anchor_and_never_nan():
  """G = 1: z = 0 but the anchor still gives a signal (the "stable with
  small groups" claim); a reward at the anchor gives exactly 0."""
  one = testing.numpy(advantages.mdp_grpo(
      np.array([[1.0], [0.0], [0.5]], np.float32)))
  np.testing.assert_allclose(one[:, 0], [0.543367, -1.222577, 0.0],
                             atol=1e-6)
  equal = testing.numpy(advantages.mdp_grpo(
      np.full((2, 3), 0.5, np.float32), eps=0.0))
  np.testing.assert_array_equal(equal, np.zeros((2, 3)))


def test_mdp_grpo_clips_to_the_bound():
  r = np.array([[10.0, 10.0], [-10.0, -10.0]], np.float32)
  # x = +-19 and -21 before the value: v = 19^0.88 ~ 13.4, -2.25*21^0.88.
  np.testing.assert_array_equal(
      testing.numpy(advantages.mdp_grpo(r, mix=1.0)),
      [[3.0, 3.0], [-3.0, -3.0]])
  np.testing.assert_array_equal(
      testing.numpy(advantages.mdp_grpo(r, mix=1.0, bound=2.0)),
      [[2.0, 2.0], [-2.0, -2.0]])


def test_prospect_value_by_hand():
  x = jnp.array([-4.0, -1.0, 0.0, 1.0, 4.0])
  out = testing.numpy(baselines.prospect_value(
      x, gain_power=0.5, loss_power=0.5, loss_aversion=2.0))
  np.testing.assert_allclose(out, [-4.0, -2.0, 0.0, 1.0, 2.0], atol=1e-6)


@pytest.mark.parametrize("option,value", [
    ("mix", 1.5), ("mix", -0.1), ("anchor_scale", 0.0), ("bound", -1.0),
    ("loss_aversion", 0.0), ("gain_power", 0.0)])
def test_mdp_grpo_bad_options_fail_at_validation(option, value):
  with pytest.raises(ValueError) as error:
    train.validate(config_with("mdp_grpo", **{option: value}))
  assert str(error.value).startswith(
      f"config.advantage.kwargs.{option}: {option} must be"), error.value
  with pytest.raises(ValueError, match=option):
    advantages.mdp_grpo(np.zeros((1, 2), np.float32), **{option: value})


# ---------------------------------------------------------------- ReMax


def test_remax_hand_case_and_weighted_greedy_columns():
  r = np.array([[1, 0, 0, 1], [0, 0, 0, 0]], np.float32)
  out = advantages.remax(r, greedy_rewards=np.array([1.0, 0.0]))
  np.testing.assert_array_equal(testing.numpy(out),
                                [[0, -1, -1, 0], [0, 0, 0, 0]])
  # Two columns (accuracy, format) weighted 1 and 0.1: the greedy row of
  # prompt 0 is wrong but formatted (0.1), that of prompt 1 right (1.1).
  pgk = np.stack([r, np.ones_like(r)], -1)
  data = groups_lib.from_rewards(
      pgk, [1.0, 0.1], greedy_rewards=np.array([[0.0, 1.0], [1.0, 1.0]]))
  out, _ = advantages.make("remax").estimate((), data)
  testing.assert_close(out, np.float32([[1, 0, 0, 1], [-1, -1, -1, -1]]),
                       atol=1e-6)


def test_remax_group_of_one_and_constant_groups_keep_their_baseline():
  out = advantages.remax(np.array([[1.0], [0.0]], np.float32),
                         greedy_rewards=np.array([0.0, 0.0]))
  np.testing.assert_array_equal(testing.numpy(out), [[1.0], [0.0]])
  out = advantages.remax(np.full((1, 3), 0.5, np.float32),
                         greedy_rewards=np.array([1.0]))
  np.testing.assert_array_equal(testing.numpy(out), [[-0.5] * 3])


def test_remax_is_shift_invariant_when_the_greedy_reward_shifts_too():
  key = jax.random.PRNGKey(4)
  data = groups_lib.from_rewards(
      jax.random.uniform(key, (3, 4, 2)), [1.0, 0.5],
      greedy_rewards=jax.random.uniform(jax.random.fold_in(key, 1), (3, 2)))
  estimate = advantages.make("remax").estimate
  shifted = data._replace(rewards=data.rewards + 3.0,
                          greedy_rewards=data.greedy_rewards + 3.0)
  testing.assert_close(estimate((), shifted)[0], estimate((), data)[0],
                       atol=1e-5)


def test_remax_without_greedy_rewards_names_the_field():
  with pytest.raises(ValueError, match="GroupData.greedy_rewards"):
    advantages.make("remax").estimate((), groups_lib.from_rewards(
        np.zeros((1, 2), np.float32)))
  with pytest.raises(ValueError, match=r"\[P\] or \[P, K\]"):
    advantages.remax(np.zeros((2, 2), np.float32),
                     greedy_rewards=np.zeros((3,)))


def test_remax_fillers_get_zero():
  data = groups_lib.from_rewards(
      np.ones((2, 2), np.float32), valid=[True, False],
      greedy_rewards=np.zeros((2, 1)))
  out, _ = advantages.make("remax").estimate((), data)
  np.testing.assert_array_equal(testing.numpy(out), [[1, 1], [0, 0]])


# ------------------------------------------------------------------ GPG


def gpg_reference(r, valid=None, f_norm=1.0):
  r = np.asarray(r, np.float64)
  valid = np.ones(len(r), bool) if valid is None else np.asarray(valid)
  rows = [x for p, row in enumerate(r) if valid[p] for x in row]
  alpha = len(rows) / max(sum(1 for x in rows if x != 0), 1)
  return np.array([alpha * (row - row.mean()) / f_norm if valid[p]
                   else np.zeros_like(row) for p, row in enumerate(r)])


def test_gpg_hand_case():
  r = np.array([[1, 0, 0, 0], [0, 0, 0, 0]], np.float32)
  # B = 8 rows, M = 1 rewarded: alpha = 8; group 0 mean 0.25.
  np.testing.assert_allclose(testing.numpy(advantages.gpg(r)),
                             [[6, -2, -2, -2], [0, 0, 0, 0]], atol=1e-6)
  np.testing.assert_allclose(testing.numpy(advantages.gpg(r, f_norm=2.0)),
                             [[3, -1, -1, -1], [0, 0, 0, 0]], atol=1e-6)


def test_gpg_fillers_count_in_neither_rows_nor_rewarded_rows():
  r = np.array([[1, 0, 0, 0], [5, 5, 0, 0]], np.float32)
  # Valid: B = 4, M = 1, so alpha = 4 (with the filler: 8 / 3).
  out = advantages.gpg(r, valid=np.array([True, False]))
  np.testing.assert_allclose(testing.numpy(out),
                             [[3, -1, -1, -1], [0, 0, 0, 0]], atol=1e-6)


def test_gpg_matches_its_definition_on_random_batches():
  rng = np.random.default_rng(7)
  for _ in range(3):
    r = (rng.integers(0, 3, (5, 4)) * rng.uniform(0, 1, (5, 4))
         ).astype(np.float32)
    valid = rng.uniform(size=5) > 0.3
    testing.assert_close(advantages.gpg(r, valid=valid, f_norm=1.5),
                         gpg_reference(r, valid, 1.5), atol=1e-5, rtol=1e-5)


def test_gpg_unrewarded_batch_and_groups_of_one_give_zero():
  np.testing.assert_array_equal(
      testing.numpy(advantages.gpg(np.zeros((2, 3), np.float32))),
      np.zeros((2, 3)))
  np.testing.assert_array_equal(
      testing.numpy(advantages.gpg(np.array([[1.0], [0.0]], np.float32))),
      np.zeros((2, 1)))


def test_gpg_bad_f_norm_fails_at_validation():
  with pytest.raises(ValueError, match=r"^config\.advantage\.kwargs\.f_norm: "
                     r"f_norm must be > 0; got 0\.0: set a value > 0"):
    train.validate(config_with("gpg", f_norm=0.0))


# ------------------------------------------------ the gpg objective


def test_gpg_objective_is_minus_a_logp_over_tokens():
  logp = np.log(np.array([[0.5, 0.25, 0.1], [0.2, 0.4, 0.9]], np.float32))
  mask = np.array([[1, 1, 0], [1, 1, 1]], np.float32)
  adv = np.array([2.0, -1.0], np.float32)
  loss, aux = objectives.gpg(jnp.asarray(logp), jnp.asarray(logp) - 0.1,
                             adv, mask)
  # token_mean over the 5 real tokens.
  expected = -(2 * (np.log(0.5) + np.log(0.25))
               - (np.log(0.2) + np.log(0.4) + np.log(0.9))) / 5
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  assert float(aux.clip_fraction) == 0.0
  grad = jax.grad(lambda lp: objectives.gpg(lp, lp, adv, mask)[0])(
      jnp.asarray(logp))
  np.testing.assert_allclose(testing.numpy(grad),
                             -adv[:, None] * mask / 5, atol=1e-7)
  meta = objectives.OBJECTIVES.entry("gpg").meta
  assert meta.mechanism is None and meta.level == "token"


# ---------------------------------------------------- asymmetric KL


def k3_numpy(logp, ref):
  d = np.clip(ref - logp, -20, 20)
  return np.exp(d) - d - 1


def test_asymmetric_kl_weighs_each_row_by_its_advantage_sign():
  rng = np.random.default_rng(1)
  logp = np.log(rng.uniform(0.1, 0.9, (3, 4))).astype(np.float32)
  ref = np.log(rng.uniform(0.1, 0.9, (3, 4))).astype(np.float32)
  mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], np.float32)
  adv = np.array([0.5, -0.2, 0.0], np.float32)  # A = 0 counts as >= 0
  reg = regularisers.make("asymmetric_kl", beta_pos=0.01, beta_neg=0.04,
                          aggregation="token_mean")
  sc, records = reg.loss((), jnp.asarray(logp), mask, ref_logp=ref,
                         advantages=adv)
  k3 = k3_numpy(logp.astype(np.float64), ref.astype(np.float64)) * mask
  beta = np.array([0.01, 0.04, 0.01])[:, None]
  assert float(sc.total) == pytest.approx((beta * k3).sum(), rel=1e-5)
  assert float(sc.count) == mask.sum()
  assert float(records["kl"].value()) == pytest.approx(
      k3.sum() / mask.sum(), rel=1e-5)
  # Token-level advantages: the sign per token.
  token_adv = np.where(np.arange(4)[None, :] < 2, 1.0, -1.0) * np.ones((3, 1))
  sc, _ = reg.loss((), jnp.asarray(logp), mask, ref_logp=ref,
                   advantages=token_adv.astype(np.float32))
  token_beta = np.where(token_adv >= 0, 0.01, 0.04)
  assert float(sc.total) == pytest.approx((token_beta * k3).sum(), rel=1e-5)


def test_asymmetric_kl_with_equal_betas_is_the_kl_regulariser():
  logp = jnp.log(jnp.array([[0.3, 0.6], [0.5, 0.2]]))
  ref = jnp.log(jnp.array([[0.4, 0.4], [0.1, 0.5]]))
  mask = jnp.ones((2, 2))
  sym = regularisers.make("kl", beta=0.05, aggregation="seq_mean_token_mean")
  asym = regularisers.make("asymmetric_kl", beta_pos=0.05, beta_neg=0.05,
                           aggregation="seq_mean_token_mean")
  testing.assert_close(
      asym.loss((), logp, mask, ref_logp=ref,
                advantages=jnp.array([1.0, -1.0]))[0],
      sym.loss((), logp, mask, ref_logp=ref)[0], rtol=1e-6)


def test_the_trainer_builds_the_asymmetric_kl_from_the_config():
  c = importlib.import_module("configs.mdp_grpo").get_config("tiny")
  components = train.make_components(c)
  assert "kl" not in components  # its state is kept under its own name
  reg = components["asymmetric_kl"]
  assert reg.name == "asymmetric_kl"
  assert reg.reads == ("ref_logp", "advantages")
  c.kl.beta_neg = 0.0
  assert train.make_components(c)["kl"].name == "kl"
  c.kl.beta, c.kl.beta_neg = 0.0, 0.04
  with pytest.raises(ValueError, match="config.kl.beta_neg"):
    train.validate(c)
  c.kl.beta, c.kl.beta_neg = 0.01, -1.0
  with pytest.raises(ValueError, match="config.kl.beta_neg"):
    train.validate(c)


# ----------------------------------------- member temperatures: config


def test_member_temperatures_are_validated_against_the_group_size():
  c = quickstart.get_config()
  c.rollout.member_temperatures = (0.7, 1.0, 1.3)  # G = 4
  with pytest.raises(ValueError) as error:
    train.validate(c)
  for part in ("config.rollout.member_temperatures", "3 entries",
               "num_generations=4"):
    assert part in str(error.value), (part, str(error.value))
  c.rollout.member_temperatures = (0.7, 1.0, 0.0, 1.3)
  with pytest.raises(ValueError, match="member_temperatures.*<= 0"):
    train.validate(c)
  c.rollout.member_temperatures = (0.7, 0.9, 1.1, 1.3)
  train.validate(c)
  assert importlib.import_module("configs.mdp_grpo").get_config(
  ).rollout.member_temperatures == (0.7, 0.9, 1.1, 1.3)


def test_member_temperatures_of_a_sampler():
  sampler = rollout.Sampler(
      num_generations=3, max_new_tokens=4, temperature=0.8, top_k=0,
      top_p=1.0, prompt_buckets=(8,), system_prompt="", eos_ids=(), pad_id=0)
  np.testing.assert_array_equal(rollout.member_temperatures(sampler),
                                np.float32([0.8, 0.8, 0.8]))
  np.testing.assert_array_equal(
      rollout.member_temperatures(sampler, greedy_row=True),
      np.float32([0.8, 0.8, 0.8, 0.0]))
  spread = sampler._replace(member_temperatures=(0.5, 1.0, 1.5))
  np.testing.assert_array_equal(
      rollout.member_temperatures(spread, greedy_row=True),
      np.float32([0.5, 1.0, 1.5, 0.0]))


# ------------------------------------ the rollout: greedy row, temperatures


@pytest.fixture(scope="module")
def tiny_model():
  return models.load_model("tiny")


def tiny_pipeline(tiny_model, reward_fn, *, estimator, members=(),
                  temperature=1.0, assemble_temperature=None):
  """A `rollout.Pipeline`: P = 2 prompts, G = 2 members, 4 new tokens, one
  verifier `reward_fn` of weight 1, off policy (the old log-prob pass
  runs)."""
  config, _, tokenizer = tiny_model
  eos_ids, pad_id = models.eos_and_pad(tokenizer)
  group_strategy = strategies.make_group_strategy("all_groups")
  if assemble_temperature is None:
    assemble_temperature = (np.tile(np.float32(members), 2) if members
                            else temperature)
  return rollout.Pipeline(
      num_prompts=2,
      sampler=rollout.Sampler(
          num_generations=2, max_new_tokens=4, temperature=temperature,
          top_k=0, top_p=1.0, prompt_buckets=(80,), system_prompt="",
          eos_ids=eos_ids, pad_id=pad_id, member_temperatures=members),
      model_config=config, tokenizer=tokenizer,
      task=data.make_task(quickstart.get_config("tiny").data, seed=0),
      format_prompt=data.format_prompt,
      verifiers={"r": (reward_fn, 1.0)}, shapers={},
      components=dict(
          select=strategies.make_selection(
              "uniform", rounds_per_step=group_strategy.rounds_per_step),
          groups=group_strategy, advantage=advantages.make(estimator),
          credit=credit.make("uniform"),
          rows=strategies.make_row_strategy("all_rows")),
      assemble=functools.partial(
          batch_lib.assemble_batch, model_config=config,
          temperature=assemble_temperature, chunk_size=64, on_policy=False))


def generate(tiny_model, pipeline, seed=0):
  _, params, _ = tiny_model
  states = {name: c.init() for name, c in pipeline.components.items()}
  batch, m, _ = rollout.generate(params, None, 0, jax.random.PRNGKey(seed),
                                 states, pipeline=pipeline)
  return batch, m


def test_remax_samples_a_greedy_row_that_is_scored_but_never_trains(
    tiny_model):
  seen = []

  def length_reward(prompts, completions, answers):
    seen.append(list(completions))
    return [float(len(c)) for c in completions]

  runs = []
  for seed in (0, 1):
    seen.clear()
    batch, m = generate(tiny_model, tiny_pipeline(
        tiny_model, length_reward, estimator="remax"), seed=seed)
    [texts] = seen  # one scoring call: P * (G + 1) completions
    assert len(texts) == 2 * 3
    runs.append((texts, batch, m))
  for texts, batch, m in runs:
    r = np.array([float(len(t)) for t in texts]).reshape(2, 3)
    # The batch keeps the G sampled rows; the greedy row is the baseline.
    assert batch.tokens.shape[0] == 4
    testing.assert_close(batch.advantages,
                         (r[:, :2] - r[:, 2:]).reshape(-1), atol=1e-6)
    assert m["reward/scored"] == 6.0
    assert m["reward/greedy_total"] == pytest.approx(r[:, 2].mean())
  # Temperature 0: the greedy completions do not depend on the key.
  greedy = lambda texts: [texts[2], texts[5]]
  assert greedy(runs[0][0]) == greedy(runs[1][0])


def test_no_greedy_row_for_an_estimator_that_does_not_read_it(tiny_model):
  seen = []

  def reward(prompts, completions, answers):
    seen.append(len(completions))
    return [0.0] * len(completions)

  generate(tiny_model, tiny_pipeline(tiny_model, reward, estimator="grpo"))
  assert seen == [4]


def test_member_temperatures_sample_and_score_each_row_at_its_own(
    tiny_model):
  """Members at 0.5 and 1.5: the trainer's log-probs (at the rows' own
  temperatures) agree with the sampler's, and scoring them at the one
  temperature instead would not."""
  zero = lambda prompts, completions, answers: [0.0] * len(completions)
  members = (0.5, 1.5)
  batch, m = generate(tiny_model, tiny_pipeline(
      tiny_model, zero, estimator="grpo", members=members))
  np.testing.assert_array_equal(testing.numpy(batch.temperature),
                                np.float32([0.5, 1.5, 0.5, 1.5]))
  assert m["logprob/sampler_trainer_max_abs_diff"] < 1e-3
  _, wrong = generate(tiny_model, tiny_pipeline(
      tiny_model, zero, estimator="grpo", members=members,
      assemble_temperature=1.0))
  assert wrong["logprob/sampler_trainer_max_abs_diff"] > 0.05


# -------------------------------------------------------------- configs


# ------------------------------------------------------------- learning


def with_greedy_row(out, reward, resample):
  """The rewards and ReMax's greedy row, sampled beside the group."""
  del out
  greedy = resample(num_samples=1, greedy=True)
  return groups_lib.from_rewards(
      reward,
      greedy_rewards=(greedy.tokens == learning.TARGET).mean(-1)[:, None])


@pytest.mark.parametrize("name,objective", [
    ("mdp_grpo", "ppo_clip"), ("remax", "reinforce"), ("gpg", "gpg")])
def test_estimator_learns_a_trivial_task_off_policy(name, objective):
  history, _ = learning.learn_trivial_task(
      advantages.make(name),
      objective=objectives.make(objective, aggregation="token_mean"),
      group_data=with_greedy_row)
  learning.check_learned(history)
