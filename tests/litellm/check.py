"""A multi-turn conversation through a real LiteLLM proxy whose headroom guardrail calls sluice.

Run by tests/litellm/run.sh. The client speaks to LiteLLM with the official openai SDK; LiteLLM
sends the history to sluice's POST /v1/compress, forwards the compacted messages to the mock
provider, and injects its `headroom_retrieve` tool. The mock (started with --curious) calls that
tool for the first `hash=` it sees; LiteLLM fetches GET /v1/retrieve/{hash} from sluice and
continues the call itself, and the mock answers `restored N bytes` with the length it got back.
"""
import gzip
import json
import os
import re
import sys
import urllib.request

import openai

litellm_url = os.environ["LITELLM_URL"]
sluice_url = os.environ["SLUICE_URL"]
mock_url = os.environ["MOCK_URL"]
corpus = os.environ["SLUICE_CORPUS_RUN"]

failures = []


def check(name, ok, detail=""):
    print(f"{name}: {'ok' if ok else 'FAILED'} {detail}")
    if not ok:
        failures.append(name)


def get_json(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def provider_requests():
    return [r for r in get_json(f"{mock_url}/mock/requests") if r["path"] == "/v1/chat/completions"]


with gzip.open(os.path.join(corpus, "openai.json.gz"), "rb") as f:
    body = json.load(f)
messages, tools = body["messages"], body.get("tools") or []


def prefix_ending_on_a_tool_result(n):
    """The first messages of the run, cut so the last is a tool result (a valid request)."""
    while messages[n - 1]["role"] != "tool":
        n += 1
    return messages[:n]


client = openai.OpenAI(base_url=litellm_url, api_key="sk-client", max_retries=0, timeout=120)
turns = [prefix_ending_on_a_tool_result(40), prefix_ending_on_a_tool_result(46)]
firsts = []
for number, history in enumerate(turns, 1):
    before = len(provider_requests())
    reply = client.chat.completions.create(model="gpt-4o", messages=history, tools=tools)
    seen = provider_requests()[before:]
    firsts.append(seen[0]["body"])
    sent = len(json.dumps(history))
    forwarded = len(json.dumps(seen[0]["body"]["messages"]))
    check(f"turn {number}: compacted by sluice", forwarded < sent, f"({sent} -> {forwarded} bytes)")
    hashes = re.findall(r"hash=([0-9a-f]{24})", json.dumps(seen[0]["body"]["messages"]))
    check(f"turn {number}: markers the gateway can match", len(hashes) > 0, f"({len(hashes)})")
    names = [t["function"]["name"] for t in seen[0]["body"].get("tools", [])]
    check(f"turn {number}: the gateway's retrieve tool is declared", "headroom_retrieve" in names)
    answer = reply.choices[0].message.content or ""
    if not hashes:
        check(f"turn {number}: the retrieve round returned the original", False, "(no marker)")
        continue
    original = get_json(f"{sluice_url}/v1/retrieve/{hashes[0]}")["original_content"]
    check(
        f"turn {number}: the retrieve round returned the original",
        answer == f"restored {len(original.encode())} bytes" and len(seen) == 2,
        f"({answer!r}, {len(seen)} provider calls)",
    )

# The gateway compresses history a turn late and resends it every turn: whatever sluice
# returned for a message must come back byte-identical later, or the provider's cache breaks.
earlier, later = firsts[0]["messages"], firsts[1]["messages"]
cut = [i for i, m in enumerate(earlier) if "hash=" in json.dumps(m)]
same = all(later[i] == earlier[i] for i in cut)
check("turn 2 repeats turn 1's compacted messages unchanged", bool(cut) and same, f"({len(cut)} messages)")

print(f"{9 - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
