#!/usr/bin/env bash
# One idempotent set-up for a fresh machine; quick when everything is already there.
#
#   bash scripts/setup.sh            Python environment (.venv) with toolgym and its extras
#   bash scripts/setup.sh --system   also the system services the full test suite needs:
#                                    Docker engine + sandbox images, bubblewrap, PostgreSQL, Chromium,
#                                    and a CPU vLLM (.venv-vllm), installed in the background: it
#                                    is still going when this returns on a cold machine; `make test`
#                                    waits for it (bash scripts/ensure-vllm.sh) right before pytest
#
# Re-running only redoes what changed: the Python install is keyed on a hash of pyproject.toml and
# setup.py; the system scripts check before they install or start anything.
#
# Output: a progress line for each step that takes more than a couple of seconds and a summary;
# everything the steps print (pip, apt, the ensure-*.sh scripts) goes to a log file,
# $TOOLGYM_LOG_DIR/setup-<time>.log (default ~/.cache/toolgym/logs; setup-latest.log links to the
# newest), and a failure prints the log's last lines. TOOLGYM_SETUP_VERBOSE=1 also shows it all.
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
START=$SECONDS

LOG_DIR=${TOOLGYM_LOG_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/toolgym/logs}
mkdir -p "$LOG_DIR" 2>/dev/null || { LOG_DIR=/tmp/toolgym-logs; mkdir -p "$LOG_DIR"; }
LOG="$LOG_DIR/setup-$(date +%Y%m%d-%H%M%S)-$$.log"
: >"$LOG"
ln -sfn "$(basename "$LOG")" "$LOG_DIR/setup-latest.log" 2>/dev/null || true
ls -1t "$LOG_DIR"/setup-2*.log 2>/dev/null | tail -n +21 | xargs -r rm -f  # keep the 20 newest

if [ -t 2 ]; then BLUE=$'\033[1;34m'; RED=$'\033[1;31m'; OFF=$'\033[0m'; else BLUE=""; RED=""; OFF=""; fi
log() { printf '%s[setup]%s %s\n' "$BLUE" "$OFF" "$*" >&2; }
SUMMARY=()

fail() {
  printf '%s[setup] failed:%s %s\n' "$RED" "$OFF" "$*" >&2
  echo "[setup] the last lines of $LOG:" >&2
  tail -n 40 "$LOG" | sed 's/^/  | /' >&2
  exit 1
}

# step WHAT COMMAND...: run COMMAND with its output in the log. Silent when it is quick; a line
# when it has run for 2 s, and one when it ends. A non-zero exit fails the set-up. The command runs
# as a job of its own (set -m) so that Ctrl-C, which reaches only this script, can stop all of it.
set -m
step() {
  local what=$1; shift
  local t0=$SECONDS shown=0 rc=0 pid
  printf '\n=== %s (%s)\n' "$what" "$*" >>"$LOG"
  if [ "${TOOLGYM_SETUP_VERBOSE:-0}" = 1 ]; then
    "$@" </dev/null > >(tee -a "$LOG" >&2) 2>&1 & pid=$!
  else
    "$@" </dev/null >>"$LOG" 2>&1 & pid=$!
  fi
  trap 'kill -- "-$pid" 2>/dev/null; echo "[setup] interrupted during: $what (log: $LOG)" >&2; exit 130' INT TERM
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$shown" = 0 ] && ((SECONDS - t0 >= 2)); then log "$what ..."; shown=1; fi
    sleep 0.2
  done
  wait "$pid" || rc=$?
  trap - INT TERM
  ((rc == 0)) || fail "$what (exit status $rc)"
  ((shown == 0)) || log "$what: done in $((SECONDS - t0)) s"
  STEP_S=$((SECONDS - t0))
}

# -- system packages, in the background while Python installs -------------------------------------
# Each ensure-*.sh says which Debian packages it would install (--packages); one apt run fetches
# them all at once, beside the pip install. The scripts themselves run afterwards and find them.
apt_pid=""
apt_log=$(mktemp /tmp/toolgym-apt.XXXXXX)
if [ "$SYSTEM" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  packages=""
  for script in scripts/ensure-*.sh; do
    [ -f "$script" ] && packages="$packages $(bash "$script" --packages 2>>"$LOG")"
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
install_python() {
  # torch first, pinned (and held there by a constraint) so that nothing pulls a multi-GB CUDA
  # build; TOOLGYM_TORCH overrides it, e.g. TOOLGYM_TORCH="torch" on a GPU machine. pip's own exit
  # status is not the test (a torch already cached can make the first call complain): the imports are.
  local torch_req=${TOOLGYM_TORCH:-torch==2.13.0} constraints
  constraints=$(mktemp)
  echo "$torch_req" >"$constraints"
  "$VENV/bin/pip" install -q --upgrade pip || true
  "$VENV/bin/pip" install -q "$torch_req" || true
  PIP_CONSTRAINT="$constraints" "$VENV/bin/pip" install -q -e ".[$EXTRAS]" || true
  # openenv-core (`toolgym serve-env`, its tests) without its hard dependency on gradio: gradio is
  # its web UI, which serve-env does not use, and it would pull ~100 MB and an older Pillow
  case ",$EXTRAS," in *,dev,*) "$VENV/bin/pip" install -q --no-deps "openenv-core>=0.3" || true ;; esac
  rm -f "$constraints"
  "$VENV/bin/python" -c "import toolgym, torch, transformers"
}

if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV with $($PY --version 2>&1 | head -n 1)" "$PY" -m venv "$VENV"
fi
stamp="$VENV/.toolgym-install"
want=$(cat pyproject.toml setup.py | sha256sum | cut -c1-16)-$EXTRAS
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  step "installing toolgym[$EXTRAS] into $VENV" install_python
  echo "$want" >"$stamp"
  SUMMARY+=("toolgym[$EXTRAS] installed into $VENV (${STEP_S} s)")
else
  SUMMARY+=("$VENV up to date")
fi

# -- the CPU vLLM (tests), in the background ---------------------------------------------------------
# Minutes of pip on a cold machine, in a venv of its own: it runs detached while the services below
# are set up and `make test` builds the sandbox images; `make test` waits for it before pytest
# (ensure-vllm.sh without --background waits for an install in progress, and says how it ended).
if [ "$SYSTEM" = 1 ] && [ -f scripts/ensure-vllm.sh ]; then
  export TOOLGYM_VLLM_LOG=${TOOLGYM_VLLM_LOG:-${LOG%.log}-vllm.log}
  printf '\n=== ensure-vllm --background\n' >>"$LOG"
  vllm_said=$(bash scripts/ensure-vllm.sh --background 2>&1 </dev/null) || { echo "$vllm_said" >>"$LOG"; fail "starting the CPU vLLM install"; }
  echo "$vllm_said" >>"$LOG"
  if [ -n "$vllm_said" ]; then
    log "CPU vLLM: ${vllm_said##*ensure-vllm: }"  # installing in the background, or already running; with its log
    SUMMARY+=("vllm installing in the background")
  else
    SUMMARY+=("vllm ok")
  fi
fi

# -- system services (tests) ----------------------------------------------------------------------
if [ -n "$apt_pid" ]; then
  rc=0
  wait "$apt_pid" || rc=$?
  { echo; echo "=== Debian packages: $packages"; cat "$apt_log"; } >>"$LOG"
  rm -f "$apt_log"
  ((rc == 0)) || fail "installing the Debian packages ($packages)"
  SUMMARY+=("Debian packages installed")
fi
rm -f "$apt_log"
if [ "$SYSTEM" = 1 ]; then
  for script in scripts/ensure-*.sh; do
    [ -f "$script" ] || continue
    name=$(basename "$script" .sh)
    [ "$name" = ensure-vllm ] && continue  # started in the background above
    step "$name" bash "$script"
    SUMMARY+=("${name#ensure-} ok")
  done
  if [ -f scripts/build-images.sh ]; then
    step "sandbox images" bash scripts/build-images.sh
    SUMMARY+=("sandbox images ok")
  fi
fi
summary=$(printf '%s, ' "${SUMMARY[@]}")
log "ready in $((SECONDS - START)) s: ${summary%, } (log: $LOG)"
