#!/usr/bin/env bash
# Five real coding agents (Claude Code, Codex, gemini-cli, mini-swe-agent, aider) end to end
# against a scripted model server (tests/agents/model.py), each directly and through sluice,
# compared by tests/agents/check.py.
#
# Usage: bash tests/agents/run.sh [claude|claude-vertex|claude-bedrock|codex|codex-gpt5|gemini|mini|aider ...]
#   (default: all)
#   claude-vertex is Claude Code on Vertex AI (CLAUDE_CODE_USE_VERTEX=1), sluice's /vertex route;
#   claude-bedrock is Claude Code on Bedrock (CLAUDE_CODE_USE_BEDROCK=1), sluice's /bedrock route,
#     sluice signing with test credentials the model server verifies (botocore);
#   codex is Codex on its default model (tools in an `additional_tools` input item, code mode);
#   codex-gpt5 is the same Codex with `model = "gpt-5-codex"` (top-level function tools);
#   ab runs Claude Code and Codex several times each (a new session every run) through one
#     sluice with `--ab 0.5` on a SQLite store, until both arms have sessions (3 to 8 runs an
#     agent), checks every run did its task, and prints `sluice ab report`;
#   claude-wrap is Claude Code started by `sluice wrap` (which starts sluice for it), with
#     SLUICE_WRAP as the command (default: the sluice binary; tests/install/run.sh passes the
#     npm package's `npx sluice-proxy`).
#   SLUICE_BIN=path/to/sluice      use that binary (default: cargo build --bin sluice, debug)
#   SLUICE_WRAP="CMD ARGS"         the `sluice` command claude-wrap runs `wrap` with
#   SLUICE_AGENTS_HOME=DIR         where the agents are installed (default ~/.cache/sluice-agents)
#   SLUICE_AGENTS_OUT=DIR          run folder: recordings, logs, results.json (default HOME/last-run)
#   SLUICE_AGENTS_TIMEOUT=SECONDS  per agent run (default 60; a run takes 1-6 s)
#   CODEX_MODEL=NAME               a model for `codex` (default: none, Codex's own default)
# The first run installs the agents (npm and PyPI, pinned); later runs reuse them.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"
here="$root/tests/agents"
home="${SLUICE_AGENTS_HOME:-$HOME/.cache/sluice-agents}"
out="${SLUICE_AGENTS_OUT:-$home/last-run}"
per_run_timeout="${SLUICE_AGENTS_TIMEOUT:-60}"
agents=("$@")
[[ ${#agents[@]} -gt 0 ]] || agents=(claude claude-vertex claude-bedrock codex codex-gpt5 gemini mini aider)
started=$SECONDS

CLAUDE_VERSION=2.1.332
CODEX_VERSION=0.171.0
GEMINI_VERSION=0.61.0
TASK="Run python3 gen.py, then fix the setting its log warns about in settings.py. Reply with a one-line summary."

# ------------------------------------------------------------------ install (once)
mkdir -p "$home"
npm_dir="$home/npm"
want_npm="@anthropic-ai/claude-code@$CLAUDE_VERSION @openai/codex@$CODEX_VERSION @google/gemini-cli@$GEMINI_VERSION"
if [[ "$(cat "$npm_dir/.stamp" 2>/dev/null)" != "$want_npm" ]]; then
    echo "installing $want_npm into $npm_dir" >&2
    mkdir -p "$npm_dir"
    # Claude Code declares node>=22 but ships a native binary per platform (an optional
    # dependency), so node 20 installs and runs it; its postinstall only links that binary.
    npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error $want_npm >&2
    echo "$want_npm" > "$npm_dir/.stamp"
fi
# The native binary itself, whether or not the postinstall replaced the wrapper's stub.
claude_bin="$(ls "$npm_dir"/node_modules/@anthropic-ai/claude-code-linux-*/claude 2>/dev/null | head -1 || true)"
[[ -x "$claude_bin" ]] || claude_bin="$npm_dir/node_modules/.bin/claude"
codex_bin="$npm_dir/node_modules/.bin/codex"
gemini_bin="$npm_dir/node_modules/.bin/gemini"

venv="$home/venv"
want_pip="$(cat "$here/requirements.txt" "$here/constraints.txt" | sha256sum | cut -c1-16)"
if [[ "$(cat "$venv/.stamp" 2>/dev/null)" != "$want_pip" ]]; then
    echo "installing tests/agents/requirements.txt into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        -r "$here/requirements.txt" -c "$here/constraints.txt" >&2
    echo "$want_pip" > "$venv/.stamp"
fi

# ------------------------------------------------------------------ sluice
if [[ -n "${SLUICE_BIN:-}" ]]; then
    sluice="$SLUICE_BIN"
else
    cargo build --quiet --bin sluice
    target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
    sluice="$target_dir/debug/sluice"
fi
[[ -x "$sluice" ]] || { echo "no sluice binary at $sluice" >&2; exit 1; }

# ------------------------------------------------------------------ helpers
rm -rf "$out"
mkdir -p "$out"
echo "$("$sluice" --version) ($sluice, built $(date -u -r "$sluice" +%Y-%m-%dT%H:%M:%SZ))" > "$out/sluice.version"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
node_dir="$(dirname "$(command -v node)")"
base_path="$node_dir:/usr/local/bin:/usr/bin:/bin"

# The scratch repository: the same files, commit and paths on every run, so the direct run and
# the run through sluice see byte-identical prompts.
work="$out/work"
make_repo() {
    rm -rf "$work"
    mkdir -p "$work/repo" "$work/home"
    cp -r "$here/template/." "$work/repo/"
    (
        cd "$work/repo"
        export GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"
        git init -q -b main
        git config user.name agent
        git config user.email agent@example.com
        git add -A
        git commit -qm "Initial commit"
    )
}

# The AWS credentials sluice signs Bedrock requests with, and the model server checks them by.
# Test values: nothing here reaches AWS.
aws_key=AKIASLUICEAGENTS
aws_secret=c2x1aWNlLWFnZW50cy10ZXN0LXNlY3JldC1rZXk
aws_token=c2x1aWNlLXNlc3Npb24tdG9rZW4
aws_region=us-east-1

start_model() { # DIR -> sets model_url
    MODEL_SIGV4="$aws_key:$aws_secret:$aws_token:$aws_region" \
        "$venv/bin/python" "$here/model.py" --record "$1/requests.jsonl" > "$1/model.out" 2> "$1/model.err" &
    pids+=($!)
    for _ in $(seq 100); do grep -q listening "$1/model.out" 2>/dev/null && break; sleep 0.05; done
    model_url="$(sed -n 's/^listening on //p' "$1/model.out")"
    [[ -n "$model_url" ]] || { echo "model server did not start" >&2; cat "$1/model.err" >&2; exit 1; }
}

start_sluice() { # DIR UPSTREAM [STORE [SERVE ARGS...]] -> sets sluice_url
    local port dir="$1" upstream="$2" store="${3:-memory}"
    shift 2
    [[ $# -gt 0 ]] && shift
    port="$(free_port)"
    # Only these credentials: no profile file, no instance metadata.
    AWS_ACCESS_KEY_ID="$aws_key" AWS_SECRET_ACCESS_KEY="$aws_secret" AWS_SESSION_TOKEN="$aws_token" \
    AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true \
    "$sluice" serve --listen "127.0.0.1:$port" --store "$store" --log-format json \
        --anthropic-upstream "$upstream" --openai-upstream "$upstream" --gemini-upstream "$upstream" \
        --vertex-upstream "$upstream" --bedrock-upstream "$upstream" --bedrock-region "$aws_region" \
        "$@" > "$dir/sluice.out" 2> "$dir/sluice.log" &
    pids+=($!)
    sluice_pid=$!
    sluice_url="http://127.0.0.1:$port"
    for _ in $(seq 200); do curl -fs "$sluice_url/healthz" >/dev/null 2>&1 && return 0; sleep 0.05; done
    echo "sluice did not answer /healthz" >&2; cat "$dir/sluice.log" >&2; exit 1
}

# run_agent AGENT ANTHROPIC_BASE OPENAI_BASE GEMINI_BASE VERTEX_BASE BEDROCK_BASE DIR: runs in
# $work/repo with a throwaway HOME.
run_agent() {
    local agent="$1" abase="$2" obase="$3" gbase="$4" vbase="$5" bbase="$6" dir="$7" h="$work/home"
    # PYTHONHASHSEED: aider lists the files in its chat in set order, which varies per process.
    local -a envs=(PATH="$base_path" HOME="$h" LANG=C.UTF-8 TERM=dumb PYTHONHASHSEED=0)
    local -a cmd
    case "$agent" in
        claude)
            envs+=(CLAUDE_CONFIG_DIR="$h/.claude" IS_SANDBOX=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
                   DISABLE_AUTOUPDATER=1 ANTHROPIC_API_KEY=test-key ANTHROPIC_BASE_URL="$abase")
            cmd=("$claude_bin" -p "$TASK" --dangerously-skip-permissions) ;;
        claude-wrap)
            # Through sluice, `abase` is `wrap:UPSTREAM`: `sluice wrap` starts sluice in front of
            # UPSTREAM and sets ANTHROPIC_BASE_URL for Claude Code itself.
            envs+=(CLAUDE_CONFIG_DIR="$h/.claude" IS_SANDBOX=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
                   DISABLE_AUTOUPDATER=1 ANTHROPIC_API_KEY=test-key)
            cmd=("$claude_bin" -p "$TASK" --dangerously-skip-permissions)
            if [[ "$abase" == wrap:* ]]; then
                local -a launcher
                read -r -a launcher <<< "${SLUICE_WRAP:-$sluice}"
                cmd=("${launcher[@]}" wrap --listen "127.0.0.1:$(free_port)" --log "$dir/sluice.log"
                     --serve-arg=--store=memory --serve-arg=--log-format=json
                     "--serve-arg=--anthropic-upstream=${abase#wrap:}" -- "${cmd[@]}")
            else
                envs+=(ANTHROPIC_BASE_URL="$abase")
            fi ;;
        claude-vertex)
            # Claude Code 2.1.332 on Vertex AI: the base URL ends in /v1 and Claude Code adds
            # projects/P/locations/L/publishers/anthropic/models/M:streamRawPredict; the skip
            # flag sends no Google token (docs/agents.md).
            envs+=(CLAUDE_CONFIG_DIR="$h/.claude" IS_SANDBOX=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
                   DISABLE_AUTOUPDATER=1 CLAUDE_CODE_USE_VERTEX=1 CLAUDE_CODE_SKIP_VERTEX_AUTH=1
                   ANTHROPIC_VERTEX_BASE_URL="$vbase" ANTHROPIC_VERTEX_PROJECT_ID=sluice-test
                   CLOUD_ML_REGION=us-east5)
            cmd=("$claude_bin" -p "$TASK" --dangerously-skip-permissions) ;;
        claude-bedrock)
            # Claude Code 2.1.332 on Bedrock: it adds model/M/invoke-with-response-stream to the
            # base URL; the skip flag sends no signature, so sluice signs with its own
            # credentials (docs/agents.md).
            envs+=(CLAUDE_CONFIG_DIR="$h/.claude" IS_SANDBOX=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
                   DISABLE_AUTOUPDATER=1 CLAUDE_CODE_USE_BEDROCK=1 CLAUDE_CODE_SKIP_BEDROCK_AUTH=1
                   ANTHROPIC_BEDROCK_BASE_URL="$bbase" AWS_REGION="$aws_region")
            cmd=("$claude_bin" -p "$TASK" --dangerously-skip-permissions) ;;
        codex|codex-gpt5)
            local model="${CODEX_MODEL:-}"
            [[ "$agent" == codex-gpt5 ]] && model=gpt-5-codex
            mkdir -p "$h/.codex"
            {
                [[ -n "$model" ]] && echo "model = \"$model\""
                cat <<TOML
model_provider = "scripted"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.scripted]
name = "scripted"
base_url = "$obase"
env_key = "SCRIPTED_API_KEY"
wire_api = "responses"
TOML
            } > "$h/.codex/config.toml"
            envs+=(CODEX_HOME="$h/.codex" SCRIPTED_API_KEY=test-key)
            # Not --ephemeral: the rollout it writes is kept in the run folder (transcripts/).
            cmd=("$codex_bin" exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "$TASK") ;;
        gemini)
            # The API-key path is the one that honours GOOGLE_GEMINI_BASE_URL; a non-interactive
            # run needs the workspace trusted (docs/agents.md).
            mkdir -p "$h/.gemini"
            echo '{"security": {"auth": {"selectedType": "gemini-api-key"}}}' > "$h/.gemini/settings.json"
            envs+=(GEMINI_API_KEY=test-key GOOGLE_GEMINI_BASE_URL="$gbase" GEMINI_CLI_TRUST_WORKSPACE=true)
            cmd=("$gemini_bin" -p "$TASK" --yolo) ;;
        mini)
            envs+=(MSWEA_GLOBAL_CONFIG_DIR="$h/mini" MSWEA_CONFIGURED=true MSWEA_SILENT_STARTUP=1
                   MSWEA_COST_TRACKING=ignore_errors LITELLM_LOCAL_MODEL_COST_MAP=True OPENAI_API_KEY=test-key)
            cmd=("$venv/bin/mini" -m openai/scripted -t "$TASK" --yolo --exit-immediately
                 -o "$h/trajectory.json" -c mini.yaml -c "model.model_kwargs.api_base=$obase") ;;
        aider)
            # aider fetches litellm's price list from the network unless the model is known locally.
            echo '{"openai/scripted": {"max_input_tokens": 128000, "max_output_tokens": 8192, "max_tokens": 8192,
 "input_cost_per_token": 0.0, "output_cost_per_token": 0.0, "litellm_provider": "openai", "mode": "chat"}}' \
                > "$h/aider-models.json"
            # aider runs no command on its own: `/run` (from --load, before --message) puts the
            # log in the chat as a user message followed by an assistant "Ok.", as a user would.
            echo "/run python3 gen.py" > "$h/aider-commands.txt"
            envs+=(LITELLM_LOCAL_MODEL_COST_MAP=True OPENAI_API_KEY=test-key)
            cmd=("$venv/bin/aider" --model openai/scripted --openai-api-base "$obase" --edit-format diff
                 --model-metadata-file "$h/aider-models.json" --yes-always --no-auto-commits
                 --no-dirty-commits --no-analytics --no-check-update --no-show-release-notes
                 --no-show-model-warnings --no-pretty --no-fancy-input --no-gitignore
                 --load "$h/aider-commands.txt" --message "$TASK" settings.py) ;;
    esac
    local rc=0 t0=$SECONDS
    (cd "$work/repo" && env -i "${envs[@]}" timeout "$per_run_timeout" "${cmd[@]}" \
        < /dev/null > "$dir/agent.out" 2> "$dir/agent.err") || rc=$?
    echo "$rc" > "$dir/exit"
    echo $((SECONDS - t0)) > "$dir/seconds"
    git -C "$work/repo" diff > "$dir/diff.patch"
    git -C "$work/repo" status --porcelain > "$dir/status.txt"
    cp "$work/repo/settings.py" "$dir/settings.py"
    # The agent's own transcripts, before the throwaway HOME goes: inputs for
    # `sluice replay --from claude-code|codex|gemini` (tests/corpus/transcripts/).
    local t
    for t in .claude/projects .codex/sessions .codex/archived_sessions .gemini/tmp; do
        if [[ -d "$h/$t" ]]; then
            mkdir -p "$dir/transcripts/$(dirname "$t")"
            # A copy is a convenience, never a failed run (an agent a timeout killed may still
            # be writing); gemini-cli's tmp/ may also cache binaries: only its chats are kept.
            if [[ "$t" == .gemini/tmp ]]; then
                (cd "$h" && find .gemini/tmp -path '*/chats/*' -type f -print0 \
                    | xargs -0 -r cp --parents -t "$dir/transcripts") \
                    || echo "note: $t not copied" >&2
            else
                cp -r "$h/$t" "$dir/transcripts/$t" || echo "note: $t not copied" >&2
            fi
        fi
    done
}

agent_version() {
    case "$1" in
        claude|claude-vertex|claude-bedrock|claude-wrap) "$claude_bin" --version 2>/dev/null | head -1 ;;
        codex|codex-gpt5) "$codex_bin" --version 2>/dev/null | head -1 ;;
        gemini) echo "gemini-cli $("$gemini_bin" --version 2>/dev/null | head -1)" ;;
        mini) "$venv/bin/python" -c 'import importlib.metadata as m; print("mini-swe-agent", m.version("mini-swe-agent"))' ;;
        aider) "$venv/bin/python" -c 'import importlib.metadata as m; print("aider-chat", m.version("aider-chat"))' ;;
    esac
}

# ------------------------------------------------------------------ the A/B experiment
# Claude Code and Codex, run after run, each run a new session, through one sluice splitting
# sessions half and half (`--ab 0.5`): every run must do its task whichever arm it is in, and
# the report must hold both arms.
if [[ "${agents[*]}" == ab ]]; then
    dir="$out/ab"
    mkdir -p "$dir"
    start_model "$dir"
    printf 'experiment: { idle_seconds: 1 }\n' > "$dir/sluice.yaml"
    # The experiment's rows need a store that keeps them: SQLite.
    start_sluice "$dir" "$model_url" "sqlite:$dir/state.db" --ab 0.5 --config "$dir/sluice.yaml"
    runs=0
    for round in 1 2 3 4 5 6 7 8; do
        for agent in claude codex; do
            run_dir="$dir/$agent-$round"
            mkdir -p "$run_dir"
            make_repo
            run_agent "$agent" "$sluice_url/anthropic" "$sluice_url/openai/v1" "$sluice_url/gemini" \
                "$sluice_url/vertex/v1" "$sluice_url/bedrock" "$run_dir"
            settings="$(cat "$run_dir/settings.py")"
            if [[ "$(cat "$run_dir/exit")" != 0 || "$settings" != *"RETRIES = 3"* ]]; then
                echo "ab: $agent run $round did not do its task (exit $(cat "$run_dir/exit"))" >&2
                tail -20 "$run_dir/agent.err" >&2
                exit 1
            fi
            runs=$((runs + 1))
        done
        sleep 1.5 # every session quiet past idle_seconds
        curl -fs "$sluice_url/ab" > "$dir/ab.json"
        both="$(python3 -c 'import json,sys; o=json.load(open(sys.argv[1]))["overall"]; print(int(o["control"]["sessions"] > 0 and o["treatment"]["sessions"] > 0))' "$dir/ab.json")"
        [[ $round -ge 3 && "$both" == 1 ]] && break
    done
    [[ "$both" == 1 ]] || { cat "$dir/ab.json" >&2; echo "ab: one arm stayed empty after $runs runs" >&2; exit 1; }
    python3 - "$dir/ab.json" "$runs" <<'PY' || { tail -20 "$dir/sluice.log" >&2; exit 1; }
import json, sys
report, runs = json.load(open(sys.argv[1])), int(sys.argv[2])
o = report["overall"]
sessions = o["control"]["sessions"] + o["treatment"]["sessions"]
assert sessions == runs, f"{sessions} sessions for {runs} runs: {report}"
agents = {g["name"] for g in report["by_agent"]}
assert agents == {"claude-code", "codex"}, agents
for arm in ("control", "treatment"):
    assert o[arm]["no_usage_turns"] == 0, (arm, o[arm])
    assert o[arm]["error_rate"] == 0.0, (arm, o[arm])
print(f"ok: {runs} runs, {o['control']['sessions']} control and {o['treatment']['sessions']} treatment sessions, every run did its task")
PY
    "$sluice" ab report --listen "${sluice_url#http://}" | tee "$dir/report.txt"
    kill "$sluice_pid" 2>/dev/null || true
    exit 0
fi

# ------------------------------------------------------------------ the runs
for agent in "${agents[@]}"; do
    case "$agent" in claude|claude-vertex|claude-bedrock|claude-wrap|codex|codex-gpt5|gemini|mini|aider) ;; *) echo "unknown agent $agent" >&2; exit 2 ;; esac
    agent_version "$agent" > "$out/$agent.version" || echo unknown > "$out/$agent.version"

    dir="$out/$agent/direct"
    mkdir -p "$dir"
    make_repo
    start_model "$dir"
    run_agent "$agent" "$model_url" "$model_url/v1" "$model_url" "$model_url/v1" "$model_url" "$dir"
    echo "$agent direct: exit $(cat "$dir/exit") in $(cat "$dir/seconds")s" >&2

    dir="$out/$agent/sluice"
    mkdir -p "$dir"
    make_repo
    start_model "$dir"
    if [[ "$agent" == claude-wrap ]]; then
        # `sluice wrap` starts sluice and stops it when Claude Code exits.
        run_agent "$agent" "wrap:$model_url" "" "" "" "" "$dir"
        echo '{}' > "$dir/stats.json"
    else
        start_sluice "$dir" "$model_url"
        run_agent "$agent" "$sluice_url/anthropic" "$sluice_url/openai/v1" "$sluice_url/gemini" \
            "$sluice_url/vertex/v1" "$sluice_url/bedrock" "$dir"
        curl -fs "$sluice_url/stats" > "$dir/stats.json" 2>/dev/null || echo '{}' > "$dir/stats.json"
        kill "$sluice_pid" 2>/dev/null || true
    fi
    echo "$agent through sluice: exit $(cat "$dir/exit") in $(cat "$dir/seconds")s" >&2
done

python3 "$here/check.py" --out "$out" --seconds $((SECONDS - started)) "${agents[@]}"
