"""Memory and FLOPs of a training step, planned ahead of time.

`plan(config)` builds what `train.build` builds, from abstract values only
(`jax.eval_shape`: no parameter is allocated, no weight is read): the
optimiser, every component, the `TrainState` with its optimiser moments, a
LoRA run's frozen base, the reference params when ``kl.beta > 0``. It then
lowers and compiles, with `jax.ShapeDtypeStruct` inputs carrying the
shardings the trainer gives them, every program one step runs on the mesh:

* ``update``: the trainer's update_fn (`update.make_update_fn`) on one
  minibatch, the state donated and laid out as `sharding.jit_sharded` does;
* ``sample``: `sampling.sample` (prefill, then the decode loop) at the
  rollout's shapes, the prompts padded to the largest prompt bucket;
* ``old_logprobs`` (off policy) and ``ref_logprobs`` (``kl.beta > 0``): the
  rollout's log-prob passes (`batch.policy_logprobs`) over
  ``train.logprob_batch_size`` rows.

Per device, a program needs (XLA's memory analysis of the compiled program)

    peak = arguments + outputs - aliased (donated) + temporaries + resident

where ``resident`` are the buffers that stay on the device while it runs but
are not its arguments: the optimiser state while sampling, the reference
params during the update. The step's peak is the largest program's.

On simulated CPU devices (``--xla_force_host_platform_device_count``) this
is XLA:CPU's analysis of the partitioned program: the per-device arguments
(params, moments, batch shards) are exact; temporaries are an estimate of
an accelerator's, since XLA:TPU and XLA:GPU fuse and schedule differently.
With libtpu importable, `tpu_devices` gives the compile-only devices of a
TPU slice (`jax.experimental.topologies`, no TPU needed) to compile for
instead, and the figures are XLA:TPU's own.

FLOPs: XLA's cost analysis counts the body of each loop once (the scanned
layers, the decode loop, microbatch and log-prob chunk loops), so for a model
of more than one layer it is far below the step's work; it is shown beside an
analytic count of the matmuls and attention as the code computes them
(`forward_flops`), and the conventional ``6 x params x tokens``.

    config = train.validate(grpo.get_config())
    config.model.name = "qwen2.5-7b"     # a shipped architecture (no weights)
    result = planning.plan(config, mesh=planning.mesh_for(config))
    print(planning.format_plan(result, mfu=0.4))

Pieces: `architectures` (model.name -> ModelConfig, no weights), `costs`
(chips, FLOPs, memory summaries), `targets` (modes, meshes, TPU
topologies), `programs` (the abstract build and the compiled programs),
`report` (the text). Everything is importable from here.
"""

from grpo_jax.planning.architectures import (ARCHITECTURES_DIR,
                                             architecture_names,
                                             hf_config_path,
                                             model_config_from_name,
                                             param_count, strip_rope_scaling)
from grpo_jax.planning.costs import (CHIPS, FIT_FRACTION, GIB, Chip,
                                     MemorySummary, fits, forward_flops,
                                     layer_matmul_params, memory_summary,
                                     sequence_forward_flops, step_time,
                                     training_flops, xla_flops)
from grpo_jax.planning.programs import (PROGRAMS, Inputs, Plan, Program,
                                        StepShapes, Training,
                                        abstract_batch, abstract_inputs,
                                        abstract_policy, abstract_training,
                                        device_bytes, logprob_program,
                                        out_of_memory, plan,
                                        policy_params, resident_buffers,
                                        resident_during, sample_program,
                                        step_shapes, update_program,
                                        with_shardings)
from grpo_jax.planning.report import format_plan
from grpo_jax.planning.targets import (MODES, apply_mode, check_mesh,
                                       mesh_for, tpu_devices)

# The public API: what the imports above re-export.
__all__ = [
    "abstract_batch", "abstract_inputs", "abstract_policy",
    "abstract_training", "apply_mode", "architecture_names",
    "ARCHITECTURES_DIR", "check_mesh", "Chip", "CHIPS", "device_bytes",
    "FIT_FRACTION", "fits", "format_plan", "forward_flops", "GIB",
    "hf_config_path", "Inputs", "layer_matmul_params", "logprob_program",
    "memory_summary", "MemorySummary", "mesh_for", "model_config_from_name",
    "MODES", "out_of_memory", "param_count", "Plan", "plan", "policy_params",
    "Program", "PROGRAMS", "resident_buffers", "resident_during",
    "sample_program", "sequence_forward_flops", "step_shapes", "step_time",
    "StepShapes", "strip_rope_scaling", "tpu_devices", "Training",
    "training_flops", "update_program", "with_shardings", "xla_flops",
]
