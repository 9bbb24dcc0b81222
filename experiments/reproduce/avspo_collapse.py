"""Claim 5: AVSPO cuts the advantage collapse rate against GRPO.

Paper: AVSPO (arXiv 2605.21125; seed 000 para. 55): virtual samples for
groups whose rewards all agree, gated by the tracked collapse rate, reduce
"the advantage collapse rate by about 60%".

Arms (the comparison task at the quickstart's scale: 2 prompts x 4, 40
steps, lr 2e-5, no KL):
  grpo   `configs/grpo.py`
  avspo  `configs/avspo.py` (momentum 0.9, threshold 0.3, one virtual
         sample per collapsed group)
The collapse rate is measured on the verifier's rewards (the share of
groups whose completions all score alike), not on the advantages, which
AVSPO's virtual samples change by design; the nonzero-gradient share
shows that mechanism.
Scale-down: 8 rollouts per step, 40 steps.

Command (3 seeds; 11 minutes for AVSPO's three runs on this 2-core CPU,
3.5 a run, after GRPO's, which claim 4 shares, 14):
  python -m experiments.reproduce.avspo_collapse
"""

from experiments.reproduce import runner

ARMS = (
    runner.Arm("grpo", "grpo"),
    runner.Arm("avspo", "avspo", rescale=False),
)
COLUMNS = ("collapse", "nonzero_share", "heldout", "accuracy_last10",
           "entropy_last10")
PANELS = (
    ("collapse rate (verifier rewards)", "advantage/collapse_rate"),
    ("nonzero-gradient share", "rollout/nonzero_gradient_share"),
    ("sampled accuracy", "accuracy"),
    ("held-out greedy accuracy", "eval/greedy_accuracy"),
)

if __name__ == "__main__":
  runner.main("avspo_collapse", ARMS, COLUMNS, PANELS)
