#!/usr/bin/env bash
# The dashboard in a real browser: Debian's chromium, headless, driven over the DevTools
# protocol (CDP) by tests/dashboard/check.py, against a sluice fed by the mock provider: one on
# a SQLite state store (the dashboard's file beside it), then one on `--store memory` (the
# dashboard in memory, nothing on disk), then one running an A/B experiment (its Experiment
# tab), then one with `--no-dashboard` (its page says so).
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
    kill "${mock_pid:-}" "${sluice_pid:-}" "${memory_pid:-}" "${off_pid:-}" "${ab_pid:-}" "${browser_pid:-}" 2>/dev/null || true
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
# The cache keep-alive is on, a second of quiet before each ping, so the overview's tile has
# pings to show once the traffic stops.
port="$(free_port)"
printf 'cache:\n  keepalive: true\n  keepalive_idle_seconds: 1\n  keepalive_min_prefix_tokens: 1000\n' > "$work/main.yaml"
"$target_dir/sluice" serve --listen "127.0.0.1:$port" --store "sqlite:$work/state.db" \
    --config "$work/main.yaml" \
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

# The memory store: the dashboard is there, in memory, and writes nothing to disk (the state
# directory sluice would use is an empty one of ours, checked afterwards).
mkdir -p "$work/state-home"
memory_port="$(free_port)"
XDG_STATE_HOME="$work/state-home" "$target_dir/sluice" serve --listen "127.0.0.1:$memory_port" \
    --store memory --anthropic-upstream "$mock_url" --openai-upstream "$mock_url" \
    2> "$work/memory.err" &
memory_pid=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$memory_port/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
grep -q "dashboard.*in memory, this run only" "$work/memory.err" \
    || { cat "$work/memory.err" >&2; echo "the start-up log does not say the dashboard is in memory" >&2; exit 1; }
SLUICE_URL="http://127.0.0.1:$memory_port" DEVTOOLS_PORT="$devtools_port" \
SLUICE_CORPUS_ROOT="$corpus/public" SLUICE_CHECK=memory \
    "$venv/bin/python" tests/dashboard/check.py || { tail -20 "$work/memory.err" >&2; exit 1; }
if [[ -n "$(find "$work/state-home" -mindepth 1 -print -quit)" ]]; then
    find "$work/state-home" >&2
    echo "sluice --store memory wrote under its state directory" >&2
    exit 1
fi
echo "ok: --store memory wrote nothing under its state directory"

# An A/B experiment: the Experiment tab shows both arms once sessions finish.
ab_port="$(free_port)"
printf 'experiment: { idle_seconds: 1 }\n' > "$work/ab.yaml"
"$target_dir/sluice" serve --listen "127.0.0.1:$ab_port" --store "sqlite:$work/ab.db" \
    --ab 0.5 --config "$work/ab.yaml" --anthropic-upstream "$mock_url" --openai-upstream "$mock_url" \
    2> "$work/ab.err" &
ab_pid=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$ab_port/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
SLUICE_URL="http://127.0.0.1:$ab_port" DEVTOOLS_PORT="$devtools_port" \
SLUICE_CORPUS_ROOT="$corpus/public" SLUICE_CHECK=experiment \
    "$venv/bin/python" tests/dashboard/check.py || { tail -20 "$work/ab.err" >&2; exit 1; }

# Off: /dashboard/ says how to turn it on, and so does the log.
off_port="$(free_port)"
"$target_dir/sluice" serve --listen "127.0.0.1:$off_port" --store memory --no-dashboard \
    --anthropic-upstream "$mock_url" --openai-upstream "$mock_url" 2> "$work/off.err" &
off_pid=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$off_port/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
status="$(curl -s -o "$work/off.html" -w '%{http_code}' "http://127.0.0.1:$off_port/dashboard/")"
[[ "$status" == 404 ]] && grep -q -- "--no-dashboard" "$work/off.html" \
    || { cat "$work/off.html" >&2; echo "the off dashboard answered $status without saying how to turn it on" >&2; exit 1; }
grep -q "dashboard.*off (--no-dashboard)" "$work/off.err" \
    || { cat "$work/off.err" >&2; echo "the start-up log does not say the dashboard is off" >&2; exit 1; }
echo "ok: with --no-dashboard, /dashboard/ answers 404 and says how to turn it on"
