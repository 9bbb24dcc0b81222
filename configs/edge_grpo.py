"""EDGE-GRPO (arXiv 2507.21848): the entropy-driven advantage and guided
error correction.

Advantages `advantages.edge_grpo`: A_i = z(R)_i * mean(H) / H_i, H_i the
masked mean token entropy of completion i under the sampler (detached),
mean(H) over the batch: a confident (low-entropy) completion gets a larger
|A|, so confident errors are penalised more. z(R) is GRPO's with the
authors' eps 1e-4. Follows the authors' TRL code (EDA) with three fixes:
masked mean, detached entropy, whole-batch mean (see
grpo_jax.advantages.reshaped.edge_grpo).

Guided error correction (`strategies.groups.guided_correction`): in a group
whose every completion is wrong, the last completion is replaced by the
reference solution (the arithmetic task's one-line working
"3 + 5 = \\boxed{8}"; GSM8K's worked solution), scored by the
verifiers, its log-probs and entropies the trainer's under the current
policy; the advantage then runs on the corrected group, which now has
signal. rollout/corrected_groups logs the share of groups corrected.

Paper's setup: Qwen2.5-Math-7B with TRL's GRPO on 1K problems, EDA with
GEC, where every completion below the top reward is, at random, either
regenerated after a "Wait! Something is wrong here." cue (1/2), given a
verification line with the reference answer (1/4), or replaced by the
reference solution (1/4). Here only the replacement is built, on the
all-wrong groups (the collapsed ones), deterministically. Scaled down to
the quickstart (configs/quickstart.py): SmolLM2-135M-Instruct on one-digit
sums, 2 prompts x 4 completions of up to 40 tokens, 40 steps, on policy
(TRL's default single update per batch), no KL. ``:tiny`` has 8-token
completions, too short for the reference to fit, so nothing is corrected
there unless --config.rollout.max_new_tokens is raised.

Command:
  python -m experiments.train --config=configs/edge_grpo.py --workdir=runs/edge_grpo

Expect: advantage/abs_mean close to GRPO's on average (mean(H) / H_i
averages near 1), spread more widely within groups; rollout/corrected_groups
equal to the share of all-wrong groups early on (most are at the start),
falling as accuracy rises; reward/* describe the plain sample (the injected
rows left out). Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "edge_grpo"
  c.advantage.kwargs = dict(normalizer="batch", eps=1e-4, ddof=1,
                            min_entropy=1e-6)
  c.groups.name = "guided_correction"
  c.groups.kwargs = dict(signal_reward="accuracy")
  return config_lib.finalize(c, arg)
