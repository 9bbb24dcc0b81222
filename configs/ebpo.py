"""EBPO (arXiv 2602.05165): the group baseline shrunk toward a global prior.

b_p = S mu0 + (1 - S) mean_g R and A = (R - b_p) / sigma0, with the prior
(mu0, sigma0, the pooled within-prompt variance and the between-prompt
variance behind S) kept across steps by Welford accumulators, the
estimator's state in TrainState (checkpointed). No public code exists: a
reconstruction from the abstract (see grpo_jax.advantages.stateful.ebpo).

Paper's setup (from the abstract): GRPO's recipe with this baseline, which
it says helps most at small group sizes and in all-fail groups, where
GRPO's advantage vanishes and EBPO's stays negative. Scaled down: the
quickstart's run (SmolLM2-135M-Instruct, one-digit additions, 40 steps of
2 prompts x 4 completions, 40 new tokens, on policy, no KL), about 10
minutes on a 2-core CPU.

Command:
  python -m experiments.train --config=configs/ebpo.py --workdir=runs/ebpo
  python -m experiments.evaluate --checkpoint=runs/ebpo --json=ebpo_after.json

Expect: the first step equal to GRPO's (empty prior); afterwards a nonzero
advantage/abs_mean even on steps whose groups are all collapsed, and the
reward rising as in the quickstart. At 40 steps with 8 completions a step
the difference from GRPO is within run-to-run noise.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "ebpo"
  c.advantage.kwargs = dict(scale="global_std", eps=1e-6, tau2_min=1e-6)
  return config_lib.finalize(c, arg)
