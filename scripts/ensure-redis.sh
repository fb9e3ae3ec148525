#!/usr/bin/env bash
# Installs Debian's redis-server when it is missing, so the quick start and
# the tests work on a fresh machine. Uses sudo when not root.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
echo "redis-server not found: installing Debian's redis-server" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq redis-server >/dev/null
# The package starts a system service on 6379; the project starts its own.
if command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
command -v redis-server >/dev/null
