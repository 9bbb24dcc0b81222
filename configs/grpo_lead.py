"""GRPO-LEAD (seed 002 para. 42): a length-dependent reward for correct
answers and -1 for wrong ones.

Reward (the `grpo_lead` shaper): a correct answer earns exp(-alpha z), z its
length's z-score among the group's correct answers (shorter than them: more
than 1), a wrong but formatted one -1, a format failure 0; alpha = 0.05.

Paper's setup (aeroplanepaper/GRPO-LEAD): DeepSeek-R1-Distill-Qwen-14B,
GRPO with 8 samples per prompt, length shaping only for groups whose
three shortest answers average over 4000 tokens, and a difficulty-aware
reweighting of the advantages (the `grpo_lead` estimator: GRPO's
advantage times w(rho) where it is positive and w(1 - rho) otherwise, rho
the group's share of R > 0, w(x) = 0.4 + 1.1 / (1 + e^{10 (x - 0.75)})).
Scaled down to the quickstart (SmolLM2-135M-Instruct, one-digit sums, 2
prompts x 4 completions of up to 40 tokens, 40 steps): alpha and the
weight kept (neither has a unit), min_len_to_shape = 0 (every group is
shaped at 40 tokens), the format reward weighted 0 (it only marks format
failures).

Command:
  python -m experiments.train --config=configs/grpo_lead.py --workdir=runs/grpo_lead

Expect: completions shorter than GRPO's among correct answers, wrong
answers pushed down harder than GRPO's 0. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  # The total is 1[correct] + column = GRPO-LEAD's R; format marks failures.
  c.rewards.weights = (1.0, 0.0)
  c.rewards.shapers.grpo_lead = dict(weight=1.0, alpha=0.05,
                                     min_len_to_shape=0)
  # The difficulty-aware reweighting of GRPO's advantages (paper's w).
  c.advantage.name = "grpo_lead"
  c.advantage.kwargs = dict(low=0.4, high=1.5, k=10.0, x0=0.75)
  return config_lib.finalize(c, arg)
