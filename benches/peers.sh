#!/usr/bin/env bash
# sluice against headroom on the same requests and mock upstream, in one run.
# Installs headroom-ai[proxy] into benches/.venv (PyPI), gives it its tokenizer offline (below),
# builds release binaries, runs benches/peers.rs. Figures go to docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=benches/.venv
if [ ! -x "$venv/bin/headroom" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "headroom-ai[proxy]==0.42.0"
fi

# headroom's optimizer counts tokens with tiktoken, which downloads its vocabularies on first
# use; offline, every request fails open uncompressed and the comparison would be void. The
# tiktoken-rs crate (crates.io) ships the same files: fetch it, and lay them out in tiktoken's
# cache, whose key is the SHA-1 of the download URL.
peers_home="$(pwd)/target/peers-home"
tk="$peers_home/tiktoken"
if [ ! -s "$tk/done" ]; then
    mkdir -p "$tk"
    cargo info tiktoken-rs@0.12.1 >/dev/null 2>&1 || true
    crate="$(ls ~/.cargo/registry/cache/*/tiktoken-rs-0.12.1.crate | head -1)"
    tar xzf "$crate" -C "$peers_home"
    for e in cl100k_base o200k_base p50k_base r50k_base; do
        key=$(python3 -c 'import hashlib,sys; print(hashlib.sha1(("https://openaipublic.blob.core.windows.net/encodings/%s.tiktoken" % sys.argv[1]).encode()).hexdigest())' "$e")
        cp "$peers_home/tiktoken-rs-0.12.1/assets/$e.tiktoken" "$tk/$key"
    done
    echo ok > "$tk/done"
fi
# cargo and rustup find their homes through HOME: pin them before headroom gets a HOME of its own.
export CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
export HOME="$peers_home" TIKTOKEN_CACHE_DIR="$tk" HEADROOM_OFFLINE=1 HEADROOM_UPDATE_CHECK=off \
    HEADROOM_TELEMETRY=off HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HEADROOM_BINARIES_OFFLINE=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True

cargo build --release --quiet -p proxy --bin sluice && cargo build --release --quiet -p benches --bin peers
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
"$target_dir/release/peers" "$target_dir/release/sluice" "$venv/bin/headroom"
# The comparison is void if headroom's optimizer failed: say how often it did.
echo "headroom 'Optimization failed' lines: $(grep -c 'Optimization failed' target/peers-headroom.log || true)"
