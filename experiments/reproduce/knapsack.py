"""Claim 4: Knapsack-RL raises the share of prompts with a nonzero
gradient over uniform allocation at the same budget.

Paper: Knapsack-RL (arXiv 2509.25849; seed 002 para. 40): allocating the
rollout budget by a knapsack over prompts' estimated success rates raises
"the ratio of non-zero policy gradients by 20-40%".

Arms (the comparison task at the quickstart's scale: 8 rollouts per step,
40 steps, lr 2e-5, no KL):
  grpo         4 completions for each of 2 prompts
  knapsack_rl  `configs/knapsack_rl.py`: 2-6 completions per prompt from
               the knapsack over the same 8 (5 warm-up steps)
Scale-down: 8 rollouts per step over 300 problems; the paper's budgets
are thousands of rollouts over its whole prompt set.

Command (3 seeds; 28 minutes on this 2-core CPU, 4.7 a run):
  python -m experiments.reproduce.knapsack

Read: the nonzero-gradient share (rows with a nonzero advantage) and the
collapse rate, at equal rollouts.
"""

from experiments.reproduce import runner

ARMS = (
    runner.Arm("grpo", "grpo"),
    runner.Arm("knapsack_rl", "knapsack_rl", rescale=False),
)
COLUMNS = ("nonzero_share", "collapse", "rollouts", "heldout",
           "accuracy_last10")
PANELS = (
    ("nonzero-gradient share", "rollout/nonzero_gradient_share"),
    ("collapse rate", "advantage/collapse_rate"),
    ("sampled accuracy", "accuracy"),
    ("held-out greedy accuracy", "eval/greedy_accuracy"),
)

if __name__ == "__main__":
  runner.main("knapsack", ARMS, COLUMNS, PANELS)
