"""EDGE-GRPO (arXiv 2507.21848): the entropy-driven advantage.

Advantages `advantages.edge_grpo`: A_i = z(R)_i * mean(H) / H_i, H_i the
masked mean token entropy of completion i under the sampler (detached),
mean(H) over the batch: a confident (low-entropy) completion gets a larger
|A|, so confident errors are penalised more. z(R) is GRPO's with the
authors' eps 1e-4. Follows the authors' TRL code (EDA) with three fixes:
masked mean, detached entropy, whole-batch mean (see
grpo_jax.advantages.reshaped.edge_grpo).

Paper's setup: Qwen2.5-Math-7B with TRL's GRPO on 1K problems, Entropy-
Driven Advantage together with Guided Error Correction (wrong completions
are regenerated after a "Wait! Something is wrong here." cue, or given the
reference answer). Guided Error Correction is a data step and is NOT part
of this config: only the advantage is. Scaled down to the quickstart
(configs/quickstart.py): SmolLM2-135M-Instruct on one-digit sums, 2
prompts x 4 completions of up to 40 tokens, 40 steps, on policy, no KL.

Command:
  python -m experiments.train --config=configs/edge_grpo.py --workdir=runs/edge_grpo

Expect: advantage/abs_mean close to GRPO's on average (mean(H) / H_i
averages near 1), spread more widely within groups; all-equal groups still
get 0 (without GEC nothing breaks the collapse); the reward rising as in
the quickstart. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "edge_grpo"
  c.advantage.kwargs = dict(normalizer="batch", eps=1e-4, ddof=1,
                            min_entropy=1e-6)
  return config_lib.finalize(c, arg)
