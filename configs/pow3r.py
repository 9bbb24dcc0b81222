"""POW3R (seed 000 para. 58; reconstruction): a rubric reward whose
criterion weights follow how much each criterion separates the group now,
each category keeping its human weight.

Reward: R = sum_c w_pc s_pgc, w_pc = H_k h_c e^{sigma_pc / temp} / sum_{c'
in k} h_c' e^{sigma_pc' / temp}, sigma_pc the criterion's std over the
group (the `pow3r` shaper adds sum_c (w_pc - h_c) s_pgc to the static
rubric sum_c h_c s_pgc). The criteria are programmatic checks of the
arithmetic task's completions (`rewards.rubric`): accuracy (category 0,
h = 0.6); format and boxed_once (category 1, 0.1 each); shows_work and
concise (category 2, 0.1 each); temp = 0.5.

Paper's setup: rubric-graded open-ended tasks with human criterion weights
(not known beyond the abstract; VARIANTS.md 5.5 proposes the softmax form
and temp). Scaled down to the quickstart (SmolLM2-135M-Instruct, one-digit
sums, 2 prompts x 4 completions of up to 40 tokens, 40 steps) with the
code-checked rubric above in place of a graded one.

Command:
  python -m experiments.train --config=configs/pow3r.py --workdir=runs/pow3r

Expect: shaping/pow3r/changed > 0 where a group's outputs differ on some
criteria and not others; the rubric's criteria rising together. Not
measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  # The rubric: human weights summing to 1, one category per criterion.
  c.rewards.functions = ("accuracy", "format", "boxed_once", "shows_work",
                         "concise")
  c.rewards.weights = (0.6, 0.1, 0.1, 0.1, 0.1)
  c.rewards.shapers.pow3r = dict(weight=1.0, categories=(0, 1, 1, 2, 2),
                                 temp=0.5)
  return config_lib.finalize(c, arg)
