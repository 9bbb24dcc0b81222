"""MDP-GRPO (seed 000 para. 17; a reconstruction): multi-temperature
groups, dual-anchor advantages through a prospect-theoretic value, and an
asymmetric KL.

Advantages `advantages.mdp_grpo`: x = (1 - m) z(R) + m (R - 0.5) / 0.5,
A = clip(v(x), -3, 3), v Kahneman-Tversky's value (a = b = 0.88,
lam = 2.25), so all-correct and all-wrong groups still get a signal. Each
group's four members sample at temperatures 0.7, 0.9, 1.1, 1.3
(``rollout.member_temperatures``, linspace(0.7, 1.3, G)), and the trainer
scores each row at its own temperature. The KL to the reference is
asymmetric (`regularisers.asymmetric_kl`): beta = 0.01 on completions with
A >= 0, 0.04 on those with A < 0 (``kl.beta``, ``kl.beta_neg``).

Paper's setup: only the abstract is public; everything here follows the
reconstruction in VARIANTS.md 1.10. Scaled down to the quickstart
(configs/quickstart.py): SmolLM2-135M-Instruct on one-digit sums, 2 prompts
x 4 completions of up to 40 tokens, 40 steps, on policy; unlike the
quickstart it keeps a reference model for the asymmetric KL.

Command:
  python -m experiments.train --config=configs/mdp_grpo.py --workdir=runs/mdp_grpo

Expect: |advantage| larger than GRPO's on collapsed groups (advantage/
abs_mean > 0 even when advantage/collapse_rate is 1); losses weigh 2.25x
gains, so early all-wrong groups push down harder than GRPO. Not measured
at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.advantage.name = "mdp_grpo"
  c.advantage.kwargs = dict(mix=0.5, anchor=0.5, anchor_scale=0.5,
                            gain_power=0.88, loss_power=0.88,
                            loss_aversion=2.25, bound=3.0)
  g = c.rollout.num_generations
  c.rollout.member_temperatures = tuple(
      round(0.7 + 0.6 * i / max(g - 1, 1), 6) for i in range(g))
  c.kl.beta = 0.01
  c.kl.beta_neg = 0.04
  return config_lib.finalize(c, arg)
