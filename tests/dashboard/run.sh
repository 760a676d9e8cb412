#!/usr/bin/env bash
# The dashboard in a real browser: Debian's chromium, headless, driven over the DevTools
# protocol (CDP) by tests/dashboard/check.py, against a sluice fed by the mock provider.
# Usage: bash tests/dashboard/run.sh   (installs websocket-client in tests/dashboard/.venv)
# SLUICE_SCREENSHOT=PATH keeps the overview's screenshot there (the drill-down's beside it,
# PATH-request.png); SLUICE_SPREAD_SECONDS spreads the traffic
# over that long (docs/guide.md's screenshot: several points on the charts).
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"
corpus="${SLUICE_CORPUS:-$root/tests/corpus}"
[[ -d "$corpus/public" ]] || { echo "no corpus at $corpus" >&2; exit 1; }

browser="$(command -v chromium || command -v chromium-browser || true)"
[[ -n "$browser" ]] || { echo "chromium is not installed (apt-get install chromium)" >&2; exit 1; }

venv="tests/dashboard/.venv"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/dashboard/requirements.txt
fi

# SLUICE_PROFILE=release runs release binaries (docs/guide.md's screenshot shows real timings).
profile="${SLUICE_PROFILE:-debug}"
if [[ "$profile" == release ]]; then
    cargo build --quiet --release --bin sluice --bin sluice-mock
else
    cargo build --quiet --bin sluice --bin sluice-mock
fi
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/$profile"
work="$(mktemp -d)"
cleanup() {
    kill "${mock_pid:-}" "${sluice_pid:-}" "${browser_pid:-}" 2>/dev/null || true
    wait 2>/dev/null || true
    # The browser's helpers may still be writing its profile for a moment.
    rm -rf "$work" 2>/dev/null || { sleep 1; rm -rf "$work" 2>/dev/null || true; }
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

"$target_dir/sluice-mock" 127.0.0.1:0 > "$work/mock.out" &
mock_pid=$!
for _ in $(seq 100); do grep -q listening "$work/mock.out" 2>/dev/null && break; sleep 0.05; done
mock_url="$(sed -n 's/^listening on //p' "$work/mock.out")"

# A state store on disk: the dashboard is on by default beside it. Content capture is opened
# so the drill-down shows what changed.
port="$(free_port)"
"$target_dir/sluice" serve --listen "127.0.0.1:$port" --store "sqlite:$work/state.db" \
    --dashboard-content --anthropic-upstream "$mock_url" --openai-upstream "$mock_url" \
    2> "$work/sluice.err" &
sluice_pid=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
[[ -f "$work/state.dashboard.db" ]] || { cat "$work/sluice.err" >&2; echo "no dashboard file beside the state store" >&2; exit 1; }

# Running as root (CI containers) needs --no-sandbox; the page is our own, on loopback.
sandbox=()
[[ "$(id -u)" == 0 ]] && sandbox=(--no-sandbox)
"$browser" --headless=new "${sandbox[@]}" --disable-gpu --no-first-run --no-default-browser-check \
    --disable-extensions --disable-background-networking --disable-component-update \
    --disable-sync --metrics-recording-only --password-store=basic \
    --user-data-dir="$work/profile" --remote-debugging-port=0 about:blank \
    2> "$work/browser.err" &
browser_pid=$!
for _ in $(seq 200); do [[ -s "$work/profile/DevToolsActivePort" ]] && break; sleep 0.05; done
[[ -s "$work/profile/DevToolsActivePort" ]] || { cat "$work/browser.err" >&2; exit 1; }
devtools_port="$(head -1 "$work/profile/DevToolsActivePort")"

SLUICE_URL="http://127.0.0.1:$port" DEVTOOLS_PORT="$devtools_port" \
SLUICE_CORPUS_ROOT="$corpus/public" \
SLUICE_SCREENSHOT="${SLUICE_SCREENSHOT:-$work/dashboard.png}" \
    "$venv/bin/python" tests/dashboard/check.py || { tail -20 "$work/sluice.err" >&2; exit 1; }
