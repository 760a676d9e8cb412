#!/usr/bin/env bash
# The install check: what a user installs, installed the way they install it, with no network.
#
# 1. The release command (proxy/packaging/release.sh: one `--profile dist` build, packed into
#    dist/ as a tarball, the Python wheel and the npm packages).
# 2. The wheel into a clean virtualenv (`pip install --no-index`): `sluice --version`, then
#    `sluice serve` with one real request through it (tests/install/check.py: a long tool
#    output cut, its marker expanded).
# 3. The npm launcher and this platform's package into a clean prefix (`npm install
#    --offline`): `sluice --version` through the launcher, then `npx sluice-proxy wrap --`
#    Claude Code, end to end against the scripted model (tests/agents/run.sh claude-wrap).
#
#   SLUICE_DIST=DIR   use artifacts already in DIR instead of running the release command
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"
tmp="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

if [[ -n "${SLUICE_DIST:-}" ]]; then
    dist="$SLUICE_DIST"
else
    dist="$tmp/dist"
    DIST="$dist" bash proxy/packaging/release.sh
fi
(cd "$dist" && sha256sum --quiet -c SHA256SUMS)
ls -l "$dist" "$dist/npm" >&2

# ------------------------------------------------------------------ Python
python3 -m venv "$tmp/venv"
# Exactly one of each artifact: a folder holding two builds would test either.
one() { [[ $# -eq 1 && -f "$1" ]] || { echo "expected one file, found: $*" >&2; exit 1; }; echo "$1"; }
wheel="$(one "$dist"/sluice_proxy-*.whl)"
"$tmp/venv/bin/pip" install --quiet --disable-pip-version-check --no-index --no-deps "$wheel"
sluice="$tmp/venv/bin/sluice"
"$sluice" --version

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
python3 tests/install/upstream.py "$tmp/record.jsonl" > "$tmp/upstream.out" &
pids+=($!)
for _ in $(seq 100); do grep -q listening "$tmp/upstream.out" 2>/dev/null && break; sleep 0.05; done
upstream="$(sed -n 's/^listening on //p' "$tmp/upstream.out")"
[[ -n "$upstream" ]] || { echo "the provider stand-in did not start" >&2; exit 1; }
port="$(free_port)"
"$sluice" serve --listen "127.0.0.1:$port" --store memory --anthropic-upstream "$upstream" 2> "$tmp/serve.log" &
pids+=($!)
for _ in $(seq 200); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
curl -fs "http://127.0.0.1:$port/healthz" >/dev/null || { echo "sluice serve did not start" >&2; cat "$tmp/serve.log" >&2; exit 1; }
python3 tests/install/check.py "http://127.0.0.1:$port" "$tmp/record.jsonl" \
    || { cat "$tmp/serve.log" >&2; exit 1; }

# ------------------------------------------------------------------ Node
prefix="$tmp/npm"
mkdir -p "$prefix"
platform_tgz="$(one "$dist"/npm/sluice-proxy-linux-*.tgz)"
launcher_tgz="$(one "$dist"/npm/sluice-proxy-[0-9]*.tgz)"
# Both tarballs at once: the platform package satisfies the launcher's optional dependency, and
# --offline proves nothing is fetched (the other platforms' packages are skipped as optional).
npm install --prefix "$prefix" --offline --no-audit --no-fund --loglevel=error "$platform_tgz" "$launcher_tgz"
(cd "$prefix" && npx --offline sluice-proxy --version)

# `npx sluice-proxy wrap -- claude`: Claude Code, installed by tests/agents/run.sh, started by
# the npm package's wrap, against the scripted model, and checked like every other agent run.
# npx resolves `sluice-proxy` through a registry; here the same two packages come from their
# files (`--package`), still offline.
SLUICE_WRAP="npx --yes --offline --package $platform_tgz --package $launcher_tgz -- sluice" \
    SLUICE_AGENTS_OUT="$tmp/agents" SLUICE_BIN="$sluice" bash tests/agents/run.sh claude-wrap
echo "install check passed: wheel and npm package from $dist"
