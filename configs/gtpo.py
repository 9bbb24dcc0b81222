"""GTPO (seed list 002 para. 20): conflict tokens protected and amplified,
high-entropy completions filtered; no KL.

Credit rule `credit.gtpo`: a token that stands at the same position in a
completion with A > 0 and in one with A < 0 (the leading run, and the
trailing run with completions right-aligned) is a conflict: weight 0 in
the negative completion (no push down), 2 in the positive one (4 when it
conflicts both ways). A completion whose mean entropy exceeds the
threshold gets A = 0; the others A - 0.1 H. From the authors' code
(winstonsmith1897/GTPO: ENT_THRESHOLD 0.7, ENT_SCALE 0.1, W_RAW 2);
``normalize_by_conflicts`` (off) is the code's extra division by each
row's conflict count.

Paper's setup (the authors' code): loss mean_i -(1/n_i) sum_t delta A r,
on policy, no KL. Followed: that loss as ppo_clip with
aggregation="seq_mean_token_mean" and kl.beta = 0, at GRPO's scale (8 x 8,
96 tokens); 2 minibatches a batch (the code's one step is on policy) so
the second step is off policy, as in the other variant configs. The
entropy is the sampler's (tempered; the code's is the current policy's).
Threshold 2.0 nats, not the code's 0.7: SmolLM2-135M at temperature 1
writes 1.5-1.9 nats a token on the arithmetic task, so at 0.7 the filter
zeroed every completion of a 40-step run (credit/gtpo/filtered_fraction
1.0 on every step, gradient 0: nothing trained); 2.0 drops the
high-entropy tail only. The paper's "provable threshold" was not
recovered.

Command:
  python -m experiments.train --config=configs/gtpo.py --workdir=runs/gtpo

Expect: credit/gtpo/conflict_fraction a few percent (the shared opening
and closing tokens), credit/gtpo/filtered_fraction the share of rows above
2.0 nats a token, well below 1.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.get_base_config()
  c.objective.kwargs.aggregation = "seq_mean_token_mean"  # (1/n_i), mean_i
  c.credit.name = "gtpo"
  c.credit.kwargs = dict(entropy_threshold=2.0, entropy_coef=0.1,
                         conflict_weight=2.0, normalize_by_conflicts=False)
  c.kl.beta = 0.0
  c.train.num_minibatches = 2
  return config_lib.finalize(c, arg)
