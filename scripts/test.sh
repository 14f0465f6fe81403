#!/usr/bin/env bash
# Runs the test suite in the project's environment (created on first use).
# Extra arguments go to pytest, e.g. scripts/test.sh -k storage
source "$(dirname "$0")/env.sh"
exec python -m pytest tests "$@"
