#!/usr/bin/env bash
# The GPU check (issue 29, benchmarks/gpu_check.py): the default model's examples/s on
# each GPU and on all of them, beside the GPU's fp32 and bf16 matmul rates measured in the
# same run, and eager = compiled there; about 5 minutes. On a machine with an NVIDIA GPU
# it makes .venv-gpu with TensorFlow's CUDA wheels from the package registry (first run:
# a few minutes); without one it runs its CPU fallback in the project's environment
# (under a minute: CI runs it so that it cannot rot). Arguments go to gpu_check.py.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  source "$root/scripts/make_venv.sh"
  make_venv "$root/.venv-gpu" "TensorFlow with CUDA" "tensorflow[and-cuda]>=2.21,<2.22" \
    -e "$root"
  cd "$root"
  exec "$root/.venv-gpu/bin/python" -m benchmarks.gpu_check "$@"
fi
source "$root/scripts/env.sh"
exec python -m benchmarks.gpu_check --cpu_fallback "$@"
