"""ReMax (arXiv 2310.10505): REINFORCE whose baseline is the reward of a
greedy completion of the same prompt.

Advantages `advantages.remax`: A = R - R_greedy. Each prompt gets one extra
row decoded at temperature 0 (the rollout adds it because the estimator
reads ``greedy_rewards``); it is scored, logged as reward/greedy_total, and
never trained on. Objective `reinforce` (-A logp, no ratio or clip).

Paper's setup (and verl's ``remax``): one sampled and one greedy completion
per prompt, on policy, REINFORCE. Scaled down to the quickstart
(configs/quickstart.py): SmolLM2-135M-Instruct on one-digit sums, 2 prompts
x 4 sampled completions (+ 1 greedy) of up to 40 tokens, 40 steps, no KL;
four samples per prompt keep the rows comparable with the other configs.

Command:
  python -m experiments.train --config=configs/remax.py --workdir=runs/remax

Expect: a group whose samples all match the greedy completion's reward
gets 0; an all-wrong group under a correct greedy answer is pushed down
(unlike GRPO). Each step samples 25% more rows than GRPO. Not measured at
this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "remax"
  c.advantage.kwargs = {}
  c.objective.name = "reinforce"
  c.objective.kwargs = dict(aggregation="seq_mean_token_mean")
  return config_lib.finalize(c, arg)
