"""SEED-GRPO (arXiv 2505.12346): GRPO's advantage damped by the semantic
entropy of the group's answers.

Advantages `advantages.seed_grpo`: A = z(R) (1 - alpha SE / log G), SE the
entropy of the group's answer classes (completions whose parsed answers
are equal, `rewards.verifiers.same_answer`; no answer is a class of its
own), which the rollout computes when the estimator reads ``answer_ids``.
A question the model answers inconsistently gets a smaller update. No
public code was found and the paper's alpha is not known: a reconstruction
(see grpo_jax.advantages.reshaped.seed_grpo), alpha=0.5 a proposal.

Paper's setup (from the abstract): GRPO's recipe with the modulated
advantage on mathematical reasoning. Scaled down to the quickstart
(configs/quickstart.py): SmolLM2-135M-Instruct on one-digit sums, 2
prompts x 4 completions of up to 40 tokens, 40 steps, on policy, no KL.

Command:
  python -m experiments.train --config=configs/seed_grpo.py --workdir=runs/seed_grpo

Expect: advantage/abs_mean below GRPO's while the answers scatter (early),
approaching it as they agree; the reward rising as in the quickstart.
Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "seed_grpo"
  c.advantage.kwargs = dict(alpha=0.5, eps=1e-6, ddof=1)
  return config_lib.finalize(c, arg)
