#!/usr/bin/env bash
# Installs what the quick start and the tests need from Debian when it is
# missing: redis-server (single node, Cluster and Sentinel all come from this
# one binary), redis-cli (cluster creation) and openssl (the TLS test makes
# its certificates). Uses sudo when not root.
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing Debian's ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
# The package starts a system service on 6379; the project starts its own.
if command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
command -v redis-server >/dev/null && command -v redis-cli >/dev/null && command -v openssl >/dev/null
