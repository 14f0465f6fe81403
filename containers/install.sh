#!/usr/bin/env bash
# The install steps of containers/Dockerfile, in one script so that CI runs exactly them
# (scripts/test_images.sh builds the Dockerfile): a broken step fails CI, not a user's
# Cloud Build.
#   install.sh runtime cpu|gpu TF_VERSION DIR   Python 3 venv at /opt/venv, TensorFlow,
#                                               and the install_requires of DIR/setup.py
#   install.sh package DIR                      the package in DIR, then an import check
# Mounted by the CI build, used when present and never kept in the image: the build
# machine's CA bundle at /run/build-ca.crt (for a network whose TLS is inspected by a
# proxy). Nothing pip downloads is cached in the image.
set -euo pipefail
venv=/opt/venv
export PIP_NO_CACHE_DIR=1
if [ -s /run/build-ca.crt ]; then export PIP_CERT=/run/build-ca.crt; fi
pip=("$venv/bin/python" -m pip install --quiet --no-warn-script-location)

case "${1:-}" in
  runtime)
    variant="$2" version="$3" deps="$4"
    case "$variant" in
      cpu) tensorflow="tensorflow-cpu==$version" ;;
      gpu) tensorflow="tensorflow[and-cuda]==$version" ;;
      *) echo "install.sh: TF_VARIANT=$variant: expected cpu or gpu" >&2; exit 2 ;;
    esac
    packages=()
    if ! command -v python3 >/dev/null || ! python3 -c "import venv, ensurepip" 2>/dev/null
    then  # a bare Debian base: its Python 3.11
      packages+=(python3 python3-venv ca-certificates)
    fi
    # LightGBM's wheel links the system's OpenMP runtime (the trees of trainer.train.forest).
    if ! ldconfig -p | grep -q 'libgomp\.so\.1'; then packages+=(libgomp1); fi
    if [ "${#packages[@]}" -gt 0 ]; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${packages[@]}" >/dev/null
      rm -rf /var/lib/apt/lists/*
    fi
    python3 -m venv "$venv"
    "${pip[@]}" --upgrade pip setuptools wheel
    # setup.py alone (no package next to it) installs just what it requires, and its
    # `submit` extra: the Vertex AI SDK, through which a job logs to its Experiments run
    # (trainer/train/experiment.py) and the pipeline's steps create jobs and models.
    "${pip[@]}" --no-build-isolation "$tensorflow" "$deps[submit]"
    "$venv/bin/python" -m pip uninstall --quiet --yes trainer
    ;;
  package)
    src="$2"
    "${pip[@]}" --no-deps --no-build-isolation "$src"
    # Fails the build if an entry point cannot import (a module missing from the sdist,
    # a dependency missing from the image), without starting TensorFlow's runtime.
    # (Each entry point in its own process: they define flags of the same names.)
    "$venv/bin/python" -c "import trainer.bootstrap, trainer.task, trainer.train.job, \
trainer.serving.bodies, trainer.serving.server, trainer.vertex.pipeline_steps, lightgbm, \
google.cloud.aiplatform, tensorflow as tf; \
print('trainer image: TensorFlow', tf.__version__, 'LightGBM', lightgbm.__version__)"
    "$venv/bin/python" -c "import trainer.serve"
    ;;
  *)
    echo "usage: install.sh runtime cpu|gpu TF_VERSION DIR | install.sh package DIR" >&2
    exit 2 ;;
esac
