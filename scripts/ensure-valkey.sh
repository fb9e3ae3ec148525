#!/usr/bin/env bash
# Installs Debian's valkey-server and valkey-tools (valkey-cli) when missing,
# for the Valkey pass of the integration suite (`make test-valkey`). On
# bookworm the package only exists in bookworm-backports, so that suite is
# added (in a sources.list.d file of its own) only when apt has no candidate
# for valkey-server from the sources the machine already has; a machine whose
# release ships Valkey is left as it is. Uses sudo when not root.
set -euo pipefail
if command -v valkey-server >/dev/null 2>&1 && command -v valkey-cli >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

candidate() { apt-cache policy valkey-server 2>/dev/null | sed -n 's/^ *Candidate: *//p'; }

$SUDO apt-get update -qq
target=()
cand=$(candidate)
if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  if [ "$codename" != bookworm ]; then
    echo "no valkey-server package for ${codename:-this release}" >&2
    exit 1
  fi
  # Backports are pinned low by apt (priority 100): nothing else on the
  # machine upgrades from them, only what is asked for with -t.
  list=/etc/apt/sources.list.d/bookworm-backports.sources
  echo "adding bookworm-backports ($list) for valkey-server" >&2
  $SUDO tee "$list" >/dev/null <<'SOURCES'
# Added by sticky-routing's scripts/ensure-valkey.sh: Valkey is only in backports on bookworm.
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  $SUDO apt-get update -qq
  target=(-t bookworm-backports)
fi
echo "installing Debian's valkey-server valkey-tools" >&2
$SUDO apt-get install -y -qq "${target[@]}" valkey-server valkey-tools >/dev/null
# The package starts a system service on 6379; the project starts its own.
if command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl disable --now valkey-server >/dev/null 2>&1 || true
fi
command -v valkey-server >/dev/null && command -v valkey-cli >/dev/null
valkey-server --version >&2
