"""One step's batch: sample G completions per prompt, score, advantages, filter.

`from_config` builds a `Rollout` record once: ``init() -> estimator_state``
and ``generate(params, ref_params, step, key, estimator_state) -> (Batch,
measurements, estimator_state)``; the caller carries the state. `generate`
makes a `Batch` of N = P*G rows, prompt major (row ``p*G + g``):

1. prompts: ``task.train(step, P)`` (with dynamic sampling, round r of step s
   reads ``task.train(s * max_rounds + r, P)``), formatted and left-padded to
   a bucket;
2. completions: `sampling.sample` with ``key = fold_in(fold_in(base, step),
   round)`` (the caller folds in the step);
3. rewards [P, G, K]: K reward functions, then one column per reward shaper
   (DAPO's overlong penalty);
4. DAPO dynamic sampling (optional): a group has signal when its signal
   reward (``rollout.signal_reward``, by default the verifier's) varies;
   resample up to ``max_rounds`` times to fill P groups with signal; groups
   still lacking it stay in the batch as fillers (``GroupData.valid`` False,
   advantage 0, all-zero mask), so shapes (and compiled functions) never
   change;
5. advantages: the estimator record on one `groups.GroupData`;
6. truncated completions (optional): their tokens leave the mask, hence the
   loss denominator too;
7. old log-probs recomputed by the trainer's own forward pass
   (`policy_logprobs`, same temperature) when the batch feeds several
   optimiser steps; on policy (one step) the update uses its own log-probs
   (`Batch.old_logp` is None). The sampler's log-probs always travel
   (`Batch.sampler_logp`). Reference log-probs only when beta > 0.

Several processes (multi-host, one process per host) run the same program
on one global mesh, and every process builds the same step:

* prompts: every process reads all P prompts (``task.train`` is a pure
  function of (seed, index), so they agree) and passes them to the jitted
  sampler as host arrays, which jit takes as replicated inputs; sampling
  and log-probs run as one SPMD program over the global mesh;
* rewards need text on a host: every process gathers the sampler's output
  whole (`to_host`: ``process_allgather`` of arrays other processes hold
  shards of), decodes and scores only the rows of its own block of
  prompts (`sharding.process_rows`, so P must be a multiple of the process
  count), and the reward blocks [P/n, G, K] (and error counts) are
  gathered back: every process then has the same rewards [P, G, K],
  advantages and masks, and every measurement is global (not one host's);
* the batch leaves as host-side or replicated arrays, whole on every process
  (old and ref log-probs gathered with `to_host`); the sharded update
  (`sharding.jit_sharded`) keeps each process's rows of it.
"""

import functools
import time
from typing import Callable, Mapping, NamedTuple, Optional, Sequence

import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import numpy as np

from grpo_jax import advantages as advantages_lib
from grpo_jax import groups as groups_lib
from grpo_jax import logprobs as logprobs_lib
from grpo_jax import models
from grpo_jax import rewards as rewards_lib
from grpo_jax import sampling
from grpo_jax import sharding


class Batch(NamedTuple):
  """The training batch of one step; N = P*G rows, S = Sp + T columns.

  Attributes:
    tokens: [N, S] int32, left-padded prompt then completion.
    input_mask: [N, S] float32, 1 on real prompt and completion tokens.
    completion_mask: [N, T] float32, 1 on tokens that enter the loss.
    advantages: [N] float32.
    old_logp: [N, T] float32 behaviour log-probs (trainer's forward pass),
      or None on policy: the batch feeds a single optimiser step, whose own
      log-probs, detached, are then the behaviour log-probs (ratio exactly 1,
      one forward pass fewer per step).
    ref_logp: [N, T] float32 reference log-probs, or None when beta == 0.
    sampler_logp: [N, T] float32 the sampler's tempered log-probs, on and
      off policy (mismatch corrections and measurements read them), or None
      for a batch built without them.
  """
  tokens: jnp.ndarray
  input_mask: jnp.ndarray
  completion_mask: jnp.ndarray
  advantages: jnp.ndarray
  old_logp: Optional[jnp.ndarray]
  ref_logp: Optional[jnp.ndarray]
  sampler_logp: Optional[jnp.ndarray] = None


# -------------------------------------------------------------- log-probs


def policy_logprobs(params, config: models.ModelConfig, tokens, input_mask,
                    completion_start: int, *, temperature: float = 1.0,
                    chunk_size: int = 4096):
  """Log-probs and entropy of the completion tokens, teacher-forced.

  logp[i, t] = log_softmax(h[i, s-1] W / temperature)[tokens[i, s]] with
  s = completion_start + t: the hidden state one position earlier predicts
  each completion token. Use the sampler's temperature, so that on policy
  the ratio is 1 (PITFALLS.md, "Temperature on one side only").

  Args:
    params: model parameters.
    config: the `models.ModelConfig`.
    tokens: [N, S] int32, left-padded prompt then T = S - completion_start
      completion tokens.
    input_mask: [N, S], 1 on real prompt and completion tokens.
    completion_start: Sp, the column of the first completion token.
    temperature: the sampling temperature.
    chunk_size: positions (of N*T) per chunk of `logprobs.token_logprobs`.

  Returns:
    (logp [N, T], entropy [N, T]) float32.
  """
  if tokens.ndim != 2 or input_mask.shape != tokens.shape:
    raise ValueError(
        f"tokens and input_mask must both be [N, S]; got {tokens.shape} and "
        f"{input_mask.shape}.")
  if not 0 < completion_start < tokens.shape[1]:
    raise ValueError(
        f"completion_start must be in (0, S={tokens.shape[1]}); got "
        f"{completion_start}.")
  positions = models.positions_from_mask(input_mask)
  attention = models.causal_attention_mask(input_mask)
  hidden, _ = models.forward(params, config, tokens, positions, attention)
  out = logprobs_lib.token_logprobs(
      hidden[:, completion_start - 1:-1], models.unembedding(params, config),
      tokens[:, completion_start:], temperature=temperature,
      chunk_size=chunk_size)
  return out[0], out[1]


@functools.partial(jax.jit, static_argnames=(
    "config", "completion_start", "temperature", "chunk_size"))
def _jitted_logprobs(params, tokens, input_mask, *, temperature, config,
                     completion_start, chunk_size):
  return policy_logprobs(params, config, tokens, input_mask, completion_start,
                         temperature=temperature, chunk_size=chunk_size)


def batched_logprobs(params, config, tokens, input_mask, completion_start, *,
                     temperature, chunk_size, batch_size=0):
  """`policy_logprobs` over rows in slices of `batch_size` (0: all), no grad.

  Returns logp [N, T] float32.
  """
  rows = tokens.shape[0]
  size = batch_size or rows
  pieces = [
      _jitted_logprobs(params, tokens[i:i + size], input_mask[i:i + size],
                       temperature=float(temperature), config=config,
                       completion_start=completion_start,
                       chunk_size=chunk_size)[0]
      for i in range(0, rows, size)]
  return jnp.concatenate(pieces, axis=0)


def sampler_mismatch(logp, sampler_logp, mask):
  """max |logp - sampler_logp| over the real tokens of [N, T] arrays: the
  trainer's and the sampler's log-probs of the same tokens under the same
  params (PITFALLS.md, "Sampler and trainer disagree"); in float32 the
  SmolLM2 quickstart logs 5e-6 to 6e-5."""
  return (abs(logp - sampler_logp) * mask).max()


# ------------------------------------------------------------ multi-host


def to_host(tree):
  """Numpy copies of `tree`'s arrays, whole on every process.

  An array whose shards other processes hold (not fully addressable, not
  replicated) is gathered with ``process_allgather``; every process must
  call this together. Other leaves are copied locally.
  """
  def one(x):
    if (isinstance(x, jax.Array) and not x.is_fully_addressable
        and not x.is_fully_replicated):
      return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))
  return jax.tree.map(one, tree)


def gather_process_blocks(local: np.ndarray) -> np.ndarray:
  """Every process's block of rows, concatenated in process order.

  [R, ...] on each of n processes -> [n*R, ...] on every process (the
  inverse of `sharding.process_rows`); the block itself on one process.
  """
  if jax.process_count() == 1:
    return np.asarray(local)
  return np.asarray(multihost_utils.process_allgather(
      np.asarray(local), tiled=True))


# ------------------------------------------------------------------ rollout


class Settings(NamedTuple):
  """The plain hyperparameters of `generate` (resolved from a config once)."""
  num_prompts: int
  num_generations: int
  max_new_tokens: int
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  prompt_buckets: Sequence[int] = (64, 128, 256)
  system_prompt: str = ""
  reward_weights: Sequence[float] = ()  # the reward functions'
  shaper_weights: Sequence[float] = ()  # the shapers', in their order
  signal_reward: str = ""  # dynamic sampling's signal; "": the first reward
  dynamic_sampling: bool = False
  max_rounds: int = 1
  mask_truncated: bool = False
  beta: float = 0.0
  chunk_size: int = 4096
  logprob_batch_size: int = 0
  on_policy: bool = False  # one optimiser step per batch: no old_logp pass


def reward_weights(settings: Settings) -> list:
  """[K] weights of the reward columns: the reward functions', then the
  shapers'."""
  return list(settings.reward_weights) + list(settings.shaper_weights)


class _Round(NamedTuple):
  """One round of sampling, numpy, grouped [P, G, ...]."""
  prompt_ids: list  # P token lists
  tokens: np.ndarray  # [P, G, T]
  mask: np.ndarray  # [P, G, T]
  lengths: np.ndarray  # [P, G]
  truncated: np.ndarray  # [P, G]
  tempered_logprobs: np.ndarray  # [P, G, T]
  rewards: np.ndarray  # [P, G, K]
  errors: np.ndarray  # [K] completions whose reward function raised
  signal: np.ndarray  # [P] groups whose signal reward varies


def encode_prompts(tokenizer, examples, *, format_prompt: Callable,
                   system_prompt: str = "") -> list:
  """Token id lists of the formatted prompts."""
  ids = []
  for example in examples:
    text = format_prompt(tokenizer, example.question,
                         system_prompt=system_prompt or None)
    if isinstance(text, str):
      text = tokenizer.encode(text, add_special_tokens=False)
    ids.append(list(text))
  return ids


def decode_completions(tokenizer, tokens, lengths) -> list:
  """Texts of the completions, special tokens (end ids) dropped."""
  return [tokenizer.decode(list(row[:n]), skip_special_tokens=True)
          for row, n in zip(np.asarray(tokens), np.asarray(lengths))]


def assemble_batch(params, ref_params, prompt_tokens, prompt_mask,
                   completion_tokens, completion_mask, loss_mask, advantages,
                   *, model_config, temperature: float, chunk_size: int,
                   logprob_batch_size: int = 0, beta: float = 0.0,
                   sampler_logp=None, on_policy: bool = False) -> Batch:
  """Concatenates prompts and completions and adds old (and ref) log-probs.

  On policy (see `Batch`) the old log-prob pass is skipped and ``old_logp``
  is None; `sampler_logp` is carried either way.

  Args:
    params: the policy that sampled (its log-probs are old_logp).
    ref_params: the reference; used only when beta > 0.
    prompt_tokens, prompt_mask: [P, Sp] left-padded prompts.
    completion_tokens: [N, T] with N = P*G, prompt-major.
    completion_mask: [N, T] the sampler's mask (real completion tokens).
    loss_mask: [N, T] the tokens that enter the loss (a subset).
    advantages: [N].
    model_config, temperature, chunk_size, logprob_batch_size: see
      `batched_logprobs`.
    beta: KL coefficient; 0 skips the reference forward pass.
    sampler_logp: [N, T] the sampler's tempered log-probs, or None.
    on_policy: the batch feeds one optimiser step: no old log-prob pass.
  """
  prompt_tokens = np.asarray(prompt_tokens)
  completion_tokens = np.asarray(completion_tokens)
  n, sp = completion_tokens.shape[0], prompt_tokens.shape[1]
  if n % prompt_tokens.shape[0]:
    raise ValueError(
        f"completion_tokens has {n} rows, not a multiple of the "
        f"{prompt_tokens.shape[0]} prompts.")
  g = n // prompt_tokens.shape[0]
  tokens = jnp.asarray(np.concatenate(
      [np.repeat(prompt_tokens, g, axis=0), completion_tokens], axis=1),
      jnp.int32)
  input_mask = jnp.asarray(np.concatenate(
      [np.repeat(np.asarray(prompt_mask, np.float32), g, axis=0),
       np.asarray(completion_mask, np.float32)], axis=1))
  logprob_kwargs = dict(temperature=temperature, chunk_size=chunk_size,
                        batch_size=logprob_batch_size)
  old_logp = None
  if not on_policy:
    old_logp = batched_logprobs(params, model_config, tokens, input_mask, sp,
                                **logprob_kwargs)
  if sampler_logp is not None:
    sampler_logp = jnp.asarray(sampler_logp, jnp.float32)
  ref_logp = None
  if beta > 0:
    ref_logp = batched_logprobs(ref_params, model_config, tokens, input_mask,
                                sp, **logprob_kwargs)
  if jax.process_count() > 1:
    # Rows may lie on other hosts; the update places its rows itself.
    old_logp, ref_logp = to_host((old_logp, ref_logp))
  return Batch(
      tokens=tokens, input_mask=input_mask,
      completion_mask=jnp.asarray(loss_mask, jnp.float32),
      advantages=jnp.asarray(advantages, jnp.float32),
      old_logp=old_logp, ref_logp=ref_logp, sampler_logp=sampler_logp)


def _sample_round(params, examples, key, *, settings: Settings, model_config,
                  tokenizer, format_prompt, reward_fns, eos_ids, pad_id,
                  shapers, signal_column: int) -> _Round:
  s = settings
  p, g = len(examples), s.num_generations
  prompt_ids = encode_prompts(tokenizer, examples, format_prompt=format_prompt,
                              system_prompt=s.system_prompt)
  prompt_tokens, prompt_mask = sampling.pad_prompts(
      prompt_ids, buckets=s.prompt_buckets, pad_id=pad_id)
  out = sampling.sample(
      params, model_config, prompt_tokens, prompt_mask, key, num_samples=g,
      max_new_tokens=s.max_new_tokens, temperature=s.temperature,
      top_k=s.top_k or None, top_p=s.top_p if s.top_p < 1.0 else None,
      eos_ids=tuple(eos_ids), pad_id=pad_id)
  out = to_host(out)
  # Each process scores the completions of its own block of prompts.
  block = sharding.process_rows(p)
  rows = slice(block.start * g, block.stop * g)
  local = examples[block]
  completions = decode_completions(tokenizer, out.tokens[rows],
                                   out.lengths[rows])
  questions = [e.question for e in local for _ in range(g)]
  answers = [e.answer for e in local for _ in range(g)]
  result = rewards_lib.score(
      {name: (fn, weight) for (name, fn), weight
       in zip(reward_fns.items(), s.reward_weights)},
      questions, completions, answers)
  rewards = gather_process_blocks(result.per_function)  # [N, K]
  errors = gather_process_blocks(np.asarray(
      [[result.num_errors[name] for name in reward_fns]])).sum(axis=0)
  columns = [np.asarray(shaper(np.asarray(out.lengths)), np.float32)[:, None]
             for shaper in shapers.values()]
  rewards = np.concatenate([np.asarray(rewards, np.float32)] + columns,
                           -1).reshape(p, g, -1)
  t = s.max_new_tokens
  return _Round(
      prompt_ids=prompt_ids,
      tokens=np.asarray(out.tokens).reshape(p, g, t),
      mask=np.asarray(out.mask, np.float32).reshape(p, g, t),
      lengths=np.asarray(out.lengths).reshape(p, g),
      truncated=np.asarray(out.truncated).reshape(p, g),
      tempered_logprobs=np.asarray(out.tempered_logprobs).reshape(p, g, t),
      rewards=rewards,
      errors=errors,
      signal=np.asarray(groups_lib.has_signal(rewards[..., signal_column])))


def _select_groups(rounds: Sequence[_Round], num_prompts: int):
  """Indices (round, group) of the batch: groups with signal first, in
  sampling order, then groups without it (to be masked out)."""
  with_signal, without = [], []
  for r, rnd in enumerate(rounds):
    for i, ok in enumerate(rnd.signal):
      (with_signal if ok else without).append((r, i))
  chosen = with_signal[:num_prompts]
  filler = without[:num_prompts - len(chosen)]
  return chosen, filler


def generate(params, ref_params, step: int, key, estimator_state, *,
             settings: Settings, model_config, tokenizer, task,
             format_prompt: Callable, reward_fns: Mapping[str, Callable],
             shapers: Mapping[str, Callable],
             estimator: advantages_lib.Estimator, eos_ids, pad_id: int):
  """One step's `Batch` and its measurements (see the module docstring).

  Args:
    params: the current policy params (sample and old log-probs).
    ref_params: the reference params; read only when ``settings.beta > 0``.
    step: the training step (selects the prompts).
    key: this step's key, ``fold_in(base_key, step)``.
    estimator_state: the estimator's state (``estimator.init()``).
    settings: `Settings`.
    model_config, tokenizer: the model's.
    task: has ``train(index, batch_size) -> list of Example``.
    format_prompt: ``(tokenizer, question, *, system_prompt) -> str``.
    reward_fns: name -> ``fn(prompts, completions, answers) -> [N]``, in
      the order of ``settings.reward_weights``.
    shapers: name -> ``lengths [N] -> column [N]``, in the order of
      ``settings.shaper_weights``.
    estimator: an `advantages.Estimator` record.
    eos_ids, pad_id: end ids and padding id of the tokenizer.

  Returns:
    (Batch, measurements dict of floats, the new estimator state).
  """
  s = settings
  p, g = s.num_prompts, s.num_generations
  names = list(reward_fns) + list(shapers)  # the K reward columns
  round_fn = functools.partial(
      _sample_round, settings=s, model_config=model_config,
      tokenizer=tokenizer, format_prompt=format_prompt, reward_fns=reward_fns,
      eos_ids=eos_ids, pad_id=pad_id, shapers=shapers,
      signal_column=names.index(s.signal_reward or names[0]))
  t0 = time.perf_counter()
  rounds = []
  for r in range(s.max_rounds if s.dynamic_sampling else 1):
    index = step * s.max_rounds + r if s.dynamic_sampling else step
    rounds.append(round_fn(params, task.train(index, p),
                           jax.random.fold_in(key, r)))
    if sum(rnd.signal.sum() for rnd in rounds) >= p:
      break
  if s.dynamic_sampling:
    chosen, filler = _select_groups(rounds, p)
  else:
    chosen, filler = [(0, i) for i in range(p)], []
  groups = chosen + filler
  pick = lambda field: np.stack([getattr(rounds[r], field)[i]
                                 for r, i in groups])
  prompt_tokens, prompt_mask = sampling.pad_prompts(
      [rounds[r].prompt_ids[i] for r, i in groups],
      buckets=s.prompt_buckets, pad_id=pad_id)
  t1 = time.perf_counter()

  weights = reward_weights(s)
  valid = np.arange(p) < len(chosen)  # the rest are fillers
  group_data = groups_lib.GroupData(
      rewards=jnp.asarray(pick("rewards"), jnp.float32),  # [P, G, K]
      weights=jnp.asarray(weights, jnp.float32), valid=jnp.asarray(valid),
      lengths=jnp.asarray(pick("lengths"), jnp.int32))
  adv, estimator_state = estimator.estimate(estimator_state, group_data)
  adv = np.asarray(adv)
  sample_mask = pick("mask")  # [P, G, T]
  loss_mask = sample_mask * valid[:, None, None]
  if s.mask_truncated:
    loss_mask *= (~pick("truncated"))[..., None]

  n, t = p * g, s.max_new_tokens
  sampler_logp = pick("tempered_logprobs").reshape(n, t)
  batch = assemble_batch(
      params, ref_params, prompt_tokens, prompt_mask,
      pick("tokens").reshape(n, t), sample_mask.reshape(n, t),
      loss_mask.reshape(n, t), jnp.asarray(adv).reshape(n),
      model_config=model_config, temperature=s.temperature,
      chunk_size=s.chunk_size, logprob_batch_size=s.logprob_batch_size,
      beta=s.beta, sampler_logp=sampler_logp, on_policy=s.on_policy)
  jax.block_until_ready((batch.old_logp, batch.ref_logp))
  t2 = time.perf_counter()

  # Measurements describe the step's plain sample (round 0), so that they
  # compare across configs with and without dynamic sampling.
  first = rounds[0]
  measurements = {
      "reward/total": float((first.rewards * np.asarray(weights)).sum(-1)
                            .mean()),
      # Groups without signal as the estimator sees them: their advantages
      # are exactly 0.
      "advantage/collapse_rate": float(groups_lib.collapse_rate(
          first.rewards, weights, per_reward=estimator.input == "PGK")),
      # Over the valid groups (fillers' advantages are 0 and do not count).
      "advantage/abs_mean": float(np.abs(adv).sum()
                                  / max(valid.sum() * g, 1)),
      "completion_length/mean": float(first.lengths.mean()),
      "completion_length/max": float(first.lengths.max()),
      "truncation_rate": float(first.truncated.mean()),
      "rollout/rounds": float(len(rounds)),
      "rollout/groups_with_signal": float(len(chosen)) / p,
      "rollout/loss_tokens": float(loss_mask.sum()),
      "time/sample_s": t1 - t0,
      "time/logprob_s": t2 - t1,
  }
  for k, name in enumerate(names):
    measurements[f"reward/{name}"] = float(first.rewards[..., k].mean())
  for k, name in enumerate(reward_fns):
    measurements[f"reward_errors/{name}"] = float(
        sum(rnd.errors[k] for rnd in rounds))
  if batch.old_logp is not None:  # on policy the update measures it
    measurements["logprob/sampler_trainer_max_abs_diff"] = float(
        sampler_mismatch(np.asarray(batch.old_logp), sampler_logp,
                         sample_mask.reshape(n, t)))
  if "accuracy" in names:
    measurements["accuracy"] = measurements["reward/accuracy"]
  return batch, measurements, estimator_state


# --------------------------------------------------------- from a config


def tiny_model_config(vocab_size: int) -> models.ModelConfig:
  """The `tiny` model: 2 layers, width 32 (a forward pass takes milliseconds)."""
  return models.ModelConfig(
      model_type="llama", vocab_size=vocab_size, hidden_size=32,
      intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
      head_dim=8, rope_theta=10000.0, tie_word_embeddings=True)


def _tiny_model(seed: int):
  """A random tiny model over `testing.tiny_tokenizer`, built in a second."""
  from grpo_jax import testing  # pylint: disable=g-import-not-at-top
  tokenizer = testing.tiny_tokenizer()
  config = tiny_model_config(len(tokenizer))
  return config, models.init_params(config, jax.random.PRNGKey(seed)), tokenizer


# Models built in code, by name; any other name is a checkpoint (`models.load`).
_BUILT_IN_MODELS = {"tiny": _tiny_model}


def load_model(name: str, *, seed: int = 0):
  """(ModelConfig, params, tokenizer) for a config's ``model.name``."""
  build = _BUILT_IN_MODELS.get(name)
  return build(seed) if build else models.load(name)


def eos_and_pad(tokenizer):
  """(end ids, pad id) of a tokenizer."""
  eos_ids = tuple(models.eos_ids(tokenizer))
  pad_id = tokenizer.pad_token_id
  if pad_id is None:
    pad_id = eos_ids[0] if eos_ids else 0
  return eos_ids, int(pad_id)


def make_task(data_config, *, seed: int):
  """The config's task (`data.TASKS`): ``train(step, batch_size)`` and
  ``heldout(n)``; its options are the fields of `data_config` it names."""
  from grpo_jax import data  # pylint: disable=g-import-not-at-top
  options = data.TASKS.options(data_config.task, exclude=("seed",))
  return data.TASKS.get(data_config.task)(
      seed=seed, **{name: data_config[name] for name in options})


def is_on_policy(config) -> bool:
  """Whether each rollout batch feeds exactly one optimiser step (one
  iteration, one minibatch), so its behaviour log-probs are the update's own
  and the old log-prob pass can be skipped (`Batch`)."""
  return (config.train.num_iterations == 1
          and config.train.num_minibatches == 1)


class Rollout(NamedTuple):
  """The rollout stage with everything bound (`from_config`)."""
  init: Callable[[], object]  # () -> estimator_state
  # (params, ref_params, step, key, estimator_state)
  #   -> (Batch, measurements, estimator_state)
  generate: Callable


def from_config(config, model_config, tokenizer, *,
                estimator: Optional[advantages_lib.Estimator] = None
                ) -> Rollout:
  """The `Rollout` of `config` (with `estimator`, default the config's);
  nothing reads the config afterwards."""
  from grpo_jax import data  # pylint: disable=g-import-not-at-top
  r = config.rollout
  o = config.rewards.overlong
  if r.num_prompts % jax.process_count():
    raise ValueError(
        f"rollout.num_prompts={r.num_prompts} does not split over "
        f"{jax.process_count()} processes (each scores its own block of "
        "prompts); make it a multiple of the process count.")
  settings = Settings(
      num_prompts=r.num_prompts, num_generations=r.num_generations,
      max_new_tokens=r.max_new_tokens, temperature=r.temperature,
      top_k=r.top_k, top_p=r.top_p,
      prompt_buckets=tuple(config.data.prompt_buckets),
      system_prompt=config.data.system_prompt,
      reward_weights=tuple(config.rewards.weights),
      shaper_weights=(o.weight,) if o.enabled else (),
      signal_reward=r.signal_reward,
      dynamic_sampling=r.dynamic_sampling, max_rounds=r.max_rounds,
      mask_truncated=r.mask_truncated, beta=float(config.kl.beta),
      chunk_size=config.train.chunk_size,
      logprob_batch_size=config.train.logprob_batch_size,
      on_policy=is_on_policy(config))
  shapers = {}
  if o.enabled:
    shapers["overlong"] = rewards_lib.make_shaper(
        "overlong", max_length=o.max_length, cache_length=o.cache_length)
  if estimator is None:
    estimator = advantages_lib.make(config.advantage.name,
                                    **config.advantage.kwargs)
  eos_ids, pad_id = eos_and_pad(tokenizer)
  return Rollout(init=estimator.init, generate=functools.partial(
      generate, settings=settings, model_config=model_config,
      tokenizer=tokenizer, task=make_task(config.data, seed=config.seed),
      format_prompt=data.format_prompt,
      reward_fns={name: rewards_lib.get(name)
                  for name in config.rewards.functions},
      shapers=shapers, estimator=estimator, eos_ids=eos_ids, pad_id=pad_id))

