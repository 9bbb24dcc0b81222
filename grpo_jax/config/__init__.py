"""Shared config pieces and the field checks; every variant file starts
from here.

A config is an ml_collections ConfigDict; every field has a concrete default
(no None) so that any field can be overridden on the command line with
``--config.a.b=value`` and an unknown key is an error. Zero means "automatic"
where a comment says so.

``get_config("tiny")`` (``--config=configs/x.py:tiny``) swaps in a random tiny
model and tiny shapes: the whole loop runs in seconds, for tests and CI.
"""


import math
import os

import ml_collections

from grpo_jax.data import arithmetic
from grpo_jax.config import errors as config_errors
from grpo_jax import data
from grpo_jax.data import gym
from grpo_jax import registry
# The presets (`:tiny`, the quickstart's scale), re-exported: configs call
# them as config.use_tiny etc.
from grpo_jax.config.presets import (  # pylint: disable=unused-import
    finalize, STAGES, TINY_MODEL, TINY_REWARD, use_comparison_task,
    use_graded_accuracy, use_quickstart_scale, use_tiny)

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
  # Gradient checkpointing: the update recomputes each layer's activations
  # in its backward pass instead of keeping them (less memory, one more
  # forward pass; docs/real-models.md, "Gradient checkpointing").
  c.model.remat = False

  # Low-rank adapters (models.lora): rank 0 trains every weight; rank r > 0
  # trains only A [in, r] and B [r, out] on each `targets` matrix, the base
  # frozen (and the KL reference is the base itself).
  c.lora = ml_collections.ConfigDict()
  c.lora.rank = 0
  c.lora.alpha = 32.0             # the adapters' output is scaled alpha / rank
  c.lora.targets = ("q", "k", "v", "o", "gate", "up", "down")

  c.data = ml_collections.ConfigDict()
  # A `data.TASKS` name: arithmetic | segments | gsm8k | jsonl | hf |
  # reasoning_gym.
  c.data.task = "arithmetic"
  # jsonl: the file; hf: a data file, save_to_disk directory or hub id.
  c.data.path = ""
  c.data.question_key = "question"  # jsonl, hf: the question's field
  c.data.answer_key = "answer"    # jsonl, hf: the reference answer's field
  # hf: the dataset's subset (config name, e.g. "main"), the split trained
  # on and the split held out ("": heldout_fraction of the training split).
  c.data.subset = ""
  c.data.split = "train"
  c.data.heldout_split = ""
  # reasoning_gym: the generators, their curriculum level (0 the easiest)
  # and the problems of each (`data.gym`).
  c.data.generators = gym.DEFAULT_GENERATORS
  c.data.difficulty = 0
  c.data.problems_per_generator = 1000
  # The system message; "" leaves the chat template's own default.
  c.data.system_prompt = data.SYSTEM_PROMPT
  # The arithmetic task: `operands` numbers of up to `digits` digits.
  c.data.digits = 1
  c.data.ops = ("+",)
  c.data.operands = 2
  # The segments task (SD-GRPO): problems of 2 to `max_segments` parts, one
  # \boxed{} answer each; also S, the segment slots of the group data.
  c.data.max_segments = 3
  # ... and each segment's credit for a box that holds a number, right or
  # wrong (the per-part format reward; `verifiers.segment_scores`).
  c.data.box_reward = 0.0
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
  # S > 0: the sampler decodes S rows at a time and gives a slot the next
  # row as soon as its row ends (the generation engine, for long-tailed
  # lengths: a batch of all P x G rows runs until its longest row ends);
  # the same tokens as 0, which decodes every row in one batch.
  c.rollout.slots = 0
  # HAPO's entropy-adaptive sampler (grpo_jax.sampling.entropy_norm): tau > 0 draws
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
  for stage, name in zip(STAGES, ("uniform", "all_groups", "uniform",
                                  "all_rows", "none", "fixed")):
    c[stage] = ml_collections.ConfigDict(
        dict(name=name, kwargs=ml_collections.ConfigDict()))

  c.rewards = ml_collections.ConfigDict()
  # Registered names (rewards.VERIFIERS) or references to functions of one's
  # own, "my_pkg.my_mod:fn" or "path/to/file.py:fn" (rewards.references);
  # one weight each.
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
  # 1.16x faster than 4096, and level with 1024 in an ad hoc timing
  # (`logprobs`' CPU default, the loss benchmark's fastest).
  c.train.chunk_size = 512
  # The update's forward and the old/ref log-prob passes run on the rows'
  # real tokens, packed into a few sequences (`train.packing`), instead of
  # [N, Sp + T] padded rows: faster when completion lengths vary, nothing
  # gained at fixed length; each new packed count (1, 2, 3, 4, 6, 8, 12,
  # ...) compiles the update once. One device's rows ('data' x 'fsdp' = 1).
  c.train.pack_rows = False
  # jax's persistent compilation cache: a rerun (or a resumed run) loads
  # the compiled sampler and update instead of compiling them; "" = off.
  c.train.compilation_cache_dir = "~/.cache/grpo_jax/xla"
  # Stop with an error after this many non-finite updates in a row (each
  # skipped, the params unchanged); 0 = never.
  c.train.max_nonfinite_updates = 10
  # Rerunning a workdir resumes it only under the config its checkpoint
  # saved (fields such as num_steps and checkpoint/eval/logging settings
  # aside: `train.resume.RESUMABLE`); True resumes with the changes.
  c.train.allow_config_change = False

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
  # Weights & Biases (`runtime.tracking`; pip install -e ".[wandb]"): the
  # config once, then each step's record. "" leaves W&B's default: the
  # entity of the login, the workdir's name as the run's name, the mode of
  # WANDB_MODE (else online).
  c.metrics.wandb = False
  c.metrics.wandb_project = "grpo_jax"
  c.metrics.wandb_entity = ""
  c.metrics.wandb_name = ""
  c.metrics.wandb_mode = ""  # "", "online", "offline" or "disabled"

  # grpo_jax.runtime.sharding: (data, fsdp, tensor) sizes, -1 = the rest of the
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


# The error helpers shared by every check module (`config.errors`); the
# checks across stages live in `rollout.checks`.
ConfigError = config_errors.ConfigError  # what `fail` raises

_fail = config_errors.fail
_check_choice = config_errors.check_choice
_check_component = config_errors.check_component
_positive = config_errors.positive


def check_files(c) -> None:
  """Raises ValueError naming the field unless every file a training run
  reads exists and is readable: the JSONL data (each record parsed, with
  its keys and id: `data.jsonl`), and a model name that reads as a local
  path (an embedded name or a hub id `models.load` resolves and
  reports itself); and unless the wandb package is installed when
  ``metrics.wandb`` is on. `train.build` calls it; `validate` does not, so
  a config restored on another machine can still be planned or
  evaluated."""
  if c.data.task == "jsonl":
    path = os.path.expanduser(c.data.path)
    if not os.path.isfile(path):
      _fail("data.path", f"{c.data.path!r} is not a file"
            + (" (it is a directory)" if os.path.isdir(path) else ""),
            "give the path of a JSONL file, one {question, answer} per line")
    if not os.access(path, os.R_OK):
      _fail("data.path", f"{c.data.path!r} is not readable",
            "fix its permissions")
    try:  # a bad line, key or id fails here, before the model loads
      data.jsonl(path, question_key=c.data.question_key,
                 answer_key=c.data.answer_key)
    except ValueError as e:
      raise config_errors.ConfigError(f"config.data.path: {e}") from None
  if c.data.task == "hf":  # the file, split or columns, before the model
    try:
      data.make_task(c.data, seed=c.seed)
    except ValueError as e:
      raise config_errors.ConfigError(f"config.{e}") from None
  if c.metrics.wandb:
    from grpo_jax.runtime import tracking  # pylint: disable=g-import-not-at-top
    if not tracking.is_installed():
      _fail("metrics.wandb", "is True but the wandb package is not installed",
            "pip install -e \".[wandb]\" (or pip install wandb), or set "
            "--config.metrics.wandb=False")
  name = c.model.name
  # "org/name" (one slash) is a hub id; "runs/x/export" and "./x" are paths.
  looks_local = (name.startswith((".", "/", "~")) or name.endswith(".gguf")
                 or name.count("/") > 1)
  if looks_local and not os.path.exists(os.path.expanduser(name)):
    _fail("model.name", f"{name!r} reads as a local path and does not exist",
          "give an existing checkpoint directory or .gguf file, "
          "'smollm2-135m-instruct', 'tiny' or a hub id 'org/name'")


def check_fields(c: ml_collections.ConfigDict) -> None:
  """Raises ValueError ``config.<field>: problem; fix.`` for a field that is
  bad on its own or against plain fields beside it. The stages' options
  and what one stage needs of another are `rollout.checks.check_stages`'s;
  `train.validate` runs both before any compute.
  """
  # Late imports: configs stay importable without jax until validation.
  from grpo_jax import kl, rewards  # pylint: disable=g-import-not-at-top
  from grpo_jax.runtime import checkpoint  # pylint: disable=g-import-not-at-top
  from grpo_jax.runtime import tracking  # pylint: disable=g-import-not-at-top
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
  # A file given to a task that reads none would be ignored without a word.
  readers = [n for n in data.TASKS.names() if "path" in data.TASKS.options(n)]
  if c.data.path and c.data.task not in readers:
    _fail("data.task", f"{c.data.task!r} reads no file: data.path="
          f"{c.data.path!r} would be ignored and the run would train on "
          f"the {c.data.task} task's own problems", "set --config.data.task="
          f"{' or '.join(readers)} to train on the file, or leave data.path "
          "empty")
  if c.data.task in ("jsonl", "hf") and not c.data.path:
    _fail("data.path", f"is empty but data.task={c.data.task!r}",
          "set --config.data.path=/path/to/file.jsonl (hf: also a data "
          "file, a save_to_disk directory or a hub id)")
  if c.data.task == "reasoning_gym":
    try:
      gym.check_options(tuple(c.data.generators), c.data.difficulty,
                             c.data.problems_per_generator)
    except registry.OptionError as e:
      raise ValueError(f"config.data.{e.key}: {e}") from None
    except ValueError as e:  # reasoning_gym missing
      _fail("data.task", str(e).rstrip("."), "or choose another task")
  if c.data.task == "arithmetic":
    _positive(c, "data.digits")
    if c.data.operands < 2:
      _fail("data.operands", f"{c.data.operands!r} is below 2",
            "set operands >= 2")
    if not c.data.ops or not set(c.data.ops) <= set(arithmetic.OPERATORS):
      _fail("data.ops", f"{c.data.ops!r} is invalid",
            f"choose a nonempty subset of {arithmetic.OPERATORS}")
  if c.data.task == "segments" and c.data.max_segments < 2:
    _fail("data.max_segments", f"{c.data.max_segments!r} is below 2",
          "set max_segments >= 2 (a problem has two or more parts)")
  if c.data.task == "segments" and not (
      math.isfinite(c.data.box_reward) and c.data.box_reward >= 0):
    _fail("data.box_reward", f"{c.data.box_reward!r} is not a finite "
          "number >= 0", "set it to 0 (no credit) or e.g. 0.1")
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
  if isinstance(r.slots, bool) or not isinstance(r.slots, int):
    _fail("rollout.slots", f"{r.slots!r} is not an integer",
          "set S >= 0 (0: every row in one batch)")
  _positive(c, "rollout.slots", allow_zero=True)
  _positive(c, "rollout.temperature_tau", allow_zero=True)
  if not r.temperature_tau < 1.0:  # T (1 - tau) at h_hat = -1 must stay > 0
    _fail("rollout.temperature_tau", f"{r.temperature_tau!r} is not below 1",
          "set a value in [0, 1), such as 0.05 (HAPO's)")
  if not 0.0 < r.entropy_pivot < 1.0:  # NaN fails too
    _fail("rollout.entropy_pivot", f"{r.entropy_pivot!r} is outside (0, 1)",
          "set a quantile such as 0.8 (HAPO's)")

  for name in c.rewards.functions:  # a registered name or a reference
    rewards.references.check(name)
  rewards.references.check_columns(c.rewards.functions)
  if not c.rewards.functions:
    _fail("rewards.functions", "is empty", "name at least one reward function")
  rewards.gym_scoring.check_task(c.data.task, tuple(c.rewards.functions))
  if len(c.rewards.weights) != len(c.rewards.functions):
    _fail("rewards.weights",
          f"has {len(c.rewards.weights)} entries for "
          f"{len(c.rewards.functions)} reward functions",
          "give one weight per reward function")
  _positive(c, "rewards.workers", allow_zero=True)
  _positive(c, "rewards.timeout_s")
  _positive(c, "rewards.deadline_s")
  # Each shaper's options and reads (`rewards.check_shapers`); its table
  # against the task's ids: `rollout.checks.check_prompt_ids`, in the stage checks.
  rewards.check_shapers(
      c.rewards.shapers, functions=tuple(c.rewards.functions),
      weights=tuple(c.rewards.weights), max_new_tokens=r.max_new_tokens)

  _positive(c, "entropy.coef", allow_zero=True)
  _positive(c, "llds.coef", allow_zero=True)
  _check_choice("llds.gate", c.llds.gate, regularisers.LLDS_GATES)

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

  _positive(c, "train.num_steps")
  _positive(c, "train.num_iterations")
  _positive(c, "train.num_minibatches")
  for field in ("microbatch_size", "logprob_batch_size"):
    _positive(c, f"train.{field}", allow_zero=True)
  _positive(c, "train.chunk_size")
  if not isinstance(c.train.get("pack_rows", False), bool):
    _fail("train.pack_rows", f"{c.train.pack_rows!r} is not a bool",
          "set --config.train.pack_rows=True or False")
  if not 0.0 < c.data.heldout_fraction < 1.0:
    _fail("data.heldout_fraction", f"{c.data.heldout_fraction!r} is not in (0, 1)",
          "hold out a share such as 0.2")

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
  _check_choice("metrics.wandb_mode", c.metrics.wandb_mode, tracking.MODES)
  if len(c.mesh.shape) != len(c.mesh.axis_names):
    _fail("mesh.shape", f"{c.mesh.shape} does not match axis_names "
          f"{c.mesh.axis_names}", "give one size per axis")
