"""Claim 3: clip-free and ratio-variance objectives stay stable on stale
data where the clipped objective degrades.

Papers: CFPO (arXiv 2601.22801; seed 002 para. 25), a clipping-free
quadratic trust region; R2VPO (seed 002 para. 13, a reconstruction here),
a penalty on the variance of the ratio in place of clipping. Both claim
stability where PPO's clip lets the policy drift over several optimiser
steps on one batch.

Arms (the comparison task at the quickstart's scale: 2 prompts x 4, 40
steps, lr 2e-5, no KL), 4 or 8 optimiser steps per batch (4 minibatches
of 2 rows, one or two passes):
  grpo_4mb, grpo_2x4mb     PPO's clip, eps 0.2 (`configs/grpo.py`)
  cfpo_4mb, cfpo_2x4mb     `configs/cfpo.py` (eps 0.2)
  r2vpo_4mb, r2vpo_2x4mb   `configs/r2vpo.py` (delta 0.01; its loss a
                           mean over the batch's tokens, the others' over
                           each completion's tokens, then rows)
Scale-down: 8 rows per batch; the papers train 1.5B-7B models with
hundreds of rows per batch.

Command (3 seeds; about 2.7 hours on this 2-core CPU: 4-6 minutes of
training a run at 4 steps per batch, 8-11 at 8):
  python -m experiments.reproduce.stale_data

Read: accuracy and entropy late in the run and the ratio's spread, at 4
against 8 steps per batch.
"""

from experiments.reproduce import runner


def steps(passes: int) -> dict:
  return {"train.num_iterations": passes, "train.num_minibatches": 4}


ARMS = tuple(
    runner.Arm(f"{name}_{'' if passes == 1 else '2x'}4mb", name, steps(passes))
    for name in ("grpo", "cfpo", "r2vpo") for passes in (1, 2))
COLUMNS = ("heldout", "accuracy_last10", "entropy_last10", "ratio_spread",
           "ratio_spread_max", "ratio_var", "clip_fraction")

if __name__ == "__main__":
  runner.main("stale_data", ARMS, COLUMNS, runner.RATIO_PANELS)
