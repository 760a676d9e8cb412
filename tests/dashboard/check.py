"""The dashboard in a real browser, over the Chrome DevTools Protocol.

Run by tests/dashboard/run.sh with a headless chromium (DEVTOOLS_PORT) and a sluice whose
upstreams are the mock (SLUICE_URL). It opens /dashboard/, checks the counters start at zero,
sends real corpus conversations through sluice in all three dialects, and waits for the page's
counters to change on their own (the live feed). Then it opens the Requests tab, one request's
drill-down with its component decisions and captured content, and saves a screenshot.

It fails if the page logs a console error, throws, reports a CSP violation or any other
browser error, or fetches anything outside sluice's origin.

With SLUICE_CHECK=memory (a sluice started with `--store memory`) it checks less and something
else: the page loads at zero, says its rows are in memory for this run only, and shows the
requests sent to it, live and in the Requests tab.

With SLUICE_CHECK=experiment (a sluice started with `--ab 0.5` and `experiment.idle_seconds: 1`)
it checks the Experiment tab: empty at first, then, once twelve sessions have been sent and
gone quiet, both arms with their sessions (summing to twelve), and the treatment's difference.
"""
import re
import base64
import gzip
import json
import os
import sys
import time
import urllib.request

import websocket

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sdk"))
from responses_form import responses_request  # noqa: E402

sluice = os.environ["SLUICE_URL"]
devtools = os.environ["DEVTOOLS_PORT"]
corpus = os.environ["SLUICE_CORPUS_ROOT"]
screenshot = os.environ.get("SLUICE_SCREENSHOT", "")
mode = os.environ.get("SLUICE_CHECK", "full")
spread = float(os.environ.get("SLUICE_SPREAD_SECONDS", "0"))

RUNS = [
    "gemini3pro-miniswe-pytest-dev-pytest-6197",
    "sweagent-gpt4-pydicom1458",
    "swesmith-arrow-py-arrow-0",
    "taubench-airline-gpt4o-task2-trial1",
]


class Page:
    """One browser tab: commands, and every event kept for the checks."""

    def __init__(self):
        request = urllib.request.Request(f"http://127.0.0.1:{devtools}/json/new?about:blank", method="PUT")
        target = json.load(urllib.request.urlopen(request, timeout=10))
        self.ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events = []

    def send(self, method, **params):
        self.next_id += 1
        mine = self.next_id
        self.ws.send(json.dumps({"id": mine, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == mine:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def pump(self, seconds):
        """Collects events for a while (the page works on its own)."""
        self.ws.settimeout(0.1)
        end = time.time() + seconds
        while time.time() < end:
            try:
                self.events.append(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                pass
        self.ws.settimeout(30)

    def js(self, expression):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression, what, timeout=15):
        end = time.time() + timeout
        while time.time() < end:
            value = self.js(expression)
            if value:
                return value
            self.pump(0.2)
        raise AssertionError(f"timed out waiting for {what}: {expression}")


def corpus_body(run, name):
    with gzip.open(os.path.join(corpus, run, name + ".gz"), "rb") as f:
        return json.load(f)


def cached(body):
    """An Anthropic body with the breakpoints Claude Code sets: on the system prompt and on the
    newest message, so the provider caches the transcript and reads it back next turn."""
    body = json.loads(json.dumps(body))
    system = body.get("system")
    if isinstance(system, str):
        body["system"] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
    last = body["messages"][-1]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    if last["content"]:
        last["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return body


def post(path, body, headers):
    request = urllib.request.Request(sluice + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
        return response.status


def traffic():
    """Each run as an agent sends it: turn after turn, the transcript growing, in three dialects."""
    sent = 0
    calls = []
    for run in RUNS:
        chat = corpus_body(run, "openai.json")
        messages = corpus_body(run, "anthropic.json")
        for turns in (0.6, 0.8, 1.0):
            n = max(2, int(len(chat["messages"]) * turns))
            o = dict(chat, messages=chat["messages"][:n])
            calls.append(("/openai/v1/chat/completions", o, {"authorization": "Bearer sk-test-openai"}))
            m = max(2, int(len(messages["messages"]) * turns))
            if messages["messages"][m - 1]["role"] != "user":
                m -= 1
            a = cached(dict(messages, messages=messages["messages"][:m]))
            calls.append(("/anthropic/v1/messages", a, {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}))
        calls.append(("/openai/v1/responses", responses_request(chat, chat.get("model", "gpt-4o")),
                      {"authorization": "Bearer sk-test-openai"}))
    # One body sluice cannot read, first (the drill-down below opens the newest row): the
    # overview must say it went untouched, and why.
    request = urllib.request.Request(sluice + "/anthropic/v1/messages", data=b"{not json", method="POST",
                                     headers={"content-type": "application/json", "x-api-key": "sk-ant-test"})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
    sent += 1
    for path, body, headers in calls:
        assert post(path, body, headers) == 200, path
        sent += 1
        if spread:
            time.sleep(spread / len(calls))
    return sent


def open_dashboard():
    """A tab on /dashboard/, loaded, its counters at zero, its live feed connected."""
    page = Page()
    for domain in ("Page", "Runtime", "Log", "Network"):
        page.send(f"{domain}.enable")
    page.send("Emulation.setDeviceMetricsOverride", width=1440, height=1000, deviceScaleFactor=1, mobile=False)
    page.send("Page.navigate", url=sluice + "/dashboard/")
    page.wait_for("document.readyState === 'complete'", "the page to load")
    start = page.wait_for("(document.querySelector('[data-testid=value-requests]') || {}).textContent", "the first tile")
    assert start == "0", f"a fresh store shows no requests, got {start!r}"
    page.wait_for("document.querySelector('[data-testid=live]').textContent.includes('live')", "the live feed")
    return page


def wait_for_requests(page, sent):
    """No reload: the live feed makes the page refresh itself."""
    return page.wait_for(
        f"(() => {{ const t = document.querySelector('[data-testid=value-requests]').textContent;"
        f" return Number(t.replace(/,/g, '')) === {sent} ? t : null; }})()",
        f"the requests tile to reach {sent}")


def check_clean(page):
    """Fails on any console error, exception, browser error or off-origin fetch the page made."""
    page.pump(0.5)
    failures = []
    for event in page.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            failures.append(f"console {params['type']}: {params.get('args')}")
        elif method == "Runtime.exceptionThrown":
            failures.append(f"exception: {params.get('exceptionDetails', {}).get('text')}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            failures.append(f"browser error: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if not (url.startswith(sluice + "/") or url.startswith("data:")):
                failures.append(f"off-origin fetch: {url}")
    fetched = sum(1 for e in page.events if e.get("method") == "Network.requestWillBeSent")
    assert fetched > 5, "the checks saw the page's requests"
    if failures:
        print("\n".join(failures), file=sys.stderr)
        sys.exit(1)
    print(f"ok: {fetched} fetches, all same-origin; no console error, exception or CSP violation")


def check_memory():
    """A sluice on `--store memory`: the dashboard is there, in memory, and shows what is sent."""
    page = open_dashboard()
    capture = page.js("document.querySelector('[data-testid=tile-capture]').innerText")
    assert "in memory, this run only" in capture, capture
    with urllib.request.urlopen(sluice + "/dashboard/api/overview", timeout=10) as response:
        kept = json.load(response)["capture"]["kept"]
    assert kept == "memory", kept
    print(f"ok: the page loads at zero and says its rows are in memory ({capture!r})")
    run = RUNS[0]
    chat = corpus_body(run, "openai.json")
    messages = corpus_body(run, "anthropic.json")
    m = len(messages["messages"])
    if messages["messages"][m - 1]["role"] != "user":
        m -= 1
    anthropic = cached(dict(messages, messages=messages["messages"][:m]))
    assert post("/anthropic/v1/messages", anthropic, {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}) == 200
    assert post("/openai/v1/chat/completions", chat, {"authorization": "Bearer sk-test-openai"}) == 200
    shown = wait_for_requests(page, 2)
    print(f"ok: the requests tile went from 0 to {shown} as traffic flowed")
    page.js("document.querySelector('[data-testid=tab-requests]').click()")
    rows = page.wait_for("document.querySelectorAll('[data-testid=request-row]').length", "request rows")
    assert rows == 2, rows
    table = page.js("document.querySelector('[data-testid=requests-table]').innerText")
    assert "anthropic" in table and "openai" in table, table
    print(f"ok: the Requests tab lists the {rows} requests")
    check_clean(page)


def check_experiment():
    """A sluice with `--ab 0.5`: the Experiment tab shows both arms and the difference."""
    page = open_dashboard()
    page.js("document.querySelector('[data-testid=tab-experiment]').click()")
    page.wait_for(
        "(() => { const rows = [...document.querySelectorAll('[data-testid=experiment-arm]')];"
        " return rows.length === 2 && rows.every((r) => r.children[1].textContent === '0'); })()",
        "both arms, no session yet")
    chat = corpus_body(RUNS[0], "openai.json")
    sessions = 12
    for i in range(sessions):
        for turns in (0.8, 1.0):
            n = max(2, int(len(chat["messages"]) * turns))
            body = dict(chat, messages=chat["messages"][:n])
            headers = {"authorization": "Bearer sk-test-openai", "x-context-guru-session": f"dash-{i}",
                       "user-agent": "claude-cli/2.0.14 (external, cli)"}
            assert post("/openai/v1/chat/completions", body, headers) == 200
    time.sleep(2.5)  # every session quiet past idle_seconds: finished, compared
    page.js("document.querySelector('[data-testid=tab-overview]').click()")
    page.js("document.querySelector('[data-testid=tab-experiment]').click()")
    counts = page.wait_for(
        "(() => { const rows = [...document.querySelectorAll('[data-testid=experiment-arm]')];"
        " const n = rows.map((r) => Number(r.children[1].textContent));"
        f" return rows.length === 2 && n[0] + n[1] === {sessions} ? n : null; }})()",
        f"both arms' finished sessions to sum to {sessions}")
    assert min(counts) > 0, counts
    summary = page.js("document.querySelector('[data-testid=experiment-summary]').textContent")
    assert summary.startswith("Experiment ab: treatment") and "95% interval" in summary, summary
    agents = page.js("document.querySelector('[data-testid=experiment-agents]').innerText")
    assert "claude-code" in agents, agents
    print(f"ok: the Experiment tab shows {counts[0]} control and {counts[1]} treatment sessions; {summary!r}")
    check_clean(page)


def main():
    if mode == "memory":
        check_memory()
        return
    if mode == "experiment":
        check_experiment()
        return
    page = open_dashboard()

    sent = traffic()
    shown = wait_for_requests(page, sent)
    print(f"ok: the requests tile went from 0 to {shown} as traffic flowed")
    billed = page.js("document.querySelector('[data-testid=value-billed]').textContent")
    assert billed.endswith("% saved") or billed.endswith("(cost more)"), billed
    billed_detail = page.js("document.querySelector('[data-testid=tile-billed]').innerText")
    reported = re.search(r"([\d,]+) requests? with a usage report", billed_detail)
    assert reported and int(reported.group(1).replace(",", "")) > 0, billed_detail
    print(f"ok: billed input saved, net {billed}")
    net = page.js("document.querySelector('[data-testid=value-net]').textContent")
    assert net.endswith("% saved") or net.endswith("(cost more)"), net
    worth = page.js("document.querySelector('[data-testid=value-worth]').textContent")
    assert worth.startswith("$") or worth.startswith("−$") or worth == "unknown", worth
    print(f"ok: net saved {net}, priced {worth}")
    untouched = page.js("document.querySelector('[data-testid=tile-untouched]').innerText")
    assert "unparsed_not_json" in untouched and not untouched.startswith("Forwarded untouched\n0.0%"), untouched
    print(f"ok: the untouched tile reads {untouched!r}")
    assert page.js("document.querySelectorAll('#chart-tokens polyline, #chart-tokens circle').length") > 0, "a chart"
    # The keep-alive (on, one second of quiet before each ping): once the traffic stops, the
    # Anthropic sessions past their first turn are pinged, and the overview counts them.
    # No row marks a ping, so the live feed does not refresh the page: each poll reloads it.
    page.pump(2.5)
    pings = page.wait_for(
        "(() => { const v = document.querySelector('[data-testid=value-keepalive]');"
        " const n = v && Number(v.textContent.replace(/,/g, ''));"
        " if (!n) document.querySelector('[data-testid=tab-overview]').click();"
        " return n > 0 && v.textContent; })()",
        "keep-alive pings on the overview")
    keep = page.js("document.querySelector('[data-testid=tile-keepalive]').innerText")
    assert "kept" in keep and "spent" in keep and "wrote instead of read" not in keep, keep
    print(f"ok: the keep-alive tile counts {pings} pings: {keep!r}")

    page.js("document.querySelector('[data-testid=tab-requests]').click()")
    rows = page.wait_for("document.querySelectorAll('[data-testid=request-row]').length", "request rows")
    assert rows == min(sent, 50), rows
    page.js("document.querySelector('[data-testid=request-row]').click()")
    decisions = page.wait_for(
        "document.querySelector('.drawer.open') && document.querySelectorAll('[data-testid=components-detail] tbody tr').length",
        "the request's component decisions")
    assert decisions >= 3, decisions
    drawer = page.js("document.querySelector('[data-testid=drawer]').innerText")
    for expected in ("Components, in pipeline order", "Provider usage", "Content tokens saved, net"):
        assert expected in drawer, f"{expected!r} not in {drawer!r}"
    print(f"ok: the drill-down lists {decisions} component decisions")
    page.pump(0.5)
    shot = page.send("Page.captureScreenshot", format="png")
    detail = screenshot.replace(".png", "-request.png")
    with open(detail, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    print(f"ok: screenshot of the drill-down saved to {detail}")
    # The overview as an operator first sees it, for docs/guide.md.
    page.js("document.querySelector('#drawer-close').click()")
    page.js("document.querySelector('[data-testid=tab-overview]').click()")
    if spread:
        # Spread traffic reads best over the last hour, a point a minute.
        page.js("(() => { const w = document.querySelector('#window'); w.value = '3600000';"
                " w.dispatchEvent(new Event('change')); })()")
    page.pump(1.0)
    shot = page.send("Page.captureScreenshot", format="png")
    with open(screenshot, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    print(f"ok: screenshot of the overview saved to {screenshot}")
    page.js("document.querySelector('[data-testid=tab-experiment]').click()")
    none = page.wait_for("document.querySelector('[data-testid=experiment-summary]').textContent",
                         "the Experiment tab")
    assert none.startswith("No experiment runs") and "--ab" in none, none
    print("ok: without --ab the Experiment tab says how to start one")
    check_clean(page)


if __name__ == "__main__":
    main()
