#!/usr/bin/env bash
# One idempotent set-up for a fresh machine; quick when everything is already there.
#
#   bash scripts/setup.sh            Python environment (.venv) with toolgym and its extras
#   bash scripts/setup.sh --system   also the system services the full test suite needs:
#                                    Docker engine + sandbox images, bubblewrap, PostgreSQL, Chromium
#
# Re-running only redoes what changed: the Python install is keyed on a hash of pyproject.toml and
# setup.py; the system scripts check before they install or start anything.
set -euo pipefail
cd "$(dirname "$0")/.."

SYSTEM=0
for arg in "$@"; do
  case "$arg" in
    --system) SYSTEM=1 ;;
    *) echo "setup.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

PY=${PYTHON:-python3}
EXTRAS=${TOOLGYM_EXTRAS:-dev,verl,gui,alfworld}
VENV=.venv
log() { printf '\033[1;34m[setup]\033[0m %s\n' "$*" >&2; }

# -- system packages, in the background while Python installs -------------------------------------
# Each ensure-*.sh says which Debian packages it would install (--packages); one apt run fetches
# them all at once, beside the pip install. The scripts themselves run afterwards and find them.
apt_pid=""
apt_log=$(mktemp /tmp/toolgym-apt.XXXXXX)
if [ "$SYSTEM" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  packages=""
  for script in scripts/ensure-*.sh; do
    [ -f "$script" ] && packages="$packages $(bash "$script" --packages)"
  done
  packages=$(echo $packages)
  if [ -n "$packages" ]; then
    log "installing Debian packages in the background: $packages"
    ( export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq && apt-get install -y -qq --no-install-recommends $packages ) >"$apt_log" 2>&1 &
    apt_pid=$!
  fi
fi

# -- Python -----------------------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV with $($PY --version)"
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.toolgym-install"
want=$(cat pyproject.toml setup.py | sha256sum | cut -c1-16)-$EXTRAS
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing toolgym[$EXTRAS] into $VENV (torch CPU build from the local wheel cache when present)"
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null
  # torch first, pinned (and held there by a constraint) so that nothing pulls a multi-GB CUDA
  # build; TOOLGYM_TORCH overrides it, e.g. TOOLGYM_TORCH="torch" on a GPU machine.
  torch_req=${TOOLGYM_TORCH:-torch==2.13.0}
  constraints=$(mktemp)
  echo "$torch_req" > "$constraints"
  "$VENV/bin/pip" install -q "$torch_req" 2>&1 | grep -v "is ignored" || true
  PIP_CONSTRAINT="$constraints" "$VENV/bin/pip" install -q -e ".[$EXTRAS]" 2>&1 | grep -v "is ignored" || true
  rm -f "$constraints"
  "$VENV/bin/python" -c "import toolgym, torch, transformers" || { echo "setup.sh: the Python install failed" >&2; exit 1; }
  echo "$want" > "$stamp"
else
  log "Python environment up to date"
fi

# -- system services (tests) ----------------------------------------------------------------------
if [ -n "$apt_pid" ]; then
  if ! wait "$apt_pid"; then
    echo "setup.sh: installing Debian packages failed; last lines of apt's output:" >&2
    tail -n 30 "$apt_log" >&2
    exit 1
  fi
  log "Debian packages installed"
fi
rm -f "$apt_log"
if [ "$SYSTEM" = 1 ]; then
  for script in scripts/ensure-*.sh; do
    [ -f "$script" ] || continue
    log "$(basename "$script" .sh)"
    bash "$script"
  done
  if [ -f scripts/build-images.sh ]; then
    log "sandbox images"
    bash scripts/build-images.sh
  fi
fi
log "done"
