"""pass@k-style advantages (verl's ``grpo_passk``, after arXiv 2503.19595):
only the best completion of each group is credited.

Advantages `advantages.pass_at_k`: the best member gets (R_max -
R_second) / (std_g R + 1e-6), every other member 0, so a group is pushed
only where one completion beats all the others (with 0/1 accuracy: exactly
one right); ties at the top give 0.

Paper's setup: training for an inference-time objective, pass@k over k
samples, with GRPO's recipe otherwise. Scaled down to the quickstart
(configs/quickstart.py): SmolLM2-135M-Instruct on one-digit sums, 2 prompts
x 4 completions (k = 4) of up to 40 tokens, 40 steps, one update per batch,
no KL; the held-out evaluation also samples 4 completions per problem
(eval/pass@4 beside greedy accuracy), which adds about a minute per
evaluation.

Command:
  python -m experiments.train --config=configs/pass_at_k.py --workdir=runs/pass_at_k

Expect: fewer groups with signal than GRPO (only a unique best counts) and
no negative advantages; pass@4 to move more than greedy accuracy. Not
measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "pass_at_k"
  c.advantage.kwargs = dict(scale="group", eps=1e-6, ddof=1)
  c.eval.num_samples = c.rollout.get_ref("num_generations")
  return config_lib.finalize(c, arg)
