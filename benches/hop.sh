#!/usr/bin/env bash
# Throughput against a reference hop, in one run: wrk drives, at 64 connections, the same
# recorded Anthropic body through
#   direct  -> a canned upstream (nginx answering a fixed Messages reply)
#   nginx   -> an nginx reverse proxy (proxy_pass, upstream keepalive) -> the canned upstream
#   off     -> sluice --preset off                                       -> the canned upstream
#   default -> sluice on its embedded default                           -> the canned upstream
# in rounds, interleaved, on two workloads in the same run: the same body on every request
# (`same`), and 64 agents each sending the largest public Anthropic session turn by turn
# (`growing`, benches/hop/grow.lua), as agents do. Beside requests per second, each arm's CPU
# time per request (user and system, from /proc, over the requests wrk counted): on a two-core
# machine that wrk, the canned upstream and the hop share, rounds swing by a quarter, and the
# CPU a request costs the hop is the steadier figure. Needs Debian's nginx and wrk. Figures go
# to docs/performance.md.
# Usage: [HOP_SECS=N] [HOP_SESSIONS=64] [SLUICE_BIN=path] [SLUICE_BEFORE=path] [HOP_STORE=memory]
#        bash benches/hop.sh
# SLUICE_BIN runs a binary built elsewhere; SLUICE_BEFORE adds a `before` arm, that binary on
# the embedded default, interleaved with the others in every round, so a before/after is
# measured side by side in one run (run after run, the machine's own swing is larger than
# most changes). The default arms keep their state in SQLite unless HOP_STORE says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nginx >/dev/null && command -v wrk >/dev/null || { echo "install nginx and wrk (apt-get install nginx-light wrk)" >&2; exit 1; }
if [ -n "${SLUICE_BIN:-}" ]; then
    sluice="$SLUICE_BIN"
else
    cargo build --release --quiet -p proxy --bin sluice
    target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
    sluice="$target_dir/release/sluice"
fi
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

# The bodies, from the repository's corpus: the public Anthropic request nearest 187 KB (the
# same workload), and the largest one cut before each assistant step, as tests/lib.rs
# `session_turns` cuts it, one file per turn (the growing workload).
mkdir -p "$work/turns"
python3 - "$work/body.json" "$work/turns" <<'PY'
import gzip, json, os, sys
bodies = []
for root, _, files in os.walk("tests/corpus/public"):
    for f in files:
        if f.startswith("anthropic.json"):
            p = os.path.join(root, f)
            bodies.append(gzip.open(p).read() if f.endswith(".gz") else open(p, "rb").read())
same = min(bodies, key=lambda b: abs(len(b) - 187_000))
open(sys.argv[1], "wb").write(same)
print(f"body: {len(same)} bytes", file=sys.stderr)
body = json.loads(max(bodies, key=len))
messages = body["messages"]
cuts = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0] + [len(messages)]
for n, cut in enumerate(cuts, 1):
    with open(os.path.join(sys.argv[2], f"{n:04d}.json"), "w") as out:
        json.dump(dict(body, messages=messages[:cut]), out, separators=(",", ":"))
print(f"growing: {len(cuts)} turns, the last {len(json.dumps(body, separators=(',', ':')))} bytes", file=sys.stderr)
PY

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
canned_port=$(port); hop_port=$(port); off_port=$(port); default_port=$(port)
reply='{"id":"msg_hop","type":"message","role":"assistant","model":"claude-hop","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":52011,"output_tokens":1,"cache_read_input_tokens":51000,"cache_creation_input_tokens":0}}'
# Two nginx instances, the canned upstream and the hop, so the hop's CPU is its own.
nginx_conf() { # name listen location
    cat > "$work/$1.conf" <<NGINX
worker_processes 2;
pid $work/$1.pid;
error_log $work/$1.error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $work/$1.body;
    proxy_temp_path $work/$1.proxy;
    client_max_body_size 32m;
    client_body_buffer_size 1m;
    upstream canned { server 127.0.0.1:$canned_port; keepalive 128; }
    server {
        listen 127.0.0.1:$2;
        tcp_nodelay on;
        location / { $3 }
    }
}
NGINX
}
nginx_conf canned "$canned_port" "default_type application/json; return 200 '$reply';"
nginx_conf hop "$hop_port" 'proxy_pass http://canned; proxy_http_version 1.1; proxy_set_header Connection "";'
nginx -c "$work/canned.conf" -p "$work" -g 'daemon off;' 2>"$work/canned.err" &
pids+=($!)
nginx -c "$work/hop.conf" -p "$work" -g 'daemon off;' 2>"$work/hop.err" &
hop_pid=$!
pids+=($!)
# The bare hop: no pipeline, and no dashboard (which is on with every store).
SLUICE_LOG=warn "$sluice" serve --listen "127.0.0.1:$off_port" --preset off --store memory \
    --no-dashboard --anthropic-upstream "http://127.0.0.1:$canned_port" 2>"$work/off.err" &
pids+=($!); off_pid=$!
store="${HOP_STORE:-sqlite:$work/state.db}"
SLUICE_LOG=warn "$sluice" serve --listen "127.0.0.1:$default_port" --store "$store" \
    --anthropic-upstream "http://127.0.0.1:$canned_port" 2>"$work/default.err" &
pids+=($!); default_pid=$!
ports="$canned_port $hop_port $off_port $default_port"
if [ -n "${SLUICE_BEFORE:-}" ]; then
    before_port=$(port)
    # A store of its own: two processes on one SQLite file would share (and fight over) it.
    before_store="sqlite:$work/before.db"
    [ "${HOP_STORE:-}" = memory ] && before_store=memory
    SLUICE_LOG=warn "$SLUICE_BEFORE" serve --listen "127.0.0.1:$before_port" --store "$before_store" \
        --anthropic-upstream "http://127.0.0.1:$canned_port" 2>"$work/before.err" &
    pids+=($!); before_pid=$!
    ports="$ports $before_port"
fi
for p in $ports; do
    for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && break; sleep 0.05; done
done

rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
nginx_rss_kib() { local t=0; for p in $(pgrep -P "$hop_pid"); do t=$((t + $(rss_kib "$p"))); done; echo "$t"; }
# CPU time (user + system, clock ticks) of an arm's processes: the hop's workers, or sluice.
ticks() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }
procs_nginx() { pgrep -P "$hop_pid" | tr '\n' ' '; }
procs_off() { echo "$off_pid"; }
procs_default() { echo "$default_pid"; }
procs_before() { echo "$before_pid"; }
idle_off=$(rss_kib $off_pid); idle_default=$(rss_kib $default_pid); idle_nginx=$(nginx_rss_kib)
[ -n "${SLUICE_BEFORE:-}" ] && idle_before=$(rss_kib $before_pid)

# HOP_SESSIONS=64: the requests carry 64 session ids in turn (64 agents); otherwise none, so
# sluice derives one session from the body and every request is a turn of that one session,
# which its lease runs one at a time.
script=post.lua
case "${HOP_SESSIONS:-1}" in
    1) ;;
    64) script=sessions.lua ;;
    *) echo "HOP_SESSIONS is 1 or 64" >&2; exit 2 ;;
esac
run() { # arm url [script] -> "rps p50_ms cpu_us_per_request" (cpu 0 for direct)
    local procs="" before after out
    [ "$1" != direct ] && procs=$("procs_$1")
    before=$(ticks $procs)
    out=$(HOP_BODY="$work/body.json" HOP_TURNS="$work/turns" wrk -t1 -c64 -d"${HOP_SECS:-10}"s --latency -s "benches/hop/${3:-$script}" "$2" 2>/dev/null \
        | awk '/^ +[0-9]+ requests in/ {n=$1} /Requests\/sec/ {rps=$2} /^ +50%/ {v=$2; if (v ~ /us$/) {sub("us","",v); v=v/1000} else if (v ~ /ms$/) {sub("ms","",v)} else if (v ~ /s$/) {sub("s","",v); v=v*1000} p50=v} END {printf "%s %s %s\n", rps, p50, n}')
    after=$(ticks $procs)
    read -r r p n <<<"$out"
    awk -v r="$r" -v p="$p" -v n="$n" -v t="$((after - before))" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%s %s %.1f\n", r, p, (n > 0 ? t / hz * 1e6 / n : 0)}'
}
declare -A rps p50 cpu
arms=(direct nginx off default)
[ -n "${SLUICE_BEFORE:-}" ] && arms+=(before)
workloads=(same growing)
url_direct="http://127.0.0.1:$canned_port/v1/messages"
url_nginx="http://127.0.0.1:$hop_port/v1/messages"
url_off="http://127.0.0.1:$off_port/anthropic/v1/messages"
url_default="http://127.0.0.1:$default_port/anthropic/v1/messages"
url_before="http://127.0.0.1:${before_port:-0}/anthropic/v1/messages"
script_of() { if [ "$1" = growing ]; then echo grow.lua; else echo "$script"; fi; }
for arm in "${arms[@]}"; do run "$arm" "$(eval echo \$url_$arm)" >/dev/null; done   # warm-up
for round in 1 2 3; do
    order=("${arms[@]}")
    # The before arm goes first every other round, so neither build always follows the other.
    if [ -n "${SLUICE_BEFORE:-}" ] && [ $((round % 2)) = 0 ]; then order=(direct nginx off before default); fi
    for w in "${workloads[@]}"; do
        for arm in "${order[@]}"; do
            read -r r p c <<<"$(run "$arm" "$(eval echo \$url_$arm)" "$(script_of "$w")")"
            rps[$w.$arm]="${rps[$w.$arm]:-} $r"; p50[$w.$arm]="${p50[$w.$arm]:-} $p"; cpu[$w.$arm]="${cpu[$w.$arm]:-} $c"
        done
    done
done
busy_off=$(rss_kib $off_pid); busy_default=$(rss_kib $default_pid); busy_nginx=$(nginx_rss_kib)
[ -n "${SLUICE_BEFORE:-}" ] && busy_before=$(rss_kib $before_pid)
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| workload | arm | req/s (median of 3) | share of nginx | p50 (median) | added p50 over direct | CPU per request (median) | against nginx's |"
echo "|---|---|--:|--:|--:|--:|--:|--:|"
for w in "${workloads[@]}"; do
    n_rps=$(echo "${rps[$w.nginx]}" | median); d_p50=$(echo "${p50[$w.direct]}" | median)
    n_cpu=$(echo "${cpu[$w.nginx]}" | median)
    for arm in "${arms[@]}"; do
        r=$(echo "${rps[$w.$arm]}" | median); p=$(echo "${p50[$w.$arm]}" | median)
        c=$(echo "${cpu[$w.$arm]}" | median)
        awk -v w="$w" -v a="$arm" -v r="$r" -v n="$n_rps" -v p="$p" -v d="$d_p50" -v c="$c" -v nc="$n_cpu" 'BEGIN {
            cpu = (a == "direct") ? "-" : sprintf("%.0f us", c); share = (a == "direct" || nc == 0) ? "-" : sprintf("%.1fx", c / nc)
            printf "| %s | %s | %.0f | %.0f%% | %.2f ms | %.2f ms | %s | %s |\n", w, a, r, 100*r/n, p, p-d, cpu, share}'
    done
done
echo
echo "rounds: $(for w in "${workloads[@]}"; do for a in "${arms[@]}"; do echo -n "$w.$a:${rps[$w.$a]} "; done; done)"
echo "CPU per request, us: $(for w in "${workloads[@]}"; do for a in "${arms[@]:1}"; do echo -n "$w.$a:${cpu[$w.$a]} "; done; done)"
awk -v io="$idle_off" -v bo="$busy_off" -v id="$idle_default" -v bd="$busy_default" -v in_="$idle_nginx" -v bn="$busy_nginx" 'BEGIN {
    printf "memory per connection at 64 (RSS under load minus idle, / 64): sluice off %.0f KiB, sluice default %.0f KiB, nginx %.0f KiB\n", (bo-io)/64, (bd-id)/64, (bn-in_)/64 }'
if [ -n "${SLUICE_BEFORE:-}" ]; then
    awk -v ib="$idle_before" -v bb="$busy_before" 'BEGIN { printf "memory per connection at 64, before: %.0f KiB\n", (bb-ib)/64 }'
fi
