# Sourced by the compatibility scripts: `make_venv DIR DESCRIPTION PACKAGE...` creates the
# environment DIR with PACKAGE... unless it already has exactly those (a stamp names them).
make_venv() {
  local venv="$1" what="$2"
  shift 2
  local stamp
  stamp="$venv/.installed-$(echo "$*" | sha1sum | cut -c1-12)"
  if [ ! -f "$stamp" ]; then
    echo "setting up $venv ($what)" >&2
    [ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet "$@"
    rm -f "$venv"/.installed*
    touch "$stamp"
  fi
}
