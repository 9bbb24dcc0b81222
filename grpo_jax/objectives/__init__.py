"""Policy objectives of the GRPO family: (logp, old_logp, adv, mask) -> (loss, aux).

Every objective is a pure function

  loss, aux = fn(logp, old_logp, advantages, mask, *, <hyperparameters>,
                 <arrays it reads>, token_weights=None)

with `logp`, `old_logp`, `mask` of shape [N, T] and `advantages` of shape [N]
(broadcast over tokens) or [N, T] (token-level). `loss` is a float32 scalar to
*minimise*; `aux` is an `ObjectiveAux` (the undivided loss and exact, mergeable
diagnostics, with the objective's own records in ``aux.extra``). Token-level
objectives take ``aggregation`` and ``horizon``; sequence-level ones (`gspo`,
`gmpo`) average one term per row with tokens. Extra batch arrays
(``sampler_logp``, declared in ``reads``) and ``token_weights`` (the
corrections' [N, T] weights, detached) are keywords the trainer passes; no
config sets them.

Families: `clipped` (ppo_clip, gspo, gspo_token, luspo, gmpo, cispo), `soft`
(cfpo and its alias spo_simple, sapo, reinforce, gpg), `penalised` (r2vpo
and its dual state), `balanced` (bapo: bounds searched per optimiser step
from a pre-pass's sums), `bounded` (ce_gppo), `divergence` (dppo,
dppo_topk), `offpolicy`
(decoupled_ppo, f_tis, vespo: they read the batch's `sampler_logp`),
`adaptive` (hapo: entropy-adaptive bands and advantages; it reads the
batch's `entropy_hat`). Each registers in `OBJECTIVES` with its metadata
(`_kit.ObjectiveMeta`: level, mechanism, paper, state, pre-pass, reads,
behaviour_weight: whether it weighs by the sampler itself) and example
options; `make(name, **options)` returns the bound `Objective` record the
trainer drives. `regularisers` holds the terms
added to any objective (KL, MDP-GRPO's asymmetric KL, LLDS). The math and its
sources are in OBJECTIVES.md. `corrections` holds the token weights and
masks (TIS, MIS, ICEPOP, OPSM; the top-entropy mask in `entropy_mask`)
that compose with every objective taking ``token_weights`` (all but r2vpo);
`entropy` the entropy-bonus regulariser.

A new objective is one function in a family file with the decorator; it
takes corrections by handing ``token_weights`` to `_kit.token_objective`
(or `_kit.sequence_objective`):

  @OBJECTIVES.register(level="token", mechanism="clip", examples=({},))
  def my_clip(logp, old_logp, advantages, mask, *, eps=0.2,
              aggregation="token_mean", horizon=None, token_weights=None):
    ...
    return _kit.token_objective(term, batch, aggregation=aggregation,
                                horizon=horizon, clipped=cut,
                                token_weights=token_weights)
"""

from grpo_jax.objectives import adaptive
from grpo_jax.objectives import balanced
from grpo_jax.objectives import bounded
from grpo_jax.objectives import clipped
from grpo_jax.objectives import corrections
from grpo_jax.objectives import covariance
from grpo_jax.objectives import divergence
from grpo_jax.objectives import entropy
from grpo_jax.objectives import entropy_mask
from grpo_jax.objectives import influence
from grpo_jax.objectives import offpolicy
from grpo_jax.objectives import penalised
from grpo_jax.objectives import regularisers
from grpo_jax.objectives import rejection
from grpo_jax.objectives import soft
from grpo_jax.objectives._kit import LOG_RATIO_BOUND
from grpo_jax.objectives._kit import OBJECTIVES
from grpo_jax.objectives._kit import ObjectiveAux
from grpo_jax.objectives._kit import PrePass
from grpo_jax.objectives._kit import StateSpec
from grpo_jax.objectives.adaptive import hapo
from grpo_jax.objectives.balanced import BAPO_BALANCES
from grpo_jax.objectives.balanced import bapo
from grpo_jax.objectives.bounded import ce_gppo
from grpo_jax.objectives.clipped import cispo
from grpo_jax.objectives.clipped import gmpo
from grpo_jax.objectives.clipped import gspo
from grpo_jax.objectives.clipped import gspo_token
from grpo_jax.objectives.clipped import luspo
from grpo_jax.objectives.clipped import ppo_clip
from grpo_jax.objectives.covariance import clip_cov
from grpo_jax.objectives.covariance import kl_cov
from grpo_jax.objectives.divergence import dppo
from grpo_jax.objectives.divergence import dppo_topk
from grpo_jax.objectives.offpolicy import decoupled_ppo
from grpo_jax.objectives.offpolicy import f_tis
from grpo_jax.objectives.offpolicy import vespo
from grpo_jax.objectives.penalised import R2VPO_CENTERS
from grpo_jax.objectives.penalised import R2VPO_DELTA
from grpo_jax.objectives.penalised import R2VPO_ETA
from grpo_jax.objectives.penalised import r2vpo
from grpo_jax.objectives.penalised import r2vpo_init
from grpo_jax.objectives.penalised import r2vpo_update
from grpo_jax.objectives.penalised import R2VPOState
from grpo_jax.objectives.record import check_options
from grpo_jax.objectives.record import make
from grpo_jax.objectives.record import Objective
from grpo_jax.objectives.record import SEQUENCE_AGGREGATION
from grpo_jax.objectives.soft import cfpo
from grpo_jax.objectives.soft import gpg
from grpo_jax.objectives.soft import reinforce
from grpo_jax.objectives.soft import SAPO_GATE_THRESHOLD
from grpo_jax.objectives.soft import sapo
from grpo_jax.objectives.soft import spo_simple

names = OBJECTIVES.names
get = OBJECTIVES.get

# The public API: what the imports above re-export.
__all__ = [
    "adaptive", "balanced", "bapo", "BAPO_BALANCES", "bounded", "ce_gppo",
    "cfpo", "check_options", "cispo", "clip_cov", "clipped", "corrections",
    "covariance", "decoupled_ppo", "divergence", "dppo", "dppo_topk",
    "entropy", "entropy_mask", "f_tis", "get", "gmpo", "gpg", "gspo",
    "gspo_token", "hapo", "influence", "kl_cov", "LOG_RATIO_BOUND", "luspo",
    "make", "names", "Objective", "ObjectiveAux", "OBJECTIVES", "offpolicy",
    "penalised", "ppo_clip", "PrePass", "r2vpo", "R2VPO_CENTERS",
    "R2VPO_DELTA", "R2VPO_ETA", "r2vpo_init", "r2vpo_update", "R2VPOState",
    "regularisers", "reinforce", "rejection", "sapo", "SAPO_GATE_THRESHOLD",
    "SEQUENCE_AGGREGATION", "soft", "spo_simple", "StateSpec", "vespo",
]
