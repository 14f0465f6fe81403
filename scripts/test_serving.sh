#!/usr/bin/env bash
# Serving compatibility: exports of this TensorFlow answer Vertex request bodies in
# TensorFlow 2.15.1 (the runtime of Vertex AI's newest prebuilt prediction images,
# tf2-cpu.2-15 / tf2-gpu.2-15), in .venv-tf215 (created on first use).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv-tf215"
source "$root/scripts/make_venv.sh"
make_venv "$venv" "TensorFlow 2.15.1" "tensorflow-cpu==2.15.1"
# Before env.sh, which has variables of its own (venv among them).
export SERVING_PYTHON="$venv/bin/python"
source "$root/scripts/env.sh"
exec python -m pytest tests/serving_compat.py "$@"
