#!/usr/bin/env bash
# Installs cargo-deny, pinned, from crates.io when it is missing or another
# version: `make deny` runs it. Compiling it takes a few minutes, once.
set -euo pipefail
CARGO_DENY=0.20.2
if [ "$(cargo deny --version 2>/dev/null)" = "cargo-deny $CARGO_DENY" ]; then
  exit 0
fi
echo "installing cargo-deny $CARGO_DENY" >&2
cargo install --locked --quiet cargo-deny --version "$CARGO_DENY"
