#!/usr/bin/env bash
# The GPU check (docs/gpu_check.md): on a machine with one H200 and the carried .whl/ (scripts/gpu_wheels.sh),
#   scripts/gpu_check.sh OUTDIR
# installs the wheels into /tmp/site, then runs scripts/gpu_check.py: versions, the default task with slice=h200,
# a qwen3_0_6b-sized model's GRPO steps (tokens/s, MFU) and TRL's GRPOTrainer on it; OUTDIR/gpu_check.json holds
# every figure. GPU_CHECK_DRY=1 (tiny sizes, any platform) skips the install and runs with PY (default python3).
set -uo pipefail
OUTDIR=${1:?usage: scripts/gpu_check.sh OUTDIR}
cd "$(dirname "$0")/.."
PY=${PY:-python3}
if [ "${GPU_CHECK_DRY:-}" != 1 ]; then
  ls .whl/*.whl >/dev/null 2>&1 || { echo "gpu_check: no .whl/*.whl: run scripts/gpu_wheels.sh and carry .whl" >&2; exit 2; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_check: installing .whl/*.whl into /tmp/site failed" >&2; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
exec "$PY" scripts/gpu_check.py "$OUTDIR"
