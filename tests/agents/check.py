#!/usr/bin/env python3
"""Compares each agent's direct run with its run through sluice (tests/agents/run.sh).

Reads RUN/AGENT/{direct,sluice}/ (requests.jsonl from model.py, exit, diff.patch, status.txt,
settings.py, agent.out; sluice.log and stats.json through sluice), prints per agent and per
check PASS / FAIL / n/a with the evidence, a table, and writes RUN/results.json.
Exit status 1 when any check fails. Standard library only.

Checks:
  direct_task_done    the direct run exited 0 and settings.py says RETRIES = 3 (the harness works)
  same_exit           the same exit status direct and through sluice
  same_changes        the same `git diff` and `git status` direct and through sluice
  sluice_compacted    where the task put the long log in the transcript: some request sluice
                      forwarded carries a <<cg:...>> marker or is shorter than the agent's
  expand_round        a forwarded marker came with the expand tool declared, the model server
                      asked for it, and sluice answered and re-asked (a continuation upstream)
  expand_hidden       no request the agent sent carries a context_guru_expand call or result,
                      the agent made as many requests as directly, and never printed the tool
  requests_identical  each agent request as the model server saw it is byte-identical to the
                      direct run's, after normalisation: ids, session ids, timestamps, the
                      injected expand tool, and strings in the transcript that sluice cut
                      (carrying a marker, or shorter) put back as the direct run had them
  headers_forwarded   the same request line query and headers, but hop-by-hop, length and
                      encoding headers and the normalised ids (and, on Bedrock, the SigV4
                      headers sluice signed with)
  bedrock_signed      (Bedrock) every request sluice forwarded, re-asks and the start-up
                      listing included, carried a SigV4 signature the model server verified
                      with botocore
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

EXPAND = "context_guru_expand"
MARK = "<<cg:"
LONG_OUTPUT_PROBE = "batch 0003 parse"  # a line near the top of gen.py's log (agents keep the head)
# Objects whose key order an agent does not keep from run to run (Codex serialises a hash map):
# compared as values, with JSON-in-strings parsed.
UNORDERED = {("client_metadata",)}
# The headers of the signature sluice makes for a Bedrock request (the agent sent none).
SIGV4_HEADERS = {"authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"}
SKIP_HEADERS = {"host", "content-length", "accept-encoding", "connection", "transfer-encoding",
                "te", "keep-alive", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "via"}

NORMALISE = [
    (re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"), "<uuid>"),
    (re.compile(r"(?<![0-9a-fA-F])[0-9a-f]{64}(?![0-9a-fA-F])"), "<hex64>"),
    (re.compile(r"(turn_started_at_unix_ms\\*\"?\s*:\s*)\d+"), r"\g<1><ms>"),
    # Codex adds the repository's git state to its turn metadata only when it is ready in time.
    (re.compile(r'\\*"workspaces\\*":\{[^{}]*\{[^{}]*\}\},?'), ""),
    (re.compile(r"Wall time:? [0-9.]+ seconds"), "Wall time <s> seconds"),  # Codex tool outputs
    (re.compile(r"Chunk ID: [0-9a-f]+"), "Chunk ID: <id>"),
    # gemini-cli names each call it makes `<tool>_<unix ms>_<n>`.
    (re.compile(r'("id\\*":\s*\\*"[a-z_]+)_\d{13}_(\d+)'), r"\g<1>_<ms>_\g<2>"),
    (re.compile(r"(\"?(?:created_at|timestamp)\\*\"?\s*:\s*)\d{9,}"), r"\g<1><time>"),
]


def normalise(text: str) -> str:
    for pat, rep in NORMALISE:
        text = pat.sub(rep, text)
    return text


# ---------------------------------------------------------------- JSON with byte spans


class Spans:
    """Parses JSON text and records, per path, the span of each value (and of each object
    member, from its key), so parts of the raw text can be replaced or removed exactly."""

    WS = " \t\r\n"
    NUM = re.compile(r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")

    def __init__(self, text: str):
        self.s = text
        self.value: dict[tuple, tuple[int, int]] = {}
        self.member: dict[tuple, tuple[int, int]] = {}
        i = self._val(self._ws(0), ())
        if self._ws(i) != len(text):
            raise ValueError("trailing data")

    def _ws(self, i):
        while i < len(self.s) and self.s[i] in self.WS:
            i += 1
        return i

    def _str(self, i):
        j = i + 1
        while True:
            c = self.s[j]
            if c == "\\":
                j += 2
            elif c == '"':
                return j + 1
            else:
                j += 1

    def _val(self, i, path):
        s = self.s
        c = s[i]
        if c == "{":
            j = self._ws(i + 1)
            if s[j] == "}":
                end = j + 1
            else:
                while True:
                    kstart = j
                    kend = self._str(j)
                    key = json.loads(s[kstart:kend])
                    j = self._ws(kend)
                    assert s[j] == ":"
                    vstart = self._ws(j + 1)
                    vend = self._val(vstart, path + (key,))
                    self.member[path + (key,)] = (kstart, vend)
                    j = self._ws(vend)
                    if s[j] == ",":
                        j = self._ws(j + 1)
                        continue
                    assert s[j] == "}"
                    end = j + 1
                    break
        elif c == "[":
            j = self._ws(i + 1)
            if s[j] == "]":
                end = j + 1
            else:
                n = 0
                while True:
                    vend = self._val(j, path + (n,))
                    n += 1
                    j = self._ws(vend)
                    if s[j] == ",":
                        j = self._ws(j + 1)
                        continue
                    assert s[j] == "]"
                    end = j + 1
                    break
        elif c == '"':
            end = self._str(i)
        elif s.startswith("true", i):
            end = i + 4
        elif s.startswith("false", i):
            end = i + 5
        elif s.startswith("null", i):
            end = i + 4
        else:
            m = self.NUM.match(s, i)
            if not m:
                raise ValueError(f"bad JSON at {i}")
            end = m.end()
        self.value[path] = (i, end)
        return end


def tree_diff(d, s, path=(), out=None):
    """Paths where the two parsed values differ (type, value, key order, length)."""
    out = [] if out is None else out
    if type(d) is not type(s):
        out.append(path)
    elif isinstance(d, dict):
        if list(d) != list(s):
            out.append(path)
        else:
            for k in d:
                tree_diff(d[k], s[k], path + (k,), out)
    elif isinstance(d, list):
        if len(d) != len(s):
            out.append(path)
        else:
            for i, (a, b) in enumerate(zip(d, s)):
                tree_diff(a, b, path + (i,), out)
    elif d != s:
        out.append(path)
    return out


def get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def fmt_path(path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path) or "(body)"


def canonical(v):
    if isinstance(v, str) and v[:1] in "{[":
        try:
            return canonical(json.loads(v))
        except ValueError:
            return v
    if isinstance(v, dict):
        return {k: canonical(x) for k, x in sorted(v.items())}
    if isinstance(v, list):
        return [canonical(x) for x in v]
    return v


def expand_tool_index(tools) -> int | None:
    for i, t in enumerate(tools or []):
        if isinstance(t, dict) and (t.get("name") == EXPAND or (t.get("function") or {}).get("name") == EXPAND):
            return i
    return None


def drop_element(spans: Spans, obj, list_path: tuple, i: int, edits: list):
    """Removes element `i` of the list at `list_path` (with its comma) from `obj`, as an edit of
    the text `spans` was parsed from; the spans of later elements are re-keyed one down."""
    lst = get(obj, list_path)
    n, k = len(lst), len(list_path)
    at = lambda j: spans.value[list_path + (j,)]  # noqa: E731
    if i > 0:
        start, end = at(i - 1)[1], at(i)[1]
    elif n > 1:
        start, end = at(0)[0], at(1)[0]
    else:
        start, end = at(0)
    edits.append((start, end, ""))
    lst.pop(i)
    remap = {}
    for path, span in spans.value.items():
        inside = len(path) > k and path[:k] == list_path and isinstance(path[k], int)
        if inside and path[k] > i:
            remap[list_path + (path[k] - 1,) + path[k + 1:]] = span
        elif inside and path[k] == i:
            continue
        else:
            remap.setdefault(path, span)
    spans.value = remap


def compare_bodies(direct_raw: str, sluice_raw: str) -> tuple[bool, str, int]:
    """(identical after normalisation, why not, number of cut strings put back)."""
    d_text, s_text = normalise(direct_raw), normalise(sluice_raw)
    if d_text == s_text:
        return True, "", 0
    try:
        d_sp, s_sp = Spans(d_text), Spans(s_text)
        d, s = json.loads(d_text), json.loads(s_text)
    except (ValueError, AssertionError, IndexError) as e:
        return False, f"not comparable as JSON: {e}", 0
    edits = []  # (start, end, replacement) on s_text
    # The injected expand tool: removed, with its comma, or the whole `tools` member sluice added.
    # Gemini declares it inside a `functionDeclarations` list of `tools`.
    if isinstance(s, dict) and isinstance(s.get("tools"), list):
        for t, tool in enumerate(s["tools"]):
            decls = tool.get("functionDeclarations") if isinstance(tool, dict) else None
            j = expand_tool_index(decls) if isinstance(decls, list) else None
            if j is not None:
                drop_element(s_sp, s, ("tools", t, "functionDeclarations"), j, edits)
                break
        i = expand_tool_index(s["tools"])
        if i is not None:
            n = len(s["tools"])
            if n == 1 and "tools" not in (d if isinstance(d, dict) else {}):
                start, end = s_sp.member[("tools",)]
                keys = list(s)
                k = keys.index("tools")
                if k > 0:  # take the comma before it
                    start = s_sp.value[(keys[k - 1],)][1]
                elif len(keys) > 1:
                    end = s_sp.member[(keys[1],)][0]
                edits.append((start, end, ""))
                del s["tools"]
            else:
                drop_element(s_sp, s, ("tools",), i, edits)
    bad, cuts = [], 0
    for path in tree_diff(d, s):
        in_transcript = bool(path) and path[0] in ("messages", "input", "contents")
        dv, sv = get(d, path), get(s, path)
        sv_text = sv if isinstance(sv, str) else json.dumps(sv)
        shorter = isinstance(dv, str) and isinstance(sv, str) and len(sv) < len(dv)
        if path in UNORDERED and canonical(dv) == canonical(sv):
            a, b = d_sp.value[path]
            start, end = s_sp.value[path]
            edits.append((start, end, d_text[a:b]))
        elif in_transcript and (MARK in sv_text or shorter):
            a, b = d_sp.value[path]
            start, end = s_sp.value[path]
            edits.append((start, end, d_text[a:b]))
            cuts += 1
        else:
            bad.append(f"{fmt_path(path)}: direct {json.dumps(dv)[:120]} / sluice {json.dumps(sv)[:120]}")
    if bad:
        return False, f"{len(bad)} difference(s) sluice was not meant to make, first: " + "; ".join(bad[:3]), cuts
    for start, end, rep in sorted(edits, reverse=True):
        s_text = s_text[:start] + rep + s_text[end:]
    if s_text == d_text:
        return True, "", cuts
    i = next((k for k, (a, b) in enumerate(zip(d_text, s_text)) if a != b), min(len(d_text), len(s_text)))
    return False, (f"same JSON but not the same bytes (re-serialised) at byte {i}: direct "
                   f"{d_text[max(0, i - 60):i + 60]!r} / sluice {s_text[max(0, i - 60):i + 60]!r}"), cuts


# ---------------------------------------------------------------- one agent


def size(r) -> int:
    return len((r.get("body") or "").encode())


def load(path: Path):
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []


def turns(records):
    return [r for r in records if r.get("dialect")]


def calls_in(body: dict) -> list[str]:
    """Names of every tool call and result in the body's transcript, any dialect."""
    text = json.dumps(body.get("messages") or body.get("input") or body.get("contents") or [])
    return re.findall(r'"name": "(\w+)"', text)


def read_text(p: Path, default="") -> str:
    return p.read_text().strip() if p.exists() else default


def access_lines(log: Path):
    out = []
    for line in (log.read_text(errors="replace").splitlines() if log.exists() else []):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if obj.get("target") != "sluice::access":
            continue
        fields = dict(obj.get("fields") or {})
        fields.update({k: v for k, v in obj.items() if k not in ("fields", "span", "spans")})
        out.append(fields)
    return out


def check_agent(run: Path, agent: str) -> dict:
    d_dir, s_dir = run / agent / "direct", run / agent / "sluice"
    d_all, s_all = load(d_dir / "requests.jsonl"), load(s_dir / "requests.jsonl")
    d_turns, s_turns = turns(d_all), turns(s_all)
    s_agent = [r for r in s_turns if not r.get("after_expand")]  # the agent's own requests
    s_cont = [r for r in s_turns if r.get("after_expand")]       # sluice's re-asks
    checks: dict[str, dict] = {}

    def put(name, ok, detail=""):
        checks[name] = {"status": "n/a" if ok is None else ("PASS" if ok else "FAIL"), "detail": detail}

    d_exit, s_exit = read_text(d_dir / "exit", "?"), read_text(s_dir / "exit", "?")
    d_settings = read_text(d_dir / "settings.py")
    put("direct_task_done", d_exit == "0" and "RETRIES = 3" in d_settings and "RETRIES = 0" not in d_settings,
        f"exit {d_exit}, settings.py {'has' if 'RETRIES = 3' in d_settings else 'lacks'} RETRIES = 3, "
        f"{len(d_turns)} model requests")
    put("same_exit", d_exit == s_exit, f"direct {d_exit}, through sluice {s_exit}")
    same_diff = read_text(d_dir / "diff.patch") == read_text(s_dir / "diff.patch")
    same_status = read_text(d_dir / "status.txt") == read_text(s_dir / "status.txt")
    put("same_changes", same_diff and same_status,
        "identical git diff and status" if same_diff and same_status else
        f"git diff {'same' if same_diff else 'differs'}, status {'same' if same_status else 'differs'} "
        f"(direct status {read_text(d_dir / 'status.txt')!r}, sluice {read_text(s_dir / 'status.txt')!r})")

    # Pair the agent's requests: same route and step, in order of arrival.
    def key(r):
        return (r["path"], r.get("agent"), r.get("step"))
    pool: dict = {}
    for r in d_turns:
        pool.setdefault(key(r), []).append(r)
    pairs, unpaired = [], []
    for r in s_agent:
        lst = pool.get(key(r))
        if lst:
            pairs.append((lst.pop(0), r))
        else:
            unpaired.append(r)

    long_output = any(LONG_OUTPUT_PROBE in (r.get("body") or "") for r in d_turns)
    marked = [r for r in s_turns if r.get("markers")]
    shorter = [(a, b) for a, b in pairs
               if len(normalise(b.get("body") or "")) < len(normalise(a.get("body") or ""))]
    if not long_output:
        put("sluice_compacted", None, "the task put no long output in this agent's transcript")
    elif agent == "aider":
        # aider runs no tool: the log `/run` showed it is a user message, which is the person's
        # own words to sluice and never cut (only tool outputs are).
        put("sluice_compacted", None, "aider has no tool outputs: its /run log is a user message, which sluice never cuts")
    else:
        put("sluice_compacted", bool(marked or shorter),
            f"{len(marked)} forwarded request(s) with a marker, {len(shorter)} shorter than the agent's"
            + ("" if marked or shorter else f"; sluice's access log: {summarise_access(s_dir)}; "
               f"component gates in /stats: {summarise_gates(s_dir)}"))

    marked_declared = [r for r in marked if EXPAND in (r.get("tools") or [])]
    marked_undeclared = [r for r in marked if EXPAND not in (r.get("tools") or [])]
    asked = [r for r in s_turns if r.get("kind") == "expand"]
    if not marked:
        put("expand_round", None, "no marker reached the model server")
    elif marked_undeclared:
        put("expand_round", False, f"{len(marked_undeclared)} request(s) carried a marker without declaring "
            f"{EXPAND} (seq {[r['seq'] for r in marked_undeclared][:5]})")
    else:
        ok = bool(asked) and len(s_cont) >= len(asked)
        put("expand_round", ok, f"{len(marked_declared)} marked request(s) declared the tool; the server asked "
            f"{len(asked)} expand(s) ({', '.join(r['expand_id'] for r in asked)}); sluice re-asked {len(s_cont)} time(s)")

    leaks = []
    for r in s_agent:
        body = json.loads(r.get("body") or "{}")
        if EXPAND in calls_in(body):
            leaks.append(r["seq"])
    printed = EXPAND in read_text(s_dir / "agent.out") + read_text(s_dir / "agent.err")
    same_count = len(s_agent) == len(d_turns)
    put("expand_hidden", not leaks and not printed and same_count,
        f"agent requests direct {len(d_turns)}, through sluice {len(s_agent)}"
        + (f"; agent requests carrying {EXPAND} calls: seq {leaks}" if leaks else "")
        + ("; the agent printed the expand tool" if printed else ""))

    diffs, cut_total, ok_n = [], 0, 0
    for a, b in pairs:
        same, why, cuts = compare_bodies(a.get("body") or "", b.get("body") or "")
        cut_total += cuts
        if same:
            ok_n += 1
        else:
            diffs.append(f"step {a.get('step')} ({a['path']}): {why}")
    if unpaired:
        diffs.append(f"{len(unpaired)} request(s) through sluice with no direct counterpart "
                     f"(steps {[r.get('step') for r in unpaired]})")
    if len(pairs) < len(d_turns):
        diffs.append(f"{len(d_turns) - len(pairs)} direct request(s) with no counterpart through sluice")
    put("requests_identical", not diffs and bool(pairs),
        f"{ok_n}/{len(pairs)} identical after normalisation ({cut_total} cut string(s) put back)"
        + ("; " + " | ".join(diffs[:3]) if diffs else ""))

    hdr_diffs = []
    for a, b in pairs:
        if a.get("query") != b.get("query"):
            hdr_diffs.append(f"step {a.get('step')}: query {a.get('query')!r} / {b.get('query')!r}")
        ha = [(k.lower(), normalise(v)) for k, v in a["headers"] if k.lower() not in SKIP_HEADERS]
        skip_b = SKIP_HEADERS | (SIGV4_HEADERS if b.get("sigv4") == "verified" else set())
        hb = [(k.lower(), normalise(v)) for k, v in b["headers"] if k.lower() not in skip_b]
        if sorted(ha) != sorted(hb):
            only_a = sorted(set(ha) - set(hb))
            only_b = sorted(set(hb) - set(ha))
            hdr_diffs.append(f"step {a.get('step')}: direct only {only_a[:3]}, sluice only {only_b[:3]}")
    put("headers_forwarded", not hdr_diffs and bool(pairs),
        f"{len(pairs) - len(hdr_diffs)}/{len(pairs)} with the same query and headers"
        + ("; " + " | ".join(hdr_diffs[:2]) if hdr_diffs else ""))

    bedrock = [r for r in s_all if r.get("bedrock")]
    refused = [r for r in s_all if r.get("kind") == "bad_sigv4"]
    if bedrock or refused:
        verified = sum(1 for r in bedrock if r.get("sigv4") == "verified")
        put("bedrock_signed", verified == len(bedrock) and not refused,
            f"{verified}/{len(bedrock)} Bedrock request(s) through sluice signed and verified"
            + (f"; {len(refused)} refused: {refused[0].get('why')}" if refused else ""))

    access = access_lines(s_dir / "sluice.log")
    stats = {}
    try:
        stats = json.loads(read_text(s_dir / "stats.json", "{}") or "{}")
    except ValueError:
        pass
    rewritten = [a for a in access if "bytes_in" in a]
    return {
        "version": read_text(run / f"{agent}.version", "unknown"),
        "checks": checks,
        "requests": {"direct": len(d_turns), "sluice_agent": len(s_agent), "sluice_upstream": len(s_turns),
                     "direct_all_routes": len(d_all), "sluice_all_routes": len(s_all)},
        "bytes": {"agent_sent_direct": sum(size(r) for r in d_turns),
                  "agent_sent_to_sluice": sum(int(a.get("bytes_in") or 0) for a in rewritten) or None,
                  "sluice_forwarded": sum(size(r) for r in s_agent),
                  "sluice_expand_reasks": sum(size(r) for r in s_cont)},
        "expand_rounds": {"model_server": len(asked), "sluice_stats": stats.get("expand_rounds")},
        "sluice_access": summarise_access(s_dir),
        "seconds": {"direct": read_text(d_dir / "seconds"), "sluice": read_text(s_dir / "seconds")},
    }


def summarise_gates(s_dir: Path) -> str:
    try:
        stats = json.loads(read_text(s_dir / "stats.json", "{}") or "{}")
    except ValueError:
        return "no /stats"
    parts = []
    for name, c in (stats.get("components") or {}).items():
        gates = ", ".join(f"{g}x{n}" for g, n in (c.get("gates") or {}).items())
        parts.append(f"{name} {c.get('verdict', '?')}" + (f" ({gates})" if gates else ""))
    return "; ".join(parts) or "none"


def summarise_access(s_dir: Path) -> str:
    counts: dict[str, int] = {}
    for a in access_lines(s_dir / "sluice.log"):
        if "bytes_in" not in a:
            continue
        label = f"{a.get('route')} {a.get('status')} acted={a.get('acted') or '-'}"
        if a.get("untouched"):
            label += f" untouched={a['untouched']}"
        counts[label] = counts.get(label, 0) + 1
    return "; ".join(f"{n}x {k}" for k, n in counts.items()) or "no access lines"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seconds", type=int, default=None)
    ap.add_argument("--results", type=Path, default=None, help="default OUT/results.json")
    ap.add_argument("agents", nargs="+")
    args = ap.parse_args()
    sluice_version = read_text(args.out / "sluice.version", "unknown")
    results = {"sluice": sluice_version, "agents": {}, "seconds": args.seconds}
    print(f"sluice: {sluice_version}")
    failed = 0
    for agent in args.agents:
        res = check_agent(args.out, agent)
        results["agents"][agent] = res
        print(f"\n== {agent} ({res['version']})")
        for name, c in res["checks"].items():
            failed += c["status"] == "FAIL"
            print(f"  {c['status']:<4} {name}: {c['detail']}")
        print(f"       sluice access log: {res['sluice_access']}")
    print()
    head = ("agent", "version", "requests direct / sluice+re-asks", "bytes agent sent",
            "bytes sluice forwarded (+re-asks)", "expand rounds", "checks")
    rows = []
    for agent, res in results["agents"].items():
        rq, by, ex = res["requests"], res["bytes"], res["expand_rounds"]
        sent = by["agent_sent_to_sluice"] or by["agent_sent_direct"]
        c = res["checks"].values()
        rows.append((agent, res["version"], f"{rq['direct']} / {rq['sluice_agent']}+{rq['sluice_upstream'] - rq['sluice_agent']}",
                     str(sent), f"{by['sluice_forwarded']} (+{by['sluice_expand_reasks']})",
                     str(ex["model_server"]) + ("" if ex["sluice_stats"] in (None, ex["model_server"])
                                                else f" (sluice /stats: {ex['sluice_stats']})"),
                     f"{sum(x['status'] == 'PASS' for x in c)} pass, {sum(x['status'] == 'FAIL' for x in c)} fail"))
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)))
    results["failed_checks"] = failed
    path = args.results or args.out / "results.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\n{failed} check(s) failed; results in {path}" + (f"; {args.seconds}s in all" if args.seconds else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
