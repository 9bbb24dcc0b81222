"""GHPO's guided hints and AERO's adaptive rollouts as group strategies
(`strategies.resampled`): the hinted prompts (VARIANTS.md 4.8's vectors)
through the rollout's `hint` helper, the escalation and the kept members
with a fake draw and resample, worked by hand; the config checks; and one
real `:tiny` step of each config showing the mechanism, deterministic
given the key."""

import functools
import hashlib

import jax
import numpy as np
import pytest

from configs import aero as aero_config
from configs import dapo as dapo_config
from configs import ghpo as ghpo_config
from grpo_jax.data import arithmetic
from grpo_jax import data
from grpo_jax.rollout import references
from grpo_jax import rollout
from grpo_jax import strategies
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.strategies import hints
from grpo_jax.strategies import resampled

HINT = hints.HINT_TEXT


class CharTokenizer:
  """One token per character (so token cuts are character cuts)."""

  def encode(self, text, add_special_tokens=False):
    del add_special_tokens
    return [ord(ch) for ch in text]

  def decode(self, ids, skip_special_tokens=True):
    del skip_special_tokens
    return "".join(chr(i) for i in ids)


class FakeRound:
  """What the strategies read of a `rollout.Round`, plus a per-row id
  field: ``tokens[p, g] = [round, p, g]``."""

  def __new__(cls, accuracy, r=0):
    accuracy = np.asarray(accuracy, np.float32)
    p, g = accuracy.shape
    tokens = np.stack(np.broadcast_arrays(
        np.full((p, g), r), np.arange(p)[:, None], np.arange(g)[None, :]),
        -1)
    return rollout.Round(
        prompt_ids=[[7]] * p, tokens=tokens, mask=np.ones((p, g, 3)),
        lengths=np.full((p, g), 3), truncated=np.zeros((p, g), bool),
        sampler_logp=np.full((p, g, 3), -float(r + 1)),
        rewards=np.stack([accuracy, np.ones_like(accuracy)], -1),
        columns=("accuracy", "format"), errors=np.asarray([r, 0]),
        entropies=np.full((p, g), float(r)),
        prompt_index=np.arange(p, dtype=np.int32))


def test_every_round_field_is_classified_for_rebuilding_groups():
  assert (set(resampled.ROW_FIELDS) | set(resampled.GROUP_FIELDS)
          == set(rollout.Round._fields))
  assert not set(resampled.ROW_FIELDS) & set(resampled.GROUP_FIELDS)


# ---------------------------------------------------------------- GHPO


def hint_helper(**kw):
  return functools.partial(references.hint_examples, task=None,
                           tokenizer=CharTokenizer(), **kw)


def test_hinted_questions_are_the_spec_vectors():
  """VARIANTS.md 4.8: "abcdefgh" hints "ab", "abcd", "abcdef"; a
  10-character solution at 0.25 gives round(2.5) = 2: "ab"."""
  hint = hint_helper()
  eight = data.Example("Q?", "1", solution="abcdefgh")
  ten = data.Example("R?", "2", solution="abcdefghij")
  got = [hint([eight, ten], [w, 0.25])[0].question for w in (.25, .5, .75)]
  assert got == ["Q?" + HINT + "ab", "Q?" + HINT + "abcd",
                 "Q?" + HINT + "abcdef"]
  assert hint([eight, ten], [0.25, 0.25])[1].question == "R?" + HINT + "ab"
  # omega 0 is the example itself; the answer and index stay.
  plain = hint([eight, ten], [0.0, 0.5])
  assert plain[0] is eight and plain[1].answer == "2"
  # The arithmetic task's own one-line working.
  task = arithmetic.ArithmeticTask()
  example = task.example(task.index((3, 5), ("+",)))
  (hinted,) = references.hint_examples([example], [0.5], task=task,
                                       tokenizer=CharTokenizer())
  # "3 + 5 = \boxed{8}" is 17 characters: round(8.5) = 8, "3 + 5 = ".
  assert hinted.question == example.question + HINT + "3 + 5 = "


def test_a_missing_solution_is_refused_when_hinting():
  with pytest.raises(ValueError, match="reference solution"):
    hint_helper()([data.Example("Q?", "1")], [0.5])
  assert references.worked_solution(None, data.Example("Q?", "1")) == ""


def ghpo_run(accuracy_by_round, *, step=0, **options):
  """GHPO over a fake draw and resample: round r's accuracy [P, G] is
  ``accuracy_by_round[r]``; returns (Selected, the examples resampled by
  round, the omegas asked for by round)."""
  strategy = strategies.make_group_strategy("ghpo", **options)
  p = len(accuracy_by_round[0])
  asked, omegas = {}, {}

  def hint(examples, shares):
    omegas[len(omegas) + 1] = np.asarray(shares).tolist()
    return hint_helper()(examples, shares)

  def resample(r, examples):
    asked[r] = [e.question for e in examples]
    return FakeRound(accuracy_by_round[r], r)

  examples = lambda r: [data.Example(f"Q{i}?", "0", solution="abcdefgh")
                        for i in range(p)]
  selected, _ = strategy.apply(
      (), lambda r: FakeRound(accuracy_by_round[r], r), p,
      examples=examples, resample=resample, hint=hint, step=step)
  return selected, asked, omegas


def test_ghpo_escalates_all_wrong_groups_by_hand():
  """Group 0 has a success: plain. Group 1 is all wrong, then right at
  omega .25: stays at round 1. Group 2 is all wrong at every level: keeps
  round 3 (omega .75), still wrong."""
  wrong = [0, 0, 0]
  rounds = [[[0, 1, 0], wrong, wrong],
            [wrong, [0, 0, 1], wrong],
            [wrong, wrong, wrong],
            [wrong, wrong, wrong]]
  selected, asked, omegas = ghpo_run(rounds)
  assert len(selected.rounds) == 4
  assert selected.picks == [(0, 0), (1, 1), (3, 2)]
  assert selected.valid.tolist() == [True] * 3
  assert omegas == {1: [0, .25, .25], 2: [0, 0, .5], 3: [0, 0, .75]}
  # Every round samples all P prompts; those not escalated, plain.
  assert asked[1] == ["Q0?", "Q1?" + HINT + "ab", "Q2?" + HINT + "ab"]
  assert asked[2] == ["Q0?", "Q1?", "Q2?" + HINT + "abcd"]
  assert asked[3] == ["Q0?", "Q1?", "Q2?" + HINT + "abcdef"]
  m = selected.measurements
  assert m["ghpo/hinted_groups"] == pytest.approx(2 / 3)
  assert m["ghpo/mean_omega"] == pytest.approx((0 + .25 + .75) / 3)
  assert m["ghpo/still_wrong_groups"] == pytest.approx(1 / 3)


def test_ghpo_waits_for_start_hint_step_and_stops_when_solved():
  wrong = [[0, 0], [0, 0]]
  selected, asked, _ = ghpo_run([wrong] * 4, step=2, start_hint_step=3)
  assert len(selected.rounds) == 1 and not asked
  assert selected.measurements == {"ghpo/hinted_groups": 0.0,
                                   "ghpo/mean_omega": 0.0,
                                   "ghpo/still_wrong_groups": 0.0}
  # Solved at the first level: no second hint; one level (omega .5) alone.
  selected, asked, omegas = ghpo_run(
      [wrong, [[1, 0], [0, 1]]], step=3, start_hint_step=3)
  assert sorted(asked) == [1] and selected.picks == [(1, 0), (1, 1)]
  selected, _, omegas = ghpo_run([wrong] * 2, omegas=(0.5,))
  assert omegas == {1: [.5, .5]} and len(selected.rounds) == 2
  assert selected.measurements["ghpo/still_wrong_groups"] == 1.0
  # The most rounds a step draws: step s reads prompt index s x this.
  assert strategies.make_group_strategy(
      "ghpo", omegas=(0.5,)).rounds_per_step == 2
  assert strategies.make_group_strategy("ghpo").rounds_per_step == 4
  assert strategies.make_group_strategy("aero").rounds_per_step == 3


# ---------------------------------------------------------------- AERO


@pytest.mark.parametrize("right,g,kept", [
    # 1 success in 8: G m / n = 0.5, half up 1: three wrong and the right.
    ([0, 0, 0, 0, 0, 1, 0, 0], 4, [0, 1, 2, 5]),
    # 3 in 8: 1.5 -> 2 of each, the earliest.
    ([0, 0, 0, 0, 1, 1, 1, 0], 4, [0, 1, 4, 5]),
    # All right, then one wrong in 8: one wrong kept.
    ([1, 1, 1, 1, 1, 1, 0, 1], 4, [0, 1, 2, 6]),
    # 1 in 12: 0.83 -> 0, raised to 1 (both outcomes present).
    ([0] * 11 + [1], 4, [0, 1, 2, 11]),
    # 7 in 11: 3.05 -> 3 right, one wrong.
    ([0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1], 4, [0, 4, 5, 6]),
    # G = 2, 6 in 8: 2.0 -> 2, lowered to G - 1 = 1.
    ([0, 0, 1, 1, 1, 1, 1, 1], 2, [0, 2]),
])
def test_mixed_members_keep_the_pools_share_by_hand(right, g, kept):
  assert resampled.mixed_members(np.asarray(right, bool), g).tolist() == kept


def aero_run(accuracy_by_round, **options):
  strategy = strategies.make_group_strategy("aero", **options)
  p = len(accuracy_by_round[0])
  asked = []

  def resample(r, examples):
    asked.append((r, list(examples)))
    return FakeRound(accuracy_by_round[r], r)

  selected, _ = strategy.apply(
      (), lambda r: FakeRound(accuracy_by_round[r], r), p,
      examples=lambda r: [f"prompt {i} of round {r}" for i in range(p)],
      resample=resample)
  return selected, asked


def test_aero_grows_all_equal_groups_until_mixed_by_hand():
  """Posterior rule, prior (1, 1), target 0.5, pool cap 12, G = 4.
  Group 0 is mixed: untouched. Group 1: 0 of 4; P(k more all wrong) =
  5/(5+k) <= 1/2 first at k = 5, so it takes G = 4; round 1 gives one
  right (member 2): pool 1 of 8, kept by `mixed_members`: originals 0-2
  and round 1's member 2. Group 2: 4 of 4 right, takes 4 (k = 5), stays
  all right (8 of 8: 9/(9+k) <= 1/2 at k = 9, room 4), takes 4 more at
  round 2 and stays as drawn."""
  ones, zeros = [1, 1, 1, 1], [0, 0, 0, 0]
  rounds = [[[1, 0, 0, 0], zeros, ones],
            [zeros, [0, 0, 1, 0], ones],
            [zeros, zeros, ones]]
  selected, asked = aero_run(rounds, max_rounds=3, max_group=12)
  # Rounds 1 and 2 sample the step's own prompts (round 0's), not new ones.
  assert [r for r, _ in asked] == [1, 2]
  assert all(ex == [f"prompt {i} of round 0" for i in range(3)]
             for _, ex in asked)
  assert len(selected.rounds) == 3
  assert selected.picks == [(0, 0), (0, 1), (0, 2)]
  merged = selected.rounds[0]
  np.testing.assert_array_equal(merged.rewards[..., 0],
                                [[1, 0, 0, 0], [0, 0, 0, 1], ones])
  # Each kept row brings its own tokens, log-probs and entropies.
  np.testing.assert_array_equal(merged.tokens[1], [[0, 1, 0], [0, 1, 1],
                                                   [0, 1, 2], [1, 1, 2]])
  np.testing.assert_array_equal(merged.sampler_logp[1, :, 0],
                                [-1, -1, -1, -2])
  np.testing.assert_array_equal(merged.entropies[1], [0, 0, 0, 1])
  np.testing.assert_array_equal(merged.tokens[0], merged.sampled.tokens[0])
  # Prompts, errors and the plain sample stay round 0's.
  assert merged.sampled.tokens[1, 3].tolist() == [0, 1, 3]
  assert merged.errors.tolist() == [0, 0]
  m = selected.measurements
  assert m["aero/extra_rows"] == 4 + 4 + 4  # group 1 once, group 2 twice
  assert m["aero/rescued_groups"] == pytest.approx(1 / 3)


def test_aero_fixed_chunks_caps_and_nothing_to_do():
  zeros = [[0, 0, 0, 0]]
  # fixed: chunk 2 a round; pool cap 6 leaves room for one chunk.
  selected, asked = aero_run([zeros, [[0, 1, 1, 1]], zeros], rule="fixed",
                             chunk=2, max_group=6)
  # Round 1's first 2 members only (0, 1): pool 1 of 6, 4/6 + .5 -> 1.
  np.testing.assert_array_equal(selected.rounds[0].tokens[0, :, 0],
                                [0, 0, 0, 1])
  np.testing.assert_array_equal(selected.rounds[0].tokens[0, :, 2],
                                [0, 1, 2, 1])
  assert len(asked) == 1 and selected.measurements["aero/extra_rows"] == 2
  # Every group mixed at once: no extra round, the round as drawn.
  first = [[1, 0, 0, 0]]
  selected, asked = aero_run([first, zeros, zeros])
  assert not asked and len(selected.rounds) == 1
  assert selected.rounds[0].sampled is None
  assert selected.measurements == {"aero/extra_rows": 0.0,
                                   "aero/rescued_groups": 0.0}
  # Never mixed: grown, but kept as drawn.
  selected, _ = aero_run([zeros, zeros, zeros])
  assert selected.measurements["aero/rescued_groups"] == 0.0
  assert selected.rounds[0].sampled is None


@pytest.mark.parametrize("name,options,match", [
    ("ghpo", {"omegas": (0.5, 0.25)}, "increasing"),
    ("ghpo", {"start_hint_step": -1}, "start_hint_step"),
    ("aero", {"max_rounds": 1}, "max_rounds"),
    ("aero", {"rule": "greedy"}, "rule"),
    ("aero", {"target": 1.0}, "target"),
    ("aero", {"max_group": -2}, "max_group"),
])
def test_options_are_checked(name, options, match):
  with pytest.raises(ValueError, match=match):
    strategies.make_group_strategy(name, **options)


# ------------------------------------------------------- config checks


def _use_spo(c):  # a per-prompt tracker (rewards in [0, 1])
  c.advantage.name = "spo"
  c.advantage.kwargs = dict(capacity=4096)
  c.rewards.weights = (1.0, 0.0)


@pytest.mark.parametrize("module,change,match", [
    (ghpo_config, lambda c: c.data.update(task="jsonl", path="x.jsonl"),
     r"config.data.task: 'jsonl' gives no worked reference solution.*"
     r"arithmetic or gsm8k"),
    (ghpo_config, lambda c: c.data.update(task="segments"),
     r"config.data.task: 'segments'"),
    (ghpo_config, lambda c: c.groups.kwargs.update(omegas=(0.3, 1.5)),
     r"config.groups.kwargs.omegas: omegas"),
    (aero_config, lambda c: c.groups.kwargs.update(max_group=4),
     r"config.groups.kwargs.max_group"),
    (aero_config, lambda c: c.groups.kwargs.update(max_rounds=1),
     r"^config\.groups\.kwargs\.max_rounds: max_rounds must be an integer "
     r">= 2 \(the plain round and at least one more\); got 1"),
    (ghpo_config, lambda c: c.groups.kwargs.update(start_hint_step=-1),
     r"^config\.groups\.kwargs\.start_hint_step: .*>= 0.*got -1"),
    (dapo_config, lambda c: c.groups.kwargs.update(max_rounds=0),
     r"^config\.groups\.kwargs\.max_rounds: max_rounds must be an integer "
     r">= 1"),
    (aero_config, lambda c: c.rollout.update(
        member_temperatures=(0.6, 0.8, 1.0, 1.2)),
     r"config.rollout.member_temperatures"),
    (aero_config, lambda c: setattr(c, "advantage",
                                    dict(name="seed_grpo", kwargs={})),
     r"config.advantage.name: 'seed_grpo' reads GroupData.answer_ids"),
    (aero_config, lambda c: c.rewards.shapers.update(
        {"grpo_lead": dict(weight=1.0)}),
     r"config.rewards.shapers.grpo_lead"),
    (aero_config, lambda c: c.groups.kwargs.update(rule="greedy"),
     r"config.groups.kwargs.rule: rule"),
    (ghpo_config, lambda c: _use_spo(c),
     r"config.advantage.name: 'spo' keeps state .*ghpo"),
    (aero_config, lambda c: _use_spo(c),
     r"config.advantage.name: 'spo' keeps state .*aero"),
])
def test_config_errors_name_the_field(module, change, match):
  config = module.get_config()
  change(config)
  with pytest.raises(ValueError, match=match):
    train.validate(config)


# ------------------------------------------------- real :tiny steps


def tiny_step(run, key, pipeline=None):
  pipeline = pipeline or run.rollout_fn.keywords["pipeline"]
  states = {name: run.state.states[name] for name in rollout.STAGES}
  with jax.set_mesh(run.mesh):
    return rollout.generate(run.state.params, run.ref_params, 0, key,
                            states, pipeline=pipeline)


def same_batch(a, b):
  return all(np.array_equal(np.asarray(x), np.asarray(y))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _never_right(name):
  """A verifier that scores every completion 0 (the random tiny model may
  hit an answer by chance)."""
  del name
  return lambda prompts, completions, answers: [0.0] * len(completions)


def test_ghpo_tiny_step_hints_every_all_wrong_group():
  """Scored by a verifier never right, every group climbs to omega 0.75
  and stays wrong; the batch trains on the hinted prompts (the hint in the
  prompt tokens, outside the loss); the same key gives the same batch."""
  config = testing.ungraded(ghpo_config.get_config("tiny"))
  run = train.build(config)
  key = jax.random.fold_in(run.state.key, 0)
  wrong = testing.with_verifiers(run.rollout_fn.keywords["pipeline"],
                                 _never_right)
  batch, m, _ = tiny_step(run, key, wrong)
  assert m["ghpo/hinted_groups"] == 1.0 and m["rollout/rounds"] == 4
  assert m["ghpo/mean_omega"] == 0.75
  assert m["ghpo/still_wrong_groups"] == 1.0
  pipeline = run.rollout_fn.keywords["pipeline"]
  t = config.rollout.max_new_tokens
  prompt = np.asarray(batch.tokens[0, :-t])[
      np.asarray(batch.input_mask[0, :-t]) > 0]
  text = pipeline.tokenizer.decode(list(prompt), skip_special_tokens=True)
  assert HINT in text and "\\boxed" in text.split(HINT)[1]
  again, _, _ = tiny_step(run, key, wrong)
  assert same_batch(batch, again)


def _rare(name):
  """A verifier right 1 time in 8, by a hash of the completion (the tiny
  model earns no reward; AERO needs groups that can become mixed)."""
  def fn(prompts, completions, answers):
    del prompts, answers
    return [float(hashlib.blake2b(f"{name}|{c}".encode()).digest()[0] % 8
                  == 0) for c in completions]
  return fn


def test_aero_tiny_step_grows_groups_and_rescues_with_some_success():
  """Scored by a verifier never right, every group is all wrong: AERO
  draws more of the same prompts (extra rows > 0, the same prompts in the
  batch). With a verifier right 1 time in 8, some key gives an all-wrong
  group a right draw: it is rescued with signal; the same key gives the
  same batch."""
  config = testing.ungraded(aero_config.get_config("tiny"))
  run = train.build(config)
  key = jax.random.fold_in(run.state.key, 0)
  batch, m, _ = tiny_step(run, key, testing.with_verifiers(
      run.rollout_fn.keywords["pipeline"], _never_right))
  assert m["aero/extra_rows"] > 0 and m["rollout/rounds"] > 1
  assert m["aero/rescued_groups"] == 0.0
  pipeline = run.rollout_fn.keywords["pipeline"]
  rare = pipeline._replace(
      verifiers={n: (_rare(n), w) for n, (_, w) in pipeline.verifiers.items()},
      scoring=pipeline.scoring._replace(workers=0))
  g = config.rollout.num_generations
  for seed in range(12):
    batch, m, _ = tiny_step(run, jax.random.PRNGKey(seed), rare)
    if m["aero/rescued_groups"] > 0:
      break
  assert m["aero/rescued_groups"] > 0, m
  adv = np.abs(np.asarray(batch.advantages)).reshape(-1, g).sum(-1)
  assert (adv > 0).mean() >= m["aero/rescued_groups"]
  again, _, _ = tiny_step(run, jax.random.PRNGKey(seed), rare)
  assert same_batch(batch, again)


def _right_when_hinted(prompts, completions, answers):
  del completions, answers
  return [float(HINT in p) for p in prompts]


@pytest.mark.slow
def test_ghpo_folds_only_the_plain_round_into_per_prompt_shapers():
  """A verifier right exactly on hinted prompts: round 0 (plain) is all
  wrong, the hinted rounds all right. HAPO's per-prompt history reads the
  policy's plain sample once per step: no correct length enters it (before,
  the hinted successes did)."""
  config = testing.ungraded(ghpo_config.get_config("tiny"))
  config.rewards.workers = 0
  config.rewards.shapers = {"hapo_length": dict(weight=0.5, capacity=4096)}
  run = train.build(config)
  pipeline = run.rollout_fn.keywords["pipeline"]
  pipeline = pipeline._replace(verifiers={
      n: (_right_when_hinted if n == "accuracy" else fn, w)
      for n, (fn, w) in pipeline.verifiers.items()})
  _, m, states = tiny_step(run, jax.random.fold_in(run.state.key, 0),
                           pipeline)
  assert m["ghpo/hinted_groups"] == 1.0 and m["ghpo/mean_omega"] == 0.25
  assert m["ghpo/still_wrong_groups"] == 0.0
  np.testing.assert_array_equal(
      np.asarray(states["shape"]["hapo_length"].count), 0.0)
