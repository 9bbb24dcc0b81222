"""Small-scale reproductions of the papers' claims, one script per claim.

  python -m experiments.reproduce.two_grpo      # 2-GRPO vs 16-GRPO
  python -m experiments.reproduce.gmpo_ratio    # GMPO's ratio range
  python -m experiments.reproduce.stale_data    # CFPO / R2VPO vs clipping
  python -m experiments.reproduce.knapsack      # Knapsack-RL's budget
  python -m experiments.reproduce.avspo_collapse
  python -m experiments.reproduce.length        # GFPO / HAPO lengths
  python -m experiments.reproduce.group_size    # G at a fixed budget

Each runs its arms (`runner.Arm`: a config under configs/ and what the
claim changes in it) with several seeds on the comparison task at the
quickstart's scale, and writes a JSON of the per-step metrics, a PNG and a
markdown table (`runner.main`); its docstring gives the claim, the
scale-down and the runtime here. ``--preset=tiny`` runs the same arms on
the random tiny model in seconds (the smoke tests).
"""
