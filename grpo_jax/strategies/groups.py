"""Group strategies: which groups a batch keeps, before the baseline forms."""

from typing import NamedTuple

import numpy as np

from grpo_jax import groups as groups_lib
from grpo_jax import registry
from grpo_jax.strategies._kit import GROUP_STRATEGIES
from grpo_jax.strategies._kit import Selected


@GROUP_STRATEGIES.register(rounds_per_step=lambda: 1, examples=({},))
def all_groups(draw, num_prompts):
  """Every group of one sampling round (GRPO)."""
  return Selected(rounds=[draw(0)],
                  picks=[(0, i) for i in range(num_prompts)],
                  valid=np.ones(num_prompts, bool))


def _keep_signal_first(rounds, signals, num_prompts):
  """Groups with signal first, in sampling order, then fillers without."""
  with_signal, without = [], []
  for r, signal in enumerate(signals):
    for i, ok in enumerate(signal):
      (with_signal if ok else without).append((r, i))
  chosen = with_signal[:num_prompts]
  picks = chosen + without[:num_prompts - len(chosen)]
  return Selected(rounds=rounds, picks=picks,
                  valid=np.arange(num_prompts) < len(chosen))


def _rounds(max_rounds=3, **_):
  registry.check_int("max_rounds", max_rounds, low=1,
                     why="sampling rounds a step may take")
  return int(max_rounds)


@GROUP_STRATEGIES.register(
    rounds_per_step=_rounds, paper="2503.14476",
    examples=({}, {"max_rounds": 1}, {"signal_reward": "accuracy"}))
def dynamic_sampling(draw, num_prompts, *, max_rounds=3, signal_reward=""):
  """DAPO's dynamic sampling (arXiv 2503.14476): keep groups whose signal
  reward varies; sample new prompts, up to `max_rounds` rounds, until P
  groups have signal. Groups still lacking it stay as fillers (valid
  False: no loss, no batch statistic), so shapes never change.

  Args:
    draw: ``draw(r) -> Round``: samples and scores round r.
    num_prompts: P, the groups of the batch.
    max_rounds: the most rounds a step samples.
    signal_reward: the reward column whose variation counts as signal (DAPO:
      the accuracy, not the shaped total); "" = the first (the verifier).
  """
  rounds, signals = [], []
  for r in range(max_rounds):
    rounds.append(draw(r))
    column = rounds[-1].columns.index(signal_reward or rounds[-1].columns[0])
    signals.append(np.asarray(groups_lib.has_signal(
        rounds[-1].rewards[..., column])))
    if sum(s.sum() for s in signals) >= num_prompts:
      break
  return _keep_signal_first(rounds, signals, num_prompts)


# ------------------------------------------- EDGE-GRPO's error correction


class References(NamedTuple):
  """One reference row per prompt of a round, as the rollout builds it
  (`references.reference_rows`): the reference solution tokenised as a
  completion, scored by the verifiers, and its log-probs computed by the
  trainer under the current policy (no sampler drew it).

  Attributes:
    tokens: [P, T] int32; mask: [P, T] float32; lengths: [P] int32;
    truncated: [P] bool (the solution and its end id did not fit in T).
    logp: [P, T] float32, the trainer's tempered log-probs, stored as the
      row's sampler log-probs.
    token_entropies: [P, T] float32 and entropies: [P] float32 (their mean
      over the mask), the policy's entropy along the reference.
    rewards: [P, K] float32, the reward columns.
    errors: [K verifiers] verifier errors.
  """
  tokens: np.ndarray
  mask: np.ndarray
  lengths: np.ndarray
  truncated: np.ndarray
  logp: np.ndarray
  token_entropies: np.ndarray
  entropies: np.ndarray
  rewards: np.ndarray
  errors: np.ndarray


def inject_reference(rnd, refs: References, where, *, member: int = -1):
  """`rnd` with member `member` of the groups `where` [P] replaced by their
  reference rows (tokens, mask, length, truncation, log-probs, entropies,
  rewards); ``injected`` [P, G] marks the replaced rows and ``sampled``
  keeps the round as sampled (for the measurements of the plain sample).
  `rnd` is a `rollout.Round` (any NamedTuple with its fields)."""
  where = np.asarray(where, bool)
  p, g = rnd.rewards.shape[:2]
  injected = np.zeros((p, g), bool)
  injected[where, member] = True

  def put(field, value):
    out = np.array(getattr(rnd, field), copy=True)
    out[where, member] = np.asarray(value, out.dtype)[where]
    return out

  fields = dict(tokens=refs.tokens, mask=refs.mask, lengths=refs.lengths,
                truncated=refs.truncated, sampler_logp=refs.logp,
                rewards=refs.rewards, entropies=refs.entropies)
  if getattr(rnd, "token_entropies", None) is not None:
    fields["token_entropies"] = refs.token_entropies
  return rnd._replace(
      injected=injected, sampled=rnd.sampled or rnd,
      errors=np.asarray(rnd.errors) + np.asarray(refs.errors),
      **{field: put(field, value) for field, value in fields.items()})


def all_wrong(rewards, column: int):
  """[P] bool: no member of the group scores above 0 on `column` of the
  [P, G, K] rewards (every completion wrong)."""
  return np.asarray(rewards)[..., column].max(axis=1) <= 0.0


@GROUP_STRATEGIES.register(
    rounds_per_step=lambda **_: 1, reads=("reference",),
    paper="EDGE-GRPO, arXiv 2507.21848",
    examples=({}, {"signal_reward": "accuracy"}))
def guided_correction(draw, num_prompts, *, reference, signal_reward=""):
  """EDGE-GRPO's guided error correction, reference form (arXiv
  2507.21848): in a group whose every completion is wrong (its signal
  reward <= 0), the last completion is replaced by the reference solution,
  so the group carries a correct member and a nonzero advantage. A
  reference that its own verifiers do not score above 0 (cut off by the
  token limit, say) is not injected.

  The authors' GEC (``grpo_aha_trainer.py``) acts on every completion
  below the top reward, each at random: half are regenerated after a
  "Wait! Something is wrong here." cue, a quarter get a verification line
  with the reference answer, a quarter are replaced by the reference
  solution. Here only the replacement is built, deterministically, on the
  all-wrong groups (VARIANTS.md 1.11's ``inject_reference``): the groups
  whose advantages collapse. The reference row is not sampled: its
  behaviour log-probs are the trainer's under the current policy (the
  authors' too: TRL recomputes old log-probs of every row), so every ratio
  and sampler correction treats it as on-policy data.

  Args:
    draw: ``draw(r) -> Round``; one round is drawn.
    num_prompts: P.
    reference: ``reference(round) -> References``, the rollout's reference
      rows of the round's prompts.
    signal_reward: the reward column that says right or wrong; "" = the
      first (the verifier).
  """
  rnd = draw(0)
  column = rnd.columns.index(signal_reward or rnd.columns[0])
  wrong = all_wrong(rnd.rewards, column)
  if wrong.any():
    refs = reference(rnd)
    where = wrong & (np.asarray(refs.rewards)[:, column] > 0.0)
    if where.any():
      rnd = inject_reference(rnd, refs, where)
  return Selected(rounds=[rnd], picks=[(0, i) for i in range(num_prompts)],
                  valid=np.ones(num_prompts, bool))
