"""Helpers shared by the tests: chex asserts and small fixtures.

Tests import chex through this module so that tolerances and conventions live
in one place. The contract laws of each kind are plain functions in
`grpo_jax.testing.estimator_laws`, `grpo_jax.testing.objective_laws` and
`grpo_jax.testing.credit_laws`:
the suites in tests/contracts and the notebooks both call them.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np

# The `tiny` model's character-level tokenizer, re-exported for tests.
from grpo_jax.models.presets import (  # pylint: disable=unused-import
    TINY_CHAT_TEMPLATE, TINY_SPECIAL_TOKENS, tiny_tokenizer)

# float32 tolerances used across the suite unless a test says otherwise.
RTOL = 1e-5
ATOL = 1e-6


def assert_close(actual, expected, *, rtol=RTOL, atol=ATOL):
  """Trees of arrays are equal within tolerance (chex)."""
  chex.assert_trees_all_close(actual, expected, rtol=rtol, atol=atol)


def assert_finite(tree):
  """Every leaf of `tree` is free of NaN and inf."""
  chex.assert_tree_all_finite(tree)


def assert_shape(x, shape):
  chex.assert_shape(x, shape)


def assert_jit_and_vmap_match_eager(fn, *batched, rtol=RTOL, atol=ATOL):
  """``jit(fn)`` equals ``fn`` on the first element of each [B, ...]
  argument, and ``vmap(fn)`` over B equals the eager results stacked (trees
  of outputs too). Returns the jitted output on the first elements."""
  first = [x[0] for x in batched]
  out = jax.jit(fn)(*first)
  assert_close(out, fn(*first), rtol=rtol, atol=atol)
  eager = [fn(*args) for args in zip(*batched)]
  assert_close(jax.vmap(fn)(*batched),
               jax.tree.map(lambda *xs: jnp.stack(xs), *eager),
               rtol=rtol, atol=atol)
  return out


def random_logps(key, shape, *, scale=1.0):
  """Plausible log-probs (negative) of the given shape."""
  return -jnp.abs(jax.random.normal(key, shape)) * scale


def random_mask(key, shape, *, min_length=1):
  """A right-padded [N, T] mask with lengths in [min_length, T]."""
  n, t = shape
  lengths = jax.random.randint(key, (n,), min_length, t + 1)
  return (jnp.arange(t)[None, :] < lengths[:, None]).astype(jnp.float32)


def numpy(x):
  return np.asarray(jax.device_get(x))


# Tiny decoder configs and checkpoints (grpo_jax.models). The RoPE theta is
# deliberately not a library default, so that a loader ignoring it fails.
TINY_ROPE_THETA = 12345.0


def tiny_config(model_type="llama", **overrides):
  """A 2-layer, width-64 ModelConfig (4 heads, 2 kv heads, vocab 128)."""
  from grpo_jax.models import ModelConfig  # pylint: disable=g-import-not-at-top
  fields = dict(
      model_type=model_type, vocab_size=128, hidden_size=64,
      intermediate_size=96, num_layers=2, num_heads=4, num_kv_heads=2,
      head_dim=16, rope_theta=TINY_ROPE_THETA, rms_norm_eps=1e-6,
      tie_word_embeddings=False, qkv_bias=model_type == "qwen2",
      qk_norm=model_type == "qwen3", max_position_embeddings=256)
  fields.update(overrides)
  return ModelConfig(**fields)


def peaked_tiny_model(scale: float):
  """(a `tiny_config` with tied embeddings and 64 positions, its params
  from key 0 with the embedding and every 3-d weight times `scale`): larger
  weights than the init give peaked logits (no near-ties in argmax or a
  top-K order), moderate ones entropies that vary."""
  from grpo_jax import models  # pylint: disable=g-import-not-at-top
  config = tiny_config(tie_word_embeddings=True, max_position_embeddings=64)
  params = models.init_params(config, jax.random.key(0))
  params = jax.tree.map(lambda x: x * scale if x.ndim == 3 else x, params)
  params["embed"] = params["embed"] * scale
  return config, params


def save_tiny_hf_checkpoint(directory, *, model_type="llama", tied=False,
                            config_style="5.x", seed=0, tokenizer=True):
  """Saves a random tiny transformers checkpoint; returns (path, torch model).

  LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM with 2 layers, width
  64, 4 heads, 2 kv heads, vocab 128, rope_theta TINY_ROPE_THETA, written with
  save_pretrained(safe_serialization=True). Norm weights and biases are
  randomised too, so that a loader dropping them fails a parity test.

  Args:
    directory: where to write (created).
    model_type: 'llama', 'qwen2' or 'qwen3'.
    tied: tie_word_embeddings (no lm_head.weight in the file).
    config_style: '5.x' keeps transformers' own config.json (rope_parameters,
      dtype); '4.x' rewrites it with top-level rope_theta / rope_scaling and
      torch_dtype, as checkpoints written by transformers 4.x have.
    seed: torch seed for the weights.
    tokenizer: also save `tiny_tokenizer()` into the directory.
  """
  import json  # pylint: disable=g-import-not-at-top
  import pathlib  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  classes = {
      "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
      "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
      "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
  }
  config_class, model_class = classes[model_type]
  hf_config = config_class(
      vocab_size=128, hidden_size=64, intermediate_size=96,
      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
      head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6,
      rope_theta=TINY_ROPE_THETA, tie_word_embeddings=tied)
  torch.manual_seed(seed)
  model = model_class(hf_config).eval()
  with torch.no_grad():
    for name, param in model.named_parameters():
      if name.endswith("norm.weight"):
        param.copy_(1.0 + 0.1 * torch.randn_like(param))
      elif name.endswith(".bias"):
        param.copy_(0.1 * torch.randn_like(param))
  directory = pathlib.Path(directory)
  model.save_pretrained(str(directory), safe_serialization=True)
  if config_style == "4.x":
    path = directory / "config.json"
    config = json.loads(path.read_text())
    rope = config.pop("rope_parameters", None) or {}
    config["rope_theta"] = rope.get("rope_theta", TINY_ROPE_THETA)
    config["rope_scaling"] = None
    config["torch_dtype"] = config.pop("dtype", None) or "float32"
    path.write_text(json.dumps(config, indent=2))
  elif config_style != "5.x":
    raise ValueError(f"config_style must be '4.x' or '5.x'; got {config_style!r}.")
  if tokenizer:
    tiny_tokenizer().save_pretrained(str(directory))
  return directory, model


def save_tiny_hub_cache(cache_dir, repo_id: str, *, revision: str = "main",
                        **checkpoint_kwargs):
  """A Hugging Face hub cache holding one tiny checkpoint, made offline.

  Lays out ``models--{org}--{name}/refs/{revision}`` and
  ``snapshots/{commit}/`` (files as `save_tiny_hf_checkpoint` writes them) as
  huggingface_hub does after a download, so that ``snapshot_download`` finds
  them with ``HF_HUB_OFFLINE=1``. Returns (snapshot path, torch model).
  """
  import hashlib  # pylint: disable=g-import-not-at-top
  import pathlib  # pylint: disable=g-import-not-at-top
  repo = pathlib.Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))
  commit = hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()
  snapshot, model = save_tiny_hf_checkpoint(
      repo / "snapshots" / commit, **checkpoint_kwargs)
  (repo / "refs").mkdir(parents=True, exist_ok=True)
  (repo / "refs" / revision).write_text(commit)
  return snapshot, model


def without_timing(records):
  """Metric records without their wall-clock entries (time/*, *per_s*)."""
  return [{k: v for k, v in r.items()
           if not k.startswith("time/") and "per_s" not in k}
          for r in records]


class _Crash(Exception):
  pass


def with_pipeline(run, pipeline):
  """`run` (a `train.Run`) rolling out with `pipeline` (a
  `rollout.Pipeline`) instead of its own."""
  import functools  # pylint: disable=g-import-not-at-top
  from grpo_jax import rollout  # pylint: disable=g-import-not-at-top
  return run._replace(rollout_fn=functools.partial(rollout.generate,
                                                   pipeline=pipeline))


def with_verifiers(pipeline, verifier):
  """`pipeline` with each reward function replaced by ``verifier(name)``
  (weights kept), scored in this process: the replacements are closures,
  which reward workers cannot receive."""
  verifiers = {n: (verifier(n), w) for n, (_, w) in pipeline.verifiers.items()}
  return pipeline._replace(verifiers=verifiers,
                           scoring=pipeline.scoring._replace(workers=0))


def coin(name: str):
  """A verifier scoring 0 or 1 by a hash of (name, completion): the tiny
  model earns no reward, and a mechanism reading rewards needs both kinds."""
  import hashlib  # pylint: disable=g-import-not-at-top

  def fn(prompts, completions, answers):
    del prompts, answers
    return [float(hashlib.blake2b(f"{name}|{c}".encode()).digest()[0] % 2)
            for c in completions]
  return fn


def ungraded(config):
  """`config`, a ``:tiny`` preset, changed in place to score `accuracy`
  where `config.use_graded_accuracy` put `config.TINY_REWARD` (its slot,
  weight and stage options; the extra weight-0 accuracy column dropped):
  the random tiny model then earns no reward, every group all wrong, as a
  test of what happens to such groups needs."""
  from grpo_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  functions = list(config.rewards.functions)
  weights = list(config.rewards.weights)
  if config_lib.TINY_REWARD not in functions:
    return config
  if functions[-1] == "accuracy" and weights[-1] == 0:
    functions, weights = functions[:-1], weights[:-1]
  functions[functions.index(config_lib.TINY_REWARD)] = "accuracy"
  config.rewards.functions = tuple(functions)
  config.rewards.weights = tuple(weights)
  for stage in config_lib.STAGES:
    for key, value in list(config[stage].kwargs.items()):
      if value == config_lib.TINY_REWARD:
        config[stage].kwargs[key] = "accuracy"
  return config


def coin_accuracy(run):
  """`run` (a `train.Run`) with its correctness reward replaced by a coin
  (1 for a quarter of completions, by a hash of the completion) and every
  other reward function by 0, scored in this process: the tiny model earns
  no reward, and a replaying strategy needs groups with and without
  variance. The correctness reward is the one the library reads
  correctness from (`rewards.shapers.READ_VERIFIERS`), and the graded one
  a ``:tiny`` preset weighs in its place (`config.TINY_REWARD`): the same
  coin in both; a ValueError if the config's ``rewards.functions`` lack
  the first."""
  import hashlib  # pylint: disable=g-import-not-at-top
  from grpo_jax import config as config_lib  # pylint: disable=g-import-not-at-top
  from grpo_jax.rewards import shapers  # pylint: disable=g-import-not-at-top
  correct = shapers.READ_VERIFIERS["correct"]
  pipeline = run.rollout_fn.keywords["pipeline"]
  if correct not in pipeline.verifiers:
    raise ValueError(
        f"config.rewards.functions={tuple(pipeline.verifiers)} has no "
        f"{correct!r}, the correctness reward the coin replaces: add it.")

  def quarter(prompts, completions, answers):
    del prompts, answers
    return [float(hashlib.blake2b(c.encode()).digest()[0] % 4 == 0)
            for c in completions]

  zero = lambda prompts, completions, answers: [0.0] * len(completions)
  replacements = dict.fromkeys(pipeline.verifiers, zero) | {
      correct: quarter, config_lib.TINY_REWARD: quarter}
  return with_pipeline(run, with_verifiers(pipeline, replacements.get))


def sample_round(run, step: int = 0, *, seed: int = 9):
  """A `rollout.Round` of `run`'s pipeline on the prompts its selection
  gives at `step` (round 0), sampled with the run's initial params and
  PRNGKey(`seed`)."""
  from grpo_jax import rollout  # pylint: disable=g-import-not-at-top
  pipeline = run.rollout_fn.keywords["pipeline"]
  examples = pipeline.components["select"].select(
      pipeline.task, step, 0, run.config.rollout.num_prompts)
  with jax.set_mesh(run.mesh):
    return rollout.sample_round(run.state.params, examples,
                                jax.random.PRNGKey(seed), pipeline=pipeline)


def rollout_step(run, step: int = 0, *, state=None, key=None, pipeline=None,
                 **stages):
  """`run`'s rollout of `step` under its mesh, as `train.train_step` calls
  it: (batch, measurements, new stage states).

  Args:
    run: a `train.Run` (without LoRA: the params are the state's).
    step: the step number.
    state: the `train.TrainState` (default the run's initial one).
    key: the rollout's key (default the trainer's, fold_in(state.key, step)).
    pipeline: a `rollout.Pipeline` to roll out with instead of the run's.
    **stages: stage states replacing the state's, by stage name.
  """
  from grpo_jax import rollout  # pylint: disable=g-import-not-at-top
  state = run.state if state is None else state
  key = jax.random.fold_in(state.key, step) if key is None else key
  states = {n: state.states[n] for n in rollout.STAGES}
  states.update(stages)
  fn = run.rollout_fn if pipeline is None else with_pipeline(
      run, pipeline).rollout_fn
  with jax.set_mesh(run.mesh):
    return fn(state.params, run.ref_params, step, key, states)


def loss_gradient(run, objective, objective_state, params, minibatch,
                  **options):
  """(gradients, measurement values) of the trainer's loss with
  `objective` (a bound `objectives.Objective`) on `minibatch`;
  `options` go to `update.make_loss_functions` (corrections=,
  replay_coef=, ...)."""
  from grpo_jax import measures  # pylint: disable=g-import-not-at-top
  from grpo_jax.train import update  # pylint: disable=g-import-not-at-top
  fns = update.make_loss_functions(
      model_config=run.model_config, objective=objective,
      chunk_size=run.config.train.chunk_size, **options)
  grads, _, records = update.minibatch_gradient(
      fns, params, {"objective": objective_state}, minibatch)
  return grads, measures.values(records)


def assert_trees_differ(tree, reference, *, rtol=0.0, msg=""):
  """Some leaf of `tree` differs from `reference`'s by more than `rtol`
  times the largest |entry| of `reference` (rtol 0: by anything)."""
  diff = max(float(jnp.abs(a - b).max()) for a, b in zip(
      jax.tree.leaves(tree), jax.tree.leaves(reference)))
  scale = max(float(jnp.abs(b).max()) for b in jax.tree.leaves(reference))
  assert diff > rtol * scale, (msg, diff, scale)


def assert_scaled_reinforce_gradient(run, grads, minibatch, scale, *,
                                     aggregation: str):
  """`grads` are `scale` times REINFORCE's gradient (with `aggregation`)
  on `minibatch` at the run's initial params, leaf by leaf, and not equal
  to it: at ratio 1 an objective whose only mechanism is a detached weight
  w acts as REINFORCE scaled by w."""
  from grpo_jax import objectives  # pylint: disable=g-import-not-at-top
  reinforce = objectives.make("reinforce", aggregation=aggregation)
  base, _ = loss_gradient(run, reinforce, (), run.state.params, minibatch)
  assert_close(grads, jax.tree.map(lambda b: scale * b, base), rtol=2e-3,
               atol=1e-7)
  assert_trees_differ(grads, base)


def check_group_option_error(config, strategy: str, option: str, value,
                             match: str) -> None:
  """`config` (a group strategy's) with ``groups.kwargs.<option>`` set to
  `value` fails `train.validate` naming ``config.groups.kwargs.<option>``
  and `match`, and the strategy's own build raises a
  `registry.OptionError` matching `match` keyed by `option`."""
  import re  # pylint: disable=g-import-not-at-top
  from grpo_jax import train  # pylint: disable=g-import-not-at-top
  from grpo_jax import registry  # pylint: disable=g-import-not-at-top
  from grpo_jax import rollout  # pylint: disable=g-import-not-at-top
  from grpo_jax import strategies  # pylint: disable=g-import-not-at-top
  # A new dict: the ConfigDict would refuse a value of another type.
  config.groups.kwargs = dict(config.groups.kwargs, **{option: value})
  try:
    train.validate(config)
    raise AssertionError(f"groups.kwargs.{option}={value!r} validated")
  except ValueError as e:
    assert re.search(rf"^config\.groups\.kwargs\.{option}: {match}",
                     str(e)), e
  try:
    strategies.make_group_strategy(
        strategy, layout=rollout.group_layout(config),
        **dict(config.groups.kwargs))
    raise AssertionError(f"{strategy} built with {option}={value!r}")
  except registry.OptionError as e:
    assert re.search(match, str(e)) and e.key == option, e


def check_a_larger_stage_state_is_refused(workdir, config, stage: str,
                                          small, larger, *, field: str):
  """A `train.TrainState` holding `small`'s ``init()`` as its `stage` state
  (a stateful component), saved in `workdir`: restoring it into one holding
  `larger`'s raises `checkpoint.StateMismatch` naming the state's path and
  the config `field` that sizes it (`train`'s restore hints for
  `config`); restoring it into its own size gives it back bit for bit."""
  import re  # pylint: disable=g-import-not-at-top
  from grpo_jax.runtime import checkpoint  # pylint: disable=g-import-not-at-top
  from grpo_jax import objectives  # pylint: disable=g-import-not-at-top
  from grpo_jax.train import optim  # pylint: disable=g-import-not-at-top
  from grpo_jax import train  # pylint: disable=g-import-not-at-top
  optimizer = optim.make_optimizer(learning_rate=1e-3, warmup_steps=0,
                                   decay="constant", total_steps=4)
  state = train.init_state(
      {"w": jnp.ones(3)}, optimizer, seed=0,
      components={"objective": objectives.make("ppo_clip"), stage: small})
  bigger = state._replace(states=dict(state.states, **{stage: larger.init()}))
  hints = train._state_hints(config, {stage: larger})  # pylint: disable=protected-access
  ckpt = checkpoint.Checkpointer(str(workdir))
  ckpt.save(1, state)
  try:
    ckpt.restore(bigger, hints=hints)
    raise AssertionError(f"a larger {stage} state restored")
  except checkpoint.StateMismatch as e:
    assert re.search(rf"states/{stage}/.*{re.escape(field)}", str(e)), e
  restored, _ = ckpt.restore(state, hints=hints)  # the same size restores
  ckpt.close()
  assert_close(restored, state, rtol=0, atol=0)


def short_run_config(config, *, num_steps: int = 4,
                     checkpoint_every: int = 2):
  """`config`, changed in place, for a short run in this process:
  `num_steps` steps, a checkpoint every `checkpoint_every`, rewards scored
  without workers, no TensorBoard or plot."""
  config.rewards.workers = 0
  config.train.num_steps = num_steps
  config.checkpoint.every = checkpoint_every
  config.metrics.tensorboard = False
  config.metrics.plot = False
  return config


def check_resume_is_exact(config, workdir, *, crash_at: int = 2, run=None):
  """Trains `config` straight through in ``workdir/a``, and in ``workdir/b``
  crashes after step `crash_at`'s metrics (before its checkpoint) and
  resumes: the final states and every metric but timing are equal, bit for
  bit, and each step is recorded once. `run` is ``train.build(config)``
  unless given. Returns (the straight run's state, its metric records)."""
  import os  # pylint: disable=g-import-not-at-top
  from grpo_jax.runtime import metrics  # pylint: disable=g-import-not-at-top
  from grpo_jax import train  # pylint: disable=g-import-not-at-top
  a, b = os.path.join(workdir, "a"), os.path.join(workdir, "b")
  run = train.build(config) if run is None else run
  straight = train.train(config, a, run=run)

  def crash(step, record):
    del record
    if step == crash_at:
      raise _Crash()

  try:
    train.train(config, b, run=run, callback=crash)
    raise AssertionError(f"no crash at step {crash_at}")
  except _Crash:
    pass
  assert_close(train.train(config, b, run=run), straight, rtol=0, atol=0)
  records = metrics.read(os.path.join(a, metrics.METRICS_FILE))
  resumed = metrics.read(os.path.join(b, metrics.METRICS_FILE))
  assert [r["step"] for r in resumed] == list(range(config.train.num_steps))
  assert without_timing(records) == without_timing(resumed)
  return straight, records


def repetition_by_hand(tokens, *, max_penalty=-1.0):
  """The repetition shaper's column over unigrams, written out for
  tests (independent of `rewards.signal_shapers`):
  max_penalty * (1 - distinct tokens / tokens)."""
  tokens = list(tokens)
  return max_penalty * (1.0 - len(set(tokens)) / len(tokens))


def with_repetition_shaper(config, weight=0.5):
  """`config` with a unigram repetition penalty as a second reward column:
  random completions repeat tokens differently, so groups get a signal."""
  config.rewards.shapers = {"repetition_penalty": dict(
      weight=weight, ngram_size=1, max_penalty=-1.0)}
  config.rewards.workers = 0
  return config

