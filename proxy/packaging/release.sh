#!/usr/bin/env bash
# The release command: builds the shipped binary once (`cargo build --profile dist`) and packs
# every artifact this machine can build into dist/ (a tarball, the Python wheel, the npm
# launcher and this platform's npm package) with SHA256SUMS. See docs/install.md.
#
#   SLUICE_BIN=PATH   pack that binary instead of building (it must be a dist build of this commit)
#   DIST=DIR          where the artifacts go (default: dist/ at the repository's root)
set -euo pipefail
cd "$(dirname "$0")/../.."
dist="${DIST:-$(pwd)/dist}"
target="$(rustc -vV | sed -n 's/^host: //p')"
if [[ -n "${SLUICE_BIN:-}" ]]; then
    binary="$SLUICE_BIN"
else
    # What ships has the grammars' parse tables gzipped; a build that could not must fail here,
    # not ship 26 MB larger (grammars/build.rs).
    SLUICE_REQUIRE_SLIM_GRAMMARS=1 cargo build --quiet --locked --profile dist -p proxy --bin sluice
    target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
    binary="$target_dir/dist/sluice"
    [[ -f "$binary.exe" ]] && binary="$binary.exe"   # a Windows runner
fi
rm -rf "$dist"
python3 proxy/packaging/pack.py "$binary" "$target" "$dist"
