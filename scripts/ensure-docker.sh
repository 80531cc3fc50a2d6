#!/usr/bin/env bash
# Make sure a Docker engine answers: install docker.io if it is missing, start dockerd in the
# background if no engine answers, wait until it does. Also installs the other host tools the
# sandboxes need when they are missing: bubblewrap (the local backend) and debootstrap (building
# the base image without a registry). Idempotent and quick when all is there.
# Usage: bash scripts/ensure-docker.sh   (needs root to install or start anything)
#        bash scripts/ensure-docker.sh --packages   only print the Debian packages it would install
# Settings: TOOLGYM_DOCKERD_LOG, TOOLGYM_DOCKERD_PIDFILE and TOOLGYM_CONTAINERD_PIDFILE (the tests' stand-ins).
set -euo pipefail

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)  # the second engine of the remote-host tests gets its own bridge
if [ "${1:-}" = "--packages" ]; then
  echo "${missing[*]}"
  exit 0
fi
if ((${#missing[@]})); then
  echo "ensure-docker: installing ${missing[*]} ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if answers; then
  exit 0
fi

# A machine restored from a snapshot (or rebooted without a fresh /run) can keep the pid files of
# a dockerd and a containerd that no longer run; dockerd refuses to start over its own stale one.
# Remove a pid file only when its process is gone or is not the daemon it names.
clear_stale_pid() {  # FILE NAME
  local file=$1 name=$2 pid
  [ -f "$file" ] || return 0
  pid=$(tr -dc '0-9' <"$file")
  if [ -n "$pid" ] && [ "$(ps -p "$pid" -o comm= 2>/dev/null)" = "$name" ]; then
    return 0
  fi
  echo "ensure-docker: removing stale $file (pid ${pid:-none} is not a running $name)" >&2
  rm -f "$file"
}
clear_stale_pid "${TOOLGYM_DOCKERD_PIDFILE:-/var/run/docker.pid}" dockerd
clear_stale_pid "${TOOLGYM_CONTAINERD_PIDFILE:-/var/run/docker/containerd/containerd.pid}" containerd

log=${TOOLGYM_DOCKERD_LOG:-/var/log/toolgym-dockerd.log}
echo "ensure-docker: starting dockerd (log: $log) ..." >&2
# dockerd (and the containerd it starts) outlive this script on purpose: the tests use them.
nohup dockerd >"$log" 2>&1 &
for _ in $(seq 1 120); do
  answers && break
  sleep 0.5
done

if ! answers; then
  echo "ensure-docker: dockerd did not answer within 60 s; last lines of its log:" >&2
  tail -n 30 "$log" >&2 || true
  exit 1
fi
echo "ensure-docker: engine $(docker version --format '{{.Server.Version}}') answers" >&2
