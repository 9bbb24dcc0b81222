"""RiskPO (risk-based policy optimisation; seed 002 para. 3): a mixed
value-at-risk objective over bundles of questions.

Advantages `advantages.riskpo`: the j-th completions of a bundle's
questions form paper j, scored S_j = sum_q R[q, j]; each paper gets
a = (w a_C + a_R) / (w + 1) / std_bundle(S), a_R the RVaR part between the
tracked quantiles q_0.2 and q_0.9, a_C the CVaR part below q_0.2, w = 1.5;
a response gets its paper's a over its question's reward std (credit
"std"). The quantiles are tracked across steps (the estimator's state in
TrainState, checkpointed): the first step's empirical ones, then one
quantile-regression step (lr 0.1) a step.

Paper's setup (RTkenny/RiskPO, scripts/run_qwen2.5_1.5b_MVaR_math.sh):
bundles of 5 questions, tracked quantiles, credit "std", w_mix 1.5. Scaled
down to the quickstart (SmolLM2-135M-Instruct, one-digit sums, 40 new
tokens, 40 steps, no KL) with its 8 completions a step, as one bundle of
2 prompts x 4 completions (bundle_size must divide num_prompts).

Command:
  python -m experiments.train --config=configs/riskpo.py --workdir=runs/riskpo
  python -m experiments.evaluate --checkpoint=runs/riskpo --json=riskpo_after.json

Expect: every advantage <= 0 (q_0.9 is the baseline), the bottom papers
pushed down most; the reward rising as in the quickstart, with the entropy
kept higher than GRPO's, as the paper reports at scale. Not measured at
this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "riskpo"
  c.advantage.kwargs = dict(bundle_size=2, quantiles="track", credit="std",
                            alpha=0.2, beta=0.9, w_mix=1.5, lr_q=0.1,
                            rvar_denominator="levels", eps=1e-6)
  return config_lib.finalize(c, arg)
