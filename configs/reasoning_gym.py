"""Reasoning Gym: GRPO on a suite of procedural tasks, each scored by its
own verifier (needs ``pip install -e ".[data]"``: reasoning-gym).

Task ``data.task="reasoning_gym"`` (`grpo_jax.data.gym`): problems drawn
uniformly from five reasoning_gym generators (``data.generators``: basic
arithmetic, chain sums, leg counting, letter counting, word sorting), each
at its curriculum level ``data.difficulty`` (0 the easiest; a generator
stops at its own highest), 1000 problems each
(``data.problems_per_generator``), 20% of them held out by a hash of their
text. Reward: ``reasoning_gym``, each generator's own scorer on the
completion's last ``\\boxed{}`` (partial credit where the scorer gives it,
e.g. word sorting's words in place), plus 0.1 ``format``. Held-out greedy
accuracy (eval/greedy_accuracy) is judged by the same scorers, correct at
a score of 1.

Scale: the quickstart's (configs/quickstart.py), SmolLM2-135M-Instruct,
2 prompts x 4 completions, 40 steps, no KL; here up to 64 new tokens (a
sorted word list takes more than 40) and longer prompt buckets (the
generators' questions carry their own instructions).

Command:
  python -m experiments.train --config=configs/reasoning_gym.py --workdir=runs/reasoning_gym
  # harder problems, two generators:
  python -m experiments.train --config=configs/reasoning_gym.py \\
      --workdir=runs/rg_hard --config.data.difficulty=2 \\
      --config.data.generators='("leg_counting", "word_sorting")'

Expect (not yet measured at this scale): reward/format rising within the
first steps, reward/reasoning_gym after it, on the arithmetic and counting
generators before word sorting; eval/greedy_accuracy on 40 held-out
problems after steps 20 and 40. Add ``:tiny`` to the config path for a
seconds-long smoke run on a random tiny model.
"""

from grpo_jax import config as config_lib
from grpo_jax.data import gym


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.data.task = "reasoning_gym"
  c.data.generators = gym.DEFAULT_GENERATORS
  c.data.difficulty = 0
  c.data.problems_per_generator = 1000
  c.data.heldout_fraction = 0.2
  c.data.system_prompt = gym.SYSTEM_PROMPT
  c.data.prompt_buckets = (128, 256)
  c.rollout.max_new_tokens = 64
  c.rewards.functions = ("reasoning_gym", "format")
  c.rewards.weights = (1.0, 0.1)
  c = config_lib.finalize(c, arg)
  if arg == config_lib.TINY_MODEL:
    # Character-level prompts: the generators' questions run to a few
    # hundred characters.
    c.data.prompt_buckets = (512,)
  return c
