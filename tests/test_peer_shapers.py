"""The peers' length and repetition shapers (Yeo et al.'s cosine reward,
TRL's n-gram repetition penalty), GRPO-LEAD's difficulty reweighting as an
estimator, and LCPO's target in evaluation prompts. Expected values are
worked by hand (or by numpy beside the code under test)."""

import math

import jax
import numpy as np
import pytest

from configs import cosine_length as cosine_config
from configs import grpo_lead as grpo_lead_config
from configs import lcpo as lcpo_config
from configs import repetition_penalty as repetition_config
from grpo_jax import advantages
from grpo_jax import data
from grpo_jax import evaluation
from grpo_jax import rewards
from grpo_jax import testing
from grpo_jax import train


def close(a, b, rtol=1e-5, atol=1e-6):
  np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=rtol,
                             atol=atol)


# ------------------------------------------------------- cosine length

# (n, correct) -> R with the defaults (L = 1000): cos(pi n / L) by hand,
# n = 250: cos(pi / 4) = 0.70710678, R = 0.5 + 0.25 x 1.70710678.
COSINE = [(0, 1, 1.0), (250, 1, 0.9267767), (500, 1, 0.75), (1000, 1, 0.5),
          (1500, 1, 0.5),  # clipped at L (the peers' cos turns back: 0.75)
          (0, 0, -1.0), (500, 0, -0.75), (1000, 0, -0.5)]


def test_cosine_length_is_the_hand_worked_reward_minus_correctness():
  n, ok, r = (np.asarray(x) for x in zip(*COSINE))
  column = rewards.cosine_length(n, correct=ok)
  assert column.dtype == np.float32
  close(column, r - ok)
  # Correct answers: shorter earns more; wrong ones: longer loses less.
  assert column[0] > column[1] > column[2] > column[3]
  assert column[5] < column[6] < column[7]


def test_cosine_length_exceed_and_own_ends():
  column = rewards.cosine_length(
      [4, 8, 9, 8], correct=[1, 1, 0, 0], max_length=8, exceed_length=-2.0,
      min_value_correct=0.0, max_value_correct=2.0)
  # n = 4: c = cos(pi / 2) = 0, R = 0 + 2 x 1/2 = 1; n >= 8: R = -2.
  close(column, [1.0 - 1.0, -2.0 - 1.0, -2.0, -2.0])
  assert rewards.shaper_range(
      "cosine_length", max_length=8, exceed_length=-2.0,
      min_value_correct=0.0, max_value_correct=2.0) == (-3.0, 1.0)


@pytest.mark.parametrize("options,match", [
    ({"max_length": 0}, "max_length=0"),
    ({"min_value_correct": 1.5}, "min_value_correct=1.5"),
    ({"min_value_wrong": 0.0}, "min_value_wrong=0.0"),
    ({"exceed_length": math.nan}, "exceed_length=nan"),
])
def test_cosine_length_options_are_checked(options, match):
  with pytest.raises(ValueError, match=match):
    rewards.make_shaper("cosine_length", **options)


# --------------------------------------------------- repetition penalty


def test_repetition_penalty_is_the_share_of_repeated_ngrams():
  pad = 7  # padding past each row's length never counts
  tokens = np.asarray([[1, 2, 3, 4, pad, pad], [5, 5, 5, 5, 5, pad],
                       [1, 2, 1, 2, 1, pad], [9, pad, pad, pad, pad, pad]])
  lengths = np.asarray([4, 5, 5, 1])
  # TRL's docstring example (2-grams: 0 and -0.75); [1 2 1 2 1]: 2-grams
  # 12 21 12 21, 2 of 4 distinct; one token: fewer than 2, so 0.
  close(rewards.repetition_penalty(lengths, tokens=tokens, ngram_size=2),
        [0.0, -0.75, -0.5, 0.0])
  # 3-grams of [1 2 1 2 1]: 121 212 121, 2 of 3 distinct -> 1/3 x -0.6.
  close(rewards.repetition_penalty(lengths, tokens=tokens, ngram_size=3,
                                   max_penalty=-0.6),
        [0.0, -0.6 * (1 - 1 / 3), -0.2, 0.0])


@pytest.mark.parametrize("options,match", [
    ({"ngram_size": 0}, "ngram_size=0"), ({"max_penalty": 0.5},
                                          "max_penalty=0.5")])
def test_repetition_penalty_options_are_checked(options, match):
  with pytest.raises(ValueError, match=match):
    rewards.make_shaper("repetition_penalty", **options)


@pytest.mark.parametrize("module,change,match", [
    (cosine_config, lambda c: c.rewards.shapers.cosine_length.update(
        max_length=64), r"rewards\.shapers\.cosine_length\.max_length.*40"),
    (cosine_config, lambda c: c.rewards.shapers.cosine_length.update(
        max_value_correct=0.0), r"rewards\.shapers\.cosine_length.*"
     r"max_value_correct"),
    (repetition_config, lambda c: c.rewards.shapers.repetition_penalty.update(
        max_penalty=1.0), r"rewards\.shapers\.repetition_penalty.*"
     r"max_penalty=1.0"),
])
def test_bad_shaper_options_fail_validation_naming_the_field(module, change,
                                                             match):
  for arg in (None, "tiny"):
    train.validate(module.get_config(arg))
  config = module.get_config()
  change(config)
  with pytest.raises(ValueError, match=match):
    train.validate(config)


# ------------------------------------------------- GRPO-LEAD reweighting


def test_grpo_lead_estimator_is_the_spec_vector_and_hand_values():
  est = advantages.make("grpo_lead")
  # VARIANTS.md 5.3: rho = 0.5, w = 1.416556 for both signs.
  a = advantages.grpo_lead(np.asarray([[1.035988, 0.965262, -1.0, -1.0]]))
  close(a, [[1.269744, 1.183034, -1.226389, -1.226389]])
  # rho = 1/4: grpo A = (1.5, -0.5, -0.5, -0.5) (mean -0.5, std 1, ddof 1);
  # the success times w(0.25) = 1.492638, failures times w(0.75) = 0.95.
  a = advantages.grpo_lead(np.asarray([[1.0, -1.0, -1.0, -1.0]]))
  close(a, [[1.5 * 1.492638, -0.5 * 0.95, -0.5 * 0.95, -0.5 * 0.95]],
        rtol=1e-5)
  # An all-equal group stays at 0; low == high == 1 is GRPO's A.
  close(advantages.grpo_lead(np.full((1, 4), 2.0)), np.zeros((1, 4)))
  close(advantages.grpo_lead(np.asarray([[1.0, -1.0, -1.0, -1.0]]),
                             low=1.0, high=1.0),
        [[1.5, -0.5, -0.5, -0.5]], rtol=1e-5)
  assert est.input == "PG" and est.output == "group"
  with pytest.raises(ValueError, match="low=2.0"):
    advantages.grpo_lead(np.zeros((1, 2)), low=2.0)
  config = grpo_lead_config.get_config()
  config.advantage.kwargs.low = 2.0
  with pytest.raises(ValueError, match="low=2.0"):
    train.validate(config)


def test_the_grpo_lead_config_reweights_its_advantages_in_a_tiny_step():
  """configs/grpo_lead.py's `:tiny` rollout (coin-flip verifiers: the tiny
  model earns no reward): the batch's advantages are GRPO's of the shaped
  rewards reweighted as `rewards.lead_reweight` (numpy) has it, and differ
  from GRPO's."""
  config = grpo_lead_config.get_config("tiny")
  assert config.advantage.name == "grpo_lead"
  config.rollout.num_generations = 4
  train.validate(config)
  run = train.build(config)
  pipeline = run.rollout_fn.keywords["pipeline"]
  seen = {}
  estimator = pipeline.components["advantage"]

  def spy(state, groups):
    seen["groups"] = groups
    return estimator.estimate(state, groups)
  components = dict(pipeline.components,
                    advantage=estimator._replace(estimate=spy))
  pipeline = testing.with_verifiers(
      pipeline._replace(components=components), testing.coin)
  batch, _, _ = testing.rollout_step(run, 0, key=jax.random.PRNGKey(3),
                                     pipeline=pipeline)
  groups = seen["groups"]
  r = (np.asarray(groups.rewards) * np.asarray(groups.weights)).sum(-1)
  centred = r - r.mean(-1, keepdims=True)
  grpo = centred / (r.std(-1, ddof=1, keepdims=True) + 1e-6)
  want = rewards.lead_reweight(grpo, r)
  close(np.asarray(batch.advantages).reshape(r.shape), want, rtol=1e-4,
        atol=1e-5)
  assert np.abs(want - grpo).max() > 1e-3, (r, grpo)


# --------------------------------------- LCPO's target in evaluation


def test_evaluation_prompts_carry_lcpo_target_as_training_does():
  config = lcpo_config.get_config("tiny")
  examples = [data.Example("What is 3 + 5?", "8", 7),
              data.Example("What is 1 + 1?", "2", 12)]
  prompted = evaluation.as_prompted(config, examples)
  lo, hi = config.rewards.shapers.lcpo.target_range
  for example, got in zip(examples, prompted):
    # n* = lo + (id * 2654435761 + 40503) mod 2^32 mod (hi - lo + 1).
    target = lo + (example.index * 2654435761 + 40503) % 2**32 % (hi - lo + 1)
    assert got.question == f"{example.question} Think for {target} tokens."
    assert got.answer == example.answer
  # A config without such a shaper leaves the prompts as they are.
  assert evaluation.as_prompted(grpo_lead_config.get_config("tiny"),
                                examples) == examples


def test_evaluate_and_periodic_evaluation_prompt_with_the_target(monkeypatch):
  seen = []

  def fake(params, model_config, tokenizer, examples, key, **kw):
    del params, model_config, tokenizer, key, kw
    seen.append([e.question for e in examples])
    return {}
  monkeypatch.setattr(evaluation, "evaluate_examples", fake)
  config = lcpo_config.get_config("tiny")
  evaluation.evaluate(config, num_problems=2, k=(),
                      load_policy=lambda: (None, None, None, 0))
  config.eval.every, config.eval.num_problems = 1, 2
  evaluation.from_config(config, None, None)(None)
  assert len(seen) == 2 and seen[0] == seen[1]
  assert all(q.endswith(" tokens.") and "Think for " in q
             for q in seen[0]), seen
