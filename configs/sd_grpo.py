"""SD-GRPO (seed list 000 ¶25): segment-decomposed advantages on problems
of several parts, each part's answer rewarded on its own.

Task `arithmetic.SegmentTask` (``data.task="segments"``): "Compute each: (a) 3 + 4
(b) 5 + 2. Write each result in its box: (a) 3 + 4 = \\boxed{} (b) 5 + 2 =
\\boxed{}", 2 to ``data.max_segments`` = 3 parts. Segment s of a completion
is its s-th ``\\boxed{}`` (reward 1 if it equals the s-th sub-answer, plus
``data.box_reward`` = 0.1 if it holds a number at all: each part's format
reward, as the quickstart's 0.1 format bonus is the whole answer's) and
owns the tokens from the end of box s-1 to the end of box s. Advantages
`advantages.sd_grpo`, token level: each token gets the z-score, over the
group, of its segment's reward; tokens of no segment (after the last box)
get the holistic reward's z-score. The holistic reward column is
``all_segments`` (1 iff every part is right) plus 0.1 ``format``; ``lam``
blends it into the segment rewards (0 here, the abstract's plain
per-segment form; try ``--config.advantage.kwargs.lam=0.5``, the blend the
abstract reports helps; its form is a reconstruction).

Paper's setup: not in the abstract beyond GRPO-style group sampling and
z-normalised per-segment rewards; this follows GRPO's (one optimiser step
per batch, std-normalised). Scaled down to the quickstart
(configs/quickstart.py): SmolLM2-135M-Instruct, 2 prompts x 4 completions,
here of up to 64 tokens (two or three boxes need more than 40), 40 steps,
no KL.

Command:
  python -m experiments.train --config=configs/sd_grpo.py --workdir=runs/sd_grpo

Expect (the paper's claim): the share of parts right rising faster than
under GRPO on the same holistic reward, since a completion that gets part
(a) right and (b) wrong is pushed up on (a)'s tokens and down on (b)'s
instead of one sign for all; reward/all_segments lags it. Measured here
(one seed, docs/comparisons.md): the format is learned (reward/format 0.125
-> 0.95) but partly gamed (boxed numbers without the sums); held-out parts
right 0.025 -> 0.069, all parts 0 -> 0. No GRPO arm yet.
"""

from grpo_jax import config as config_lib

# `data.SYSTEM_PROMPT` asks for one final box; a multi-part problem needs one
# per part.
SYSTEM_PROMPT = ("You are a math assistant. Solve each part in order; give "
                 "each part's answer as \\boxed{<number>}.")


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.data.task = "segments"
  c.data.max_segments = 3
  c.data.box_reward = 0.1  # each part's format reward: a boxed number
  c.data.system_prompt = SYSTEM_PROMPT
  c.rollout.max_new_tokens = 64
  # segment_fraction at weight 0: logged (reward/segment_fraction, the share
  # of parts right), never trained on.
  c.rewards.functions = ("all_segments", "format", "segment_fraction")
  c.rewards.weights = (1.0, 0.1, 0.0)
  c.advantage.name = "sd_grpo"
  c.advantage.kwargs = dict(lam=0.0, blend_at="reward", scale="group")
  c = config_lib.finalize(c, arg)
  if arg == config_lib.TINY_MODEL:
    # Character-level prompts: a three-part question is over 80 characters.
    c.data.prompt_buckets = (160,)
  return c
