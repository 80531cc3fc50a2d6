#!/usr/bin/env bash
# Make sure a Docker engine answers: install docker.io if it is missing, start dockerd in the
# background if no engine answers, wait until it does. Also installs the other host tools the
# sandboxes need when they are missing: bubblewrap (the local backend) and debootstrap (building
# the base image without a registry). Idempotent and quick when all is there.
# Usage: bash scripts/ensure-docker.sh   (needs root to install or start anything)
#        bash scripts/ensure-docker.sh --packages   only print the Debian packages it would install
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
