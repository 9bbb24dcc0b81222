"""AVSPO (arXiv 2605.21125): virtual rewards for collapsed groups, gated by
the tracked advantage collapse rate.

ACR is the share of groups whose rewards are all equal; its moving average
(momentum 0.9) is the estimator's state in TrainState (checkpointed). Once
it exceeds 0.3, each all-equal group is standardised together with one
virtual reward (r_hi below the midpoint of [r_lo, r_hi], r_lo above it), so
that all-fail groups get a negative and all-pass groups a positive
advantage; other groups get GRPO's. The authors' repository holds only a
README: a reconstruction from the abstract (see
grpo_jax.advantages.stateful.avspo).

Paper's setup (from the abstract): GRPO with the virtual samples, models of
0.5B to 14B on mathematical reasoning. Scaled down: the quickstart's run
(SmolLM2-135M-Instruct, one-digit additions, 40 steps of 2 prompts x 4
completions, 40 new tokens, on policy, no KL), about 10 minutes on a
2-core CPU. r_hi is 1.1, the largest weighted reward here (accuracy 1 plus
0.1 for the format).

Command:
  python -m experiments.train --config=configs/avspo.py --workdir=runs/avspo
  python -m experiments.evaluate --checkpoint=runs/avspo --json=avspo_after.json

Expect: exactly GRPO until the collapse rate's average passes 0.3 (with
the defaults, after four fully collapsed steps in a row at the earliest);
from then on a nonzero advantage/abs_mean on collapsed steps, and the
reward rising as in the quickstart. At 40 steps with 8 completions a step
the difference from GRPO is within run-to-run noise.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "avspo"
  c.advantage.kwargs = dict(momentum=0.9, acr_threshold=0.3, n_virtual=1,
                            r_lo=0.0, r_hi=1.1)
  return config_lib.finalize(c, arg)
