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
GSM8K and MATH with verl's binary correctness reward, bundles of 5
questions, tracked quantiles, credit "std", w_mix 1.5. Scaled down to the
quickstart (SmolLM2-135M-Instruct, one-digit sums, 40 new tokens, 40
steps, no KL) with its 8 completions a step, as one bundle of 2 prompts x
4 completions (bundle_size must divide num_prompts), and the paper's
binary reward alone. The advantage divides a numerator in reward units
against the tracked quantiles by two batch stds (the papers' and the
question's), so it scales as 1 / reward step: with the quickstart's 0.1
format bonus, a batch whose rewards differed only by that bonus got
|A| up to ~190 (advantage/abs_mean 92 and grad_norm 629 at one step of
the 40-step comparison run), against ~1 to 2.5 for binary rewards.

Command:
  python -m experiments.train --config=configs/riskpo.py --workdir=runs/riskpo
  python -m experiments.evaluate --checkpoint=runs/riskpo --json=riskpo_after.json

Expect: every advantage <= 0 (q_0.9 is the baseline: a correct
completion gets 0, never a push up), the bottom papers pushed down most,
the entropy kept higher than GRPO's. Measured before the binary reward,
the 40-step comparison run ended at 0.385 held-out greedy (0.420 before):
with no positive advantage, every step only pushes sampled completions
down, all-wrong steps included (GRPO's gradient is 0 there), and the
completions grew to the 40-token limit (truncated at 10 of the last 11
steps) with the entropy at 1.5 (docs/comparisons.md, "NGRPO and RiskPO at the
quickstart's scale"). Not measured with the binary reward yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.rewards.functions = ("accuracy",)  # the paper's binary reward
  c.rewards.weights = (1.0,)
  c.advantage.name = "riskpo"
  c.advantage.kwargs = dict(bundle_size=2, quantiles="track", credit="std",
                            alpha=0.2, beta=0.9, w_mix=1.5, lr_q=0.1,
                            rvar_denominator="levels", eps=1e-6)
  return config_lib.finalize(c, arg)
