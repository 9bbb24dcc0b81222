"""DVAO (arXiv 2605.25604): each reward's z-score in the group, weighted by
that reward's variance in the group (a reconstruction: no public code).

Advantages `advantages.dvao`: A = sum_k c_k z_k with c_k proportional to
var_g(w_k R_k), so the reward that varies more in a group steers it and a
reward that does not vary counts 0; the weights are convex, so |A| stays
within the largest |z_k|. It needs two or more reward columns (validation
says so otherwise): accuracy and format, weight 1 each, since DVAO's
weights take the place of static ones.

Paper's setup: GRPO with several rewards (accuracy with length, format or
tool-call objectives) on Qwen3 and Qwen2.5 models, for mathematical
reasoning and tool use, against reward combination (GRPO on the weighted
sum), advantage combination and GDPO. Scaled down to the quickstart
(configs/quickstart.py): SmolLM2-135M-Instruct on one-digit sums, 2 prompts
x 4 completions of up to 40 tokens, 40 steps, one update per batch, no KL.

Command:
  python -m experiments.train --config=configs/dvao.py --workdir=runs/dvao

Expect: in a group where only format varies the advantage is format's
z-score alone (GRPO on the sum would divide by the sum's std); where both
vary, the one with the larger spread steers. Not measured at this scale
yet; compare with the quickstart (GRPO on accuracy + 0.1 format).
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.rewards.functions = ("accuracy", "format")
  c.rewards.weights = (1.0, 1.0)
  c.advantage.name = "dvao"
  c.advantage.kwargs = dict(eps=1e-6, ddof=1, weight_power=1.0, floor=0.0)
  return config_lib.finalize(c, arg)
