"""Group strategies that sample the step's own prompts again.

* ``ghpo``: GHPO's guided hints (VARIANTS.md 4.8, arXiv 2507.10628): an
  all-wrong group is resampled from its prompt with the start of the
  reference solution appended, the share rising while it stays all-wrong.
* ``aero``: AERO's adaptive rollouts (arXiv 2602.14338, reconstruction): a
  group whose outcomes are all equal draws more completions of the same
  prompt until they are mixed, and G of them are kept.

Both differ from ``dynamic_sampling`` (DAPO), which replaces a signal-free
group by a *new prompt*: here the prompt stays, and its group is redrawn
(GHPO, with a hint) or grown (AERO).

Each extra round samples all P prompts (one sampler shape, one compiled
program); a group that does not need the round discards its rows. Round r
samples with the step's ``fold_in(key, r)``, r < rounds_per_step, so a step
is a pure function of its key.
"""

from typing import Sequence

import numpy as np

from grpo_jax import registry
from grpo_jax.strategies import budgets
from grpo_jax.strategies import hints
from grpo_jax.strategies._kit import GROUP_STRATEGIES
from grpo_jax.strategies._kit import Selected

# The `rollout.Round` fields, by what indexes them: one value per row
# [P, G, ...] (gathered when AERO builds a group from several rounds), or
# one per group / round (kept from the plain round). A new Round field
# must be listed here (tests/test_strategies_resampled.py checks).
ROW_FIELDS = ("tokens", "mask", "lengths", "truncated", "sampler_logp",
              "rewards", "entropies", "answer_ids", "segment_rewards",
              "segment_valid", "segment_ids", "sampler_topk_ids",
              "sampler_topk_logp", "token_entropies", "injected",
              "token_temperatures")
GROUP_FIELDS = ("prompt_ids", "columns", "errors", "prompt_index",
                "greedy_rewards", "sampled", "replayed")


def _column(rnd, signal_reward: str) -> int:
  return rnd.columns.index(signal_reward or rnd.columns[0])


def take_rows(rounds, source):
  """``rounds[0]`` with row (p, g) taken from ``rounds[r][p, m]``,
  ``(r, m) = source[p, g]``, for every per-row field (`ROW_FIELDS`); the
  prompts, reward columns, errors and ReMax's greedy rewards stay round
  0's, and ``sampled`` keeps round 0 as drawn (the plain sample the
  measurements describe).

  Args:
    rounds: the step's rounds (`rollout.Round`s of the same P prompts).
    source: [P, G, 2] int, the (round, member) of each kept row.
  """
  source = np.asarray(source, np.int64)
  p, g = source.shape[:2]
  first = rounds[0]
  rows = np.arange(p)[:, None]
  fields = {}
  for name in ROW_FIELDS:
    if getattr(first, name, None) is None:
      continue
    stacked = np.stack([np.asarray(getattr(rnd, name)) for rnd in rounds])
    fields[name] = stacked[source[..., 0], rows, source[..., 1]]
  if "sampled" in first._fields:
    fields["sampled"] = first.sampled or first
  return first._replace(**fields)


# ---------------------------------------------------------------- GHPO


def _ghpo_rounds(omegas=hints.OMEGAS, start_hint_step=0, **_):
  omegas = hints.check_omegas(omegas)
  registry.check_int("start_hint_step", start_hint_step, low=0,
                     why="the first step that hints")
  return 1 + len(omegas)


@GROUP_STRATEGIES.register(
    rounds_per_step=_ghpo_rounds, reads=("examples", "resample", "hint",
                                         "step"),
    paper="GHPO, arXiv 2507.10628", solutions=True,
    examples=({}, {"omegas": (0.5,), "start_hint_step": 0},
              {"start_hint_step": 5, "signal_reward": "accuracy"}))
def ghpo(draw, num_prompts, *, examples, resample, hint, step,
         start_hint_step=0, omegas: Sequence[float] = hints.OMEGAS,
         signal_reward=""):
  """GHPO's guided hints (arXiv 2507.10628; the authors'
  ``ghpo_trainer.py``, VARIANTS.md 4.8).

  From step `start_hint_step` on, a group whose signal rewards are all
  <= 0 is sampled again from the hinted prompt

    question + hint_text + solution_tokens[: round(omega * n)]

  (`hints.hint_question`: solution *tokens*, Python's round, half to
  even; the authors cut characters), omega rising through `omegas` while
  the group stays all-wrong (`hints.ghpo_escalate`). A group with any
  success keeps its prompt and draw; one still all-wrong at the last level
  keeps its last draw. Training is GRPO on each group's final prompt: the
  hint is prompt context, never trained on.

  Rounds: round 0 is the plain draw; round l (1 <= l <= len(omegas))
  samples all P prompts, the escalated ones hinted at their new level, the
  others plain and discarded. rounds_per_step = 1 + len(omegas), so step s
  reads prompts at index ``s * (1 + len(omegas))``.

  Measurements: ``ghpo/hinted_groups`` the share of the batch's groups on
  a hinted prompt; ``ghpo/mean_omega`` the mean hint share over all the
  batch's groups (0 on a plain prompt); ``ghpo/still_wrong_groups`` the
  share hinted yet still all-wrong after their last level.

  Args:
    draw: ``draw(r) -> Round``; round 0 is drawn.
    num_prompts: P.
    examples: ``examples(r) -> [Example]``, round r's prompts.
    resample: ``resample(r, examples) -> Round``, P examples sampled and
      scored with round r's key.
    hint: ``hint(examples, omegas [P]) -> [Example]``, each question
      hinted at its omega (0 = plain).
    step: the training step.
    start_hint_step: the first step that hints.
    omegas: the hint shares, strictly increasing in (0, 1].
    signal_reward: the reward column that says right (> 0) or wrong; "" =
      the first (the verifier).
  """
  omegas = hints.check_omegas(omegas)
  rnd = draw(0)
  column = _column(rnd, signal_reward)
  accuracy = np.asarray(rnd.rewards[..., column])
  levels = np.zeros(num_prompts, np.int64)
  final = np.zeros(num_prompts, np.int64)  # each group's round
  rounds, plain = [rnd], None
  while True:
    new_levels, again = hints.ghpo_escalate(
        levels, accuracy, step=step, start_hint_step=start_hint_step,
        num_levels=len(omegas))
    if not again.any():
      break
    plain = examples(0) if plain is None else plain
    shares = np.where(again, hints.ghpo_omega(new_levels, omegas), 0.0)
    rounds.append(resample(len(rounds), hint(plain, shares)))
    final[again] = len(rounds) - 1
    accuracy = np.where(again[:, None],
                        np.asarray(rounds[-1].rewards[..., column]), accuracy)
    levels = new_levels
  hinted = levels > 0
  measurements = {
      "ghpo/hinted_groups": float(hinted.mean()),
      "ghpo/mean_omega": float(hints.ghpo_omega(levels, omegas).mean()),
      "ghpo/still_wrong_groups": float(
          (hinted & np.all(accuracy <= 0, axis=1)).mean()),
  }
  return Selected(rounds=rounds,
                  picks=[(int(final[i]), i) for i in range(num_prompts)],
                  valid=np.ones(num_prompts, bool),
                  measurements=measurements)


# ---------------------------------------------------------------- AERO


def _aero_rounds(max_rounds=3, max_group=0, rule="posterior", chunk=4,
                 target=0.5, prior=(1.0, 1.0), **_):
  registry.check_int("max_rounds", max_rounds, low=2,
                     why="the plain round and at least one more")
  registry.check_int("max_group", max_group, low=0, why="0: G x max_rounds")
  # The rule's own checks (rule, chunk, target, prior).
  budgets.aero_extra_draws([0], [1], max_group=2, rule=rule, chunk=chunk,
                           target=target, prior=tuple(prior))
  return int(max_rounds)


def mixed_members(right, num_members: int) -> np.ndarray:
  """The members AERO keeps of a grown pool whose first G draws agree.

    o = right[0];  m = #{i: right[i] != o};  n = len(right)
    k = clip(floor(G m / n + 1/2), 1, G - 1)

  the first G - k draws with outcome o and the first k with the other, in
  draw order: the kept group's share of each outcome is the pool's
  (rounded half up, at least one of each), so the group baseline is the
  larger pool's estimate of the success rate, not an arbitrary even mix;
  within an outcome the earliest draws are kept, so nothing but the
  outcome decides.

  Args:
    right: [n] bool, the pool's outcomes in draw order, n > G, both present.
    num_members: G >= 2.

  Returns:
    [G] int64 pool positions, ascending.
  """
  right = np.asarray(right, bool)
  g, n = int(num_members), right.size
  other = right != right[0]
  k = int(np.clip(np.floor(g * other.sum() / n + 0.5), 1, g - 1))
  keep = np.concatenate([np.flatnonzero(~other)[:g - k],
                         np.flatnonzero(other)[:k]])
  return np.sort(keep)


@GROUP_STRATEGIES.register(
    rounds_per_step=_aero_rounds, reads=("examples", "resample"),
    paper="AERO, arXiv 2602.14338 (reconstruction)", moves_rows=True,
    examples=({}, {"rule": "fixed", "chunk": 2, "max_rounds": 2},
              {"max_group": 5, "target": 0.8, "signal_reward": "accuracy"}))
def aero(draw, num_prompts, *, examples, resample, max_rounds=3,
         max_group=0, rule="posterior", chunk=4, target=0.5,
         prior=(1.0, 1.0), signal_reward=""):
  """AERO's adaptive rollouts (arXiv 2602.14338; **reconstruction**: the
  paper's rule was not recovered): a group whose outcomes (signal reward
  > 0 or not) are all equal draws more completions of the *same* prompt,
  until they are mixed or a cap is reached; dynamic sampling instead
  replaces the prompt.

  Each extra round r (1 <= r < max_rounds) samples G completions of every
  prompt; a group with s successes in its n draws so far takes the first
  min(k, G) of them into its pool, k = `budgets.aero_extra_draws(s, n)`
  (``fixed``: `chunk`; ``posterior``: the fewest draws that break the tie
  with probability >= `target` under the Beta posterior), the pool capped
  at `max_group` (0: G x max_rounds). A pool that becomes mixed gives its
  group the G members `mixed_members` keeps (the pool's share of each
  outcome, at least one of each, earliest draws first), in draw order;
  a group that stays all-equal, or had signal at once, stays as drawn.
  Rows keep their tokens, log-probs and rewards; each moved row may sit in
  another member slot (so per-member temperatures are refused by the
  config checks).

  Measurements: ``aero/extra_rows`` the completions taken into pools this
  step (drawn rows a group did not need are not counted);
  ``aero/rescued_groups`` the share of the batch's groups made mixed.

  Args:
    draw: ``draw(r) -> Round``; round 0 is drawn.
    num_prompts: P.
    examples: ``examples(r) -> [Example]``, round r's prompts.
    resample: ``resample(r, examples) -> Round``, sampled with round r's key.
    max_rounds: the most rounds a step samples (the plain one included).
    max_group: the largest pool of a group; 0 = G x max_rounds.
    rule, chunk, target, prior: `budgets.aero_extra_draws`'s.
    signal_reward: the reward column whose sign is the outcome; "" = the
      first (the verifier).
  """
  first = draw(0)
  column = _column(first, signal_reward)
  g = first.rewards.shape[1]
  cap = max_group or g * max_rounds
  if g < 2 or cap <= g:
    raise ValueError(
        f"aero needs groups of G >= 2 and max_group > G to grow a group; got "
        f"G={g}, max_group={cap}.")
  right = np.asarray(first.rewards[..., column]) > 0
  pools = [[(0, j) for j in range(g)] for _ in range(num_prompts)]
  outcomes = [list(right[i]) for i in range(num_prompts)]
  rounds, plain, extra_rows = [first], None, 0
  for r in range(1, max_rounds):
    extra = budgets.aero_extra_draws(
        [sum(o) for o in outcomes], [len(o) for o in outcomes],
        max_group=cap, rule=rule, chunk=chunk, target=target,
        prior=tuple(prior))
    if not extra.any():
      break
    plain = examples(0) if plain is None else plain
    rounds.append(resample(r, plain))
    new = np.asarray(rounds[-1].rewards[..., column]) > 0
    for i in np.flatnonzero(extra):
      take = min(int(extra[i]), g)
      pools[i] += [(r, j) for j in range(take)]
      outcomes[i] += list(new[i, :take])
      extra_rows += take
  equal = np.asarray([len(set(o[:g])) == 1 for o in outcomes])
  rescued = equal & np.asarray([len(set(o)) == 2 for o in outcomes])
  if rescued.any():
    source = np.asarray([[(0, j) for j in range(g)]] * num_prompts)
    for i in np.flatnonzero(rescued):
      source[i] = [pools[i][k] for k in mixed_members(outcomes[i], g)]
    rounds[0] = take_rows(rounds, source)
  return Selected(rounds=rounds, picks=[(0, i) for i in range(num_prompts)],
                  valid=np.ones(num_prompts, bool),
                  measurements={"aero/extra_rows": float(extra_rows),
                                "aero/rescued_groups": float(rescued.mean())})
