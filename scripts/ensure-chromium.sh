#!/usr/bin/env bash
# Make sure headless Chromium is installed (the HTML report test opens the report in it).
# Installs Debian's `chromium` package when /usr/bin/chromium is missing; exits at once when it is
# there. Idempotent. Usage: bash scripts/ensure-chromium.sh   (needs root to install)
#        bash scripts/ensure-chromium.sh --packages   only print the Debian packages it would install
set -euo pipefail

bin=${TOOLGYM_CHROMIUM:-/usr/bin/chromium}
if [ "${1:-}" = "--packages" ]; then
  [ -x "$bin" ] || echo "chromium fonts-dejavu-core"
  exit 0
fi
if [ -x "$bin" ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "ensure-chromium: $bin is missing and installing it needs root: run 'sudo apt-get install -y chromium'" >&2
  exit 1
fi
echo "ensure-chromium: installing chromium ..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
if [ ! -x "$bin" ]; then
  echo "ensure-chromium: apt-get finished but $bin is still missing" >&2
  exit 1
fi
echo "ensure-chromium: $("$bin" --version 2>/dev/null || echo chromium) installed" >&2
