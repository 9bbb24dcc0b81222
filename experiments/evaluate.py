"""Greedy accuracy and pass@k on the held-out split: ``python -m experiments.evaluate``.

  python -m experiments.evaluate --config=configs/quickstart.py --num_problems=64
  python -m experiments.evaluate --checkpoint=runs/quickstart --k=4 \
      --json=runs/quickstart/eval.json

With ``--checkpoint=WORKDIR`` the config saved in the run's checkpoint is
used (``--config`` is then optional) and the policy params of its latest
checkpoint are evaluated; without it, the base model of ``--config``.
"""

import json

from absl import app
from absl import flags
import ml_collections
from ml_collections import config_flags

from grpo_jax import config as config_lib
from grpo_jax import evaluation
from grpo_jax import train as train_lib

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "A configs/<variant>.py file (optional with --checkpoint).",
    lock_config=True)
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", None, "A training workdir; evaluates its latest checkpoint.")
_NUM_PROBLEMS = flags.DEFINE_integer(
    "num_problems", 0, "Held-out problems; 0 = config.data.heldout_size.")
_K = flags.DEFINE_integer("k", 4, "Samples per problem for pass@k.")
_JSON = flags.DEFINE_string("json", None, "Write the figures to this file.")


def main(argv):
  del argv
  config = _CONFIG.value
  if _CHECKPOINT.value:
    _, metadata = train_lib.restore_metadata(_CHECKPOINT.value)
    config = ml_collections.ConfigDict(json.loads(metadata["config"]))
  if config is None:
    raise app.UsageError("give --config or --checkpoint.")
  config_lib.validate(config)
  results = evaluation.evaluate(
      config, checkpoint=_CHECKPOINT.value,
      num_problems=_NUM_PROBLEMS.value or config.data.heldout_size, k=_K.value)
  print(json.dumps(results, indent=2))
  if _JSON.value:
    with open(_JSON.value, "w") as f:
      json.dump(results, f, indent=2)


if __name__ == "__main__":
  app.run(main)
