"""AERO (arXiv 2602.14338): adaptive rollouts for the groups whose
completions all agree (**reconstruction**: the paper's rule was not
recovered).

Group strategy `strategies.resampled.aero`: a group whose outcomes
(accuracy > 0 or not) are all equal draws more completions of the same
prompt, as many as `budgets.aero_extra_draws` says: the fewest that break
the tie with probability >= 0.5 under the Beta(1 + s, 1 + n - s) posterior
of its success rate (for 4 wrong of 4: 5 more; taken G = 4 per round), up
to a pool of 12; when the pool becomes mixed the group keeps G members in
the pool's proportion of right and wrong (at least one of each, earliest
draws first), so its advantages carry signal. A group that stays all-equal
is kept as drawn. Unlike dynamic sampling (configs/dapo.py), which draws
new prompts in place of signal-free groups, the prompt stays and its group
grows.

Paper's setup (from the abstract): GRPO on Qwen2.5-Math-1.5B, Qwen2.5-7B
and Qwen2.5-7B-Instruct, evaluated by Pass@8 and Avg@8, with an adaptive
rollout count, selective rejection of rollouts and a Bayesian posterior of
each prompt's success rate; its hyperparameters were not recovered.
Scaled down to the quickstart (configs/quickstart.py): SmolLM2-135M-Instruct
on one-digit sums, 2 prompts x 4 completions of up to 40 tokens, 40 steps
at lr 2e-5, on policy, no KL; at most 3 rounds a step (the plain one and 2
more of G each), so step s reads the prompts at index 3s.

Command:
  python -m experiments.train --config=configs/aero.py --workdir=runs/aero

Expect: aero/extra_rows (completions added to pools per step) high while
many groups are all-equal, aero/rescued_groups the share of groups made
mixed; advantage/collapse_rate and reward/* describe the plain sample
(round 0), comparable with GRPO's. Not measured at this scale yet.
"""

from grpo_jax import config as config_lib


def get_config(arg=None):
  c = config_lib.use_quickstart_scale(config_lib.get_base_config())
  c.groups.name = "aero"
  c.groups.kwargs = dict(rule="posterior", target=0.5, prior=(1.0, 1.0),
                         max_rounds=3, max_group=12,
                         signal_reward="accuracy")
  return config_lib.finalize(c, arg)
