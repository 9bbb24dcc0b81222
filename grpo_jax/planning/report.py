"""A `Plan` as text: per-device memory by program, FLOPs, fit and step time."""

from typing import Mapping

from grpo_jax.planning.costs import CHIPS, GIB, Chip, fits, step_time
from grpo_jax.planning.programs import Plan

def _in(unit: int):
  return lambda x: f"{x / unit:.2f}"


def _time(seconds: float) -> str:
  if seconds < 1:
    return f"{seconds * 1e3:.1f} ms"
  return f"{seconds:.2f} s"


def format_plan(result: Plan, *, mfu: float = 0.4,
                peak_tflops: float = 0.0,
                chips: Mapping[str, Chip] = CHIPS) -> str:
  """The plan as text: shapes, per-device memory by program, FLOPs, and
  fit and step time per chip (`peak_tflops` > 0 adds a custom chip)."""
  c, s = result.model_config, result.shapes
  on_cpu = result.platform == "cpu"
  unit, unit_name = (GIB, "GiB") if result.peak >= GIB else (1024 ** 2, "MiB")
  size = _in(unit)
  mesh = " x ".join(f"{k}={v}" for k, v in result.mesh_shape.items())
  lines = [
      f"model    {result.model_name}: {c.model_type}, "
      f"{result.num_params / 1e9:.3f}B params"
      + ("" if result.trainable_params == result.num_params else
         f" ({result.trainable_params / 1e6:.1f}M trainable: LoRA)")
      + f", {c.num_layers} layers, D={c.hidden_size}, params "
      f"{c.param_dtype}, compute {c.dtype}"
      + (", layers rematerialised" if c.remat else ""),
      f"mesh     {mesh} ({result.num_devices} "
      + ("simulated CPU devices)" if on_cpu else
         f"{result.platform} devices, compiled ahead of time)"),
      f"shapes   P={s['prompts']} x G={s['generations']} = {s['rows']} rows,"
      f" prompt {s['prompt_length']} + {s['new_tokens']} new tokens; "
      f"update minibatch {s['minibatch']} rows (microbatch "
      f"{s['microbatch']}); log-prob passes of {s['logprob_rows']} rows",
      "",
  ]
  if on_cpu:
    lines.append(
        f"Per-device memory, {unit_name}: XLA:CPU's analysis of the "
        "partitioned programs, an ESTIMATE of accelerator memory (arguments "
        "exact, temporaries as XLA:CPU schedules them).")
    if c.dtype != "float32":
      lines.append(
          f"  XLA:CPU converts {c.dtype} matmuls to float32, so these "
          "temporaries are not a bf16 program's (--topology=... for TPU's).")
  else:
    lines.append(f"Per-device memory, {unit_name}: XLA's analysis of the "
                 f"programs compiled for {result.platform}.")
  header = (f"  {'program':<14}{'args':>9}{'output':>9}{'aliased':>9}"
            f"{'temp':>9}{'resident':>10}{'peak':>9}{'compile':>10}")
  lines.append(header)
  for p in result.programs:
    m = p.memory
    if m is None:
      lines.append(f"  {p.name:<14}does not fit: {p.error}")
      continue
    lines.append(
        f"  {p.name:<14}{size(m.argument):>9}{size(m.output):>9}"
        f"{size(m.alias):>9}{size(m.temp):>9}{size(p.resident):>10}"
        f"{size(p.peak):>9}{p.compile_s:>9.1f}s")
  lines.append(
      "  resident: " + ", ".join(f"{k} {size(v)}"
                                 for k, v in result.resident.items()))
  lines.append("  step peak per device: "
               + ("" if result.fitted else "over ")
               + f"{size(result.peak)} {unit_name} ({result.peak_program})")
  lines += ["", "FLOPs per step (all devices; calls per step in brackets):",
            f"  {'program':<20}{'analytic':>12}{'XLA, loop bodies once':>24}"]
  for p in result.programs:
    xla = ("n/a" if p.xla_flops is None
           else f"{p.xla_flops * result.num_devices * p.calls:.3e}")
    lines.append(f"  {p.name + f' (x{p.calls})':<20}"
                 f"{p.flops * p.calls:>12.3e}{xla:>24}")
  lines.append(f"  {'step':<20}{result.step_flops:>12.3e}")
  lines.append(f"  6 x params x tokens trained: {result.six_nd:.3e}")
  lines += ["", f"Fit and step time at MFU {mfu:g} (step peak "
            f"{size(result.peak)} {unit_name} per device; decode is "
            "bandwidth-bound, so its time at MFU is a lower bound):",
            f"  {'chip':<10}{'TFLOP/s':>9}{'HBM GiB':>9}{'fits':>7}"
            f"{'update':>11}{'step':>11}"]
  table = dict(chips)
  if peak_tflops > 0:
    table["custom"] = Chip("custom", peak_tflops, 0, "--peak_tflops")
  update = result.by_name.get("update")
  update_flops = update.flops * update.calls if update else 0
  for name, chip in table.items():
    time_of = lambda f, chip=chip: step_time(
        f, num_devices=result.num_devices, mfu=mfu,
        peak_tflops=chip.peak_tflops)
    hbm = f"{chip.hbm_bytes / GIB:.0f}" if chip.hbm_bytes else "?"
    fit = fits(result.peak, chip.hbm_bytes) if chip.hbm_bytes else "?"
    if not result.fitted and fit != "no":
      fit = "?"  # a program's own need is unknown past XLA's refusal
    lines.append(f"  {name:<10}{chip.peak_tflops:>9.0f}{hbm:>9}{fit:>7}"
                 f"{_time(time_of(update_flops)):>11}"
                 f"{_time(time_of(result.step_flops)):>11}")
  lines.append("  sources: " + "; ".join(
      f"{k}: {v.source}" for k, v in chips.items()))
  if on_cpu:
    lines.append(
        "  ahead-of-time TPU figures: --topology=v5e:2x4 (needs libtpu: pip "
        "install 'jax[tpu]'); GPU topologies cannot be compiled for without "
        "a GPU in this jax (jax-ml/jax#23971).")
  for note in result.notes:
    lines.append(f"note: {note}")
  return "\n".join(lines)
