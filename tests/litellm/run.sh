#!/usr/bin/env bash
# A real LiteLLM proxy (PyPI, pinned in requirements.txt) with its `headroom` compression
# guardrail pointed at sluice's sidecar routes, in front of the mock provider.
# Usage: bash tests/litellm/run.sh   (installs LiteLLM in tests/litellm/.venv the first time)
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"
corpus="${SLUICE_CORPUS:-$root/tests/corpus}"

venv="tests/litellm/.venv"
if [[ ! -x "$venv/bin/litellm" ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/litellm/requirements.txt
fi

cargo build --quiet --bin sluice --bin sluice-mock
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
work="$(mktemp -d)"
cleanup() { kill "${mock_pid:-}" "${sluice_pid:-}" "${litellm_pid:-}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { for _ in $(seq "$2"); do curl -fs "$1" >/dev/null 2>&1 && return 0; sleep 0.5; done; echo "no answer from $1" >&2; return 1; }

# The provider: a model that asks for the first marker it sees, through the gateway's tool.
"$target_dir/debug/sluice-mock" 127.0.0.1:0 --curious > "$work/mock.out" &
mock_pid=$!
for _ in $(seq 100); do grep -q listening "$work/mock.out" 2>/dev/null && break; sleep 0.05; done
mock_url="$(sed -n 's/^listening on //p' "$work/mock.out")"

# sluice as the sidecar: only /v1/compress and /v1/retrieve are used.
sluice_port="$(free_port)"
"$target_dir/debug/sluice" serve --listen "127.0.0.1:$sluice_port" --store memory \
    --openai-upstream "$mock_url" --anthropic-upstream "$mock_url" 2> "$work/sluice.err" &
sluice_pid=$!
wait_for "http://127.0.0.1:$sluice_port/healthz" 100

litellm_port="$(free_port)"
cat > "$work/litellm.yaml" <<YAML
model_list:
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_base: "$mock_url/v1", api_key: sk-mock}
litellm_settings: {num_retries: 0, request_timeout: 60, telemetry: false}
guardrails:
  - guardrail_name: compression
    litellm_params: {guardrail: headroom, mode: pre_call, api_base: "http://127.0.0.1:$sluice_port", default_on: true}
YAML
# LiteLLM refuses to start without a master key unless told loopback is fine; its own state
# (HOME) stays in the temporary folder.
HOME="$work" LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_TELEMETRY=False \
LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY=true \
    "$venv/bin/litellm" --config "$work/litellm.yaml" --host 127.0.0.1 --port "$litellm_port" \
    > "$work/litellm.log" 2>&1 &
litellm_pid=$!
wait_for "http://127.0.0.1:$litellm_port/health/liveliness" 240 || { tail -30 "$work/litellm.log" >&2; exit 1; }

LITELLM_URL="http://127.0.0.1:$litellm_port" SLUICE_URL="http://127.0.0.1:$sluice_port" MOCK_URL="$mock_url" \
SLUICE_CORPUS_RUN="$corpus/public/gemini3pro-miniswe-pytest-dev-pytest-6197" \
    "$venv/bin/python" tests/litellm/check.py \
    || { tail -40 "$work/litellm.log" >&2; cat "$work/sluice.err" >&2; exit 1; }
