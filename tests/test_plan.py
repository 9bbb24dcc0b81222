"""The memory planner (grpo_jax.planning, experiments/plan.py).

Expected values are derived by hand from the configs: parameter counts from
the architecture's shapes (and the hub's published counts), argument bytes
of the update from params + two Adam moments + the batch, FLOPs from the
matmul shapes. Programs compile on simulated CPU devices (tests/conftest.py
forces 8).
"""

import functools
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from configs import grpo
from configs import replay as configs_replay
from configs import repo as configs_repo
from grpo_jax import models
from grpo_jax import planning
from grpo_jax import testing
from grpo_jax import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_config(**overrides):
  c = grpo.get_config("tiny")
  for field, value in overrides.items():
    node = c
    *parents, leaf = field.split(".")
    for part in parents:
      node = node[part]
    node[leaf] = value
  return train.validate(c)


def mesh(config, devices):
  return planning.mesh_for(config, jax.devices()[:devices])


# ------------------------------------------------------- architectures


def hand_count(*, V, D, F, L, H, K, hd, tied, qkv_bias=False, qk_norm=False):
  """Parameters of our decoder from its shapes (models/transformer.py)."""
  layer = 2 * D + D * H * hd + 2 * D * K * hd + H * hd * D + 3 * D * F
  layer += (H * hd + 2 * K * hd) if qkv_bias else 0
  layer += 2 * hd if qk_norm else 0
  return V * D * (1 if tied else 2) + L * layer + D


# name -> (hand count from the published config.json, the hub's published
# safetensors parameter count).
ARCHITECTURES = {
    "qwen2.5-0.5b": (hand_count(V=151936, D=896, F=4864, L=24, H=14, K=2,
                                hd=64, tied=True, qkv_bias=True), 494032768),
    "qwen2.5-1.5b": (hand_count(V=151936, D=1536, F=8960, L=28, H=12, K=2,
                                hd=128, tied=True, qkv_bias=True), 1543714304),
    "qwen2.5-7b": (hand_count(V=152064, D=3584, F=18944, L=28, H=28, K=4,
                              hd=128, tied=False, qkv_bias=True), 7615616512),
    "qwen3-8b": (hand_count(V=151936, D=4096, F=12288, L=36, H=32, K=8,
                            hd=128, tied=False, qk_norm=True), 8190735360),
    "llama-3.1-8b": (hand_count(V=128256, D=4096, F=14336, L=32, H=32, K=8,
                                hd=128, tied=False), 8030261248),
    "smollm2-135m-instruct": (hand_count(V=49152, D=576, F=1536, L=30, H=9,
                                         K=3, hd=64, tied=True), 134515008),
}


def test_every_architecture_is_shipped_and_counted():
  assert set(planning.architecture_names()) == set(ARCHITECTURES)


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_shipped_architecture_has_the_published_parameter_count(name):
  config, _ = planning.model_config_from_name(name)
  params = jax.eval_shape(
      lambda: models.init_params(config, jax.random.PRNGKey(0)))
  by_hand, published = ARCHITECTURES[name]
  assert by_hand == published
  assert planning.param_count(params) == published


def test_llama31_rope_scaling_is_planned_without_it_and_noted():
  config, notes = planning.model_config_from_name("llama-3.1-8b")
  assert config.rope_theta == 500000.0 and config.num_kv_heads == 8
  assert len(notes) == 1 and "'llama3'" in notes[0]
  assert "do not depend" in notes[0]


def test_qwen_families_read_their_features():
  qwen2, _ = planning.model_config_from_name("qwen2.5-7b")
  assert qwen2.qkv_bias and not qwen2.qk_norm and not qwen2.tie_word_embeddings
  qwen3, notes = planning.model_config_from_name("qwen3-8b")
  assert qwen3.qk_norm and not qwen3.qkv_bias and qwen3.head_dim == 128
  assert notes == ()


def test_a_config_json_path_and_its_directory_are_read(tmp_path):
  hf = json.loads((planning.ARCHITECTURES_DIR / "qwen2.5-0.5b.json")
                  .read_text())
  (tmp_path / "config.json").write_text(json.dumps(hf))
  by_name, _ = planning.model_config_from_name("qwen2.5-0.5b")
  assert planning.model_config_from_name(
      str(tmp_path / "config.json"))[0] == by_name
  assert planning.model_config_from_name(str(tmp_path))[0] == by_name


def test_unsupported_architecture_names_its_model_type(tmp_path):
  path = tmp_path / "config.json"
  path.write_text(json.dumps(dict(
      model_type="mistral", hidden_size=64, num_attention_heads=4,
      num_hidden_layers=2, intermediate_size=128, vocab_size=100)))
  with pytest.raises(ValueError) as e:
    planning.model_config_from_name(str(path))
  assert "model_type='mistral'" in str(e.value)
  assert "llama, qwen2, qwen3" in str(e.value)
  assert str(path) in str(e.value)


def test_unknown_model_name_lists_the_architectures():
  with pytest.raises(ValueError, match="qwen2.5-7b.*config.json"):
    planning.model_config_from_name("no-such-model")


# --------------------------------------------------------------- meshes


def test_mesh_must_use_exactly_the_planned_devices():
  assert planning.check_mesh((1, -1, 1), 8) == (1, 8, 1)
  assert planning.check_mesh((2, 4, 1), 8) == (2, 4, 1)
  with pytest.raises(ValueError, match=r"uses 4 devices but the plan is for "
                     r"--devices=8"):
    planning.check_mesh((1, 4, 1), 8)
  with pytest.raises(ValueError, match="does not divide --devices=8"):
    planning.check_mesh((3, -1, 1), 8)


def test_modes_are_config_overrides():
  c = tiny_config()
  assert planning.apply_mode(c, "full") is c
  c = planning.apply_mode(c, "bf16+lora+remat")
  assert c.model.dtype == "bfloat16" and c.lora.rank == 16 and c.model.remat
  with pytest.raises(ValueError, match="mode='fp8' is unknown"):
    planning.apply_mode(c, "fp8")
  del c.lora
  with pytest.raises(ValueError, match=r"config.lora.rank.*--mode=full"):
    planning.apply_mode(c, "lora")


# ---------------------------------------------------------------- FLOPs


def test_forward_flops_by_hand():
  cfg = testing.tiny_config()  # D 64, F 96, H 4, K 2, hd 16, V 128, 2 layers
  # per token per layer: q 64*64 + k, v 2*64*32 + o 64*64 + gate/up/down
  # 3*64*96 = 30720 weights; attention 2*H*hd*queries*keys = 2*4*16*10*12.
  layers = 2 * (30720 * 10 + 2 * 4 * 16 * 10 * 12)
  expected = 2 * layers + 2 * 64 * 128 * 3
  assert expected == 1339392
  assert planning.forward_flops(cfg, queries=10, keys=12,
                                logit_positions=3) == expected
  # 8 rows of 5 prompt + 3 completion columns in groups of 4: the prompt
  # runs for 2 groups (10 queries), the completions for all 8 rows (24);
  # every query sees all 8 slots; 24 positions get log-probs.
  assert planning.sequence_forward_flops(
      cfg, rows=8, prompt_length=5, completion_length=3, group_size=4) == \
      planning.forward_flops(cfg, queries=34, keys=8, logit_positions=24)
  assert planning.sequence_forward_flops(
      cfg, rows=8, prompt_length=5, completion_length=3) == \
      planning.forward_flops(cfg, queries=64, keys=8, logit_positions=24)
  assert planning.training_flops(1000, 50) == 300000


def test_step_time_and_fit():
  # 1e15 FLOPs on 8 chips of 250 TFLOP/s at half utilisation: 1 s.
  assert planning.step_time(1e15, num_devices=8, mfu=0.5,
                            peak_tflops=250) == pytest.approx(1.0)
  with pytest.raises(ValueError, match="mfu"):
    planning.step_time(1.0, num_devices=1, mfu=0.0, peak_tflops=1.0)
  assert planning.fits(89, 100) == "yes"
  assert planning.fits(95, 100) == "tight"
  assert planning.fits(101, 100) == "no"


def test_analytic_flops_match_xla_on_one_layer():
  """With one layer, one microbatch and one log-prob chunk every loop runs
  once, so XLA's count (loop bodies once) is the whole program's; the
  analytic matmul + attention count must agree with it up to the
  elementwise work it leaves out."""
  c = tiny_config(**{"train.chunk_size": 4096})
  cfg = planning.model_config_from_name("tiny")[0].replace(
      num_layers=1, hidden_size=128, intermediate_size=512, num_heads=4,
      num_kv_heads=2, head_dim=32)
  result = planning.plan(c, mesh=mesh(c, 1), model_config=cfg,
                         programs=("update", "ref_logprobs"))
  for program in result.programs:
    assert program.xla_flops == pytest.approx(program.flops, rel=0.1), \
        program.name


# --------------------------------------------------------------- memory


def tiny_hand_bytes(config, devices):
  """Per-device bytes of the tiny config's update arguments, by hand.

  Every matrix (embedding, q, k, v, o, gate, up, down) splits its D over
  fsdp; the norms are replicated. The state holds params, Adam's mu and nu
  (float32) and scalars; the minibatch (on policy, beta > 0) holds tokens
  and input_mask [M, S], completion_mask, ref_logp and sampler_logp [M, T],
  advantages and temperature [M], rows split over the devices.
  """
  m = planning.model_config_from_name("tiny")[0]
  d, f, h, k, hd = (m.hidden_size, m.intermediate_size, m.num_heads,
                    m.num_kv_heads, m.head_dim)
  matrices = m.vocab_size * d + m.num_layers * (
      d * h * hd + 2 * d * k * hd + h * hd * d + 3 * d * f)
  norms = m.num_layers * 2 * d + d
  params = 4 * (matrices // devices + norms)
  rows = config.rollout.num_prompts * config.rollout.num_generations
  s = max(config.data.prompt_buckets) + config.rollout.max_new_tokens
  t = config.rollout.max_new_tokens
  batch = 4 * rows * (2 * s + 3 * t + 2) // devices
  return params, batch


@functools.lru_cache(maxsize=None)
def update_plan(devices):
  c = tiny_config(**{"mesh.shape": (1, devices, 1)})
  return c, planning.plan(c, mesh=mesh(c, devices), programs=("update",))


@pytest.mark.parametrize("devices", [1, 2])
def test_update_arguments_are_params_two_moments_and_the_batch(devices):
  config, result = update_plan(devices)
  state = planning.abstract_training(
      config, planning.model_config_from_name("tiny")[0]).state
  # step, key, counts, injected hyperparameters: replicated scalars.
  scalars = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state)
                if x.size <= 2)
  params, batch = tiny_hand_bytes(config, devices)
  (update,) = result.programs
  assert update.memory.argument == 3 * params + scalars + batch
  # The state is donated: the new state reuses its buffers.
  assert update.memory.alias == 3 * params + scalars
  # Resident beside it: the reference params and the whole rollout batch.
  assert result.resident["ref_params"] == params
  assert update.resident == params + batch * devices
  assert update.peak == (update.memory.argument + update.memory.output
                         - update.memory.alias + update.memory.temp
                         + update.resident)


def test_model_remat_reaches_the_planned_update():
  """`model.remat` (train.load_policy and the planner's abstract policy set
  it on the model config): the update's temporaries shrink, its arguments
  and outputs stay, and its FLOPs count a second forward pass (3 -> 4
  passes), which the report and the JSON name."""
  plans = [planning.plan(c, mesh=mesh(c, 1), programs=("update",))
           for c in (tiny_config(), tiny_config(**{"model.remat": True}))]
  (plain,), (remat,) = [p.programs for p in plans]
  assert remat.memory.temp < plain.memory.temp
  assert ((remat.memory.argument, remat.memory.output)
          == (plain.memory.argument, plain.memory.output))
  assert remat.flops * 3 == plain.flops * 4
  assert [p.to_dict()["remat"] for p in plans] == [False, True]
  text = planning.format_plan(plans[1], mfu=0.5, peak_tflops=0.0)
  assert "layers rematerialised" in text


def test_lora_update_holds_the_base_once_and_moments_of_the_adapters():
  c = tiny_config()
  if "lora" not in c:
    pytest.skip("this checkout's config has no lora fields")
  c = planning.apply_mode(c, "lora")
  c.lora.targets = ("q", "down")
  result = planning.plan(c, mesh=mesh(c, 1), programs=("update",))
  m = planning.model_config_from_name("tiny")[0]
  r, layers = c.lora.rank, m.num_layers
  # q: A [D, r], B [r, H*hd]; down: A [F, r], B [r, D], in every layer.
  adapters = layers * (m.hidden_size * r + r * m.num_heads * m.head_dim
                       + m.intermediate_size * r + r * m.hidden_size)
  base = 4 * planning.param_count(jax.eval_shape(
      lambda: models.init_params(m, jax.random.PRNGKey(0))))
  assert result.trainable_params == adapters
  _, batch = tiny_hand_bytes(c, 1)
  state = planning.abstract_training(c, m).state
  scalars = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state)
                if x.size <= 2)
  (update,) = result.programs
  # Adapters with two moments, the frozen base once (also the KL
  # reference: no second copy), the minibatch.
  assert update.memory.argument == 3 * 4 * adapters + scalars + base + batch
  assert "ref_params" not in result.resident
  assert result.resident["frozen"] == base
  assert update.resident == batch  # only the rollout batch besides


@pytest.mark.parametrize("name", ["repo", "replay"])
def test_replayed_rows_size_the_update_and_log_prob_passes(name):
  """configs/{repo,replay}.py tiny: the sampler draws P x G = 2 x 4 = 8
  rows; the rollout batch adds RePO's K = num_replays = 4 slots per group
  (2 x (4 + 4) = 16 rows, 2 minibatches of 8, one group of G + K = 8
  sharing its prompt) or row replay's R = rows = 16 (8 + 16 = 24 rows, 4
  minibatches of 6, one prompt per row). Both are off policy; RePO has
  KL (beta 0.04), row replay none."""
  module = {"repo": configs_repo, "replay": configs_replay}[name]
  c = train.validate(module.get_config("tiny"))
  rows, minibatch, group = {"repo": (16, 8, 8), "replay": (24, 6, 1)}[name]
  passes = {"repo": ["old_logprobs", "ref_logprobs"],
            "replay": ["old_logprobs"]}[name]
  # The sampler's program is the plain P x G one (not compiled here).
  result = planning.plan(c, mesh=mesh(c, 1), programs=(
      "update", "old_logprobs", "ref_logprobs"))
  s = result.shapes
  assert (s["rows"], s["batch_rows"], s["minibatch"], s["logprob_rows"]) \
      == (8, rows, minibatch, rows)
  assert any(f"{rows} rows a step" in note for note in result.notes)
  programs = {p.name: p for p in result.programs}
  assert sorted(programs) == sorted(["update"] + passes)
  cfg = result.model_config
  seq = functools.partial(planning.sequence_forward_flops, cfg,
                          prompt_length=80, completion_length=8)
  # Forward + backward's two matmuls, one microbatch per minibatch.
  assert programs["update"].flops == 3 * seq(rows=minibatch,
                                             group_size=group)
  assert programs["update"].calls == rows // minibatch
  for p in passes:
    assert programs[p].flops == seq(rows=rows, group_size=group)
    assert programs[p].calls == 1
  assert result.six_nd == 6 * result.num_params * rows * 88
  # Batch bytes per row: tokens and input_mask [88], completion_mask,
  # sampler_logp, old_logp (and ref_logp) [8], advantage, temperature and
  # the replayed mark; the update takes a minibatch, the whole batch stays.
  per_row = 4 * (2 * 88 + 8 * (2 + len(passes)) + 3)
  assert result.resident["rollout_batch"] == rows * per_row
  # Row replay's update reads no mark off policy (no split loss, no
  # sampler gap measure), so jit drops that argument.
  update_row = per_row - (4 if name == "replay" else 0)
  assert programs["update"].memory.argument == (
      result.resident["params"] + result.resident["optimizer_and_states"]
      + minibatch * update_row)


def test_sharding_shrinks_the_update_arguments_as_the_mesh_implies():
  one = update_plan(1)[1].programs[0].memory.argument
  two = update_plan(2)[1].programs[0].memory.argument
  assert two < 0.55 * one  # all but the norms and scalars split in two


def test_resident_during_a_program_excludes_its_arguments():
  resident = dict(params=10, optimizer_and_states=20, ref_params=10,
                  rollout_batch=1)
  assert planning.resident_during(resident, ("params",
                                             "optimizer_and_states")) == 11
  assert planning.resident_during(resident, ("params", "rollout_batch")) == 30
  with pytest.raises(ValueError, match="lora"):
    planning.resident_during(resident, ("lora",))


def test_abstract_state_matches_train_build():
  """The planner composes train.py's functions as `train.build` does; the
  state it plans for is the one the trainer builds, and its model config
  (with `model.remat`, which both set from the config)."""
  c = tiny_config(**{"model.remat": True})
  run = train.build(c)
  planned = planning.abstract_training(
      c, planning.model_config_from_name("tiny")[0])
  assert planned.model_config == run.model_config and run.model_config.remat
  shapes = lambda tree: jax.tree.map(lambda x: (np.shape(x), x.dtype), tree)
  assert shapes(planned.state) == shapes(run.state)
  assert shapes(planned.ref_params) == shapes(run.ref_params)


def test_the_report_labels_the_cpu_estimate():
  text = planning.format_plan(update_plan(2)[1], mfu=0.5, peak_tflops=100.0)
  assert "ESTIMATE of accelerator memory" in text
  assert "2 simulated CPU devices" in text
  for chip in ("v5e", "v5p", "h100", "custom"):
    assert f"\n  {chip} " in text


# XLA:TPU's refusal of the 7B update on a v5e-8, as libtpu words it.
TPU_OUT_OF_MEMORY = (
    "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required "
    "for HLO temporaries (31.96G) exceeds available HBM (15.75G).")


def test_out_of_memory_message_is_read():
  message, needed = planning.out_of_memory(RuntimeError(TPU_OUT_OF_MEMORY))
  assert message == TPU_OUT_OF_MEMORY
  assert needed == int(31.96 * 2 ** 30)
  assert planning.out_of_memory(RuntimeError("INVALID_ARGUMENT: x")) == ("", 0)


def test_a_program_that_does_not_fit_is_reported_as_such():
  result = update_plan(2)[1]
  update = result.programs[0]
  refused = update._replace(memory=None, error=TPU_OUT_OF_MEMORY,
                            needed=int(31.96 * 2 ** 30))
  result = result._replace(programs=(refused,))
  assert not result.fitted
  assert result.peak == refused.needed + update.resident  # a lower bound
  text = planning.format_plan(result)
  assert "update        does not fit: RESOURCE_EXHAUSTED" in text
  assert "step peak per device: over 31.96 GiB" in text
  rows = {line.split()[0]: line.split() for line in text.splitlines()
          if line.startswith(("  v5e ", "  v5p ", "  h100 "))}
  assert rows["v5e"][3] == "no"  # 16 GiB < 32 GiB needed
  assert rows["v5p"][3] == rows["h100"][3] == "?"


# ------------------------------------------------------------------- CLI


def run_plan(*flags):
  env = dict(os.environ, JAX_DISABLE_MOST_OPTIMIZATIONS="true",
             PYTHONPATH=ROOT)
  env.pop("XLA_FLAGS", None)  # the entry point sets the device count
  return subprocess.run([sys.executable, "-m", "experiments.plan", *flags],
                        cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=600)


@pytest.mark.slow  # CI time; run with -m slow
def test_cli_plans_the_tiny_config_on_two_devices(tmp_path):
  out = tmp_path / "plan.json"
  result = run_plan("--config=configs/grpo.py:tiny", "--devices=2",
                    "--config.mesh.shape=(1,2,1)", f"--json={out}")
  assert result.returncode == 0, result.stderr[-4000:]
  assert "2 simulated CPU devices" in result.stdout
  assert "step peak per device" in result.stdout
  figures = json.loads(out.read_text())
  assert figures["mesh"] == {"data": 1, "fsdp": 2, "tensor": 1}
  # GRPO's tiny config: on policy (no old log-prob pass), beta > 0.
  assert [p["name"] for p in figures["programs"]] == [
      "update", "sample", "ref_logprobs"]
  assert figures["peak_bytes"] == max(p["peak"] for p in figures["programs"])


def test_cli_rejects_a_mesh_that_does_not_use_every_device():
  result = run_plan("--config=configs/grpo.py:tiny", "--devices=2",
                    "--config.mesh.shape=(1,4,1)")
  assert result.returncode != 0
  assert "uses 4 devices but the plan is for --devices=2" in result.stderr
