r"""A trained policy as a Hugging Face directory: ``python -m experiments.export``.

  python -m experiments.export --checkpoint=runs/quickstart --out=exported/
  python -m experiments.export --checkpoint=runs/x --step=40 --dtype=bfloat16 \
      --out=exported-bf16/

The directory (config.json, generation_config.json, safetensors, tokenizer)
loads with ``transformers.AutoModelForCausalLM.from_pretrained(out)``, with
``--config.model.name=out`` in grpo_jax, and uploads with ``hf upload``.
``--out`` must not exist or be empty; it appears only when complete.
"""

from absl import flags

from experiments import _cli
from grpo_jax import models
from grpo_jax.train import saved_runs
from grpo_jax.models import export

_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", None, "A training workdir.", required=True)
_OUT = flags.DEFINE_string("out", None, "The directory to write.",
                           required=True)
_STEP = flags.DEFINE_integer("step", None, "Which checkpoint; default latest.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"],
                           "The exported tensors' dtype.")
_MAX_SHARD_GB = flags.DEFINE_float(
    "max_shard_gb", export.DEFAULT_MAX_SHARD_BYTES / 2**30,
    "Largest safetensors file (GiB) before the weights are sharded.")


def main(argv):
  del argv
  export.check_out_dir(_OUT.value)  # before anything is loaded
  _, model_config, params, tokenizer, step = saved_runs.restore_policy(
      _CHECKPOINT.value, step=_STEP.value)
  out = models.save_hf_checkpoint(
      _OUT.value, params, model_config, tokenizer, dtype=_DTYPE.value,
      max_shard_bytes=int(_MAX_SHARD_GB.value * 2**30))
  print(f"exported step {step} of {_CHECKPOINT.value} to {out}")


if __name__ == "__main__":
  _cli.run(main)
