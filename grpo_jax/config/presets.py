"""The presets a config file applies: ``:tiny`` (`finalize`, `use_tiny`),
the quickstart's scale and the comparison task. They set fields of a
config built from `config.get_base_config`."""

import ml_collections

# The tiny preset: a random model built offline, shapes that run in seconds.
TINY_MODEL = "tiny"
# ... and its reward in accuracy's place (`use_graded_accuracy`).
TINY_REWARD = "graded_accuracy"
# The stages a config names as {name, kwargs}.
STAGES = ("select", "groups", "credit", "rows", "filter", "budget")


def use_quickstart_scale(c: ml_collections.ConfigDict
                         ) -> ml_collections.ConfigDict:
  """The quickstart's scale on the embedded model (configs/quickstart.py):
  2 prompts x 4 completions of up to 40 tokens, 40 steps at lr 2e-5 and no
  KL, greedy accuracy on 40 held-out problems (half the task held out)
  after steps 20 and 40; about 3 to 5 minutes on a 2-core CPU."""
  c.data.heldout_fraction = 0.5
  c.data.heldout_size = 40
  c.data.prompt_buckets = (64, 128)
  c.rollout.num_prompts = 2
  c.rollout.num_generations = 4
  c.rollout.max_new_tokens = 40
  c.kl.beta = 0.0
  c.optimizer.learning_rate = 2e-5
  c.train.num_steps = 40
  c.checkpoint.every = 10
  # Two greedy passes over the held-out problems (steps 20 and 40), in one
  # sampler call of 40 prompts each.
  c.eval.every = 20
  c.eval.num_problems = 40
  return c


def use_comparison_task(c: ml_collections.ConfigDict
                        ) -> ml_collections.ConfigDict:
  """The task every comparison table uses (experiments/compare.py): one-digit
  problems a + b, a - b and a * b, 70% of the 300 held out, greedy accuracy
  on the first 200 of them. The embedded model starts at greedy 0.42 and
  sampled 0.17 there (pass@4 0.455): at 4 completions about half the groups
  carry signal, where one-digit sums saturate by step 24 and two-digit or
  three-term sums start near 0.04 sampled. A config on another task (SD-GRPO's
  boxed sub-problems) keeps its own."""
  if c.data.task != "arithmetic":
    return c
  c.data.digits, c.data.operands = 1, 2
  c.data.ops = ("+", "-", "*")
  c.data.heldout_fraction = 0.7
  c.data.heldout_size = 200
  c.eval.num_problems = 200
  return c


def use_tiny(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Random tiny model and tiny shapes: the loop end to end in seconds.

  The random model almost never writes the right answer, so `accuracy`
  alone would give every group equal rewards, zero advantages and nothing
  to train on (DAPO's dynamic sampling would drop every group). The
  preset scores with partial credit instead (`use_graded_accuracy`):
  `TINY_REWARD` (1 / (1 + |n - answer|), n the completion's last number)
  in accuracy's place, so that a tiny run's groups hold different rewards
  from its first step and every objective's mechanism runs. A config
  without `accuracy` (SD-GRPO's segments) keeps its rewards.
  """
  c.model.name = TINY_MODEL
  c.data.prompt_buckets = (80,)  # character-level prompts
  c.data.system_prompt = ""  # the character-level prompt stays short
  c.rollout.num_prompts = 2
  c.rollout.num_generations = max(2, min(c.rollout.num_generations, 4))
  c.mesh.shape = (1, 1, 1)  # one device: tiny batches need not split evenly
  c.rollout.max_new_tokens = 8
  if "horizon" in c.objective.kwargs:
    c.objective.kwargs.horizon = c.rollout.max_new_tokens
  c.optimizer.learning_rate = 1e-3
  c.optimizer.warmup_steps = 0
  c.train.num_steps = 4
  c.train.chunk_size = 64
  c.train.compilation_cache_dir = ""  # tiny programs compile in seconds
  c.checkpoint.every = 2
  c.data.heldout_size = 4
  c.eval.num_problems = 4
  return use_graded_accuracy(c)


def use_graded_accuracy(c: ml_collections.ConfigDict
                        ) -> ml_collections.ConfigDict:
  """`TINY_REWARD` in the place of the `accuracy` reward: its slot in
  rewards.functions, its weight and every stage option that names it
  (``signal_reward``: DAPO's dynamic sampling, the budgets' solved rows,
  GHPO's hints; BPPO's ``correct_reward``: "> 0" now reads "partly
  right"). `accuracy` stays as the last
  column at weight 0 (its metric, the correctness a length shaper reads),
  unless a shaper reads every reward column as its criteria (POW3R's
  rubric, one category each). The declared range is accuracy's, [0, 1], so
  an estimator's reward domain (NGRPO's r_max, BNPO's) still holds. A
  config without `accuracy` is returned as it is."""
  functions = list(c.rewards.functions)
  if "accuracy" not in functions:
    return c
  from grpo_jax.rewards import shapers  # pylint: disable=g-import-not-at-top
  slot = functions.index("accuracy")
  functions[slot] = TINY_REWARD
  weights = list(c.rewards.weights)
  rubric = any(name in shapers.SHAPERS.names()
               and "verified" in shapers.SHAPERS.entry(name).meta.reads
               for name in c.rewards.shapers)
  if not rubric:
    functions.append("accuracy")
    weights.append(0.0)
  c.rewards.functions, c.rewards.weights = tuple(functions), tuple(weights)
  for stage in STAGES:  # an option naming a column: signal_reward, ...
    for key, value in list(c[stage].kwargs.items()):
      if value == "accuracy":
        c[stage].kwargs[key] = TINY_REWARD
  return c


def finalize(c: ml_collections.ConfigDict, arg=None
             ) -> ml_collections.ConfigDict:
  """Applies the ``:arg`` of ``--config=configs/x.py:arg`` ("tiny" or None)."""
  if arg in (None, ""):
    return c
  if arg == TINY_MODEL:
    return use_tiny(c)
  raise ValueError(f"config argument {arg!r} is unknown; use 'tiny' or none.")
