"""Shared config pieces and `validate`; every variant file starts from here.

A config is an ml_collections ConfigDict; every field has a concrete default
(no None) so that any field can be overridden on the command line with
``--config.a.b=value`` and an unknown key is an error. Zero means "automatic"
where a comment says so.

``get_config("tiny")`` (``--config=configs/x.py:tiny``) swaps in a random tiny
model and tiny shapes: the whole loop runs in seconds, for tests and CI.
"""


import functools
import inspect
import math
import os

import ml_collections

from grpo_jax import data
from grpo_jax import prompt_ids

# The tiny preset: a random model built offline, shapes that run in seconds.
TINY_MODEL = "tiny"
DECAYS = ("cosine", "linear", "constant")


def get_base_config() -> ml_collections.ConfigDict:
  """GRPO (DeepSeekMath, arXiv 2402.03300) on SmolLM2 + the arithmetic task."""
  c = ml_collections.ConfigDict()
  c.seed = 0

  c.model = ml_collections.ConfigDict()
  # "smollm2-135m-instruct" (embedded), "tiny", a Hugging Face directory or
  # .gguf file, or a hub id such as "Qwen/Qwen2.5-0.5B-Instruct".
  c.model.name = "smollm2-135m-instruct"
  c.model.revision = ""           # a hub id's branch, tag or commit; "" = main
  # Compute dtype. "bfloat16": matmuls, activations and the sampler's KV
  # cache in bf16 over float32 master weights; optimiser state, log-probs
  # and the loss stay float32.
  c.model.dtype = "float32"

  # Low-rank adapters (models.lora): rank 0 trains every weight; rank r > 0
  # trains only A [in, r] and B [r, out] on each `targets` matrix, the base
  # frozen (and the KL reference is the base itself).
  c.lora = ml_collections.ConfigDict()
  c.lora.rank = 0
  c.lora.alpha = 32.0             # the adapters' output is scaled alpha / rank
  c.lora.targets = ("q", "k", "v", "o", "gate", "up", "down")

  c.data = ml_collections.ConfigDict()
  c.data.task = "arithmetic"      # a `data.TASKS` name: arithmetic | gsm8k | jsonl
  c.data.path = ""                # the JSONL file when task == "jsonl"
  # The system message; "" leaves the chat template's own default.
  c.data.system_prompt = data.SYSTEM_PROMPT
  # The arithmetic task: `operands` numbers of up to `digits` digits.
  c.data.digits = 1
  c.data.ops = ("+",)
  c.data.operands = 2
  # The segments task (SD-GRPO): problems of 2 to `max_segments` parts, one
  # \boxed{} answer each; also S, the segment slots of the group data.
  c.data.max_segments = 3
  c.data.prompt_buckets = (64, 128, 256)  # prompt lengths padded up to these
  c.data.heldout_size = 64        # evaluate.py's held-out problems
  # Share of the arithmetic problems (or JSONL records) held out for evaluation.
  c.data.heldout_fraction = 0.2

  c.rollout = ml_collections.ConfigDict()
  c.rollout.num_prompts = 8       # P per step
  c.rollout.num_generations = 8   # G per prompt
  c.rollout.max_new_tokens = 96   # T
  c.rollout.temperature = 1.0
  c.rollout.top_k = 0             # 0 = off
  c.rollout.top_p = 1.0
  # Each group member's own temperature, G floats (MDP-GRPO's multi-
  # temperature groups; the trainer scores each row at its member's
  # temperature); () = rollout.temperature for every member.
  c.rollout.member_temperatures = ()
  # K > 0: the sampler also records each position's K most likely ids and
  # their tempered log-probs ([N, T, K]; DPPO's top-K forms read them).
  # 0 = off (nothing recorded or compiled). At most the vocabulary size.
  c.rollout.record_topk = 0
  # HAPO's entropy-adaptive sampler (grpo_jax.entropy_norm): tau > 0 draws
  # token t at T (1 + tau clip(h_hat_t, -1, 1)), h_hat its entropy
  # normalised by the previous step's batch statistics, and the trainer
  # scores each token at the temperature it was drawn at; 0 = off (the
  # plain sampler). HAPO uses 0.05.
  c.rollout.temperature_tau = 0.0
  # h_hat's pivot: this quantile of the batch's log-entropies (HAPO: 0.8),
  # and the public code's sign bug (every h_hat >= 0) when True.
  c.rollout.entropy_pivot = 0.8
  c.rollout.entropy_legacy_sign = False

  # The stages of a step (grpo_jax.rollout), each a registered component
  # named here with its options: `select` (strategies.SELECTIONS), `groups`
  # (strategies.GROUP_STRATEGIES, e.g. DAPO's dynamic_sampling with
  # max_rounds and signal_reward), `credit` (credit.CREDIT), `rows`
  # (strategies.ROW_STRATEGIES, e.g. mask_truncated), `filter`
  # (strategies.MEMBER_FILTERS: which members of each group train, e.g.
  # GFPO's k shortest), `budget` (strategies.BUDGETS: each prompt's group
  # size within the N = num_prompts * num_generations rows, e.g.
  # Knapsack-RL's knapsack; "fixed" = num_generations each).
  for stage, name in (("select", "uniform"), ("groups", "all_groups"),
                      ("credit", "uniform"), ("rows", "all_rows"),
                      ("filter", "none"), ("budget", "fixed")):
    c[stage] = ml_collections.ConfigDict(
        dict(name=name, kwargs=ml_collections.ConfigDict()))

  c.rewards = ml_collections.ConfigDict()
  c.rewards.functions = ("accuracy", "format")
  c.rewards.weights = (1.0, 0.1)
  # Reward shapers (rewards.SHAPERS), each one more reward column: name ->
  # its options and weight, e.g. DAPO's
  #   overlong=dict(weight=1.0, max_length=96, cache_length=24).
  c.rewards.shapers = ml_collections.ConfigDict()
  # The reward functions run in this many worker processes, one completion
  # per task, so that one that hangs or crashes costs only that completion
  # (0, counted as reward_errors/<name>); 0 = in the training process, with
  # no timeout (for debugging).
  c.rewards.workers = 2
  c.rewards.timeout_s = 30.0      # per completion and function, with workers
  # Seconds for all reward functions on one sampling round, with workers:
  # then every unfinished completion fails.
  c.rewards.deadline_s = 300.0
  # Stop with an error when a reward function has failed on every
  # completion of this many steps in a row (a warning each step before);
  # 0 = never.
  c.rewards.max_failing_steps = 3

  c.advantage = ml_collections.ConfigDict()
  # An `advantages` name: grpo, dr_grpo, rloo, or gdpo (GDPO normalises each
  # reward column alone; give it kwargs of eps and ddof only).
  c.advantage.name = "grpo"
  c.advantage.kwargs = ml_collections.ConfigDict(
      dict(scale="group", eps=1e-6, ddof=1))

  c.objective = ml_collections.ConfigDict()
  c.objective.name = "ppo_clip"
  # Every option of the objective in one place: its hyperparameters, its
  # aggregation (and horizon), and a stateful one's state options (R2VPO's
  # lam0, eta): `objectives.make(name, **kwargs)`.
  c.objective.kwargs = ml_collections.ConfigDict(
      dict(clip_low=0.2, clip_high=0.2, aggregation="seq_mean_token_mean"))

  c.kl = ml_collections.ConfigDict()
  c.kl.beta = 0.04                # 0 skips the reference model entirely
  c.kl.estimator = "k3"
  # > 0: MDP-GRPO's asymmetric KL (regularisers.asymmetric_kl), kl.beta on
  # the tokens of completions with A >= 0 and beta_neg on those with A < 0;
  # 0 = kl.beta on every token.
  c.kl.beta_neg = 0.0

  # Token weights and masks applied to the objective's per-token terms
  # (objectives.corrections), name -> options, multiplied together; the
  # loss's denominator stays the mask's. Sampler mismatch: tis, tis_sequence,
  # mis, mis_sequence, icepop (they read the sampler's own log-probs);
  # DeepSeek-V3.2's opsm; the top_entropy mask. E.g.
  #   --config.corrections='{"tis": {"c_max": 2.0}, "top_entropy": {}}'
  c.corrections = ml_collections.ConfigDict()

  # The entropy bonus (regularisers "entropy_bonus"): -coef * the policy's
  # entropy, aggregated like the objective; 0 = off.
  c.entropy = ml_collections.ConfigDict()
  c.entropy.coef = 0.0

  # LLDS (regularisers "llds", arXiv 2512.04220): coef * the likelihood drop
  # of tokens with A >= 0 whose gate span lost likelihood since the rollout,
  # aggregated like the objective; 0 = off. It is 0 on policy, so it needs
  # several optimiser steps per batch (train.num_minibatches or
  # num_iterations > 1).
  c.llds = ml_collections.ConfigDict()
  c.llds.coef = 0.0               # the paper's lambda (0.2); 0 = off
  c.llds.gate = "action"          # "action" (the A-gate) or "response" (R)

  c.optimizer = ml_collections.ConfigDict()
  c.optimizer.learning_rate = 1e-6
  c.optimizer.warmup_steps = 0    # optimiser steps
  c.optimizer.decay = "constant"  # cosine | linear | constant
  c.optimizer.final_lr_fraction = 0.1
  c.optimizer.weight_decay = 0.0
  c.optimizer.b1 = 0.9
  c.optimizer.b2 = 0.999  # transformers, TRL and verl's default
  c.optimizer.eps = 1e-8
  c.optimizer.max_grad_norm = 1.0

  c.train = ml_collections.ConfigDict()
  c.train.num_steps = 200
  c.train.num_iterations = 1      # passes over each rollout batch
  # Optimiser steps per pass: the N rows split into this many minibatches.
  # One pass in one minibatch is on policy (no old log-prob pass).
  c.train.num_minibatches = 1
  c.train.microbatch_size = 0     # rows per accumulation step; 0 = minibatch
  c.train.logprob_batch_size = 0  # rows per old/ref logprob pass; 0 = N
  # Positions (of N*T) per log-prob chunk: on CPU 512 ran the 4 x 8 update
  # 1.16x faster than 4096 (the chunk's [.., V] passes stay in cache).
  c.train.chunk_size = 512
  # jax's persistent compilation cache: a rerun (or a resumed run) loads
  # the compiled sampler and update instead of compiling them; "" = off.
  c.train.compilation_cache_dir = "~/.cache/grpo_jax/xla"
  # Stop with an error after this many non-finite updates in a row (each
  # skipped, the params unchanged); 0 = never.
  c.train.max_nonfinite_updates = 10

  c.checkpoint = ml_collections.ConfigDict()
  c.checkpoint.every = 50
  c.checkpoint.max_to_keep = 3
  # An unreadable newest checkpoint: "error" names it and the newest
  # readable one; "previous" moves it aside (checkpoints.corrupt/) and
  # resumes from that one.
  c.checkpoint.on_corrupt = "error"

  # Held-out evaluation during training (`evaluation.from_config`): after
  # every `every` steps and after the last, logged as eval/greedy_accuracy,
  # eval/pass@k and eval/maj@k beside the step's measurements.
  c.eval = ml_collections.ConfigDict()
  c.eval.every = 0                # steps between evaluations; 0 = off
  c.eval.num_problems = 32        # the first held-out problems of the task
  # n sampled completions per problem at rollout.temperature, beside the
  # greedy one; 0 = greedy accuracy only.
  c.eval.num_samples = 0
  c.eval.k = ()                   # pass@k, maj@k budgets; () = (1, num_samples)
  # Prompts per sampler call (evaluate.py's default too); with
  # rollout.num_prompts and num_samples = num_generations - 1 evaluation
  # reuses the rollout's compiled sampler.
  c.eval.batch_size = 64

  c.metrics = ml_collections.ConfigDict()
  c.metrics.tensorboard = True
  c.metrics.plot = True

  # grpo_jax.sharding: (data, fsdp, tensor) sizes, -1 = the rest of the
  # devices; a product that divides the device count uses the first devices.
  c.mesh = ml_collections.ConfigDict()
  c.mesh.shape = (1, -1, 1)
  c.mesh.axis_names = ("data", "fsdp", "tensor")
  return c


def with_defaults(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`c` with the fields the base config has and `c` lacks (a checkpoint's
  config from before they existed) added at their defaults. A component's
  ``kwargs`` are its own: never filled in."""
  def fill(target, defaults):
    for key, value in defaults.items():
      if key not in target:
        target[key] = value
      elif (key != "kwargs" and isinstance(value, ml_collections.ConfigDict)
            and isinstance(target[key], ml_collections.ConfigDict)):
        fill(target[key], value)
  fill(c, get_base_config())
  return c


def use_quickstart_scale(c: ml_collections.ConfigDict
                         ) -> ml_collections.ConfigDict:
  """The quickstart's scale on the embedded model (configs/quickstart.py):
  2 prompts x 4 completions of up to 40 tokens, 40 steps at lr 2e-5 and no
  KL, greedy accuracy on 40 held-out problems (half the task held out)
  after steps 20 and 40; about ten minutes on a 2-core CPU."""
  c.data.heldout_fraction = 0.5
  c.data.heldout_size = 40
  c.data.prompt_buckets = (64, 128)
  c.rollout.num_prompts = 2
  c.rollout.num_generations = 4
  c.rollout.max_new_tokens = 40
  c.kl.beta = 0.0
  c.optimizer.learning_rate = 2e-5
  c.train.num_steps = 40
  c.checkpoint.every = 10
  # Two greedy passes over the held-out problems (steps 20 and 40), in one
  # sampler call of 40 prompts each.
  c.eval.every = 20
  c.eval.num_problems = 40
  return c


def use_comparison_task(c: ml_collections.ConfigDict
                        ) -> ml_collections.ConfigDict:
  """The task every comparison table uses (experiments/compare.py): one-digit
  problems a + b, a - b and a * b, 70% of the 300 held out, greedy accuracy
  on the first 200 of them. The embedded model starts at greedy 0.42 and
  sampled 0.17 there (pass@4 0.455): at 4 completions about half the groups
  carry signal, where one-digit sums saturate by step 24 and two-digit or
  three-term sums start near 0.04 sampled. A config on another task (SD-GRPO's
  boxed sub-problems) keeps its own."""
  if c.data.task != "arithmetic":
    return c
  c.data.digits, c.data.operands = 1, 2
  c.data.ops = ("+", "-", "*")
  c.data.heldout_fraction = 0.7
  c.data.heldout_size = 200
  c.eval.num_problems = 200
  return c


def use_tiny(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Random tiny model and tiny shapes: the loop end to end in seconds."""
  c.model.name = TINY_MODEL
  c.data.prompt_buckets = (80,)  # character-level prompts
  c.data.system_prompt = ""  # the character-level prompt stays short
  c.rollout.num_prompts = 2
  c.rollout.num_generations = max(2, min(c.rollout.num_generations, 4))
  c.mesh.shape = (1, 1, 1)  # one device: tiny batches need not split evenly
  c.rollout.max_new_tokens = 8
  if "horizon" in c.objective.kwargs:
    c.objective.kwargs.horizon = c.rollout.max_new_tokens
  c.optimizer.learning_rate = 1e-3
  c.optimizer.warmup_steps = 0
  c.train.num_steps = 4
  c.train.chunk_size = 64
  c.train.compilation_cache_dir = ""  # tiny programs compile in seconds
  c.checkpoint.every = 2
  c.data.heldout_size = 4
  c.eval.num_problems = 4
  return c


def finalize(c: ml_collections.ConfigDict, arg=None
             ) -> ml_collections.ConfigDict:
  """Applies the ``:arg`` of ``--config=configs/x.py:arg`` ("tiny" or None)."""
  if arg in (None, ""):
    return c
  if arg == TINY_MODEL:
    return use_tiny(c)
  raise ValueError(f"config argument {arg!r} is unknown; use 'tiny' or none.")


def _fail(field: str, problem: str, fix: str):
  raise ValueError(f"config.{field}: {problem}; {fix}.")


def _check_choice(field, value, choices):
  if value not in choices:
    _fail(field, f"{value!r} is unknown",
          f"choose one of {', '.join(map(str, choices))}")


def _check_component(field, make, name, kwargs):
  """A stage component's own checks (its name, option names and values)
  as a config error naming `field`."""
  try:
    return make(name, **kwargs)
  except ValueError as e:
    _fail(field, str(e).rstrip("."), f"see --config.{field}")


def _positive(c, field, *, allow_zero=False):
  value = c
  for part in field.split("."):
    value = value[part]
  # NaN passes every comparison: name it rather than turn a term off.
  if math.isnan(value) or value < 0 or (value == 0 and not allow_zero):
    bound = ">= 0" if allow_zero else "> 0"
    _fail(field, f"{value!r} is not {bound}", f"set a value {bound}")


def check_files(c) -> None:
  """Raises ValueError naming the field unless every file a training run
  reads exists and is readable: the JSONL data, and a model name that reads
  as a local path (an embedded name or a hub id `models.load` resolves and
  reports itself). `train.build` calls it; `validate` does not, so a config
  restored on another machine can still be planned or evaluated."""
  if c.data.task == "jsonl":
    path = os.path.expanduser(c.data.path)
    if not os.path.isfile(path):
      _fail("data.path", f"{c.data.path!r} is not a file"
            + (" (it is a directory)" if os.path.isdir(path) else ""),
            "give the path of a JSONL file, one {question, answer} per line")
    if not os.access(path, os.R_OK):
      _fail("data.path", f"{c.data.path!r} is not readable",
            "fix its permissions")
  name = c.model.name
  # "org/name" (one slash) is a hub id; "runs/x/export" and "./x" are paths.
  looks_local = (name.startswith((".", "/", "~")) or name.endswith(".gguf")
                 or name.count("/") > 1)
  if looks_local and not os.path.exists(os.path.expanduser(name)):
    _fail("model.name", f"{name!r} reads as a local path and does not exist",
          "give an existing checkpoint directory or .gguf file, "
          "'smollm2-135m-instruct', 'tiny' or a hub id 'org/name'")


def _option_values(fns, kwargs) -> dict:
  """The keyword defaults of `fns`' signatures, overridden by `kwargs`."""
  values = {}
  for fn in fns:
    for key, p in inspect.signature(fn).parameters.items():
      if p.default is not inspect.Parameter.empty:
        values[key] = p.default
  values.update(kwargs)
  return values


def _check_estimator_sizes(c, advantages) -> None:
  """Sizes an estimator's options must fit, before any compute: bundles of
  questions (``bundle_size``, RiskPO) split the P prompts."""
  name = c.advantage.name
  spec = advantages.meta(name)["state"]
  fns = [advantages.get(name)] + ([spec.init] if spec is not None else [])
  options = _option_values(fns, dict(c.advantage.kwargs))
  bundle = options.get("bundle_size")
  if bundle is not None and c.rollout.num_prompts % bundle:
    _fail("advantage.kwargs.bundle_size",
          f"{bundle} does not divide rollout.num_prompts="
          f"{c.rollout.num_prompts} (estimator {name!r} bundles the "
          "prompts of a batch)",
          "set a divisor of num_prompts, or change rollout.num_prompts")
  if spec is not None and spec.offline is not None:  # SPO's offline_init
    from grpo_jax.advantages import trackers  # pylint: disable=g-import-not-at-top
    try:
      trackers.check_offline_init(options.get("offline_init", 0),
                                  options.get("rho_min", 0.875))
    except ValueError as e:
      _fail("advantage.kwargs.offline_init", str(e).rstrip("."),
            "set --config.advantage.kwargs.offline_init=0 or n > 0")
    if options.get("offline_init") and c.data.task == "segments":
      _fail("data.task", "'segments' cannot look a problem up by its index "
            "(advantage.kwargs.offline_init profiles every training "
            "problem)", "use data.task='arithmetic', 'gsm8k' or 'jsonl', "
            "or offline_init=0")
  # A per-prompt table (``capacity``) against the task's ids: in
  # `_check_tracker_stages` (`prompt_ids.check_config`).


def _check_tracker_stages(c, advantages) -> None:
  """What a selection that reads the estimator's state (SPO's prioritised
  draw) and a group strategy that injects reference rows (EDGE-GRPO's
  guided correction) need from the other stages, before any compute; the
  registries' metadata says which entries these are."""
  from grpo_jax import strategies  # pylint: disable=g-import-not-at-top
  select = strategies.SELECTIONS.entry(c.select.name).meta
  groups = strategies.GROUP_STRATEGIES.entry(c.groups.name).meta
  by_state = "advantage" in select.get("reads", ())
  references = "reference" in groups.get("reads", ())
  if by_state:
    state = advantages.make(c.advantage.name, **c.advantage.kwargs).init()
    needs = select.get("needs", ())
    if not all(hasattr(state, field) for field in needs):
      _fail("select.name", f"{c.select.name!r} draws by the estimator's "
            f"per-prompt tracker ({', '.join(needs)}), which "
            f"advantage.name={c.advantage.name!r} does not keep",
            "set --config.advantage.name=spo, or select.name=uniform")
  if (by_state or references) and c.data.task == "segments":
    _fail("data.task", "'segments' cannot look a problem up by its index "
          f"(select {c.select.name!r}, groups {c.groups.name!r})",
          "use data.task='arithmetic', 'gsm8k' or 'jsonl'")
  meta = advantages.meta(c.advantage.name, **c.advantage.kwargs)
  if "divergence" in meta["reads"] and (meta.get("prompt_ids")
                                        or "exact") != "exact":
    # The revisit memory keeps one response per slot (revisits.make).
    _fail("advantage.kwargs.prompt_ids", f"{meta['prompt_ids']!r} lets ids "
          "share a slot, and the revisit memory that measures "
          f"{c.advantage.name!r}'s divergence would rescore another "
          "prompt's stored response under this one",
          "set prompt_ids='exact' (capacity above the task's largest id), "
          "or rho='constant'")
  # Per-prompt tables against the task's ids (exact or hashed, by each
  # entry's ``prompt_ids`` metadata), distinct ids where a stage keys on
  # them, and enough problems for a draw without replacement; any task.
  prompt_ids.check_config(c, by_id=[
      f"{stage} {name!r}" for stage, name, used in (
          ("select", c.select.name, by_state),
          ("groups", c.groups.name, references)) if used])
  if not references:
    return
  if c.rewards.shapers:
    _fail("rewards.shapers", "reference rows are scored by the verifiers "
          f"alone (groups.name={c.groups.name!r})",
          "remove the shapers, or use another group strategy")
  if c.rollout.get("record_topk", 0):
    _fail("rollout.record_topk", "a reference row has no sampler top-K "
          f"(groups.name={c.groups.name!r})", "set rollout.record_topk=0")
  if c.rollout.get("temperature_tau", 0.0):
    _fail("rollout.temperature_tau", "a reference row has no sampling "
          f"temperatures (groups.name={c.groups.name!r})",
          "set rollout.temperature_tau=0")
  reads = advantages.meta(c.advantage.name, **c.advantage.kwargs)["reads"]
  stale = [f for f in reads if f == "answer_ids" or f.startswith("segment_")]
  if stale:
    _fail("groups.name", f"{c.groups.name!r} replaces rows, but estimator "
          f"{c.advantage.name!r} reads GroupData.{stale[0]}, which is not "
          "rebuilt for them", "choose another estimator or group strategy")


def _check_resampled_stages(c, advantages) -> None:
  """A group strategy that hints from worked solutions (metadata
  ``solutions``: GHPO) needs a task that gives them; one that builds a
  group from rows of several rounds (``moves_rows``: AERO) needs rows that
  carry no member slot or group context. Keyed on registry metadata."""
  from grpo_jax import rewards  # pylint: disable=g-import-not-at-top
  from grpo_jax import strategies  # pylint: disable=g-import-not-at-top
  name = c.groups.name
  meta = strategies.GROUP_STRATEGIES.entry(name).meta
  if meta.get("solutions") and not data.TASKS.entry(c.data.task).meta.get(
      "solutions"):
    with_solutions = [n for n in data.TASKS.names()
                      if data.TASKS.entry(n).meta.get("solutions")]
    _fail("data.task", f"{c.data.task!r} gives no worked reference solution "
          f"(data.Example.solution), which groups.name={name!r} hints from",
          f"set --config.data.task={' or '.join(with_solutions)}, or use "
          "another group strategy")
  if "resample" in meta.get("reads", ()) and advantages.meta(
      c.advantage.name, **c.advantage.kwargs).get("state") is not None:
    # (Stateful shapers fold in the plain round 0 alone: rollout.generate.)
    _fail("advantage.name", f"{c.advantage.name!r} keeps state that would "
          f"fold in the groups groups.name={name!r} draws again (hinted or "
          "rebuilt from extra draws), not the policy's plain sample",
          "use a stateless estimator (grpo), or another group strategy")
  if not meta.get("moves_rows"):
    return
  g = c.rollout.num_generations
  max_group = c.groups.kwargs.get("max_group", 0)
  if g < 2 or (max_group and max_group <= g):
    _fail("groups.kwargs.max_group" if g >= 2 else "rollout.num_generations",
          f"groups.name={name!r} grows groups of G={g} up to max_group="
          f"{max_group or 'G x max_rounds'}, and needs G >= 2 and "
          "max_group > G", "set num_generations >= 2 and max_group > "
          "num_generations (or 0)")
  if len(c.rollout.member_temperatures):
    _fail("rollout.member_temperatures", f"groups.name={name!r} moves rows "
          "between member slots, and each slot samples at its own "
          "temperature", "set rollout.member_temperatures=()")
  reads = advantages.meta(c.advantage.name, **c.advantage.kwargs)["reads"]
  if "answer_ids" in reads:
    _fail("advantage.name", f"{c.advantage.name!r} reads GroupData."
          f"answer_ids, numbered within one round's group, and "
          f"groups.name={name!r} joins rows of several rounds",
          "choose another estimator or group strategy")
  for shaper in c.rewards.shapers:
    if "group_size" in rewards.SHAPERS.entry(shaper).meta.get("reads", ()):
      _fail(f"rewards.shapers.{shaper}", "forms statistics over each "
            f"round's group, and groups.name={name!r} joins rows of several "
            "rounds", "remove it, or use another group strategy")


def _check_replay_stages(c, objective, advantages) -> None:
  """A group strategy that refills groups from a buffer of earlier steps
  (registry metadata ``replays``: POPO) trains them through an objective
  that weighs each row by its own behaviour log-probs, and rebuilds only
  the fields it stores."""
  from grpo_jax import strategies  # pylint: disable=g-import-not-at-top
  name = c.groups.name
  if not strategies.GROUP_STRATEGIES.entry(name).meta.get("replays"):
    return
  if not objective.behaviour_weight:
    _fail("objective.name", f"{c.objective.name!r} does not weigh rows by "
          f"the behaviour policy's log-probs, which groups.name={name!r} "
          "replays from earlier steps (stale rows would train as on-policy)",
          "set --config.objective.name=decoupled_ppo (is_cap=2.0)")
  if c.rollout.get("record_topk", 0):
    _fail("rollout.record_topk", "a replayed group keeps no sampler top-K "
          f"(groups.name={name!r})", "set rollout.record_topk=0")
  if c.rollout.get("temperature_tau", 0.0):
    _fail("rollout.temperature_tau", "a replayed group keeps no per-token "
          f"temperatures (groups.name={name!r})",
          "set rollout.temperature_tau=0")
  meta = advantages.meta(c.advantage.name, **c.advantage.kwargs)
  stale = [f for f in meta["reads"] if f in ("answer_ids", "greedy_rewards",
                                             "divergence")
           or f.startswith("segment_")]
  if stale:
    _fail("advantage.name", f"{c.advantage.name!r} reads GroupData."
          f"{stale[0]}, which groups.name={name!r} does not store for a "
          "replayed group", "use grpo, dr_grpo or rloo")
  if meta.get("state") is not None:
    _fail("advantage.name", f"{c.advantage.name!r} keeps state that would "
          "fold in a replayed group's rewards a second time "
          f"(groups.name={name!r})", "use a stateless estimator (grpo)")


def _check_corrections(c, objective) -> None:
  """``corrections``: known names, each one's options (its own checks), and
  whether the objective's loss takes their weights."""
  from grpo_jax.objectives import corrections  # pylint: disable=g-import-not-at-top
  if not isinstance(c.corrections, (dict, ml_collections.ConfigDict)):
    _fail("corrections", f"{c.corrections!r} is not a mapping of names to "
          "options", "e.g. --config.corrections='{\"tis\": {}}'")
  known = corrections.names()
  records = []
  for name, options in c.corrections.items():
    field = f"corrections.{name}"
    if name not in known:
      _fail(field, f"correction {name!r} is unknown",
            f"choose from {', '.join(known)}")
    if not isinstance(options, (dict, ml_collections.ConfigDict)):
      _fail(field, f"{options!r} is not a mapping of options",
            f"give {{}} for the defaults, e.g. --config.corrections="
            f"'{{\"{name}\": {{}}}}'")
    records.append(_check_component(field, corrections.make, name,
                                    dict(options)))
  try:
    corrections.check_compatible(objective, records)
  except ValueError as e:
    _fail("corrections", str(e).rstrip("."),
          "drop it from --config.corrections or change "
          "--config.objective.name")


def _check_credit(c, objective, advantages) -> None:
  """A token credit rule against the estimator (a rule that reads the
  rows' signs needs [N] advantages) and the objective (a sequence-level one
  averages token advantages over each row, undoing the rule)."""
  from grpo_jax import credit  # pylint: disable=g-import-not-at-top
  name = c.credit.name
  if credit.meta(name)["identity"]:
    return
  output = advantages.ESTIMATORS.entry(c.advantage.name).meta["output"]
  if credit.meta(name)["row_advantages"] and output == "token":
    _fail("credit.name", f"credit rule {name!r} needs one advantage per row, "
          f"but estimator {c.advantage.name!r} gives token advantages",
          "pick a group-level estimator (e.g. advantage.name=grpo) or "
          "credit.name=uniform")
  if objective.level == "sequence":
    _fail("credit.name", f"credit rule {name!r} gives each token its own "
          f"advantage, but objective {c.objective.name!r} is sequence-level "
          "and averages them over each row", "pick a token-level objective "
          "(e.g. objective.name=ppo_clip) or credit.name=uniform")


def validate(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Raises ValueError naming the field and the fix; returns `c` if valid.

  Called before any model is loaded or any function compiled.
  """
  # Late imports: configs stay importable without jax until validation.
  from grpo_jax import advantages, credit, kl, objectives  # pylint: disable=g-import-not-at-top
  from grpo_jax import checkpoint, rewards, rollout, strategies  # pylint: disable=g-import-not-at-top
  from grpo_jax import budget_rollout  # pylint: disable=g-import-not-at-top
  from grpo_jax import replay_rollout  # pylint: disable=g-import-not-at-top
  from grpo_jax import repo_rollout  # pylint: disable=g-import-not-at-top
  from grpo_jax.objectives import regularisers  # pylint: disable=g-import-not-at-top

  if not c.model.name:
    _fail("model.name", "is empty",
          "use 'smollm2-135m-instruct', 'tiny', a checkpoint path or a hub id")
  _check_choice("model.dtype", c.model.dtype, ("float32", "bfloat16"))
  _positive(c, "lora.rank", allow_zero=True)
  if c.lora.rank:
    from grpo_jax.models import lora  # pylint: disable=g-import-not-at-top
    if len(set(c.lora.targets)) != len(c.lora.targets):
      _fail("lora.targets", f"{tuple(c.lora.targets)!r} repeats a name",
            "name each matrix once")
    try:
      lora.check_targets(c.lora.targets)
    except ValueError as e:
      _fail("lora.targets", str(e).rstrip("."),
            "e.g. --config.lora.targets='(\"q\", \"v\")'")
    _positive(c, "lora.alpha")
  _check_choice("data.task", c.data.task, data.TASKS.names())
  if c.data.task == "jsonl" and not c.data.path:
    _fail("data.path", "is empty but data.task='jsonl'",
          "set --config.data.path=/path/to/file.jsonl")
  if c.data.task == "arithmetic":
    _positive(c, "data.digits")
    if c.data.operands < 2:
      _fail("data.operands", f"{c.data.operands!r} is below 2",
            "set operands >= 2")
    if not c.data.ops or not set(c.data.ops) <= set(data.OPERATORS):
      _fail("data.ops", f"{c.data.ops!r} is invalid",
            f"choose a nonempty subset of {data.OPERATORS}")
  if c.data.task == "segments" and c.data.max_segments < 2:
    _fail("data.max_segments", f"{c.data.max_segments!r} is below 2",
          "set max_segments >= 2 (a problem has two or more parts)")
  if not c.data.prompt_buckets or any(b <= 0 for b in c.data.prompt_buckets):
    _fail("data.prompt_buckets", f"{c.data.prompt_buckets!r} is invalid",
          "give positive prompt lengths, e.g. (64, 128)")

  r = c.rollout
  for field in ("num_prompts", "num_generations", "max_new_tokens"):
    _positive(c, f"rollout.{field}")
  _positive(c, "rollout.temperature")
  _positive(c, "rollout.top_k", allow_zero=True)
  if not 0.0 < r.top_p <= 1.0:
    _fail("rollout.top_p", f"{r.top_p!r} is outside (0, 1]", "set 0 < top_p <= 1")
  members = tuple(r.member_temperatures)
  if members and len(members) != r.num_generations:
    _fail("rollout.member_temperatures",
          f"has {len(members)} entries for rollout.num_generations="
          f"{r.num_generations}", "give one temperature per group member, "
          "or () for rollout.temperature")
  if any(not x > 0 for x in members):
    _fail("rollout.member_temperatures", f"{members!r} holds a value <= 0",
          "give temperatures > 0 (a greedy member would have no log-probs "
          "to train on)")
  if isinstance(r.record_topk, bool) or not isinstance(r.record_topk, int):
    _fail("rollout.record_topk", f"{r.record_topk!r} is not an integer",
          "set K >= 0 (0: off)")
  _positive(c, "rollout.record_topk", allow_zero=True)
  _positive(c, "rollout.temperature_tau", allow_zero=True)
  if not r.temperature_tau < 1.0:  # T (1 - tau) at h_hat = -1 must stay > 0
    _fail("rollout.temperature_tau", f"{r.temperature_tau!r} is not below 1",
          "set a value in [0, 1), such as 0.05 (HAPO's)")
  if not 0.0 < r.entropy_pivot < 1.0:  # NaN fails too
    _fail("rollout.entropy_pivot", f"{r.entropy_pivot!r} is outside (0, 1)",
          "set a quantile such as 0.8 (HAPO's)")

  known = rewards.names()
  for name in c.rewards.functions:
    if name not in known:
      _fail("rewards.functions", f"{name!r} is unknown",
            f"choose from {', '.join(known)}")
  if not c.rewards.functions:
    _fail("rewards.functions", "is empty", "name at least one reward function")
  if len(c.rewards.weights) != len(c.rewards.functions):
    _fail("rewards.weights",
          f"has {len(c.rewards.weights)} entries for "
          f"{len(c.rewards.functions)} reward functions",
          "give one weight per reward function")
  _positive(c, "rewards.workers", allow_zero=True)
  _positive(c, "rewards.timeout_s")
  _positive(c, "rewards.deadline_s")
  # Each shaper's options and reads (`rewards.check_shapers`); its table
  # against the task's ids: `prompt_ids.check_config`, in the stage checks.
  rewards.check_shapers(
      c.rewards.shapers, functions=tuple(c.rewards.functions),
      weights=tuple(c.rewards.weights), max_new_tokens=r.max_new_tokens)

  for stage, known in (("select", strategies.SELECTIONS),
                       ("groups", strategies.GROUP_STRATEGIES),
                       ("credit", credit.CREDIT),
                       ("rows", strategies.ROW_STRATEGIES)):
    _check_choice(f"{stage}.name", c[stage].name, known.names())
  groups = _check_component(
      "groups.kwargs", functools.partial(strategies.make_group_strategy,
                                         layout=rollout.group_layout(c)),
      c.groups.name, c.groups.kwargs)
  _check_component("select.kwargs", strategies.make_selection, c.select.name,
                   dict(c.select.kwargs,
                        rounds_per_step=groups.rounds_per_step))
  # Option names and values, as config.credit.kwargs.<option>.
  credit.check_options(c.credit.name, dict(c.credit.kwargs),
                       field="config.credit.kwargs")
  _check_component("credit.kwargs", credit.make, c.credit.name,
                   c.credit.kwargs)
  _check_component("rows.kwargs", strategies.make_row_strategy, c.rows.name,
                   c.rows.kwargs)
  # The reward columns: the functions', then the shapers'.
  columns = tuple(c.rewards.functions) + tuple(c.rewards.shapers)
  signal = c.groups.kwargs.get("signal_reward", "")
  if signal and signal not in columns:
    _fail("groups.kwargs.signal_reward", f"{signal!r} is not a configured "
          "reward", f"choose one of {', '.join(columns)}, or '' for "
          f"{columns[0]!r}")

  _check_choice("advantage.name", c.advantage.name, advantages.names())
  _check_component("advantage.kwargs", advantages.make, c.advantage.name,
                   c.advantage.kwargs)
  # The member filter's options against G' and the reward columns; one
  # whose statistics are over the kept members needs an estimator that
  # honours GroupData.members.
  _check_choice("filter.name", c.filter.name,
                strategies.MEMBER_FILTERS.names())
  member_filter = _check_component(
      "filter.kwargs", functools.partial(
          strategies.make_member_filter, group_size=r.num_generations,
          columns=columns), c.filter.name, c.filter.kwargs)
  if (member_filter.statistics == "kept"
      and not advantages.meta(c.advantage.name)["members"]):
    _fail("advantage.name", f"{c.advantage.name!r} does not honour the kept "
          f"members of filter {c.filter.name!r} (GroupData.members: its "
          "mean and std over the kept subset)", "choose one that does: "
          f"{', '.join(advantages.honouring_members())}")
  # Group data only some tasks give: per-segment rewards (SD-GRPO).
  segment_reads = [f for f in advantages.meta(c.advantage.name)["reads"]
                   if f.startswith("segment_")]
  if segment_reads and not data.TASKS.entry(c.data.task).meta.get(
      "segments", False):
    with_segments = [n for n in data.TASKS.names()
                     if data.TASKS.entry(n).meta.get("segments", False)]
    _fail("data.task", f"{c.data.task!r} gives no per-segment rewards, but "
          f"advantage estimator {c.advantage.name!r} reads GroupData."
          f"{segment_reads[0]}", "set --config.data.task="
          f"{' or '.join(with_segments)} (problems of several parts, one "
          "\\boxed{} answer each), or pick an estimator that reads no "
          "segments")
  # The estimator's needs (its reward domain, a number of reward columns)
  # against the rewards' declared ranges: here, not in the jitted step.
  try:
    advantages.check_reward_columns(
        c.advantage.name, dict(c.advantage.kwargs), columns=columns,
        weights=tuple(c.rewards.weights) + tuple(
            options["weight"] for options in c.rewards.shapers.values()),
        ranges=rewards.column_ranges(c.rewards.functions, c.rewards.shapers))
  except ValueError as e:
    raise ValueError(f"config.advantage: {str(e).rstrip('.')}.") from None
  _check_estimator_sizes(c, advantages)
  _check_tracker_stages(c, advantages)
  _check_resampled_stages(c, advantages)
  budget_rollout.check_config(c)  # the budget stage and what it carries

  _check_choice("objective.name", c.objective.name, objectives.names())
  # The objective checks its own options (names, then values).
  kwargs = dict(c.objective.kwargs)
  objectives.check_options(c.objective.name, kwargs, field="config.objective.kwargs")
  try:
    objective = objectives.make(c.objective.name, **kwargs)
  except ValueError as e:
    _fail("objective.kwargs", str(e).rstrip("."),
          f"e.g. --config.objective.kwargs.horizon={r.max_new_tokens} for "
          "a constant normaliser")
  _check_corrections(c, objective)
  _check_credit(c, objective, advantages)
  _check_replay_stages(c, objective, advantages)
  repo_rollout.check_config(c, objective)  # RePO's G + K rows per group
  replay_rollout.check_config(c, objective)  # row replay's R stored rows
  if "sampler_topk_logp" in objective.reads and not r.record_topk:
    _fail("rollout.record_topk", f"is 0, but objective {c.objective.name!r} "
          "reads the sampler's top-K log-probs (sampler_topk_ids, "
          "sampler_topk_logp), which the run then does not record",
          "set --config.rollout.record_topk=K > 0 (e.g. 20), or use a "
          "binary form (objective.name=dppo)")
  requires = objectives.OBJECTIVES.entry(c.objective.name).meta.get(
      "requires", ())
  if "token_temperatures" in requires and not r.temperature_tau > 0:
    _fail("rollout.temperature_tau", f"is {r.temperature_tau!r}, but "
          f"objective {c.objective.name!r} needs the sampler's per-token "
          "temperatures (HAPO samples each token at an entropy-adaptive "
          "temperature), which the run then does not record",
          "set --config.rollout.temperature_tau=0.05 (HAPO's)")
  _positive(c, "entropy.coef", allow_zero=True)
  _positive(c, "llds.coef", allow_zero=True)
  _check_choice("llds.gate", c.llds.gate, regularisers.LLDS_GATES)
  if c.llds.coef > 0 and rollout.is_on_policy(c):
    _fail("llds.coef", f"{c.llds.coef!r} is set but each batch feeds one "
          "optimiser step, where logp = old_logp and the penalty is 0",
          "train off policy (e.g. --config.train.num_minibatches=4), or set "
          "llds.coef=0")

  _positive(c, "kl.beta", allow_zero=True)
  _positive(c, "kl.beta_neg", allow_zero=True)
  if c.kl.beta_neg > 0 and not c.kl.beta > 0:
    _fail("kl.beta_neg", f"{c.kl.beta_neg!r} is set but kl.beta is 0 (no "
          "reference model is kept)", "set --config.kl.beta > 0 (the "
          "coefficient for A >= 0), or kl.beta_neg=0")
  _check_choice("kl.estimator", c.kl.estimator, kl.names())

  _positive(c, "optimizer.learning_rate", allow_zero=True)
  _positive(c, "optimizer.warmup_steps", allow_zero=True)
  _positive(c, "optimizer.weight_decay", allow_zero=True)
  _positive(c, "optimizer.max_grad_norm")
  _check_choice("optimizer.decay", c.optimizer.decay, DECAYS)
  if not 0.0 <= c.optimizer.final_lr_fraction <= 1.0:
    _fail("optimizer.final_lr_fraction",
          f"{c.optimizer.final_lr_fraction!r} is outside [0, 1]",
          "set a fraction of the peak learning rate")

  t = c.train
  _positive(c, "train.num_steps")
  _positive(c, "train.num_iterations")
  _positive(c, "train.num_minibatches")
  for field in ("microbatch_size", "logprob_batch_size"):
    _positive(c, f"train.{field}", allow_zero=True)
  _positive(c, "train.chunk_size")
  if not 0.0 < c.data.heldout_fraction < 1.0:
    _fail("data.heldout_fraction", f"{c.data.heldout_fraction!r} is not in (0, 1)",
          "hold out a share such as 0.2")
  # RePO's groups carry K replay rows beside their G members.
  extra = repo_rollout.extra_rows(c)
  replayed = replay_rollout.replay_rows(c)  # row replay's R stored rows
  rows = r.num_prompts * (r.num_generations + extra) + replayed
  if rows % t.num_minibatches:
    _fail("train.num_minibatches",
          f"{t.num_minibatches} does not divide the N={rows} rows of a step "
          f"(num_prompts * num_generations"
          + (f", + {extra} replay rows per group" if extra else "")
          + (f", + {replayed} replayed rows)" if replayed else ")"),
          "choose a divisor of N")
  minibatch = rows // t.num_minibatches
  micro = t.microbatch_size or minibatch
  if minibatch % micro:
    _fail("train.microbatch_size",
          f"{micro} does not divide the minibatch of {minibatch} rows",
          "choose a divisor of the minibatch, or 0 for no accumulation")
  # Clip-Cov's random draw keys each token by its place in the minibatch.
  whole = objectives.OBJECTIVES.entry(c.objective.name).meta.get(
      "whole_minibatch", False)
  if micro < minibatch and (whole(**dict(c.objective.kwargs))
                            if callable(whole) else whole):
    _fail("train.microbatch_size",
          f"{micro} splits the minibatch of {minibatch} rows, but objective "
          f"{c.objective.name!r} draws over the whole minibatch's tokens",
          "set --config.train.microbatch_size=0, or "
          "--config.objective.kwargs.clip_cov_rule=top")
  if t.logprob_batch_size and rows % t.logprob_batch_size:
    _fail("train.logprob_batch_size",
          f"{t.logprob_batch_size} does not divide the N={rows} rows",
          "choose a divisor of N, or 0 for all rows")

  _positive(c, "checkpoint.every")
  _positive(c, "checkpoint.max_to_keep")
  _check_choice("checkpoint.on_corrupt", c.checkpoint.on_corrupt,
                checkpoint.ON_CORRUPT)
  _positive(c, "train.max_nonfinite_updates", allow_zero=True)
  _positive(c, "rewards.max_failing_steps", allow_zero=True)
  _positive(c, "eval.every", allow_zero=True)
  _positive(c, "eval.num_problems")
  _positive(c, "eval.num_samples", allow_zero=True)
  _positive(c, "eval.batch_size")
  bad = [k for k in c.eval.k if not 1 <= k <= c.eval.num_samples]
  if bad:
    _fail("eval.k", f"holds k={bad[0]}, outside [1, eval.num_samples="
          f"{c.eval.num_samples}] (pass@k and maj@k need n >= k samples)",
          "give every k >= 1" if bad[0] < 1 else
          f"set --config.eval.num_samples={max(c.eval.k)} or lower eval.k")
  if len(c.mesh.shape) != len(c.mesh.axis_names):
    _fail("mesh.shape", f"{c.mesh.shape} does not match axis_names "
          f"{c.mesh.axis_names}", "give one size per axis")
  return c
