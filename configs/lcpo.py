"""LCPO / L1 (arXiv 2503.04697): reward the right answer and a completion
as long as the target length the prompt asks for.

Reward (the `lcpo` shaper, exact mode): R = 1[correct] - alpha |n - n*|,
n the completion's tokens and n* the target stated in the prompt ("Think
for n* tokens.", appended to every question; `rewards.length_shapers.
lcpo_target` derives n* from the prompt's id, so a prompt keeps its target
across steps and a resumed run). ``mode="max"`` is L1-Max: R = 1[correct]
clip(0.5 + (n* - n) / (2 width), 0, 1).

Paper's setup (the authors' deepscaler fork): DeepScaleR-1.5B, n* drawn
uniformly in [100, 4000] tokens, alpha = 1/3000 per token (the paper's
0.0003), correctness alone as the task reward, GRPO. Scaled down to the
quickstart (SmolLM2-135M-Instruct, one-digit sums, 2 prompts x 4
completions of up to 40 tokens, 40 steps): n* in [8, 32] tokens and alpha
= 0.03, so being off by the whole target range costs about what it does
in the paper (24 x 0.03 = 0.72 against 3900 / 3000 = 1.3). ``:tiny``
keeps targets within its 8 new tokens.

Command:
  python -m experiments.train --config=configs/lcpo.py --workdir=runs/lcpo

Expect: shaping/lcpo/abs_mean (the mean token distance to the target
times alpha) falling over the run; accuracy near GRPO's. Evaluation
prompts (held-out, benchmarks) carry a target as training prompts do
(`evaluation.as_prompted`, n* from each problem's id). Not measured at
this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.rewards.functions = ("accuracy",)  # L1 rewards correctness alone
  c.rewards.weights = (1.0,)
  c.rewards.shapers.lcpo = dict(weight=1.0, mode="exact", target_range=(8, 32),
                                alpha=0.03)
  c = config_lib.finalize(c, arg)
  if arg == config_lib.TINY_MODEL:
    c.rewards.shapers.lcpo.target_range = (2, c.rollout.max_new_tokens)
  return c
