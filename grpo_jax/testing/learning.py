"""A trivial task every estimator and objective must learn, as one function.

A one-layer llama of vocabulary `VOCAB` samples completions of two fixed
prompts; the reward is the share of `TARGET` tokens, which starts near 1/8
(uniform over the vocabulary) and which training raises. Each batch feeds
several optimiser steps, so that every step after the first is off policy.
The estimator's state is carried from step to step, as the trainer does.
"""

import functools

import jax
import jax.numpy as jnp

from grpo_jax.testing import estimator_laws

VOCAB = 8
TARGET = 5  # the token the reward counts


def model_config():
  """The tiny llama the task trains: width 16, one layer, vocab `VOCAB`."""
  from grpo_jax import models  # pylint: disable=g-import-not-at-top
  return models.ModelConfig(
      model_type="llama", vocab_size=VOCAB, hidden_size=16,
      intermediate_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
      head_dim=8, tie_word_embeddings=True)


def sampled_groups(out, reward, resample):
  """The default group data: `estimator_laws.sampled_groups` of the
  sample `out` and its [P, G] `reward`."""
  del resample
  return estimator_laws.sampled_groups(out, reward, *reward.shape)


def learn_trivial_task(estimator, *, objective=None, group_data=None,
                       steps=25, prompts=2, group=4, t=4, lr=5e-2,
                       num_minibatches=2, on_step=None, credit=None,
                       corrections=(), record_topk=0):
  """Mean rewards of a short off-policy run on the trivial task.

  Args:
    estimator: an `advantages.Estimator`; jitted, its state carried.
    objective: an objective record; default ppo_clip with token_mean.
    group_data: ``group_data(out, reward, resample)`` -> `groups.GroupData`
      of the `sampling.sample` output `out` and its [P, G] `reward`;
      ``resample(**overrides)`` samples the same prompts with the same key
      (a greedy row, say). Default `sampled_groups`.
    steps, prompts, group, t, lr: steps, P (at most 2), G, new tokens per
      completion and the learning rate of `optim.make_optimizer`.
    num_minibatches: optimiser steps per batch.
    on_step: ``on_step(reward, advantages, records)`` after each step: the
      estimator's advantages ([P, G] or [N, T]; with `credit`, the rule's
      [N, T]) and `measures.values` of each minibatch's update (with
      `credit`, its measures as ``credit/<name>``).
    credit: a `credit.Credit` rule applied after the estimator, as the
      rollout does (the sampler's entropies and tokens, the rewards, G);
      a mask it returns narrows the loss tokens.
    corrections: `corrections.make(...)` records weighing the objective's
      terms (FIPO's influence weights, say); the batch here carries no
      ``sampler_logp``, so sampler-mismatch corrections do not apply.
    record_topk: K > 0: the sampler records its top-K ids and log-probs
      and the batch carries them with ``sampler_logp`` (DPPO's top-K
      forms read them).

  Returns:
    (the mean reward of each step, the list of `on_step` results).
  """
  from grpo_jax.train import batch as batch_lib  # pylint: disable=g-import-not-at-top
  from grpo_jax import measures  # pylint: disable=g-import-not-at-top
  from grpo_jax import models  # pylint: disable=g-import-not-at-top
  from grpo_jax import objectives  # pylint: disable=g-import-not-at-top
  from grpo_jax.train import optim  # pylint: disable=g-import-not-at-top
  from grpo_jax import sampling  # pylint: disable=g-import-not-at-top
  from grpo_jax import train  # pylint: disable=g-import-not-at-top
  from grpo_jax.train import update as update_lib  # pylint: disable=g-import-not-at-top
  config = model_config()
  group_data = group_data or sampled_groups
  if objective is None:
    objective = objectives.make("ppo_clip", aggregation="token_mean")
  optimizer = optim.make_optimizer(learning_rate=lr)
  update = update_lib.make_update_fn(
      model_config=config, optimizer=optimizer, objective=objective,
      corrections=corrections, chunk_size=16)
  state = train.init_state(
      models.init_params(config, jax.random.PRNGKey(0)), optimizer, seed=0,
      components={"objective": objective, "advantage": estimator})
  prompt_tokens = jnp.array([[1, 2, 3], [3, 2, 1]], jnp.int32)[:prompts]
  prompt_mask = jnp.ones_like(prompt_tokens)
  estimate = jax.jit(estimator.estimate)
  history, hooked = [], []
  for step in range(steps):
    resample = functools.partial(
        sampling.sample, state.params, config, prompt_tokens, prompt_mask,
        jax.random.fold_in(state.key, step), num_samples=group,
        max_new_tokens=t, temperature=1.0, eos_ids=(), pad_id=0,
        record_topk=record_topk)
    out = resample()
    reward = (out.tokens == TARGET).mean(axis=-1).reshape(prompts, group)
    history.append(float(reward.mean()))
    adv, adv_state = estimate(state.states["advantage"],
                              group_data(out, reward, resample))
    state = state._replace(states=dict(state.states, advantage=adv_state))
    rows = adv.reshape(-1) if estimator.output == "group" else adv
    loss_mask, credit_measures = out.mask, {}
    if credit is not None:
      credited, _ = credit.apply(
          credit.init(), rows, out.mask, token_entropies=out.entropies,
          tokens=out.tokens, rewards=reward.reshape(-1),
          num_generations=group)
      adv = rows = credited.advantages
      if credited.mask is not None:
        loss_mask = credited.mask
      credit_measures = {f"credit/{k}": float(v)
                         for k, v in credited.measures.items()}
    topk = {}
    if record_topk:
      topk = dict(sampler_logp=out.tempered_logprobs,
                  sampler_topk_ids=out.topk_ids,
                  sampler_topk_logp=out.topk_logprobs)
    batch = batch_lib.assemble_batch(
        state.params, None, prompt_tokens, prompt_mask, out.tokens, out.mask,
        loss_mask, rows, model_config=config, temperature=1.0, chunk_size=16,
        **topk)
    records = []
    for minibatch in update_lib.minibatches(batch, num_minibatches):
      state, m = update(state, minibatch)
      records.append(dict(measures.values(m), **credit_measures))
      # Only a rule that narrows the loss mask can leave a minibatch
      # without loss tokens (skipped and counted, not an error).
      empty = records[-1]["empty_minibatches"] if credit is not None else 0.0
      assert records[-1]["skipped_updates"] == empty
    if on_step is not None:
      hooked.append(on_step(reward, adv, records))
  return history, hooked


def check_learned(history):
  """The reward starts near chance (the first step's, sampled before any
  update, < 0.35; 1/8 of the tokens are TARGET under a uniform policy) and
  ends at least 0.3 above its start, each as the mean of three steps (a
  fast objective may be past chance by the third)."""
  start, end = sum(history[:3]) / 3, sum(history[-3:]) / 3
  assert history[0] < 0.35, history
  assert end > start + 0.3, history
