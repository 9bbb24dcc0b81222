r"""Greedy accuracy, pass@k and maj@k of a policy: ``python -m experiments.evaluate``.

  # the configured task's held-out split, base model
  python -m experiments.evaluate --config=configs/quickstart.py
  # a trained run's latest checkpoint (its own config), 8 samples per problem
  python -m experiments.evaluate --checkpoint=runs/quickstart \
      --num_samples=8 --k=1,4,8 --json=runs/quickstart/eval.json
  # ... sampled at temperature 0.6 instead of the run's
  python -m experiments.evaluate --checkpoint=runs/quickstart \
      --num_samples=8 --config.rollout.temperature=0.6
  # GSM8K's test split (tensorflow_datasets, read and never downloaded:
  # prepare it once where the network allows, python -c "import
  # tensorflow_datasets as tfds; tfds.data_source('gsm8k')"), the first
  # 200 problems
  python -m experiments.evaluate --config=configs/quickstart.py \
      --benchmark=gsm8k --num_problems=200
  # a JSONL file of question/answer records (MATH-500, AIME, ...)
  python -m experiments.evaluate --config=configs/quickstart.py \
      --benchmark=math500.jsonl --config.rollout.max_new_tokens=1024

``--benchmark`` is ``heldout`` (default), ``gsm8k`` or a JSONL path whose
records hold a question (``question`` or ``problem``) and an answer
(``answer`` or ``solution``; other names with ``--question_key`` /
``--answer_key``). Sampling follows the config's rollout block (``--config.
rollout.temperature=0.6``, ``max_new_tokens``, top-k/top-p); every problem
gets one greedy completion and ``--num_samples`` sampled ones. With
``--checkpoint=WORKDIR`` the policy of the run's latest checkpoint is
evaluated under the config saved with it, ``--config.a.b=value`` overrides
applied on top (``--config`` is then optional, and its file's own values
are not read); an override of the policy's own fields (model, lora, seed)
is an error. Without it, the base model of ``--config``. Prompts read as the
config's training prompts do (a config with LCPO's shaper appends each
problem's "Think for N tokens."). Bad input (a missing
file or field, k above num_samples) stops before any model is loaded.
"""

import functools
import json
import os

if __name__ == "__main__":  # before the imports below, which a re-exec
  from grpo_jax.runtime import allocator  # would load twice
  allocator.enable(keep_freed=False)  # decoding only

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags
from experiments import _cli
from grpo_jax import train as train_lib
from grpo_jax import evaluation
from grpo_jax.train import saved_runs

# Without --config the base config parses the --config.a.b overrides (their
# fields and types), which then apply to a --checkpoint run's own config.
_BASE_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "base_config.py")
_CONFIG = config_flags.DEFINE_config_file(
    "config", _BASE_CONFIG, "A configs/<variant>.py file (optional with "
    "--checkpoint, whose run's config --config.a.b=value overrides then "
    "change).", lock_config=True)
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", None, "A training workdir; evaluates its latest checkpoint.")
_BENCHMARK = flags.DEFINE_string(
    "benchmark", "heldout",
    "heldout (the config's task), gsm8k (test split, tfds) or a JSONL path.")
_NUM_PROBLEMS = flags.DEFINE_integer(
    "num_problems", 0, "The first N problems; 0 = config.data.heldout_size "
    "for heldout, all of a benchmark otherwise.")
_NUM_SAMPLES = flags.DEFINE_integer(
    "num_samples", 0, "Sampled completions per problem (n >= every k); "
    "0 = the largest k.")
_K = flags.DEFINE_list(
    "k", ["1", "4"], "Budgets of pass@k and maj@k, e.g. 1,4,8; empty = "
    "greedy accuracy only.")
_BATCH_SIZE = flags.DEFINE_integer(
    "batch_size", 0, "Prompts per sampler call; 0 = config.eval.batch_size.")
_SEED = flags.DEFINE_integer("seed", 0, "Sampling seed.")
_QUESTION_KEY = flags.DEFINE_string(
    "question_key", "", "A JSONL benchmark's question field; '' = question "
    "or problem.")
_ANSWER_KEY = flags.DEFINE_string(
    "answer_key", "", "A JSONL benchmark's answer field; '' = answer or "
    "solution.")
_DATA_DIR = flags.DEFINE_string(
    "data_dir", None, "tensorflow_datasets data directory (--benchmark=gsm8k).")
_JSON = flags.DEFINE_string("json", None, "Write the figures to this file.")


def parse_k(values) -> list:
  try:
    return [int(v) for v in values if v.strip()]
  except ValueError as error:
    raise app.UsageError(
        f"--k={','.join(values)}: give integers, e.g. --k=1,4,8.") from error


def main(argv):
  del argv
  given = flags.FLAGS["config"].present
  if _CHECKPOINT.value:
    if given:
      logging.warning(
          "--config=%s: with --checkpoint the run's own config is evaluated; "
          "only the --config.a.b=value overrides apply to it.",
          flags.FLAGS["config"].config_filename)
    _, config = saved_runs.restore_config(_CHECKPOINT.value)
    try:
      config = saved_runs.with_overrides(
          config, config_flags.get_override_values(flags.FLAGS["config"]))
    except ValueError as error:
      raise app.UsageError(str(error)) from None
  elif given:
    config = _CONFIG.value
  else:
    raise app.UsageError("give --config or --checkpoint.")
  train_lib.validate(config)
  results = evaluation.evaluate(
      config, load_policy=functools.partial(
          saved_runs.policy_to_evaluate, config, _CHECKPOINT.value),
      benchmark=_BENCHMARK.value,
      num_problems=_NUM_PROBLEMS.value, num_samples=_NUM_SAMPLES.value,
      k=parse_k(_K.value), seed=_SEED.value, batch_size=_BATCH_SIZE.value,
      question_key=_QUESTION_KEY.value, answer_key=_ANSWER_KEY.value,
      data_dir=_DATA_DIR.value)
  print(json.dumps(results, indent=2))
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(results, f, indent=2)


if __name__ == "__main__":
  _cli.run(main)
