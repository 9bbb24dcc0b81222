"""SPO (single-stream policy optimisation; seed 002 para. 7): a persistent
per-prompt Beta value tracker replaces the group baseline, and advantages
are normalised over the whole batch.

Advantages `advantages.spo`: A_raw = R - alpha_x / (alpha_x + beta_x), the
tracker of problem x (`data.Example.index`) as it stood before the step,
then (A_raw - mean_B) / std_B over the batch; after the step
alpha_x <- rho alpha_x + R and beta_x <- rho beta_x + (1 - R). The
tracker (one slot per problem, `capacity` slots) is the estimator's state in
TrainState, checkpointed.

Paper's setup (verl recipe/spo): one sample per prompt (G = 1) and more
prompts, the KL-adaptive rho in [0.875, 0.96], trackers initialised from 8
offline samples per prompt, prompts drawn with priority sqrt(p(1-p)) +
0.05. Here: ``rho="constant"`` (0.875; the KL-adaptive rho is not built),
the uninformed prior alpha = beta = 0.5 (no offline pass), and the
task's own prompt order (the prioritised draw needs the tracker in the
select stage, which the rollout does not pass yet). Scaled down to the
quickstart's 8 completions a step as 8 prompts x 1 completion (one-digit
sums, SmolLM2-135M-Instruct, 40 new tokens, 40 steps, no KL); the table
holds the task's 100 problems; the reward is the verifier's 0/1 alone
(the tracker counts successes, so no format bonus). ``:tiny`` keeps the
shapes of use_tiny (2 prompts x 2).

Command:
  python -m experiments.train --config=configs/spo.py --workdir=runs/spo
  python -m experiments.evaluate --checkpoint=runs/spo --json=spo_after.json

Expect: nonzero advantages at every step, also when all 8 samples fail
alike (the tracked baseline sits above 0 until a problem's tracker has
learned it fails); with 40 steps over ~50 training problems each problem
is seen a few times only, so the tracker stays close to its prior and the
run behaves like batch-normalised REINFORCE with baseline 0.5. Not
measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.rollout.num_prompts = 8
  c.rollout.num_generations = 1
  # The tracker counts successes: a reward in [0, 1], the verifier's alone
  # (the paper's binary correctness).
  c.rewards.functions = ("accuracy",)
  c.rewards.weights = (1.0,)
  c.advantage.name = "spo"
  # One slot per problem: 10**digits ** operands * len(ops) ** (operands - 1)
  # is 100 here and 300 on the comparison task (three operators).
  c.advantage.kwargs = dict(rho="constant", rho_value=0.875, eps=1e-8,
                            capacity=300)
  return config_lib.finalize(c, arg)
