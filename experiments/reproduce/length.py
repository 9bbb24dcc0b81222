"""Claim 6: GFPO and history-aware HAPO shorten completions at about equal
accuracy.

Papers: GFPO (arXiv 2508.09726; seed 002 para. 93): sample more and train
on the shortest k, cutting length inflation; HAPO (seed 002 para. 115):
reward an answer for beating the shortest correct one seen so far.

Arms (the comparison task at the quickstart's scale: 2 prompts, 40 steps,
lr 2e-5, no KL, up to 40 new tokens):
  grpo         4 completions per prompt
  gfpo         `configs/gfpo.py`: 8 sampled, the shortest 4 train, the
               loss a mean over the batch's tokens (the paper's; GRPO's
               is a mean over each completion's tokens, then rows)
  hapo_length  `configs/hapo_length.py`: accuracy plus the history-aware
               length reward (no format reward: GRPO's and GFPO's 0.1
               for the format drop out, so reward totals do not compare)
Scale-down: 40-token completions; the papers' answers run to thousands of
tokens, and GRPO lengthens them there. At this scale GRPO itself shortens
them (the quickstart from 40 to about 9 tokens), so the claim can only
show as a faster or further shortening at equal accuracy.

Command (3 seeds; 28 minutes on this 2-core CPU for GFPO's and HAPO's six
runs, 5.5 and 4 a run, after GRPO's, which claim 4 shares, 14):
  python -m experiments.reproduce.length
"""

from experiments.reproduce import runner

ARMS = (
    runner.Arm("grpo", "grpo"),
    runner.Arm("gfpo", "gfpo", rescale=False),
    runner.Arm("hapo_length", "hapo_length", rescale=False),
)
COLUMNS = ("length_first5", "length_last5", "heldout", "accuracy_last10",
           "rollouts")
PANELS = (
    ("completion length", "completion_length/mean"),
    ("sampled accuracy", "accuracy"),
    ("held-out greedy accuracy", "eval/greedy_accuracy"),
    ("truncated at 40 tokens", "truncation_rate"),
)

if __name__ == "__main__":
  runner.main("length", ARMS, COLUMNS, PANELS)
