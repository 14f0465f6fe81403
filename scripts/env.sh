# Sourced by the other scripts: creates (or refreshes) .venv with the package and its
# test dependencies, then activates it. Re-installs only when setup.py changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
stamp="$venv/.installed-$(sha1sum "$root/setup.py" | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "setting up $venv (first run takes a few minutes: TensorFlow is large)" >&2
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -e "$root[tf,submit,dev,prepare,docs,pipelines]"
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi
# shellcheck disable=SC1091
source "$venv/bin/activate"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
cd "$root"
