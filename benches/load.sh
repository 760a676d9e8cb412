#!/usr/bin/env bash
# The load harness in one command: build release binaries, then measure sluice against direct.
# Figures go to docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p proxy --bin sluice && cargo build --release --quiet -p benches --bin load
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
# `bash benches/load.sh dashboard`: the dashboard's capture, on and off, side by side.
# `bash benches/load.sh compare OTHER_BINARY`: this build and another, side by side.
# `bash benches/load.sh ab`: without an experiment and with `--ab 0.5`, side by side, by arm.
# `bash benches/load.sh keepalive`: without and with `cache.keepalive: true`, side by side.
"$target_dir/release/load" "$target_dir/release/sluice" "$@"
