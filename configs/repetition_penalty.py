"""N-gram repetition penalty (Yeo et al., arXiv 2502.03373, appendix C.2;
TRL's ``get_repetition_penalty_reward``): a completion that repeats its own
token n-grams is penalised in proportion to the share repeated.

Reward (the `repetition_penalty` shaper, beside accuracy and format):
column = max_penalty (1 - #distinct 3-grams / #3-grams), 0 for a
completion without a repeat, max_penalty = -1 in the limit of one 3-gram
over and over; n-grams of token ids, as TRL has them.

Paper's setup: the penalty rides on the cosine length reward of a
Llama-3.1-8B PPO run on MATH, added to wrong answers only; TRL's
defaults are ngram_size 3, max_penalty -1. Scaled down to the quickstart
(SmolLM2-135M-Instruct, one-digit sums, 2 prompts x 4 completions of up
to 40 tokens, 40 steps, GRPO): ngram_size 3 kept, max_penalty -0.5 so
that a repetitive correct answer still beats any wrong one, every row
penalised (TRL's semantics). ``:tiny`` counts single tokens (1-grams):
8 tokens of its random 100-token model hold repeated tokens but hardly
ever a repeated 2- or 3-gram.

Command:
  python -m experiments.train --config=configs/repetition_penalty.py --workdir=runs/repetition_penalty

Expect: shaping/repetition_penalty/abs_mean falling over the run (fewer
looping completions); accuracy near GRPO's. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.rewards.shapers.repetition_penalty = dict(weight=1.0, ngram_size=3,
                                              max_penalty=-0.5)
  c = config_lib.finalize(c, arg)
  if arg == config_lib.TINY_MODEL:
    c.rewards.shapers.repetition_penalty.ngram_size = 1
  return c
