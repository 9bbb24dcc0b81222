#!/bin/bash
# Issue 46's accelerator figures in one run (about 5-8 minutes on one H100
# or H200): Qwen2.5-1.5B's shape on random weights in bfloat16, decode at
# 1 / 8 / 32 / 128 rows against the HBM bound, the update's MFU at 16 x 8
# rows, the planner's estimate beside them (accelerator.py --shape 1.5b),
# then per-slot cache regions against a paged cache (paged.py).
#
# Run from the repo root on the device machine, with the wheels of the
# packages its image lacks or has at other versions carried in .whl (see
# experiments/benchmarks/NOTES.md, "Issue 46"). Results go to $OUT.
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/device_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv \
    2>&1 | tee "$OUT/gpu.txt"
timeout 450 python3 -m experiments.benchmarks.accelerator --shape "${SHAPE:-1.5b}" \
    --json "$OUT/accelerator_${SHAPE:-1.5b}.json" 2>&1 | tee "$OUT/accelerator.log"
status=$?
timeout 60 python3 -m experiments.benchmarks.paged ${PAGED_ARGS:---slots 8,32} \
    --json "$OUT/paged.json" 2>&1 | tee "$OUT/paged.log"
exit $status
