"""HAPO, history-aware length reward (seed 002 para. 115): each problem
remembers the shortest correct answer seen so far, h_x, and an answer is
rewarded for beating it.

Reward (the `hapo_length` shaper): R = 1[correct] + w f, f = cos((n / h_x)
pi / 2) for n < 2 h_x, else -1; correct answers keep max(-0.7, f), wrong
ones min(0, f); 0 until the problem has a correct answer. After every step
h_x <- min(h_x, that step's shortest correct length). The history is a
table of one float32 slot per problem (`data.Example.index`), the shape
stage's state in TrainState, checkpointed with the run.

Paper's setup (the authors' ``utils.py``, also boovines/G-HAPO):
DeepSeek-R1-Distill-Qwen-1.5B, GRPO, w = 1, the history updated after each
rollout. Scaled down to the quickstart (SmolLM2-135M-Instruct, one-digit
sums, 2 prompts x 4 completions of up to 40 tokens, 40 steps): w = 1 (the
shaper's weight); the table holds 300 slots (the comparison task's
problems; 100 here); the history is updated once per step from all its
rows (order-free); correctness alone as the task reward.

Command:
  python -m experiments.train --config=configs/hapo_length.py --workdir=runs/hapo_length

Expect: shaping/hapo_length/changed rising as problems gain a history
(40 steps x 2 prompts visit about 50 training problems, so most are seen
once or twice); correct completions shorter than GRPO's. Not measured at
this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.rewards.functions = ("accuracy",)
  c.rewards.weights = (1.0,)
  # One slot per problem: 100 one-digit sums (300 on the comparison task).
  c.rewards.shapers.hapo_length = dict(weight=1.0, mode="min", capacity=300)
  return config_lib.finalize(c, arg)
