#!/usr/bin/env bash
# Submits to Vertex AI from the project's environment (created on first use); arguments
# go to scripts/submit.py, e.g. scripts/submit.sh --project=P ... --dry_run -- --label=y
source "$(dirname "$0")/env.sh"
exec python scripts/submit.py "$@"
