"""Evaluation: greedy accuracy, pass@k and maj@k of a policy on a benchmark.

Benchmarks (`load_benchmark`):

| benchmark         | problems                                                 |
|-------------------|----------------------------------------------------------|
| ``heldout``       | the configured task's held-out split (`data.make_task`)  |
| ``gsm8k``         | GSM8K's test split through tensorflow_datasets           |
| a JSONL file path | a file you bring (MATH-500, AIME, ...): question and     |
|                   | answer fields, `records.QUESTION_KEYS` / `ANSWER_KEYS`   |

Each problem gets one greedy completion and n sampled ones at the sampling
temperature from one sampler call per batch of prompts: of the ``1 + n`` rows
of prompt p, row ``p*(1+n)`` decodes greedily (temperature 0) and the other n
sample (`sampling.sample`'s per-row temperature). Every call of an
evaluation has one shape (all prompts padded to the bucket of the longest,
the last batch filled up with its last prompt), so the sampler compiles once
per problem set; with ``batch_size`` P and ``n = G - 1`` of a training run
it is the rollout's own program.

Figures over P problems, c_p of the n samples of problem p correct:

  greedy_accuracy = mean_p [greedy completion of p correct]
  pass@k          = mean_p 1 - C(n - c_p, k) / C(n, k)
                    (unbiased for n >= k; Chen et al., arXiv 2107.03374)
  maj@k           = mean_p of the mean over the floor(n / k) disjoint blocks
                    of k samples of [the block's majority answer is correct]

maj@k votes over final answers as the verifiers parse and compare them
(`rewards.verifiers.parse_answer`, `same_answer`): the largest class of
equivalent answers wins (ties: the class seen first), completions without a
final answer do not vote, and the vote is correct when the first completion
of the winning class is. Each block of k i.i.d. samples is a draw of maj@k,
so the block mean is unbiased for it too.

A multi-part problem (the segments task, SD-GRPO's) is judged as its
``all_segments`` reward judges it: correct when its s-th ``\\boxed{}``
equals the s-th sub-answer for every part; its answer, for the vote, is the
tuple of its boxes (`Segmented`). A whole-text parse would read the three
boxes of "11; 5; 0" as the set {0, 5, 11} and the reference as 0. A
reasoning_gym problem is judged by its generator's scorer (correct at a
score of 1; `rewards.gym_scoring`), its answer the last box's text.
"""

import math
import operator
import os
import time
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import jax
import numpy as np

from grpo_jax import data as data_lib
from grpo_jax import models
from grpo_jax.data import gym, records
from grpo_jax import rollout
from grpo_jax import sampling as sampling_lib
from grpo_jax.runtime import sharding
from grpo_jax.rewards import gym_scoring, verifiers

# ------------------------------------------------------------ the figures


def pass_at_k(num_samples, num_correct, k: int) -> np.ndarray:
  """Unbiased pass@k of problems with `num_correct` of `num_samples` correct.

  ``1 - C(n - c, k) / C(n, k)``, the probability that k of the n samples
  drawn without replacement hold a correct one (Chen et al., arXiv
  2107.03374), computed with exact integer binomials.

  Args:
    num_samples: n, samples per problem (>= k); an int or an array.
    num_correct: c, correct samples per problem, 0 <= c <= n; broadcasts
      against `num_samples`.
    k: the budget, >= 1.

  Returns:
    float64 array of the broadcast shape.
  """
  n, c = np.broadcast_arrays(np.asarray(num_samples), np.asarray(num_correct))
  if int(k) != k or k < 1:
    raise ValueError(f"k must be an integer >= 1; got {k!r}.")
  if (n < k).any():
    raise ValueError(f"num_samples must be >= k={k}; got {n.min()}.")
  if (c < 0).any() or (c > n).any():
    raise ValueError("num_correct must be in [0, num_samples]; got "
                     f"{c.ravel().tolist()} of {n.ravel().tolist()}.")
  k = int(k)
  out = [1.0 - math.comb(int(ni) - int(ci), k) / math.comb(int(ni), k)
         for ni, ci in zip(n.ravel(), c.ravel())]
  return np.asarray(out, np.float64).reshape(n.shape)


def majority_vote(answers: Sequence, *,
                  same: Callable = operator.eq) -> Optional[int]:
  """Index of the majority answer among `answers`, or None if none voted.

  Answers fall into classes by `same` (compared with each class's first
  member); None is no answer and does not vote. The largest class wins,
  ties going to the class whose first member comes first; the result is
  the index of the winning class's first member.

  Args:
    answers: k answers (parsed, e.g. `verifiers.parse_answer`; None = none).
    same: the equivalence, e.g. `verifiers.same_answer`.
  """
  classes = []  # [index of the first member, size]
  for i, answer in enumerate(answers):
    if answer is None:
      continue
    for entry in classes:
      if same(answers[entry[0]], answer):
        entry[1] += 1
        break
    else:
      classes.append([i, 1])
  if not classes:
    return None
  # max keeps the first of equal sizes: ties go to the earlier class.
  return max(classes, key=lambda entry: entry[1])[0]


def majority_correct(correct, answers: Sequence[Sequence], k: int, *,
                     same: Callable = operator.eq) -> np.ndarray:
  """[P] maj@k per problem: the mean over the floor(n / k) disjoint blocks
  of k samples of whether the block's majority answer (`majority_vote`) is
  correct (0 for a block without any answer).

  Args:
    correct: [P, n] bool, each sample's correctness.
    answers: P sequences of n answers (None = no final answer).
    k: samples per vote, 1 <= k <= n.
    same: the answers' equivalence.
  """
  correct = np.asarray(correct, bool)
  if correct.ndim != 2:
    raise ValueError(f"correct must be [P, n]; got shape {correct.shape}.")
  p, n = correct.shape
  if len(answers) != p or any(len(a) != n for a in answers):
    raise ValueError(f"answers must be {p} sequences of {n} answers, like "
                     "correct.")
  if not 1 <= k <= n:
    raise ValueError(f"k must be in [1, n={n}]; got {k!r}.")
  out = np.zeros(p, np.float64)
  blocks = n // k
  for row in range(p):
    for b in range(blocks):
      winner = majority_vote(answers[row][b * k:(b + 1) * k], same=same)
      if winner is not None:
        out[row] += correct[row, b * k + winner]
  return out / blocks


def check_k(k: Sequence[int], num_samples: int) -> Tuple[int, ...]:
  """The sorted distinct k's; ValueError unless 1 <= k <= num_samples."""
  ks = tuple(sorted({int(x) for x in k}))
  if num_samples < 0:
    raise ValueError(f"num_samples must be >= 0; got {num_samples!r}.")
  for value in ks:
    if value < 1:
      raise ValueError(f"k={value} is below 1; give k >= 1.")
    if value > num_samples:
      raise ValueError(
          f"k={value} exceeds num_samples={num_samples}: pass@k and maj@k "
          f"need n >= k samples per problem; set num_samples >= {value} or "
          "lower k.")
  return ks


class Segmented(NamedTuple):
  """A multi-part reference or answer: one parsed answer per part."""
  parts: tuple


def same_answer(first, second) -> bool:
  """`verifiers.same_answer`, part by part for `Segmented` answers; the
  same text for reasoning_gym's (`parse_completion`)."""
  if isinstance(first, str):
    return first == second
  if isinstance(first, Segmented):
    return len(first.parts) == len(second.parts) and all(
        verifiers.same_answer(a, b) for a, b in zip(first.parts, second.parts))
  return verifiers.same_answer(first, second)


class Scores(NamedTuple):
  """Correctness and parsed answers of an evaluation's completions."""
  greedy: np.ndarray  # [P] bool
  correct: np.ndarray  # [P, n] bool, the sampled completions
  answers: list  # P lists of n parsed answers (None: no final answer)
  # [P] float, the share of each problem's parts the greedy completion got
  # right; None unless the references are `Segmented`.
  greedy_parts: Optional[np.ndarray] = None


def summarize(scores: Scores, k: Sequence[int], *,
              same: Callable = same_answer) -> dict:
  """greedy_accuracy, and pass@k and maj@k for each k (module docstring)."""
  correct = np.asarray(scores.correct, bool)
  ks = check_k(k, correct.shape[1])
  figures = {"greedy_accuracy": float(np.mean(scores.greedy))}
  if scores.greedy_parts is not None:
    figures["greedy_part_accuracy"] = float(np.mean(scores.greedy_parts))
  for value in ks:
    figures[f"pass@{value}"] = float(pass_at_k(
        correct.shape[1], correct.sum(axis=1), value).mean())
    figures[f"maj@{value}"] = float(majority_correct(
        correct, scores.answers, value, same=same).mean())
  return figures


# ------------------------------------------------------------ the problems


def _heldout(config, num_problems: int, **unused) -> list:
  """The config task's first held-out problems (0: data.heldout_size)."""
  del unused
  try:
    return data_lib.make_task(config.data, seed=config.seed).heldout(
        num_problems or config.data.heldout_size)
  except ValueError as error:
    raise ValueError(f"held-out split of data.task={config.data.task!r}: "
                     f"{error}") from error


def _gsm8k(config, num_problems: int, *, data_dir=None, **unused) -> list:
  """GSM8K's test split (tensorflow_datasets; prepared data only, never
  downloaded: `data.gsm8k_source` says what is missing)."""
  del config, num_problems, unused
  try:
    return data_lib.gsm8k("test", data_dir=data_dir)
  except ValueError as error:
    raise ValueError(f"benchmark 'gsm8k': {error}") from error


def _jsonl(path: str, *, question_key: str = "", answer_key: str = "") -> list:
  """A JSONL file's problems (`data.jsonl` with the benchmark field names)."""
  if not os.path.isfile(path):
    raise ValueError(
        f"benchmark {path!r} is not {' or '.join(map(repr, BENCHMARKS))} "
        "and no such file exists; give one of those or the path to a JSONL "
        "file.")
  # A benchmark's problems key no per-prompt state: numbered by their
  # order, whatever id fields they carry ("2024-I-1").
  return data_lib.jsonl(
      path, question_key=question_key or records.QUESTION_KEYS,
      answer_key=answer_key or records.ANSWER_KEYS, id_key=None)


# name -> ``fn(config, num_problems, **options) -> examples``; any other
# benchmark is a JSONL path.
BENCHMARKS = {"heldout": _heldout, "gsm8k": _gsm8k}


def load_benchmark(benchmark: str, config, *, num_problems: int = 0,
                   question_key: str = "", answer_key: str = "",
                   data_dir: Optional[str] = None) -> List[data_lib.Example]:
  """The problems of `benchmark`: "heldout", "gsm8k" or a JSONL file path.

  Args:
    benchmark: "heldout" (the config's task, `data.make_task(config.data)`),
      "gsm8k" (GSM8K's test split, tensorflow_datasets) or a JSONL path.
    config: the config whose ``data`` block "heldout" reads.
    num_problems: the first this many problems; 0 = ``data.heldout_size``
      for "heldout", every problem otherwise.
    question_key, answer_key: a JSONL file's field names; "" tries
      `records.QUESTION_KEYS` / `records.ANSWER_KEYS` (question/problem,
      answer/solution), case-insensitively.
    data_dir: tensorflow_datasets' data directory for "gsm8k".

  Returns:
    The examples. Raises ValueError naming the problem (a missing file,
    a missing field, too few problems) before any model is loaded.
  """
  if num_problems < 0:
    raise ValueError(f"num_problems must be >= 0; got {num_problems!r}.")
  if benchmark in BENCHMARKS:
    examples = BENCHMARKS[benchmark](config, num_problems, data_dir=data_dir)
  else:
    examples = _jsonl(benchmark, question_key=question_key,
                      answer_key=answer_key)
  if num_problems > len(examples):
    raise ValueError(
        f"num_problems={num_problems} but benchmark {benchmark!r} holds "
        f"{len(examples)} problems; lower num_problems (0 = all).")
  return examples[:num_problems or None]


def prompt_shapers(config) -> dict:
  """The config's shapers whose prompts must say something (LCPO's target
  length, `rewards.shapers.Shaper.instruction`), name -> options: what
  makes an evaluation prompt read like a training prompt."""
  from grpo_jax.rewards import shapers as shapers_lib  # pylint: disable=g-import-not-at-top
  return {name: dict(options)
          for name, options in config.rewards.get("shapers", {}).items()
          if shapers_lib.SHAPERS.entry(name).meta.instruction}


def as_prompted(config, examples: Sequence[data_lib.Example]) -> list:
  """`examples` as training prompts them: each shaper's instruction
  (`prompt_shapers`; LCPO's "Think for N tokens.", N from the example's
  id) appended to the question, as `rollout.sample_round` does."""
  from grpo_jax.rewards import shaping  # pylint: disable=g-import-not-at-top
  shapers = prompt_shapers(config)
  if not shapers:
    return list(examples)
  stage = shaping.make_shape_stage(shapers)
  return shaping.with_instructions(list(examples), stage.shapers)


def is_segmented(config) -> bool:
  """Whether the config's task poses multi-part problems (it has segment
  slots, as the rollout reads them: `rollout.fields`)."""
  task = data_lib.make_task(config.data, seed=config.seed)
  return getattr(task, "max_segments", 0) > 0


def parse_references(examples: Sequence[data_lib.Example], *,
                     source: str, segmented: bool = False) -> list:
  """The parsed reference answer of every example
  (`verifiers.parse_reference`), with `segmented` a `Segmented` of its
  sub-answers (`verifiers.reference_segments`); ValueError naming
  `source`, the problem and its answer for one without a parsable answer
  (or sub-answer)."""
  golds = []
  for i, example in enumerate(examples):
    if gym.is_reference(example.answer):  # judged by its generator
      gold = gym_scoring.Reference(example.answer)
    elif segmented:
      gold = Segmented(tuple(
          verifiers.parse_reference(part)
          for part in verifiers.reference_segments(example.answer)))
      gold = gold if all(gold.parts) else None
    else:
      gold = verifiers.parse_reference(example.answer)
    if not gold:
      raise ValueError(
          f"{source}: problem {i} ({example.question[:60]!r}) has the "
          f"reference answer {example.answer!r}, which holds no parsable "
          "answer; fix its answer field (or choose another with answer_key).")
    golds.append(gold)
  return golds


# -------------------------------------------------------------- sampling


class Sampling(NamedTuple):
  """How an evaluation samples (`from_rollout`: a config's rollout's)."""
  max_new_tokens: int
  temperature: float  # of the n sampled rows; the greedy row uses 0
  top_k: int  # 0 = off
  top_p: float  # 1 = off
  buckets: Tuple[int, ...]
  system_prompt: str
  batch_size: int  # prompts per sampler call

  @classmethod
  def from_rollout(cls, config, *, batch_size: int) -> "Sampling":
    r = config.rollout
    return cls(max_new_tokens=r.max_new_tokens, temperature=r.temperature,
               top_k=r.top_k, top_p=r.top_p,
               buckets=tuple(config.data.prompt_buckets),
               system_prompt=config.data.system_prompt, batch_size=batch_size)


def complete(params, model_config, tokenizer, examples, key, *,
             num_samples: int, sampling: Sampling):
  """One greedy and `num_samples` sampled completions per example.

  One sampler call per `sampling.batch_size` prompts, all of one shape
  (module docstring); call ``i`` samples with ``fold_in(key, i)``.

  Returns:
    (greedy texts [P], P lists of `num_samples` sampled texts).
  """
  if sampling.batch_size < 1:
    raise ValueError(
        f"batch_size must be >= 1; got {sampling.batch_size!r}.")
  eos_ids, pad_id = models.eos_and_pad(tokenizer)
  ids = rollout.encode_prompts(tokenizer, examples,
                               format_prompt=data_lib.format_prompt,
                               system_prompt=sampling.system_prompt)
  # One bucket for every call: the longest prompt's.
  tokens, mask = sampling_lib.pad_prompts(ids, buckets=sampling.buckets,
                                          pad_id=pad_id)
  total, rows = len(examples), 1 + num_samples
  batch = min(sampling.batch_size, total)
  temperature = np.tile(np.asarray(
      [0.0] + [sampling.temperature] * num_samples, np.float32), batch)
  greedy, sampled = [], []
  for call, start in enumerate(range(0, total, batch)):
    picked = np.minimum(np.arange(start, start + batch), total - 1)
    out = sharding.to_host(sampling_lib.sample(
        params, model_config, tokens[picked], mask[picked],
        jax.random.fold_in(key, call), num_samples=rows,
        max_new_tokens=sampling.max_new_tokens, temperature=temperature,
        top_k=sampling.top_k or None,
        top_p=sampling.top_p if sampling.top_p < 1.0 else None,
        # Greedy only: no random draw compiled (the rollout's program has
        # one, but differs in its row count anyway).
        greedy=num_samples == 0, eos_ids=tuple(eos_ids), pad_id=pad_id))
    kept = min(batch, total - start) * rows
    texts = rollout.decode_completions(tokenizer, out.tokens[:kept],
                                       out.lengths[:kept])
    for first in range(0, kept, rows):
      greedy.append(texts[first])
      sampled.append(texts[first + 1:first + rows])
  return greedy, sampled


def parse_completion(text: str, gold):
  """A completion's parsed final answer (`verifiers.parse_answer`), or for
  a `Segmented` reference the `Segmented` of its boxes, each parsed as the
  ``all_segments`` reward parses it; empty when it gives none. For a
  reasoning_gym `Reference`, the last box's text ("" when none)."""
  if isinstance(gold, gym_scoring.Reference):
    return gym_scoring.final_answer(text) or ""
  if not isinstance(gold, Segmented):
    return verifiers.parse_answer(text)
  boxes = verifiers.boxed_answers(text)
  return Segmented(tuple(verifiers.parse_answer(f"\\boxed{{{content}}}")
                         for _, content in boxes)) if boxes else []


def is_correct(answer, gold) -> bool:
  """Whether a `parse_completion` answer equals its reference: every part
  of a `Segmented` one in order (a missing box is wrong, extra boxes do not
  count), as ``all_segments`` rewards it; a reasoning_gym `Reference`
  when its generator scores the answer 1."""
  if isinstance(gold, gym_scoring.Reference):
    return bool(answer) and gym_scoring.score_answer(answer, gold.text) == 1
  if not isinstance(gold, Segmented):
    return verifiers.matches_reference(answer, gold)
  return bool(answer) and len(answer.parts) >= len(gold.parts) and all(
      verifiers.matches_reference(a, g)
      for a, g in zip(answer.parts, gold.parts))


def parts_right(answer, gold: Segmented) -> float:
  """The share of `gold`'s parts that the `parse_completion` answer gets
  right in order (the mean of the segment rewards, as the
  ``segment_fraction`` reward gives it)."""
  given = answer.parts if answer else ()
  return sum(verifiers.matches_reference(a, g)
             for a, g in zip(given, gold.parts)) / len(gold.parts)


def score(golds: Sequence, greedy_texts: Sequence[str],
          sampled_texts: Sequence[Sequence[str]]) -> Scores:
  """Correctness of every completion against its parsed reference
  (`parse_references`), each completion parsed once (`parse_completion`)."""
  if not len(golds) == len(greedy_texts) == len(sampled_texts):
    raise ValueError(
        f"golds, greedy_texts and sampled_texts need one entry per problem; "
        f"got {len(golds)}, {len(greedy_texts)} and {len(sampled_texts)}.")
  judge = is_correct
  greedy, correct, answers, parts = [], [], [], []
  for gold, text, texts in zip(golds, greedy_texts, sampled_texts):
    answer = parse_completion(text, gold)
    greedy.append(judge(answer, gold))
    if isinstance(gold, Segmented):
      parts.append(parts_right(answer, gold))
    parsed = [parse_completion(t, gold) for t in texts]
    correct.append([judge(a, gold) for a in parsed])
    answers.append([a or None for a in parsed])
  n = len(sampled_texts[0]) if sampled_texts else 0
  segmented = bool(golds) and len(parts) == len(golds)
  return Scores(np.asarray(greedy, bool),
                np.asarray(correct, bool).reshape(len(golds), n), answers,
                np.asarray(parts, np.float64) if segmented else None)


def evaluate_examples(params, model_config, tokenizer, examples, key, *,
                      num_samples: int, k: Sequence[int], sampling: Sampling,
                      golds: Optional[list] = None,
                      source: str = "examples") -> dict:
  """`summarize` of `complete`'s completions of `examples`, scored."""
  k = check_k(k, num_samples)
  if golds is None:
    golds = parse_references(examples, source=source)
  greedy, sampled = complete(params, model_config, tokenizer, examples, key,
                             num_samples=num_samples, sampling=sampling)
  return summarize(score(golds, greedy, sampled), k)


# ------------------------------------------------------- entry points


def auto_k(k: Sequence[int], num_samples: int) -> Tuple[int, ...]:
  """A config's ``eval.k``: () means (1, num_samples), or none when greedy
  only (num_samples 0)."""
  if k:
    return tuple(k)
  return tuple(sorted({1, num_samples})) if num_samples else ()


def evaluate(config, *, load_policy: Callable, benchmark: str = "heldout",
             num_problems: int = 0,
             num_samples: int = 0, k: Sequence[int] = (1, 4), seed: int = 0,
             batch_size: int = 0, question_key: str = "",
             answer_key: str = "", data_dir: Optional[str] = None) -> dict:
  """Greedy accuracy, pass@k and maj@k of a policy on `benchmark`.

  Every input is checked (k against num_samples, the benchmark's file,
  fields and reference answers) before the model is loaded. Prompts read
  as in training (`as_prompted`: LCPO's target length appended).

  Args:
    config: a training config (model, data, rollout lengths and
      temperature, ``eval.batch_size``).
    benchmark: "heldout", "gsm8k" or a JSONL path (`load_benchmark`).
    load_policy: ``() -> (model_config, params, tokenizer, step)``,
      called once the inputs are checked: a base model or a run's latest
      checkpoint (`train.saved_runs.policy_to_evaluate`).
    num_problems: the first this many problems (0: see `load_benchmark`).
    num_samples: n sampled completions per problem; 0 = max(k).
    k: the budgets of pass@k and maj@k, each <= n; () = greedy only.
    seed: sampling seed.
    batch_size: prompts per sampler call; 0 = ``config.eval.batch_size``.
    question_key, answer_key, data_dir: see `load_benchmark`.

  Returns:
    dict of greedy_accuracy, pass@k and maj@k for each k, benchmark,
    num_problems, num_samples, k, temperature, step, time_s.
  """
  num_samples = num_samples or max(k, default=0)
  ks = check_k(k, num_samples)
  batch_size = batch_size or config.eval.batch_size
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1; got {batch_size!r}.")
  examples = as_prompted(config, load_benchmark(
      benchmark, config, num_problems=num_problems, question_key=question_key,
      answer_key=answer_key, data_dir=data_dir))
  golds = parse_references(
      examples, source=f"benchmark {benchmark!r}",
      segmented=benchmark == "heldout" and is_segmented(config))
  model_config, params, tokenizer, step = load_policy()
  start = time.perf_counter()
  sampling = Sampling.from_rollout(config, batch_size=batch_size)
  figures = evaluate_examples(
      params, model_config, tokenizer, examples, jax.random.PRNGKey(seed),
      num_samples=num_samples, k=ks, sampling=sampling, golds=golds)
  figures.update(benchmark=benchmark, num_problems=len(examples),
                 num_samples=int(num_samples), k=list(ks),
                 temperature=float(sampling.temperature), step=step,
                 time_s=time.perf_counter() - start)
  return figures


def from_config(config, model_config, tokenizer) -> Optional[Callable]:
  """The periodic held-out evaluation of a training run, or None when
  ``eval.every`` is 0.

  Returns ``evaluate(params) -> dict`` of `summarize`'s figures on the
  first ``eval.num_problems`` held-out problems, with ``eval.num_samples``
  samples each at the rollout's temperature, top-k and top-p, in calls of
  ``eval.batch_size`` prompts. Every call uses the same key (the
  evaluations of a run differ only by their params) and one shape, so the
  sampler compiles once for all of them (module docstring). Reads the
  config now, never later.
  """
  e = config.eval
  if not e.every:
    return None
  try:
    examples = data_lib.make_task(config.data, seed=config.seed).heldout(
        e.num_problems)
  except ValueError as error:
    raise ValueError(
        f"config.eval.num_problems: {e.num_problems} held-out problems of "
        f"data.task={config.data.task!r} are not available ({error}); lower "
        "--config.eval.num_problems.") from error
  examples = as_prompted(config, examples)  # LCPO's target, as in training
  golds = parse_references(examples, source="config.eval (held-out split)",
                           segmented=is_segmented(config))
  ks = check_k(auto_k(e.k, e.num_samples), e.num_samples)
  sampling = Sampling.from_rollout(config, batch_size=e.batch_size)
  num_samples = int(e.num_samples)
  # Not a step's key (those are fold_in(PRNGKey(seed), step)).
  key = jax.random.split(jax.random.PRNGKey(config.seed))[1]

  def evaluate_params(params) -> dict:
    return evaluate_examples(params, model_config, tokenizer, examples, key,
                             num_samples=num_samples, k=ks,
                             sampling=sampling, golds=golds)
  return evaluate_params
