"""Claim 1: 2-GRPO matches 16-GRPO with 1/8 of the rollouts.

Paper: "It Takes Two: Your GRPO Is Secretly DPO" (arXiv 2510.00977; seed
002 para. 5): 2-GRPO "achieves performance on par with 16-GRPO, despite
using only 1/8 of the rollouts and reducing training time by over 70%".

Arms (GRPO, `configs/grpo.py` and `configs/two_grpo.py`, on the comparison
task at the quickstart's scale: 40 steps, lr 2e-5, one optimiser step per
batch, no KL):
  grpo_1x16     1 prompt x 16 completions per step (16-GRPO)
  two_grpo_1x2  1 prompt x 2: equal prompts, 1/8 of the rollouts
  two_grpo_8x2  8 prompts x 2: equal rollouts (16 per step)
Scale-down: the paper trains 1.5B-7B models for hundreds of steps on
MATH-scale data with 16 rollouts on each of many prompts; here one prompt
per step for the 16-rollout arm, so that an arm costs minutes.

Command (3 seeds; about 45 minutes on this 2-core CPU, the 16-rollout
arms 5-6 minutes a run, the 2-rollout one 3):
  python -m experiments.reproduce.two_grpo

Read: held-out greedy accuracy after 40 steps and the sampled accuracy
over the last 10 steps, 1x2 and 8x2 against 1x16.
"""

from experiments.reproduce import runner

ARMS = (
    runner.Arm("grpo_1x16", "grpo", {"rollout.num_prompts": 1,
                                     "rollout.num_generations": 16}),
    runner.Arm("two_grpo_1x2", "two_grpo", {"rollout.num_prompts": 1,
                                            "rollout.num_generations": 2}),
    runner.Arm("two_grpo_8x2", "two_grpo", {"rollout.num_prompts": 8,
                                            "rollout.num_generations": 2}),
)
COLUMNS = ("heldout", "accuracy_last10", "rollouts", "train_s",
           "nonzero_share", "collapse", "length_last5")
PANELS = (
    ("sampled accuracy", "accuracy"),
    ("held-out greedy accuracy", "eval/greedy_accuracy"),
    ("nonzero-gradient share", "rollout/nonzero_gradient_share"),
    ("entropy", "entropy"),
)

if __name__ == "__main__":
  runner.main("two_grpo", ARMS, COLUMNS, PANELS)
