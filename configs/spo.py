"""SPO (single-stream policy optimisation; seed 002 para. 7): a persistent
per-prompt Beta value tracker replaces the group baseline, its forgetting
adapts to how far the policy moved, advantages are normalised over the
whole batch, and prompts are drawn by the tracker's uncertainty.

Advantages `advantages.spo`: A_raw = R - alpha_x / (alpha_x + beta_x), the
tracker of problem x (`data.Example.index`) as it stood before the step,
then (A_raw - mean_B) / std_B over the batch; after the step
alpha_x <- rho_x alpha_x + R and beta_x <- rho_x beta_x + (1 - R) with the
KL-adaptive rho_x = clip(2^(-D_x / 0.06), 0.875, 0.96), D_x the mean
|log-prob change| of the response stored at x's previous visit
(`grpo_jax.rollout.revisits`; 0, so rho = 0.96, at a first visit). The prompts of
a step are drawn without replacement with weight sqrt(p_x (1 - p_x)) +
0.05 (`strategies.select.prioritized`). Before the first step's draw the
tracker is initialised offline (``offline_init`` = n): n completions of
every training problem under the initial policy, k_x solved, set alpha_x
= 8 (k_x + 0.5) / (n + 1) and beta_x = 8 (n - k_x + 0.5) / (n + 1)
(N_init = 1 / (1 - 0.875) = 8). The tracker and the stored responses (one
slot per problem) are state in TrainState, checkpointed.

Paper's setup (verl recipe/spo, train.sh): one sample per prompt (G = 1),
1024 prompts drawn by priority from a pool of 14000 in 8 PPO minibatches
of 128, the KL-adaptive rho (``rho.type="kl"``), trackers initialised
from 8 offline samples per prompt (a separate evaluation pass of the base
model at temperature 0.6). Here: the same 8 offline samples of each
training problem, drawn at step 0 by the training sampler (its
temperature) in calls of the step's 8 rows (the one-digit sums' ~50
training problems: 400 completions, about a minute on a 2-core CPU, as
sGPO's profile), the pool is every training problem, and the quickstart's
8 completions a step as 8 prompts x 1 completion in 2 minibatches of 4
(one-digit sums, SmolLM2-135M-Instruct, 40 new tokens, 40 steps, no KL;
ppo_clip acts on the second minibatch). The reward is the verifier's 0/1
alone (the tracker counts successes, so no format bonus). ``:tiny`` keeps
the shapes of use_tiny (2 prompts x 2) and draws 1 offline sample per
problem (4 problems per sampler call), so its first step stays short.

Command:
  python -m experiments.train --config=configs/spo.py --workdir=runs/spo
  python -m experiments.evaluate --checkpoint=runs/spo --json=spo_after.json

Expect: advantage/offline_problems (the training problems) and
advantage/offline_success_mean (the base model's solve rate) at step 0
only; nonzero advantages at every step, also when all 8 samples fail
alike (the tracked baseline sits above 0 until a problem's tracker has
learned it fails); revisits/revisited_share rising from 0 as problems come
back (40 steps x 8 draws over ~50 training problems), with
revisits/divergence_mean of a few hundredths, so rho sits near its 0.875
floor for problems the policy moved on. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.rollout.num_prompts = 8
  c.rollout.num_generations = 1
  c.train.num_minibatches = 2  # verl: 8 minibatches of 128 per batch
  # The tracker counts successes: a reward in [0, 1], the verifier's alone
  # (the paper's binary correctness).
  c.rewards.functions = ("accuracy",)
  c.rewards.weights = (1.0,)
  c.advantage.name = "spo"
  # One slot per problem: 10**digits ** operands * len(ops) ** (operands - 1)
  # is 100 here and 300 on the comparison task (three operators).
  c.advantage.kwargs = dict(rho="kl_adaptive", rho_min=0.875, rho_max=0.96,
                            d_half=0.06, eps=1e-8, capacity=300,
                            offline_init=8)  # verl: offline_N = 8
  c.select.name = "prioritized"
  c.select.kwargs = dict(floor=0.05)
  c = config_lib.finalize(c, arg)
  if arg == config_lib.TINY_MODEL:  # a short offline pass at step 0
    c.advantage.kwargs.offline_init = 1
  return c
