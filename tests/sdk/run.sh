#!/usr/bin/env bash
# The official openai and anthropic Python SDKs against sluice, pointed at the mock provider.
# Usage: bash tests/sdk/run.sh   (builds what it needs; installs the SDKs in tests/sdk/.venv)
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"
# The corpus ships in the repository; SLUICE_CORPUS points at a larger one laid out the same way.
corpus="${SLUICE_CORPUS:-$root/tests/corpus}"
[[ -d "$corpus/public" ]] || { echo "no corpus at $corpus (SLUICE_CORPUS must name a folder with public/)" >&2; exit 1; }

venv="tests/sdk/.venv"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check openai anthropic
fi

cargo build --quiet --bin sluice --bin sluice-mock
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
logs="$(mktemp -d)"
cleanup() { kill "${mock_pid:-}" "${sluice_pid:-}" "${observer_pid:-}" 2>/dev/null || true; rm -rf "$logs"; }
trap cleanup EXIT

"$target_dir/debug/sluice-mock" 127.0.0.1:0 > "$logs/mock.out" &
mock_pid=$!
for _ in $(seq 100); do grep -q listening "$logs/mock.out" 2>/dev/null && break; sleep 0.05; done
mock_url="$(sed -n 's/^listening on //p' "$logs/mock.out")"

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$target_dir/debug/sluice" serve --listen "127.0.0.1:$port" --store "sqlite:$logs/state.db" \
    --anthropic-upstream "$mock_url" --openai-upstream "$mock_url" 2> "$logs/sluice.err" &
sluice_pid=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.05; done

SLUICE_URL="http://127.0.0.1:$port" \
SLUICE_CORPUS_RUN="$corpus/public/gemini3pro-miniswe-pytest-dev-pytest-6197" \
    "$venv/bin/python" tests/sdk/check.py || { cat "$logs/sluice.err" >&2; exit 1; }

# The same checks against a sluice that only observes: everything is forwarded untouched.
observe_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$target_dir/debug/sluice" serve --listen "127.0.0.1:$observe_port" --store memory --mode observe \
    --anthropic-upstream "$mock_url" --openai-upstream "$mock_url" 2> "$logs/observer.err" &
observer_pid=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$observe_port/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
SLUICE_URL="http://127.0.0.1:$observe_port" SLUICE_MODE=observe \
SLUICE_CORPUS_RUN="$corpus/public/gemini3pro-miniswe-pytest-dev-pytest-6197" \
    "$venv/bin/python" tests/sdk/check.py || { cat "$logs/observer.err" >&2; exit 1; }
