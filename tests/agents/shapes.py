#!/usr/bin/env python3
"""Prints the request shapes each agent sent in a run of tests/agents/run.sh (docs/agents.md is
written from this): routes, headers of note, body key order, roles and block types, tools,
cache_control positions, and the other fields that matter to a proxy.

Usage: python3 tests/agents/shapes.py RUN_DIR [AGENT ...]   (reads RUN_DIR/AGENT/direct)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

NOTE_HEADERS = ("anthropic-beta", "anthropic-version", "x-app", "user-agent", "originator", "openai-beta",
                "x-stainless-helper-method", "version", "session-id", "x-codex-beta-features",
                "x-openai-internal-codex-responses-lite", "accept", "accept-encoding", "content-type")
CRED = ("authorization", "x-api-key", "api-key")


def cache_paths(obj, path=""):
    out = []
    if isinstance(obj, dict):
        if "cache_control" in obj:
            out.append(f"{path or '(body)'} {json.dumps(obj['cache_control'])}")
        for k, v in obj.items():
            if k != "cache_control":
                out += cache_paths(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += cache_paths(v, f"{path}[{i}]")
    return out


def transcript_shape(body: dict) -> list[str]:
    items = body.get("messages") if "messages" in body else body.get("input")
    if isinstance(items, str):
        return ["input: string"]
    out = []
    for m in items or []:
        role = m.get("role")
        kind = m.get("type")
        c = m.get("content")
        if isinstance(c, list):
            blocks = ",".join(b.get("type", "?") for b in c if isinstance(b, dict))
        elif isinstance(c, str):
            blocks = "string"
        else:
            blocks = "-"
        extra = sorted(set(m) - {"role", "content", "type"})
        label = f"{kind or ''}{'/' if kind and role else ''}{role or ''}[{blocks}]"
        if m.get("tool_calls"):
            label += f"+tool_calls({','.join(tc['function']['name'] for tc in m['tool_calls'])})"
        if kind in ("function_call", "custom_tool_call"):
            label = f"{kind}({m.get('name')})"
        if kind in ("function_call_output", "custom_tool_call_output"):
            o = m.get("output")
            label = f"{kind}[{'string' if isinstance(o, str) else ','.join(p.get('type', '?') for p in o)}]"
        if kind == "additional_tools":
            label = f"additional_tools/{role}({len(m.get('tools') or [])} namespaces)"
        if extra and kind not in ("function_call", "custom_tool_call", "function_call_output",
                                  "custom_tool_call_output", "additional_tools"):
            label += "{" + ",".join(extra) + "}"
        out.append(label)
    return out


def main() -> int:
    run = Path(sys.argv[1])
    agents = sys.argv[2:] or ["claude", "codex", "codex-gpt5", "mini", "aider"]
    for agent in agents:
        path = run / agent / "direct" / "requests.jsonl"
        if not path.exists():
            continue
        recs = [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
        print(f"\n===== {agent}: {len(recs)} requests")
        for r in recs:
            print(f"  #{r['seq']} {r['method']} {r['path']}{'?' + r['query'] if r['query'] else ''} "
                  f"kind={r.get('kind')} step={r.get('step')} stream={r.get('stream')} bytes={len((r.get('body') or '').encode())}")
        turns = [r for r in recs if r.get("dialect")]
        if not turns:
            continue
        first, last = turns[0], turns[-1]
        hdrs = first["headers"]
        print("  header order:", [k for k, _ in hdrs])
        for k, v in hdrs:
            if k.lower() in NOTE_HEADERS or k.lower().startswith("x-") and k.lower() not in CRED:
                print(f"    {k}: {v[:300]}")
        print("  credential header:", [k for k, _ in hdrs if k.lower() in CRED])
        for label, r in (("first", first), ("last", last)):
            b = json.loads(r["body"])
            print(f"  [{label} request] keys:", list(b))
            for k, v in b.items():
                if k in ("messages", "input", "tools", "system", "instructions"):
                    continue
                print(f"    {k}: {json.dumps(v)[:400]}")
            sysv = b.get("system")
            if isinstance(sysv, list):
                print("    system blocks:", [(x.get("type"), len(x.get("text", "")), "cache_control" in x) for x in sysv])
            elif sysv is not None:
                print("    system: string", len(sysv))
            if "instructions" in b:
                print("    instructions: chars", len(b["instructions"] or ""))
            print("    transcript:", transcript_shape(b))
            tools = b.get("tools") or []
            names = [t.get("name") or (t.get("function") or {}).get("name") for t in tools]
            print(f"    tools ({len(tools)}):", names, "types:", sorted({t.get("type", "-") for t in tools}))
            print("    cache_control:", cache_paths(b) or "none")
        sides = [r for r in recs if r.get("kind") not in ("task", "expand")]
        for r in sides:
            if r.get("body"):
                b = json.loads(r["body"])
                print(f"  side #{r['seq']} {r['path']} model={b.get('model')} keys={list(b)} "
                      f"tools={len(b.get('tools') or [])} transcript={transcript_shape(b)[:6]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
