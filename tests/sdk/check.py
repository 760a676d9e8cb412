"""Drive sluice with the official openai and anthropic SDKs, streaming and not.

Run by tests/sdk/run.sh with SLUICE_URL pointing at a sluice whose upstreams are the mock.
Each call sends a real corpus conversation (so the pipeline acts and injects the expand tool)
and checks the answer the SDK parsed.
"""
import gzip
import json
import os
import sys

import anthropic
import openai

url = os.environ["SLUICE_URL"]
corpus = os.environ["SLUICE_CORPUS_RUN"]


def corpus_body(name):
    """A request body of the run: `name`, or `name.gz` as the repository stores it."""
    path = os.path.join(corpus, name)
    if os.path.exists(path):
        with open(path, "rb") as f:
            return json.load(f)
    with gzip.open(path + ".gz", "rb") as f:
        return json.load(f)


a_body = corpus_body("anthropic.json")
o_body = corpus_body("openai.json")

failures = []


def check(name, got, want):
    status = "ok" if got == want else "FAILED"
    print(f"{name}: {status} ({got!r})")
    if got != want:
        failures.append(name)


ac = anthropic.Anthropic(base_url=f"{url}/anthropic", api_key="test-key", max_retries=0)
msg = ac.messages.create(model="mock", max_tokens=64, system=a_body.get("system"), messages=a_body["messages"], tools=a_body.get("tools", []))
check("anthropic non-stream", msg.content[0].text, "ok")
with ac.messages.stream(model="mock", max_tokens=64, system=a_body.get("system"), messages=a_body["messages"], tools=a_body.get("tools", [])) as stream:
    text = "".join(stream.text_stream)
check("anthropic stream", text, "ok")

oc = openai.OpenAI(base_url=f"{url}/openai/v1", api_key="test-key", max_retries=0)
resp = oc.chat.completions.create(model="mock", messages=o_body["messages"], tools=o_body.get("tools") or openai.NOT_GIVEN)
check("openai non-stream", resp.choices[0].message.content, "ok")
chunks = oc.chat.completions.create(model="mock", messages=o_body["messages"], tools=o_body.get("tools") or openai.NOT_GIVEN, stream=True)
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
check("openai stream", text, "ok")
models = oc.models.list()
check("openai models pass through", list(models), [])

print(f"{4 + 1 - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
