#!/usr/bin/env bash
# The state stores side by side (memory, SQLite, Redis) in one run: build release binaries, then
# measure. Needs Debian's redis-server (the harness starts its own on a free port and stops it).
# Figures go to docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v redis-server >/dev/null || { echo "install redis-server (apt-get install redis-server)" >&2; exit 1; }
cargo build --release --quiet -p proxy --bin sluice && cargo build --release --quiet -p benches --bin stores
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
# SLUICE_BEFORE=PATH puts another build's SQLite and Redis arms beside this one's.
"$target_dir/release/stores" "$target_dir/release/sluice" ${SLUICE_BEFORE:+"$SLUICE_BEFORE"}
