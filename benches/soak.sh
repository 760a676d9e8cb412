#!/usr/bin/env bash
# The soak in one command: 1,000 concurrent sessions for 10 minutes against a release build.
# SLUICE_SOAK_SECS / SLUICE_SOAK_SESSIONS change the length and the width. Figures go to
# docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p proxy --bin sluice && cargo build --release --quiet -p benches --bin soak
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
"$target_dir/release/soak" "$target_dir/release/sluice"
