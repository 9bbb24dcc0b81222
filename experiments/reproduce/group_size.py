"""Claim 7: the group size G at a fixed rollout budget (GRPO's gradient as
a U-statistic).

Paper: "GRPO through the lens of U-statistics" (seed 002 para. 57): "the
GRPO policy gradient is inherently a U-statistic", with "a universal
scaling law that offers principled guidance for selecting the optimal
group size".

Arms (`configs/grpo.py`, G=2 through `configs/two_grpo.py`; the comparison
task at the quickstart's scale: 40 steps, lr 2e-5, no KL), 16 rollouts per
step split as P prompts x G completions:
  two_grpo_8x2, grpo_4x4, grpo_2x8, grpo_1x16
Scale-down: one budget (16) instead of the paper's grid, 40 steps. The
8x2 and 1x16 arms are claim 1's runs (`two_grpo`).

Command (3 seeds; about 70 minutes on this 2-core CPU, 5-6 minutes a
run; 33 minutes for the six runs claim 1 does not share):
  python -m experiments.reproduce.group_size

Read: the share of rows with a nonzero advantage (a group all right or
all wrong trains nothing: more likely at small G), the gradient norm, and
accuracy, against G.
"""

from experiments.reproduce import runner


def split(prompts: int, generations: int) -> dict:
  return {"rollout.num_prompts": prompts,
          "rollout.num_generations": generations}


ARMS = (
    runner.Arm("two_grpo_8x2", "two_grpo", split(8, 2)),
    runner.Arm("grpo_4x4", "grpo", split(4, 4)),
    runner.Arm("grpo_2x8", "grpo", split(2, 8)),
    runner.Arm("grpo_1x16", "grpo", split(1, 16)),
)
COLUMNS = ("heldout", "accuracy_last10", "nonzero_share", "collapse",
           "abs_advantage", "grad_norm")
PANELS = (
    ("sampled accuracy", "accuracy"),
    ("held-out greedy accuracy", "eval/greedy_accuracy"),
    ("nonzero-gradient share", "rollout/nonzero_gradient_share"),
    ("gradient norm", "grad_norm"),
)

if __name__ == "__main__":
  runner.main("group_size", ARMS, COLUMNS, PANELS)
