#!/usr/bin/env bash
# Download into .whl/ the wheels rlexp needs on the GPU check's machine that its image lacks (docs/gpu_check.md).
#
# That machine (Python 3.12, x86-64) has jax 0.11.2 with its CUDA plugins, flax, optax, orbax-checkpoint, torch,
# transformers, accelerate, tokenizers, safetensors, pandas, pyarrow, sympy and the rest of its image, and cannot
# reach a registry. What is missing is pure Python: Tunix and what it imports on a run (metrax, clu, perfetto,
# tensorboardX; qwix for LoRA), Hydra (hydra-core, omegaconf, antlr4), the math reward (math-verify, latex2sympy2_extended), and
# TRL with datasets and datasets' dill and multiprocess, for part d. Versions: this venv's (pyproject.toml pins),
# trl as the bench extra pins it. Wheels only, no dependencies resolved: the list is the whole set.
#
#   scripts/gpu_wheels.sh          # then carry .whl to the machine; prints the total size
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
WHEELS=(
  google-tunix==0.1.7 google_metrax==0.2.4 clu==0.0.12 perfetto==0.59.1 tensorboardX==2.6.5 qwix==0.1.8
  hydra-core==1.3.8 omegaconf==2.3.1
  math-verify==0.9.0 latex2sympy2_extended==1.11.0
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
)
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  PLATFORMS+=(--platform "$p")
done
mkdir -p .whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d .whl "${WHEELS[@]}"
# antlr4-python3-runtime 4.9.3 (omegaconf's pin) is published as an sdist only: build its wheel here (pure Python)
if ! ls .whl/antlr4_python3_runtime-*.whl >/dev/null 2>&1; then
  "$PY" -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
fi
ls -1 .whl
echo "total: $(du -sh .whl | cut -f1) in $(ls .whl | wc -l) wheels (.whl/)"
