#!/usr/bin/env bash
# sluice against headroom on the same requests and mock upstream, in one run.
# Installs headroom-ai[proxy] into benches/.venv (PyPI), builds release binaries, runs benches/peers.rs.
# Figures go to docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=benches/.venv
if [ ! -x "$venv/bin/headroom" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "headroom-ai[proxy]"
fi
cargo build --release --quiet -p proxy --bin sluice && cargo build --release --quiet -p benches --bin peers
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
"$target_dir/release/peers" "$target_dir/release/sluice" "$venv/bin/headroom"
