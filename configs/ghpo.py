"""GHPO (arXiv 2507.10628): guided hints for the groups the policy cannot
solve yet.

Group strategy `strategies.resampled.ghpo` (VARIANTS.md 4.8, the authors'
``ghpo_trainer.py``): from start_hint_step on, a group whose accuracy
rewards are all 0 is sampled again from the hinted prompt

  question + "\\n The following text is the beginning part of the answer,
  which you can refer to for solving the problem:\\n" + the first
  round(omega * n) of the reference solution's n tokens

with omega rising through (0.25, 0.5, 0.75) while it stays all-wrong; a
group with any success keeps its plain prompt. Training is GRPO on each
group's final prompt (the hint is prompt context, never a target). The
reference is the task's worked solution: the arithmetic task's one-line
working "3 + 5 = \\boxed{8}" (so omega 0.75 shows "3 + 5 = \\boxed{"),
GSM8K's own; a task without one (jsonl, segments) is refused by
train.validate.

Paper's setup (recipes/Qwen2.5-Math-7B/ghpo/config_ghpo.yaml):
Qwen2.5-Math-7B with TRL's GRPO on math3to5_olympiads_aime, 8 completions
of up to 2048 tokens per prompt at temperature 1, lr 1e-6, no KL, accuracy
(1.0) and format (0.5) rewards, start_hint_step 0, one update per batch.
Scaled down to the quickstart (configs/quickstart.py): SmolLM2-135M-Instruct
on one-digit sums, 2 prompts x 4 completions of up to 40 tokens, 40 steps
at lr 2e-5, on policy, no KL, the quickstart's accuracy (1.0) and format
(0.1) rewards; hints from step 0, as the recipe. Each hint level samples
all P prompts again (one sampler shape; groups not escalated discard
theirs), so a step draws 1 to 4 rounds, and step s reads the prompts at
index 4s. ``:tiny``'s character-level prompts get one 192-token bucket,
which holds the hinted ones (about 150 characters).

Command:
  python -m experiments.train --config=configs/ghpo.py --workdir=runs/ghpo

Expect: ghpo/hinted_groups equal to the share of all-wrong groups early
on, falling as accuracy rises; ghpo/mean_omega the mean hint share (0 for
plain prompts); ghpo/still_wrong_groups the hinted groups still without a
correct completion at omega 0.75; reward/* and accuracy describe the plain
sample (round 0), comparable with GRPO's. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.groups.name = "ghpo"
  c.groups.kwargs = dict(start_hint_step=0, omegas=(0.25, 0.5, 0.75),
                         signal_reward="accuracy")
  c = config_lib.finalize(c, arg)
  if arg:  # `:tiny`: character-level prompts, the hinted ones ~150 long;
    c.data.prompt_buckets = (192,)  # one bucket, one sampler program
  return c
