"""A run's checkpoints read back, for evaluation and export: the metadata,
the config it saved, its policy, its whole state (`train` writes them).
"""

import functools
import json
from typing import Any, Mapping, Optional

import jax
import ml_collections

from grpo_jax.runtime import checkpoint as checkpoint_lib
from grpo_jax import config as config_lib
from grpo_jax.config import errors as config_errors
from grpo_jax.train import optim
from grpo_jax import train
from grpo_jax.models import lora


def restore_metadata(workdir: str, *, step=None) -> tuple:
  """(step, metadata) of a run's checkpoint (default: the latest)."""
  checkpointer = checkpoint_lib.Checkpointer(
      train.checkpoint_directory(workdir))
  try:
    step = checkpointer.latest_step() if step is None else step
    return step, checkpointer.metadata(step)
  finally:
    checkpointer.close()


def restore_config(workdir: str, *, step=None) -> tuple:
  """(step, config) a run saved in its checkpoint (default: the latest);
  fields added since it was written take their defaults."""
  step, metadata = restore_metadata(workdir, step=step)
  return step, config_lib.with_defaults(
      ml_collections.ConfigDict(json.loads(metadata["config"])))


# The fields that make a trained policy what it is: its base model (name,
# revision, dtype), its adapters, and the seed of a random model's weights
# and the adapters' initialisation. `restore_policy` reads them from the
# run's own config, so an override of one would be ignored.
POLICY_FIELDS = ("model", "lora", "seed")


def with_overrides(config, overrides: Mapping[str, Any]):
  """A copy of a run's `config` with ``--config.a.b=value`` overrides
  (flat, as `config_flags.get_override_values` gives them) applied, for
  evaluating its policy another way (``rollout.temperature``, ``eval.*``,
  ``data.*``). ValueError naming every override of a `POLICY_FIELDS`
  field: those come from the checkpoint."""
  fixed = [field for field in overrides
           if any(field == p or field.startswith(p + ".")
                  for p in POLICY_FIELDS)]
  if fixed:
    config_errors.fail(
        ", config.".join(fixed), "a trained policy's "
        f"{'/'.join(POLICY_FIELDS)} fields come from its checkpoint and "
        "cannot be overridden", "drop these overrides (to evaluate another "
        "model, give --config without --checkpoint)")
  config = config.copy_and_resolve_references()
  config.update_from_flattened_dict(dict(overrides))
  return config


def restore_policy(workdir: str, *, step=None) -> tuple:
  """The policy of a run's checkpoint (default: the latest), for evaluation
  and export: (config, model_config, params, tokenizer, step).

  The run's config comes from the checkpoint (fields added since it was
  written take their defaults); its base model is loaded for the tokenizer
  and the state's structure, and the trained params replace its weights. A
  LoRA run's adapters come back merged into the base: plain params.
  """
  step, config = restore_config(workdir, step=step)
  model_config, params, frozen, tokenizer = train.load_policy(config)
  optimizer = optim.make_optimizer(
      total_steps=train.total_optimizer_steps(config), **config.optimizer)
  template = jax.eval_shape(functools.partial(
      train.init_state, optimizer=optimizer, seed=config.seed,
      components=train.make_components(config)), params)
  params = restore(workdir, template, step=step)[0].params
  if frozen is not None:
    params = lora.merge(lora.combine(frozen, params), model_config.lora_scale)
  return config, model_config, params, tokenizer, step


def restore(workdir: str, template: train.TrainState, *, step=None):
  """(state, metadata) of a run's checkpoint `step` (default: the latest),
  a component state it holds none of (`train.INITIAL_STATES`) the
  template's."""
  checkpointer = checkpoint_lib.Checkpointer(
      train.checkpoint_directory(workdir))
  try:
    return checkpointer.restore(template, step, initial=train.INITIAL_STATES)
  finally:
    checkpointer.close()


def policy_to_evaluate(config, checkpoint: Optional[str] = None):
  """(model_config, params, tokenizer, step): the config's base model as
  training loads it (`train.load_policy`: revision, dtype), or with
  `checkpoint` (a training workdir) the policy of its latest checkpoint
  (`restore_policy`, which reads the run's own config)."""
  if checkpoint:
    _, model_config, params, tokenizer, step = restore_policy(checkpoint)
    return model_config, params, tokenizer, int(step)
  model_config, params, frozen, tokenizer = train.load_policy(config)
  # A LoRA config's base model is its frozen params (no adapters yet).
  return model_config, params if frozen is None else frozen, tokenizer, 0
