"""SPO's KL-adaptive rho, its response memory (`revisits`) and prioritised
prompt draw; EDGE-GRPO's guided error correction (`inject_reference`,
`guided_correction`, the reference rows); their state through a
checkpoint; and one real `:tiny` step of each config showing the
mechanism. Expected values are worked by hand (VARIANTS.md 1.4, 1.11)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import edge_grpo as edge_config
from configs import spo as spo_config
from grpo_jax import advantages
from grpo_jax.data import arithmetic
from grpo_jax.train import batch as batch_lib
from grpo_jax.runtime import checkpoint
from grpo_jax import data
from grpo_jax import objectives
from grpo_jax.train import optim
from grpo_jax.rollout import references
from grpo_jax.rollout import revisits
from grpo_jax import rollout
from grpo_jax import strategies
from grpo_jax import testing
from grpo_jax import train
from grpo_jax.advantages import trackers
from grpo_jax.strategies import groups as group_strategies
from grpo_jax.strategies import select


def close(actual, expected, *, atol=1e-6):
  np.testing.assert_allclose(np.asarray(actual, np.float64),
                             np.asarray(expected, np.float64), atol=atol,
                             rtol=1e-6)


# VARIANTS.md 1.4.
SPEC_ALPHA = [4.0, 1.0, 2.0, 0.5]
SPEC_BETA = [4.0, 3.0, 2.0, 0.5]
SPEC_R = [[1.0], [0.0], [1.0], [0.0]]


def spec_state():
  return trackers.SPOState(alpha=jnp.asarray(SPEC_ALPHA),
                           beta=jnp.asarray(SPEC_BETA))


# ----------------------------------------------------- KL-adaptive rho


def test_kl_adaptive_spo_forgets_by_the_divergence_spec_vector():
  """D = [0, .06, .12, .01]: rho = clip(2^(-D/.06), .875, .96) =
  [.96 (2^0 = 1 clipped), .875 (1/2 clipped), .875 (1/4 clipped),
  2^(-1/6) = .890899]; alpha' = rho alpha + R, beta' = rho beta + 1 - R.
  The constant rule would decay every slot by .875 instead."""
  adv, state = trackers.spo(
      jnp.asarray(SPEC_R), spec_state(), rho="kl_adaptive",
      prompt_index=jnp.arange(4),
      divergence=jnp.asarray([0.0, 0.06, 0.12, 0.01]))
  close(state.alpha, [4.84, 0.875, 2.75, 0.445449])
  close(state.beta, [3.84, 3.625, 1.75, 1.445449])
  # The advantages do not depend on rho (the baseline is the old tracker).
  close(adv[:, 0], [0.848875, -0.606339, 0.848875, -1.091410])
  _, constant = trackers.spo(jnp.asarray(SPEC_R), spec_state(),
                             prompt_index=jnp.arange(4))
  close(constant.alpha, [4.5, 0.875, 2.75, 0.4375])


def test_kl_adaptive_spo_reads_the_divergence_only_when_it_needs_it():
  assert "divergence" in advantages.make("spo", rho="kl_adaptive").reads
  assert "divergence" not in advantages.make("spo").reads
  estimator = advantages.make("spo", rho="kl_adaptive", capacity=4)
  groups = advantages.GroupData(
      rewards=jnp.zeros((2, 1, 1)), weights=jnp.ones(1),
      valid=jnp.ones(2, bool), lengths=jnp.ones((2, 1), jnp.int32),
      prompt_index=jnp.arange(2))
  with pytest.raises(ValueError, match=r"reads GroupData\.divergence"):
    estimator.estimate(estimator.init(), groups)
  with pytest.raises(ValueError, match="divergence must be"):
    trackers.spo(jnp.zeros((2, 1)), trackers.spo_init(capacity=2),
                 rho="kl_adaptive", prompt_index=jnp.arange(2),
                 divergence=jnp.zeros(3))


@pytest.mark.parametrize("options,match", [
    ({"rho_min": 0.97}, r"rho_min=0.97.*rho_max=0.96"),
    ({"rho_min": 0.0}, r"rho_min=0.0"),
    ({"d_half": 0.0}, r"d_half=0.0"),
])
def test_kl_adaptive_options_are_checked(options, match):
  with pytest.raises(ValueError, match=match):
    advantages.make("spo", rho="kl_adaptive", **options).estimate(
        trackers.spo_init(capacity=2), advantages.GroupData(
            rewards=jnp.zeros((2, 1, 1)), weights=jnp.ones(1),
            valid=jnp.ones(2, bool), lengths=jnp.ones((2, 1), jnp.int32),
            prompt_index=jnp.arange(2), divergence=jnp.zeros(2)))


# ------------------------------------------------------ response memory


def test_memory_stores_looks_up_and_measures_by_hand():
  memory = revisits.init(capacity=3, num_tokens=3)
  memory = revisits.store(
      memory, jnp.asarray([2, 0, 2, -1]),
      tokens=jnp.asarray([[5, 6, 7], [1, 1, 1], [9, 9, 9], [4, 4, 4]]),
      mask=jnp.asarray([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1]]),
      logp=jnp.asarray([[-1.0, -2.0, -3.0], [-0.5, -0.5, -0.5],
                        [-7.0, -7.0, -7.0], [-4.0, -4.0, -4.0]]),
      write=jnp.asarray([True, True, True, True]))
  # Slot 2 keeps its first response (the duplicate is dropped), past its
  # mask stored as 0; slot 1 is empty; index -1 is not written.
  np.testing.assert_array_equal(memory.tokens,
                                [[1, 0, 0], [0, 0, 0], [5, 6, 0]])
  close(memory.logp, [[-0.5, 0, 0], [0, 0, 0], [-1.0, -2.0, 0]])
  got = revisits.lookup(memory, jnp.asarray([2, 1, 7]))
  close(got.mask, [[1, 1, 0], [0, 0, 0], [0, 0, 0]])
  # D = (|-1 - -1.5| + |-2 - -1|) / 2 = 0.75; 0 for the empty rows.
  close(revisits.divergence(got.logp, jnp.asarray([[-1.5, -1.0, -9.0]] * 3),
                            got.mask), [0.75, 0.0, 0.0])
  # write False leaves a slot alone.
  kept = revisits.store(memory, jnp.asarray([0]), jnp.ones((1, 3), jnp.int32),
                        jnp.ones((1, 3)), jnp.zeros((1, 3)),
                        jnp.asarray([False]))
  testing.assert_close(kept, memory, rtol=0, atol=0)


def test_revisit_scores_old_and_new_responses_in_one_pass():
  """A fake policy whose log-prob of token k is -k/10: the stored response
  [3, 1] of slot 0 was stored with log-probs [-0.2, -0.2]; now it scores
  [-0.3, -0.1], so D = (0.1 + 0.1) / 2 = 0.1; slot 1 is a first visit."""
  memory = revisits.store(
      revisits.init(capacity=2, num_tokens=2), jnp.asarray([0]),
      jnp.asarray([[3, 1]]), jnp.ones((1, 2)), jnp.full((1, 2), -0.2),
      jnp.asarray([True]))
  calls = []

  def score(tokens, input_mask, start):
    calls.append((tokens.shape, start))
    return -np.asarray(tokens[:, start:], np.float32) / 10.0

  gap, memory, measures = revisits.revisit(
      memory, np.asarray([0, 1]), np.asarray([True, True]),
      prompt_tokens=np.asarray([[7, 7, 7], [8, 8, 8]]),
      prompt_mask=np.ones((2, 3)), tokens=np.asarray([[2, 2], [5, 0]]),
      mask=np.asarray([[1.0, 1.0], [1.0, 0.0]]), score=score)
  close(gap, [0.1, 0.0])
  assert calls == [((4, 5), 3)]  # stored and new rows of both prompts
  close(memory.logp, [[-0.2, -0.2], [-0.5, 0.0]])
  np.testing.assert_array_equal(memory.tokens, [[2, 2], [5, 0]])
  # Prompt 0 had a stored response (D 0.1), prompt 1 none (D 0).
  assert measures == {"revisits/divergence_mean": pytest.approx(0.05),
                      "revisits/revisited_share": 0.5}


# ----------------------------------------------------- prioritised draw


def test_priorities_are_the_spec_vector():
  close(select.beta_priorities(spec_state()), [0.55, 0.483013, 0.55, 0.55])
  close(select.beta_priorities(spec_state(), floor=0.1),
        [0.6, 0.533013, 0.6, 0.6])


def test_the_registered_selection_draws_by_the_tracker():
  """Problems 0 and 2 solved (p ~ 1: weight 0.05), 1 and 3 uncertain
  (0.55): over 2000 rounds of one prompt, shares 0.05 / 1.2 and 0.55 /
  1.2, and the same (step, round, tracker) draws the same prompts."""
  task = data.ListDataset([data.Example(f"q{i}", str(i)) for i in range(4)],
                          seed=5)
  tracker = trackers.SPOState(alpha=jnp.asarray([1e6, 1.0, 1e6, 1.0]),
                              beta=jnp.asarray([1e-6, 1.0, 1e-6, 1.0]))
  selection = strategies.make_selection("prioritized", rounds_per_step=2)
  assert selection.reads == ("advantage",)
  first = [selection.select(task, s, 0, 1, advantage=tracker)[0].index
           for s in range(2000)]
  close(np.bincount(first, minlength=4) / 2000,
        np.array([0.05, 0.55, 0.05, 0.55]) / 1.2, atol=0.03)
  # Round r of step s reads prompt index s * rounds_per_step + r.
  assert selection.select(task, 3, 1, 3, advantage=tracker) == (
      select.draw_by_priority(task, 7, 3,
                              [0.05, 0.55, 0.05, 0.55]))
  with pytest.raises(ValueError, match="Beta tracker"):
    selection.select(task, 0, 0, 1, advantage=())
  with pytest.raises(ValueError, match="floor=0"):
    strategies.make_selection("prioritized", floor=0.0).select(
        task, 0, 0, 1, advantage=tracker)


def test_prioritized_needs_a_beta_tracker_and_indexed_problems():
  config = spo_config.get_config()
  config.advantage.name, config.advantage.kwargs = "grpo", {}
  config.rewards.functions, config.rewards.weights = ("accuracy",), (1.0,)
  with pytest.raises(ValueError, match=r"config.select.name: 'prioritized'"
                     r".*'grpo'.*advantage.name=spo"):
    train.validate(config)
  config = spo_config.get_config()  # some of the 100 one-digit sums train
  config.rollout.num_prompts = 101
  with pytest.raises(ValueError, match=r"config.rollout.num_prompts: 101 "
                     r"exceeds the \d+ training problems"):
    train.validate(config)
  for floor in (0.0, -1.0, float("nan")):
    config = spo_config.get_config()
    config.select.kwargs.floor = floor
    with pytest.raises(ValueError, match=r"config\.select\.kwargs\.floor: floor"):
      train.validate(config)


# ------------------------------------------------ guided error correction


def toy_round(rewards, *, t=3):
  """A `rollout.Round` of [P, G] accuracy rewards, row (p, g) all tokens
  10 p + g."""
  rewards = np.asarray(rewards, np.float32)
  p, g = rewards.shape
  ids = (10 * np.arange(p)[:, None] + np.arange(g)[None, :])
  return rollout.Round(
      prompt_ids=[[1]] * p, tokens=np.repeat(ids[..., None], t, -1),
      mask=np.ones((p, g, t), np.float32), lengths=np.full((p, g), t),
      truncated=np.zeros((p, g), bool),
      sampler_logp=np.full((p, g, t), -1.0, np.float32),
      rewards=rewards[..., None], columns=("accuracy",),
      errors=np.asarray([0]), entropies=np.ones((p, g), np.float32),
      prompt_index=np.arange(p, dtype=np.int32))


def toy_references(p, *, correct=1.0, t=3):
  return group_strategies.References(
      tokens=np.full((p, t), 99, np.int32),
      mask=np.asarray([[1.0, 1.0, 0.0]] * p, np.float32),
      lengths=np.full((p,), 2, np.int32), truncated=np.zeros(p, bool),
      logp=np.full((p, t), -3.0, np.float32),
      token_entropies=np.full((p, t), 0.5, np.float32),
      entropies=np.full((p,), 0.5, np.float32),
      rewards=np.full((p, 1), correct, np.float32), errors=np.asarray([2]))


def test_inject_reference_replaces_the_last_member_by_hand():
  rnd = toy_round([[0, 0, 0], [0, 1, 0]])
  out = group_strategies.inject_reference(rnd, toy_references(2),
                                          np.asarray([True, False]))
  np.testing.assert_array_equal(out.injected, [[0, 0, 1], [0, 0, 0]])
  np.testing.assert_array_equal(out.tokens[0, 2], [99, 99, 99])
  np.testing.assert_array_equal(out.tokens[1], rnd.tokens[1])
  np.testing.assert_array_equal(out.mask[0, 2], [1, 1, 0])
  np.testing.assert_array_equal(out.rewards[..., 0], [[0, 0, 1], [0, 1, 0]])
  np.testing.assert_array_equal(out.sampler_logp[0, 2], [-3, -3, -3])
  np.testing.assert_array_equal(out.sampler_logp[0, 1], [-1, -1, -1])
  assert out.lengths[0, 2] == 2 and out.entropies[0, 2] == 0.5
  assert out.errors.tolist() == [2]
  assert out.sampled is rnd  # the plain sample, for the measurements
  np.testing.assert_array_equal(rnd.rewards[0, :, 0], [0, 0, 0])  # untouched


def test_guided_correction_corrects_all_wrong_groups_only():
  """Group 0 is all wrong and is corrected; group 1 has a right member and
  is left alone; then GRPO's z of [0, 0, 0, 1] (mean 1/4, std 1/2, ddof 1)
  is [-1/2, -1/2, -1/2, 3/2] where the plain group gave 0."""
  rnd = toy_round([[0, 0, 0, 0], [0, 1, 0, 0]])
  strategy = strategies.make_group_strategy("guided_correction")
  assert strategy.reads == ("reference",)
  asked = []
  reference = lambda r: asked.append(r) or toy_references(2)
  selected, _ = strategy.apply((), lambda r: rnd, 2, reference=reference)
  corrected = selected.rounds[0]
  np.testing.assert_array_equal(corrected.injected[:, -1], [True, False])
  adv = advantages.grpo(jnp.asarray(corrected.rewards[..., 0]), eps=0.0)
  close(adv[0], [-0.5, -0.5, -0.5, 1.5])
  close(advantages.grpo(jnp.asarray(rnd.rewards[..., 0]))[0], [0, 0, 0, 0])
  # No all-wrong group: the references are never built.
  asked.clear()
  fine = toy_round([[1, 0], [0, 1]])
  selected, _ = strategy.apply((), lambda r: fine, 2, reference=reference)
  assert not asked and selected.rounds[0] is fine
  # A reference its verifiers reject (cut off, say) is not injected.
  selected, _ = strategy.apply(
      (), lambda r: rnd, 2, reference=lambda r: toy_references(2, correct=0))
  assert selected.rounds[0] is rnd
  with pytest.raises(ValueError, match="'reference' helper"):
    strategy.apply((), lambda r: rnd, 2)


class CharTokenizer:
  def encode(self, text, add_special_tokens=False):
    del add_special_tokens
    return [ord(ch) for ch in text]


def test_reference_rows_tokenise_score_and_score_logprobs():
  task = arithmetic.ArithmeticTask()
  example = task.example(task.index((3, 5), ("+",)))
  assert references.solution_text(task, example) == "3 + 5 = \\boxed{8}"
  assert references.solution_text(
      None, data.Example("q", "72", solution="work \\boxed{72}")) == (
          "work \\boxed{72}")
  assert references.solution_text(None, data.Example("q", "7")) == (
      "The answer is \\boxed{7}.")
  tokens, mask, lengths, truncated = references.encode_completions(
      CharTokenizer(), ["ab", "abcd"], num_tokens=4, eos_id=0, pad_id=-1)
  np.testing.assert_array_equal(tokens, [[97, 98, 0, -1], [97, 98, 99, 100]])
  np.testing.assert_array_equal(mask, [[1, 1, 1, 0], [1, 1, 1, 1]])
  assert lengths.tolist() == [3, 4] and truncated.tolist() == [False, True]
  rnd = toy_round([[0, 0]], t=20)._replace(prompt_ids=[[5, 6]])
  refs = references.reference_rows(
      rnd, [example], tokenizer=CharTokenizer(), task=task, num_tokens=20,
      eos_id=0, pad_id=0, prompt_buckets=(4,),
      score=lambda ex, tok, n: (np.asarray([[1.0]]), np.asarray([0])),
      logprobs=lambda tok, m, start: (np.full((1, 20), -2.0),
                                      np.full((1, 20), 3.0)),
      num_columns=1)
  assert refs.lengths.tolist() == [18]  # 17 characters and the end id
  close(refs.logp[0, :18], [-2.0] * 18)
  close(refs.logp[0, 18:], [0.0, 0.0])
  close(refs.entropies, [3.0])
  close(refs.rewards, [[1.0]])


def test_gsm8k_solution_drops_annotations_and_boxes_the_answer():
  assert data.gsm8k_solution(
      "She sold 48/2 = <<48/2=24>>24 clips.\n#### 72", "72") == (
          "She sold 48/2 = 24 clips.\nThe answer is \\boxed{72}.")


@pytest.mark.parametrize("change,match", [
    (lambda c: c.rewards.shapers.update(
        {"overlong": dict(weight=1.0, max_length=40, cache_length=10)}),
     r"config.rewards.shapers: reference rows"),
    (lambda c: setattr(c, "advantage", dict(name="seed_grpo", kwargs={})),
     r"config.groups.name: 'guided_correction'.*answer_ids"),
])
def test_guided_correction_config_errors(change, match):
  config = edge_config.get_config()
  change(config)
  with pytest.raises(ValueError, match=match):
    train.validate(config)


# --------------------------------------------------------- checkpoints


def small_state(capacity=3, num_tokens=4):
  optimizer = optim.make_optimizer(learning_rate=1e-3)
  return train.init_state(
      {"w": jnp.ones((2, 3))}, optimizer, seed=0,
      components={"objective": objectives.make("ppo_clip"),
                  "advantage": advantages.make("spo", capacity=capacity,
                                               rho="kl_adaptive"),
                  "revisits": revisits.make(capacity=capacity,
                                            num_tokens=num_tokens)})


def test_a_warm_memory_round_trips_and_other_shapes_are_refused(tmp_path):
  state = small_state()
  warm = revisits.store(state.states["revisits"], jnp.asarray([0, 2]),
                        jnp.asarray([[3, 4, 5, 6], [7, 8, 0, 0]]),
                        jnp.asarray([[1, 1, 1, 1], [1, 1, 0, 0]]),
                        jnp.asarray([[-1.0] * 4, [-2.0] * 4]),
                        jnp.asarray([True, True]))
  state = state._replace(states=dict(state.states, revisits=warm))
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(1, state)
  restored, _ = ckpt.restore(small_state())
  assert isinstance(restored.states["revisits"], revisits.Revisits)
  testing.assert_close(restored.states["revisits"], warm, rtol=0, atol=0)
  with pytest.raises(ValueError, match=r"revisits.*\(3, 4\).*\(3, 6\)"):
    ckpt.restore_newest(small_state(num_tokens=6))
  with pytest.raises(ValueError, match=r"\(3, 4\).*\(5, 4\)|\(3,\).*\(5,\)"):
    ckpt.restore_newest(small_state(capacity=5))
  ckpt.close()


def test_an_spo_run_resumes_exactly_with_memory_and_priorities(tmp_path):
  """configs/spo.py:tiny on a 3-problem task (P = 2, so problems come
  back): crash after step 2, resume; tracker, memory and every metric
  equal the straight run's, and the memory holds the visited problems."""
  config = few_problem_config(tmp_path)
  config.train.num_steps, config.checkpoint.every = 4, 2
  straight, records = testing.check_resume_is_exact(config,
                                                    str(tmp_path / "run"))
  memory = straight.states["revisits"]
  visited = np.asarray(memory.mask).any(-1)
  # Slots are the problems' ids: their records' indices in the file.
  ids = data.make_task(config.data, seed=config.seed).train_indices()
  assert visited.sum() >= 2 and set(np.flatnonzero(visited)) <= set(ids)
  assert max(r["revisits/revisited_share"] for r in records) > 0


# ------------------------------------------------- real :tiny steps


def few_problem_config(tmp_path):
  """configs/spo.py:tiny on a JSONL task of 3 training problems."""
  path = tmp_path / "few.jsonl"
  lines = [{"question": f"What is {i} + 1?", "answer": i + 1}
           for i in range(40)]
  examples = [data.Example(line["question"], str(line["answer"]))
              for line in lines]
  train_part, _ = data.split_heldout(examples, fraction=0.5)
  keep = {e.question for e in train_part[:3]}
  # The three training problems and every held-out one.
  path.write_text("\n".join(
      json.dumps(line) for line in lines
      if line["question"] in keep or data.split_heldout(
          [data.Example(line["question"], "")], fraction=0.5)[1]))
  config = spo_config.get_config("tiny")
  config.data.task, config.data.path = "jsonl", str(path)
  config.data.heldout_fraction = 0.5
  config.metrics.tensorboard = config.metrics.plot = False
  config.eval.every = 0
  return config


def test_spo_tiny_steps_revisit_measure_and_prioritise(tmp_path):
  """Four real steps: from the second on a drawn problem comes back, its
  stored response is rescored, and once the policy has moved the
  divergence is above 0 (so rho leaves 0.96); the tracker's priorities are
  no longer uniform; the step's rows are the drawn problems."""
  config = few_problem_config(tmp_path)
  run = train.build(config)
  state = jax.tree.map(jnp.copy, run.state)
  records = []
  for step in range(4):
    state, m = train.train_step(run, state, step)
    records.append(m)
  assert records[0]["revisits/revisited_share"] == 0.0
  assert max(m["revisits/revisited_share"] for m in records[1:]) > 0
  assert max(m["revisits/divergence_mean"] for m in records) > 0
  weights = select.beta_priorities(state.states["advantage"])
  trained = run.rollout_fn.keywords["pipeline"].task.train_indices()
  assert np.ptp(weights[trained]) > 1e-3  # priority non-uniform
  # Each weight is sqrt(p (1 - p)) + floor of its own tracked counts.
  tracker = state.states["advantage"]
  p = np.asarray(tracker.alpha, np.float64)[trained] / np.asarray(
      tracker.alpha + tracker.beta, np.float64)[trained]
  np.testing.assert_allclose(weights[trained],
                             np.sqrt(p * (1 - p)) + 0.05, rtol=1e-6)


def test_edge_grpo_tiny_step_corrects_all_wrong_groups():
  """Scored by accuracy (`testing.ungraded`), the random tiny model
  answers nothing right, so every group is all wrong: each gets the
  reference as its last row (24 tokens hold it), which then has signal;
  the row's sampler log-probs are the trainer's."""
  config = testing.ungraded(edge_config.get_config("tiny"))
  config.rollout.max_new_tokens = 24
  run = train.build(config)
  state = run.state
  batch, m, _ = testing.rollout_step(run, 0)
  assert m["rollout/corrected_groups"] > 0
  g = config.rollout.num_generations
  adv = np.asarray(batch.advantages).reshape(-1, g)
  corrected = np.abs(adv).sum(-1) > 0
  assert corrected.sum() >= 1 and (adv[corrected, -1] > 0).all()
  completion = batch.tokens[:, -config.rollout.max_new_tokens:]
  start = batch.tokens.shape[1] - config.rollout.max_new_tokens
  rows = np.flatnonzero(np.repeat(corrected, g)
                        & (np.arange(adv.size) % g == g - 1))
  logp = batch_lib.batched_logprobs(
      state.params, run.model_config, batch.tokens[rows],
      batch.input_mask[rows], start, temperature=batch.temperature[rows],
      chunk_size=config.train.chunk_size)
  sampled = batch.input_mask[rows, start:]
  close(np.asarray(batch.sampler_logp[rows]) * sampled,
        np.asarray(logp) * sampled, atol=1e-4)
  pipeline = run.rollout_fn.keywords["pipeline"]
  text = pipeline.tokenizer.decode(list(np.asarray(completion[rows[0]])),
                                   skip_special_tokens=True)
  assert "\\boxed{" in text
