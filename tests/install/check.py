"""One real request through an installed sluice, and its marker expanded.

Usage: check.py SLUICE_URL RECORD. Sends an Anthropic Messages request whose transcript holds
a long, repetitive tool output (a build log), reads what the provider stand-in received, finds
a `<<cg:ID>>` marker in it, and asks `GET /expand` for it: the original must come back whole.
"""

import json
import re
import sys
import urllib.request

url, record = sys.argv[1], sys.argv[2]
HEADERS = {"content-type": "application/json", "anthropic-version": "2023-06-01",
           "x-api-key": "sk-install-check", "x-context-guru-session": "install-check"}

log = "\n".join(f"[{i:05d}] compiling module_{i % 7} ... ok (warning: unused variable `x{i % 3}`)"
                for i in range(1500))
request = {
    "model": "claude-sonnet-4-5", "max_tokens": 64,
    "messages": [
        {"role": "user", "content": "Build the project and tell me whether it passes."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                           "input": {"command": "make"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": log}]},
        {"role": "assistant", "content": "It built. Running the tests next."},
        {"role": "user", "content": "Go on."},
    ],
}


def call(method, path, body=None):
    req = urllib.request.Request(url + path, data=body, headers=HEADERS, method=method)
    with urllib.request.urlopen(req, timeout=30) as response:
        return response.status, response.read()


status, _ = call("POST", "/anthropic/v1/messages", json.dumps(request).encode())
assert status == 200, status
forwarded = [json.loads(line) for line in open(record)][-1]["body"]
assert len(forwarded) < len(json.dumps(request)), "sluice forwarded the request uncut"
ids = re.findall(r"<<cg:([0-9a-zA-Z_-]+)>>", forwarded)
assert ids, "no marker in what the provider received"
status, original = call("GET", f"/expand?id={ids[0]}")
assert status == 200, status
text = original.decode()
assert text and text in log, "the expanded original is not the tool output the agent sent"
print(f"install check: {len(json.dumps(request))} bytes sent, {len(forwarded)} forwarded, "
      f"marker {ids[0]} expands to {len(text)} bytes of the original")
