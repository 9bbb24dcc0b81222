"""LamPO / LambdaPO (seed 000 para. 54 and 59): pairwise reward gaps
within each group, each weighted by the policy's confidence in the pair.

Advantages `advantages.lampo`: A_i = 1/(G-1) sum_j w_ij (R_i - R_j) with
the RankNet / LambdaRank pair weight w_ij = 2 sigmoid(-beta sgn(R_i - R_j)
(s_i - s_j)), s the mean token log-prob the sampler gave each completion
(detached): a pair the policy already ranks right is attenuated, one it
ranks wrong amplified; beta = 0 is RLOO. No code was found for either
paper: the pair weight is a reconstruction (see
grpo_jax.advantages.reshaped.lampo); their auxiliary rewards (ROUGE-L,
semantic density) are reward functions and are not used here.

Paper's setup (from the abstracts): group sampling as in GRPO, the
group-relative advantage replaced by the pairwise one, on mathematical and
general reasoning. Scaled down to the quickstart (configs/quickstart.py):
SmolLM2-135M-Instruct on one-digit sums, 2 prompts x 4 completions of up
to 40 tokens, 40 steps, on policy, no KL; beta 1 on length-normalised
scores, no std scaling.

Command:
  python -m experiments.train --config=configs/lampo.py --workdir=runs/lampo

Expect: advantages summing to 0 in each group, of the size of RLOO's (at
most twice), larger for right completions the model found unlikely; the
reward rising as in the quickstart. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "lampo"
  c.advantage.kwargs = dict(beta=1.0, score="mean", scale="none")
  return config_lib.finalize(c, arg)
