#!/usr/bin/env bash
# Runs the test suite in the project's environment (created on first use).
# Extra arguments go to pytest, e.g. scripts/test.sh -k storage
source "$(dirname "$0")/env.sh"
# report.html is rendered in a real headless Chromium (tests/test_report.py).
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  echo "installing Chromium from the system packages, for tests/test_report.py" >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get install -y -q chromium >/dev/null 2>&1 ||
    { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q chromium >/dev/null; }
fi
exec python -m pytest tests "$@"
