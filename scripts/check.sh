#!/usr/bin/env bash
# Lint, format and type checks, and the docs site, in the project's environment: what CI
# runs before the tests (under a minute). Fix formatting with `ruff format .`.
source "$(dirname "$0")/env.sh"
ruff check .
ruff format --check .
mypy
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir "$(mktemp -d)"
echo "check.sh: ruff, ruff format, mypy and mkdocs --strict are clean"
