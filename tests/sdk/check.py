"""Drive sluice with the official openai and anthropic SDKs, streaming and not.

Run by tests/sdk/run.sh with SLUICE_URL pointing at a sluice whose upstreams are the mock.
Each call sends a real corpus conversation (so the pipeline acts and injects the expand tool)
and checks the answer the SDK parsed. The Responses API calls send the same conversation as
`input` items (function calls and their outputs included); with `x-mock-model: curious` the mock
asks for the first marker it sees, so the expand loop runs under the SDK, streamed and not.
SLUICE_MODE=observe runs the checks that hold when sluice only observes.
"""
import gzip
import json
import os
import sys

import anthropic
import openai

from responses_form import responses_request

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
observe = os.environ.get("SLUICE_MODE") == "observe"


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

r_request = responses_request(o_body)
check("responses request has function calls", any(i["type"] == "function_call" for i in r_request["input"]), True)
resp = oc.responses.create(**r_request)
check("responses non-stream", resp.output_text, "ok")
events = list(oc.responses.create(**r_request, stream=True))
text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
check("responses stream", text, "ok")
checks = 8

# The curious model asks for the first marker's original. In sync mode sluice answers from its
# store and continues upstream: the SDK sees only the final answer, never the expand call.
curious = {"x-mock-model": "curious"}
resp = oc.responses.create(**r_request, extra_headers=curious)
names = [getattr(item, "name", None) for item in resp.output]
if observe:
    check("observe: responses forwarded untouched, no marker to ask for", resp.output_text, "ok")
    checks += 1
else:
    restored = resp.output_text
    check("responses expand loop, non-stream", restored.startswith("restored ") and int(restored.split()[1]) > 200, True)
    check("responses expand call hidden, non-stream", "context_guru_expand" in names, False)
    with oc.responses.stream(**r_request, extra_headers=curious) as stream:
        deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    check("responses expand loop, stream", deltas.startswith("Let me read that. restored "), True)
    check("responses stream final response lists both rounds", final.output_text, deltas)
    check("responses expand call hidden, stream",
          any(getattr(item, "name", None) == "context_guru_expand" for item in final.output), False)
    # A stored request (no `store: false`) could be chained on by id, where its markers would
    # have no way back: sluice cuts nothing lossy on it, so the curious model finds no marker.
    events = oc.responses.create(**dict(r_request, store=True), stream=True, extra_headers=curious)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    check("responses stored request: no marker without a way back", text, "ok")
    checks += 6

print(f"{checks - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
