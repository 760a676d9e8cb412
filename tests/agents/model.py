#!/usr/bin/env python3
"""A scripted model server for tests/agents: plays one deterministic coding task.

Speaks Anthropic Messages (POST /v1/messages, also ?beta=true, streamed or not, plus
count_tokens; as Claude on Vertex AI, :rawPredict and :streamRawPredict; and as Claude on
Bedrock, /model/M/invoke and /model/M/invoke-with-response-stream, the stream in AWS's binary
event-stream framing), OpenAI Responses
(POST /v1/responses) and chat completions
(POST /v1/chat/completions), each streamed or not, Gemini (POST /v1beta/models/M:generateContent
and :streamGenerateContent?alt=sse, plus :countTokens), and GET /v1/models.

Gemini replies sign the first function call of each turn with a `thoughtSignature`, as Gemini 3
does, and a request that brings back a signature this server never issued, or a signed call
without its signature, is refused with 400 as Gemini 3 refuses it.

The task, in a scratch repository made from tests/agents/template: (a) run `python3 gen.py`
(about 3000 lines of log), (b) read settings.py, (c) change `RETRIES = 0` to `RETRIES = 3`,
(d) answer with a one-line summary. The next step is chosen from the request alone: the number
of tool results (observations) in the transcript whose call was not the expand tool. aider
cannot run commands: its one turn answers with a SEARCH/REPLACE edit of the file it was given.

The expand tool: a request that declares `context_guru_expand` and whose transcript carries a
`<<cg:HEX>>` marker not yet asked for (a process-wide set) is answered with one call of that
tool, `{"id": "HEX"}`, in the dialect's shape, instead of the next step.

Every request is appended to --record as one JSON line: method, path, query, headers (credential
headers redacted), the raw body (utf-8 or base64), and what the server made of it (agent, kind
task|expand|side, step, markers seen, expand id asked).

Bedrock requests may come unsigned (Claude Code with CLAUDE_CODE_SKIP_BEDROCK_AUTH, directly);
a signed one must verify against the credentials in MODEL_SIGV4 (`KEY:SECRET:TOKEN:REGION`)
by AWS's own Python signer (botocore, from tests/agents/requirements.txt), or it is refused
with 403 as AWS refuses it. The record says which (`sigv4`: verified or absent).

Usage: python3 model.py --record requests.jsonl [--port 0]   (prints `listening on URL`)
Python 3.11; botocore only for Bedrock signatures.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import socket
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

EXPAND = "context_guru_expand"
MARKER = re.compile(r"<<cg:([0-9a-fA-F]+)>>")
REDACT = {"authorization", "x-api-key", "api-key", "x-goog-api-key"}
CREATED = 1767225600  # 2026-01-01T00:00:00Z: fixed, so replies are the same on every run

FILE = "settings.py"
OLD = "RETRIES = 0"
NEW = "RETRIES = 3"
FINAL = "Done: gen.py warned that RETRIES = 0 disables retries, so settings.py now sets RETRIES = 3."
AIDER_FINAL = "Set RETRIES = 3, so a failed batch is retried instead of dropped."  # names no file: aider
MINI_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

ASKED: set[str] = set()
SIGNED: set[str] = set()  # Gemini thoughtSignatures issued
LOCK = threading.Lock()
RECORD_LOCK = threading.Lock()
RECORD_PATH = None
SEQ = [0]


# ---------------------------------------------------------------- Bedrock


def eventstream_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message: prelude (total and headers length, CRC-32), string
    headers, payload, CRC-32 of everything before it."""
    head = b"".join(bytes([len(k)]) + k.encode() + b"\x07" + len(v.encode()).to_bytes(2, "big") + v.encode()
                    for k, v in headers.items())
    total = 12 + len(head) + len(payload) + 4
    prelude = total.to_bytes(4, "big") + len(head).to_bytes(4, "big")
    prelude += zlib.crc32(prelude).to_bytes(4, "big")
    message = prelude + head + payload
    return message + zlib.crc32(message).to_bytes(4, "big")


def verify_sigv4(method: str, path: str, headers, body: bytes) -> str:
    """`absent`, `verified`, or why the signature is refused (see the module's doc)."""
    auth = headers.get("authorization")
    if not auth:
        return "absent"
    key, secret, token, region = (os.environ.get("MODEL_SIGV4") or ":::").split(":", 3)
    m = re.fullmatch(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                     r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})", auth)
    if not m:
        return "malformed authorization"
    if (m.group(1), m.group(3), m.group(4)) != (key, region, "bedrock"):
        return f"wrong scope {m.group(1)}/{m.group(3)}/{m.group(4)}"
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    signed = m.group(5).split(";")
    request = AWSRequest(method=method, url=f"http://{headers.get('host')}{path}", data=body,
                         headers={h: headers.get(h, "") for h in signed})
    request.context["timestamp"] = headers.get("x-amz-date", "")
    signer = SigV4Auth(Credentials(key, secret, token or None), "bedrock", region)
    canonical = signer.canonical_request(request)
    computed = signer.signature(signer.string_to_sign(request, canonical), request)
    return "verified" if computed == m.group(6) else "signature mismatch"


# ---------------------------------------------------------------- transcripts


def _text(content) -> str:
    """All text inside a content value of any dialect (string, blocks, nested results)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(c) for c in content)
    if isinstance(content, dict):
        parts = []
        for key in ("text", "content", "output", "input", "arguments"):
            if key in content:
                parts.append(_text(content[key]))
        return "\n".join(p for p in parts if p)
    return ""


def transcript(dialect: str, body: dict) -> list[tuple]:
    """The request's conversation as ("msg", role, text) / ("call", id, name, args) /
    ("result", id, text) events, in order."""
    ev: list[tuple] = []
    if dialect == "anthropic":
        for m in body.get("messages") or []:
            role = m.get("role")
            content = m.get("content")
            if isinstance(content, str):
                ev.append(("msg", role, content))
                continue
            for b in content or []:
                t = b.get("type")
                if t == "tool_use":
                    ev.append(("call", b.get("id"), b.get("name"), json.dumps(b.get("input"))))
                elif t == "tool_result":
                    ev.append(("result", b.get("tool_use_id"), _text(b.get("content"))))
                elif t == "text":
                    ev.append(("msg", role, b.get("text", "")))
    elif dialect == "responses":
        items = body.get("input")
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        for it in items or []:
            t = it.get("type", "message")
            if t == "message":
                ev.append(("msg", it.get("role"), _text(it.get("content"))))
            elif t in ("function_call", "custom_tool_call", "local_shell_call"):
                args = it.get("arguments", it.get("input", json.dumps(it.get("action"))))
                ev.append(("call", it.get("call_id"), it.get("name", t), args))
            elif t in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
                ev.append(("result", it.get("call_id"), _text(it.get("output"))))
    elif dialect == "gemini":
        seen_calls: dict[str, int] = {}
        seen_results: dict[str, int] = {}
        for c in body.get("contents") or []:
            role = "assistant" if c.get("role") == "model" else "user"
            for p in c.get("parts") or []:
                if "functionCall" in p:
                    f = p["functionCall"]
                    name = f.get("name")
                    n = seen_calls[name] = seen_calls.get(name, 0) + 1
                    ev.append(("call", f"{name}#{n}", name, json.dumps(f.get("args"))))
                elif "functionResponse" in p:
                    f = p["functionResponse"]
                    name = f.get("name")
                    n = seen_results[name] = seen_results.get(name, 0) + 1
                    # gemini-cli answers an id-less call with an id of its own: pair by name.
                    ev.append(("result", f"{name}#{n}", _text(f.get("response"))))
                elif "text" in p and not p.get("thought"):
                    ev.append(("msg", role, p.get("text", "")))
    else:  # chat completions
        for m in body.get("messages") or []:
            role = m.get("role")
            if role == "tool":
                ev.append(("result", m.get("tool_call_id"), _text(m.get("content"))))
                continue
            text = _text(m.get("content"))
            if text:
                ev.append(("msg", role, text))
            for tc in m.get("tool_calls") or []:
                f = tc.get("function") or {}
                ev.append(("call", tc.get("id"), f.get("name"), f.get("arguments", "")))
    return ev


def declared_tools(dialect: str, body: dict) -> list[dict]:
    """The request's tool definitions: `tools`, and for Responses also the tools that Codex's
    default model gets in `additional_tools` input items (namespaces flattened)."""
    tools = list(body.get("tools") or [])
    if dialect == "gemini":
        return [d for t in tools for d in (t.get("functionDeclarations") or [])]
    if dialect == "responses" and isinstance(body.get("input"), list):
        for it in body["input"]:
            if isinstance(it, dict) and it.get("type") == "additional_tools":
                tools += it.get("tools") or []
    flat = []
    while tools:
        t = tools.pop(0)
        if t.get("type") == "namespace":
            tools[:0] = t.get("tools") or []
        else:
            flat.append(t)
    return flat


def tool_names(dialect: str, body: dict) -> list[str]:
    names = []
    for t in declared_tools(dialect, body):
        if dialect == "chat":
            names.append((t.get("function") or {}).get("name") or t.get("name"))
        else:
            names.append(t.get("name") or (t.get("function") or {}).get("name") or t.get("type"))
    return [n for n in names if n]


def system_text(dialect: str, body: dict) -> str:
    if dialect == "anthropic":
        parts = [_text(body.get("system"))]
        parts += [_text(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "system"]
        return "\n".join(parts)
    if dialect == "responses":
        return _text(body.get("instructions"))
    if dialect == "gemini":
        return _text((body.get("systemInstruction") or {}).get("parts"))
    return "\n".join(_text(m.get("content")) for m in body.get("messages") or []
                     if m.get("role") in ("system", "developer"))


def detect_agent(dialect: str, names: list[str], body: dict) -> str:
    if dialect == "anthropic":
        return "claude" if "Bash" in names else "side"
    if dialect == "responses":
        return "codex" if names else "side"
    if dialect == "gemini":
        return "gemini" if "run_shell_command" in names else "side"
    if "bash" in names:
        return "mini"
    if "SEARCH/REPLACE" in system_text(dialect, body) or "SEARCH/REPLACE" in json.dumps(body.get("messages")):
        return "aider"
    return "side"


def working_dir(dialect: str, body: dict, events) -> str:
    """The agent's working directory, from its system prompt or environment context."""
    blob = system_text(dialect, body) + "\n" + "\n".join(e[2] for e in events if e[0] == "msg")
    for pat in (r"Primary working directory:\s*(\S+)", r"Working directory:\s*(\S+)",
                r"Workspace Directories:\*\*\s*-\s*(\S+)",
                r"<cwd>([^<]+)</cwd>", r"current working directory[^/]*(/\S+)"):
        m = re.search(pat, blob)
        if m:
            return m.group(1).rstrip(".,`'\"")
    return "."


# ---------------------------------------------------------------- the script

# Each action: ("call", tool_name, input[, text said before it]), ("custom", tool_name, freeform
# input) for a Responses custom tool, or ("text", final answer).


def codex_shell_call(names: list[str], command: str):
    if "exec" in names and "exec_command" not in names:  # code mode: JavaScript calling nested tools
        return ("custom", "exec", f"const r = await tools.exec_command({{cmd: {json.dumps(command)}}});\n"
                                  "text(r.output);\n")
    if "exec_command" in names:
        return ("call", "exec_command", {"cmd": command, "yield_time_ms": 10000})
    if "shell_command" in names:
        return ("call", "shell_command", {"command": command, "timeout_ms": 60000})
    return ("call", "shell", {"command": ["bash", "-lc", command], "timeout_ms": 60000})


def codex_patch(names: list[str], tools: list[dict]):
    patch = (f"*** Begin Patch\n*** Update File: {FILE}\n@@\n-{OLD}\n+{NEW}\n*** End Patch\n")
    kinds = {t.get("name"): t.get("type") for t in tools}
    if "exec" in names and "apply_patch" not in names:  # code mode
        return ("custom", "exec", f"text(await tools.apply_patch({json.dumps(patch)}));\n")
    if kinds.get("apply_patch") == "custom":
        return ("custom", "apply_patch", patch)
    if "apply_patch" in names:
        return ("call", "apply_patch", {"input": patch})
    return codex_shell_call(names, f"apply_patch <<'EOF'\n{patch}EOF")


def next_action(agent: str, step: int, names: list[str], body: dict, dialect: str, events):
    if agent == "claude":
        cwd = working_dir(dialect, body, events)
        path = f"{cwd.rstrip('/')}/{FILE}"
        return [
            ("call", "Bash", {"command": "python3 gen.py", "description": "Run the log generator"},
             "I'll run the generator first."),
            ("call", "Read", {"file_path": path}, "The log warns about RETRIES; let me read the settings."),
            ("call", "Edit", {"file_path": path, "old_string": OLD, "new_string": NEW},
             "RETRIES is 0; setting it to 3."),
            ("text", FINAL),
        ][min(step, 3)]
    if agent == "codex":
        tools = declared_tools(dialect, body)
        acts = [codex_shell_call(names, "python3 gen.py"),
                codex_shell_call(names, f"cat {FILE}"),
                codex_patch(names, tools),
                ("text", FINAL)]
        return acts[min(step, 3)]
    if agent == "mini":
        return [
            ("call", "bash", {"command": "python3 gen.py"}, "THOUGHT: Run the generator to see its log."),
            ("call", "bash", {"command": f"cat {FILE}"}, "THOUGHT: The log warns about RETRIES; read the settings."),
            ("call", "bash", {"command": f"sed -i 's/^{OLD}$/{NEW}/' {FILE}"}, "THOUGHT: Set RETRIES to 3."),
            ("call", "bash", {"command": MINI_SUBMIT}, FINAL),
        ][min(step, 3)]
    if agent == "gemini":
        cwd = working_dir(dialect, body, events)
        path = f"{cwd.rstrip('/')}/{FILE}"
        tools = {t.get("name"): t for t in declared_tools(dialect, body)}

        def path_args(tool: str, **extra):
            """The file argument under the name this gemini-cli version declares."""
            schema = tools.get(tool) or {}
            props = (schema.get("parametersJsonSchema") or schema.get("parameters") or {}).get("properties") or {}
            key = next((k for k in ("file_path", "absolute_path", "path") if k in props), "file_path")
            return {key: path, **extra}

        return [
            ("call", "run_shell_command", {"command": "python3 gen.py", "description": "Run the log generator"},
             "I'll run the generator first."),
            ("call", "read_file", path_args("read_file")),
            ("call", "replace", path_args("replace", old_string=OLD, new_string=NEW,
                                          instruction="Set RETRIES to 3 so failed batches are retried.")),
            ("text", FINAL),
        ][min(step, 3)]
    if agent == "aider":
        if step == 0:
            return ("text", f"RETRIES must be at least 1.\n\n{FILE}\n```python\n<<<<<<< SEARCH\n{OLD}\n"
                            f"=======\n{NEW}\n>>>>>>> REPLACE\n```\n\n{AIDER_FINAL}")
        return ("text", AIDER_FINAL)
    return ("text", "Scripted session")


# ---------------------------------------------------------------- ids and usage


def _b62(seed: str, n: int) -> str:
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    x = int.from_bytes(hashlib.sha256(seed.encode()).digest(), "big")
    out = []
    for _ in range(n):
        x, r = divmod(x, 62)
        out.append(alphabet[r])
    return "".join(out)


def _hex(seed: str, n: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:n]


def usage_numbers(raw: bytes, cache_breakpoints: int) -> tuple[int, int, int]:
    """(uncached input, cache read, cache write) tokens: a plausible split of len/4."""
    total = max(1, len(raw) // 4)
    if cache_breakpoints == 0:
        return total, 0, 0
    read = total * 3 // 5
    write = total // 5
    return total - read - write, read, write


def count_breakpoints(obj) -> int:
    if isinstance(obj, dict):
        return (1 if "cache_control" in obj else 0) + sum(count_breakpoints(v) for v in obj.values())
    if isinstance(obj, list):
        return sum(count_breakpoints(v) for v in obj)
    return 0


# ---------------------------------------------------------------- the server


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "scripted-model/1"
    eventstream = False  # this request's stream is Bedrock's event-stream, not SSE

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):  # quiet
        pass

    # --- plumbing

    def _body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def _record(self, raw: bytes, info: dict):
        url = urlsplit(self.path)
        headers = [[k, "<redacted>" if k.lower() in REDACT else v] for k, v in self.headers.items()]
        try:
            body = {"body": raw.decode("utf-8")}
        except UnicodeDecodeError:
            body = {"body_b64": base64.b64encode(raw).decode()}
        with RECORD_LOCK:
            SEQ[0] += 1
            rec = {"seq": SEQ[0], "method": self.command, "path": url.path, "query": url.query,
                   "headers": headers, **body, **info}
            if RECORD_PATH:
                with open(RECORD_PATH, "a", encoding="utf-8") as f:
                    f.write(json.dumps(rec) + "\n")

    def _json(self, status: int, obj, extra_headers=()):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in extra_headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _sse_start(self, extra_headers=()):
        self.send_response(200)
        self.send_header("content-type", "application/vnd.amazon.eventstream" if self.eventstream
                         else "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        for k, v in extra_headers:
            self.send_header(k, v)
        self.end_headers()

    def _chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _sse_end(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _event(self, name: str | None, obj):
        payload = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
        if self.eventstream:  # Bedrock: each event a `chunk` frame, base64 inside JSON
            chunk = {"bytes": base64.b64encode(payload.encode()).decode(), "p": "abcdefgh"[: len(payload) % 8 + 1]}
            return self._chunk(eventstream_frame({":event-type": "chunk", ":content-type": "application/json",
                                                  ":message-type": "event"}, json.dumps(chunk).encode()))
        head = f"event: {name}\n" if name else ""
        self._chunk(f"{head}data: {payload}\n\n".encode())

    # --- routes

    def do_HEAD(self):
        self._record(b"", {"kind": "probe"})
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self):
        path = urlsplit(self.path).path
        if path == "/inference-profiles":  # Claude Code on Bedrock lists them at start-up
            sigv4 = verify_sigv4("GET", urlsplit(self.path).path + ("?" + urlsplit(self.path).query if urlsplit(self.path).query else ""), self.headers, b"")
            if sigv4 not in ("verified", "absent"):
                self._record(b"", {"kind": "bad_sigv4", "why": sigv4})
                return self._json(403, {"message": f"The request signature we calculated does not match: {sigv4}"})
            self._record(b"", {"kind": "probe", "sigv4": sigv4, "bedrock": True})
            return self._json(404, {"message": "no inference profiles here"})
        self._record(b"", {"kind": "probe"})
        if path.rstrip("/").endswith("/models"):
            if self.headers.get("anthropic-version"):
                data = [{"type": "model", "id": "claude-sonnet-4-5", "display_name": "Scripted",
                         "created_at": "2026-01-01T00:00:00Z"}]
                return self._json(200, {"data": data, "has_more": False, "first_id": data[0]["id"],
                                        "last_id": data[0]["id"]})
            return self._json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": CREATED, "owned_by": "sluice-tests"}
                for m in ("scripted", "gpt-5-codex", "gpt-4o")]})
        if path in ("/", ""):
            return self._json(200, {"ok": True})
        return self._json(404, {"error": {"type": "not_found_error", "message": f"no route {path}"}})

    def do_POST(self):
        self.eventstream = False  # a kept-alive connection serves the next request here
        path = urlsplit(self.path).path
        raw = self._body()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            self._record(raw, {"kind": "bad_json"})
            return self._json(400, {"error": {"type": "invalid_request_error", "message": "body is not JSON"}})
        if path.endswith("/v1/messages/count_tokens") or path.endswith("/count-tokens:rawPredict"):
            self._record(raw, {"kind": "count_tokens"})
            return self._json(200, {"input_tokens": max(1, len(raw) // 4)})
        if path.endswith("/v1/messages"):
            return self._turn("anthropic", raw, body)
        bedrock = re.fullmatch(r"/model/([^/]+)/(invoke|invoke-with-response-stream)", path)
        if bedrock:  # Claude on Bedrock
            sigv4 = verify_sigv4("POST", urlsplit(self.path).path, self.headers, raw)
            if sigv4 not in ("verified", "absent"):
                self._record(raw, {"kind": "bad_sigv4", "why": sigv4})
                return self._json(403, {"message": f"The request signature we calculated does not match: {sigv4}"})
            if body.get("anthropic_version") != "bedrock-2023-05-31" or "model" in body or "stream" in body:
                self._record(raw, {"kind": "bad_bedrock_body"})
                return self._json(400, {"message": "anthropic_version must be bedrock-2023-05-31, no model, no stream"})
            body["model"] = bedrock.group(1)
            body["stream"] = bedrock.group(2) == "invoke-with-response-stream"
            self.eventstream = body["stream"]
            return self._turn("anthropic", raw, body, {"sigv4": sigv4, "bedrock": True})
        if path.endswith(":rawPredict") or path.endswith(":streamRawPredict"):  # Claude on Vertex AI
            if body.get("anthropic_version") != "vertex-2023-10-16" or "model" in body:
                self._record(raw, {"kind": "bad_vertex_body"})
                return self._json(400, {"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                                  "message": "anthropic_version must be vertex-2023-10-16, no model"}})
            body["model"] = path.rsplit("/", 1)[-1].split(":")[0]
            return self._turn("anthropic", raw, body)
        if path.endswith("/v1/responses"):
            return self._turn("responses", raw, body)
        if path.endswith("/v1/chat/completions") or path.endswith("/chat/completions"):
            return self._turn("chat", raw, body)
        if path.endswith(":countTokens"):
            self._record(raw, {"kind": "count_tokens"})
            return self._json(200, {"totalTokens": max(1, len(raw) // 4)})
        if path.endswith(":generateContent") or path.endswith(":streamGenerateContent"):
            refused = check_signatures(body)
            if refused:
                self._record(raw, {"kind": "bad_signature", "why": refused})
                return self._json(400, {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": refused}})
            body["stream"] = path.endswith(":streamGenerateContent")
            body.setdefault("model", path.rsplit("/", 1)[-1].split(":")[0])
            return self._turn("gemini", raw, body)
        self._record(raw, {"kind": "unknown"})
        return self._json(404, {"error": {"type": "not_found_error", "message": f"no route {path}"}})

    # --- one model turn

    def _turn(self, dialect: str, raw: bytes, body: dict, extra: dict | None = None):
        names = tool_names(dialect, body)
        events = transcript(dialect, body)
        agent = detect_agent(dialect, names, body)
        call_names = {e[1]: e[2] for e in events if e[0] == "call"}
        results = [e for e in events if e[0] == "result"]
        step = sum(1 for r in results if call_names.get(r[1]) != EXPAND)
        last_is_expand = bool(events) and events[-1][0] == "result" and call_names.get(events[-1][1]) == EXPAND
        markers = []
        for e in events:
            for m in MARKER.finditer(" ".join(str(x) for x in e[1:])):
                if m.group(1) not in markers:
                    markers.append(m.group(1))
        expand_id = None
        if agent != "side" and EXPAND in names and not last_is_expand:
            with LOCK:
                for h in markers:
                    if h not in ASKED:
                        ASKED.add(h)
                        expand_id = h
                        break
        if agent == "side":
            action, kind = ("text", side_answer(dialect, body)), "side"
        elif expand_id:
            action, kind = ("call", EXPAND, {"id": expand_id}, None), "expand"
        else:
            action, kind = next_action(agent, step, names, body, dialect, events), "task"
        info = {"agent": agent, "kind": kind, "step": step, "dialect": dialect, "tools": names,
                "markers": markers, "expand_id": expand_id, "after_expand": last_is_expand,
                "stream": bool(body.get("stream")), "action": action[:3] if action[0] != "text" else ["text"],
                **(extra or {})}
        self._record(raw, info)
        seed = f"{agent}|{kind}|{step}|{expand_id}|{dialect}"
        # Gemini caches a repeated prefix without being asked (its implicit cache).
        usage = usage_numbers(raw, count_breakpoints(body) + (dialect == "gemini"))
        model = body.get("model") or "scripted"
        if dialect == "anthropic":
            return self._anthropic(body, action, seed, usage, model)
        if dialect == "responses":
            return self._responses(body, action, seed, usage, model)
        if dialect == "gemini":
            return self._gemini(body, action, seed, usage, model)
        return self._chat(body, action, seed, usage, model)

    # --- Anthropic Messages

    def _anthropic(self, body, action, seed, usage, model):
        uncached, read, write = usage
        blocks = []
        if action[0] == "text":
            blocks.append({"type": "text", "text": action[1]})
            stop = "end_turn"
        else:
            if len(action) > 3 and action[3]:
                blocks.append({"type": "text", "text": action[3]})
            blocks.append({"type": "tool_use", "id": "toolu_01" + _b62(seed + "tool", 22),
                           "name": action[1], "input": action[2]})
            stop = "tool_use"
        out_tokens = max(1, len(json.dumps(blocks)) // 4)
        msg_id = "msg_01" + _b62(seed + "msg", 22)
        full_usage = {"input_tokens": uncached, "cache_creation_input_tokens": write,
                      "cache_read_input_tokens": read,
                      "cache_creation": {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": 0},
                      "output_tokens": out_tokens, "service_tier": "standard"}
        headers = [("request-id", "req_01" + _b62(seed + "req", 22)), ("anthropic-organization-id", "scripted")]
        if not body.get("stream"):
            return self._json(200, {"id": msg_id, "type": "message", "role": "assistant", "model": model,
                                    "content": blocks, "stop_reason": stop, "stop_sequence": None,
                                    "usage": full_usage}, headers)
        self._sse_start(headers)
        start_usage = dict(full_usage, output_tokens=1)
        self._event("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": start_usage}})
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                self._event("content_block_start", {"type": "content_block_start", "index": i,
                                                    "content_block": {"type": "text", "text": ""}})
                if i == 0:
                    self._event("ping", {"type": "ping"})
                for piece in _pieces(b["text"], 24):
                    self._event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                        "delta": {"type": "text_delta", "text": piece}})
            else:
                self._event("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                    "type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
                self._event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                    "delta": {"type": "input_json_delta", "partial_json": ""}})
                for piece in _pieces(json.dumps(b["input"]), 16):
                    self._event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                        "delta": {"type": "input_json_delta", "partial_json": piece}})
            self._event("content_block_stop", {"type": "content_block_stop", "index": i})
        self._event("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"input_tokens": uncached, "cache_creation_input_tokens": write,
                                                "cache_read_input_tokens": read, "output_tokens": out_tokens}})
        self._event("message_stop", {"type": "message_stop"})
        self._sse_end()

    # --- OpenAI Responses

    def _responses(self, body, action, seed, usage, model):
        uncached, read, write = usage
        resp_id = "resp_" + _hex(seed + "resp", 48)
        items = []
        if action[0] == "text":
            items.append({"id": "msg_" + _hex(seed + "msg", 48), "type": "message", "status": "completed",
                          "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": action[1]}],
                          "role": "assistant"})
        elif action[0] == "custom":
            items.append({"id": "ctc_" + _hex(seed + "item", 48), "type": "custom_tool_call", "status": "completed",
                          "call_id": "call_" + _b62(seed + "call", 24), "input": action[2], "name": action[1]})
        else:
            items.append({"id": "fc_" + _hex(seed + "item", 48), "type": "function_call", "status": "completed",
                          "arguments": json.dumps(action[2]), "call_id": "call_" + _b62(seed + "call", 24),
                          "name": action[1]})
        out_tokens = max(1, len(json.dumps(items)) // 4)
        total_in = uncached + read + write
        usage_obj = {"input_tokens": total_in, "input_tokens_details": {"cached_tokens": read},
                     "output_tokens": out_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                     "total_tokens": total_in + out_tokens}
        base = {"id": resp_id, "object": "response", "created_at": CREATED, "status": "in_progress",
                "background": False, "error": None, "incomplete_details": None,
                "instructions": body.get("instructions"), "max_output_tokens": None, "model": model,
                "output": [], "parallel_tool_calls": body.get("parallel_tool_calls", True),
                "previous_response_id": body.get("previous_response_id"),
                "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
                "store": body.get("store", True), "temperature": 1.0, "text": {"format": {"type": "text"}},
                "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
                "top_p": 1.0, "truncation": "disabled", "usage": None, "user": None, "metadata": {}}
        done = dict(base, status="completed", output=items, usage=usage_obj, completed_at=CREATED)
        if not body.get("stream"):
            return self._json(200, done)
        self._sse_start([("x-request-id", "req_" + _hex(seed + "req", 32))])
        n = [0]

        def ev(obj):
            obj = dict(obj, sequence_number=n[0])
            n[0] += 1
            self._event(obj["type"], obj)

        ev({"type": "response.created", "response": base})
        ev({"type": "response.in_progress", "response": base})
        for idx, item in enumerate(items):
            if item["type"] == "message":
                ev({"type": "response.output_item.added", "output_index": idx,
                    "item": dict(item, status="in_progress", content=[])})
                part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
                ev({"type": "response.content_part.added", "item_id": item["id"], "output_index": idx,
                    "content_index": 0, "part": part})
                text = item["content"][0]["text"]
                for piece in _pieces(text, 24):
                    ev({"type": "response.output_text.delta", "item_id": item["id"], "output_index": idx,
                        "content_index": 0, "delta": piece, "logprobs": []})
                ev({"type": "response.output_text.done", "item_id": item["id"], "output_index": idx,
                    "content_index": 0, "text": text, "logprobs": []})
                ev({"type": "response.content_part.done", "item_id": item["id"], "output_index": idx,
                    "content_index": 0, "part": dict(part, text=text)})
            elif item["type"] == "custom_tool_call":
                ev({"type": "response.output_item.added", "output_index": idx,
                    "item": dict(item, status="in_progress", input="")})
                for piece in _pieces(item["input"], 24):
                    ev({"type": "response.custom_tool_call_input.delta", "item_id": item["id"],
                        "output_index": idx, "delta": piece})
                ev({"type": "response.custom_tool_call_input.done", "item_id": item["id"],
                    "output_index": idx, "input": item["input"]})
            else:
                ev({"type": "response.output_item.added", "output_index": idx,
                    "item": dict(item, status="in_progress", arguments="")})
                for piece in _pieces(item["arguments"], 16):
                    ev({"type": "response.function_call_arguments.delta", "item_id": item["id"],
                        "output_index": idx, "delta": piece})
                ev({"type": "response.function_call_arguments.done", "item_id": item["id"],
                    "output_index": idx, "arguments": item["arguments"]})
            ev({"type": "response.output_item.done", "output_index": idx, "item": item})
        ev({"type": "response.completed", "response": done})
        self._sse_end()

    # --- Gemini generateContent

    def _gemini(self, body, action, seed, usage, model):
        uncached, read, write = usage
        parts = []
        if action[0] == "text":
            parts.append({"text": action[1]})
        else:
            if len(action) > 3 and action[3]:
                parts.append({"text": action[3]})
            signature = base64.b64encode(hashlib.sha256((seed + "sig").encode()).digest() * 3).decode()
            with LOCK:
                SIGNED.add(signature)
            parts.append({"functionCall": {"name": action[1], "args": action[2]}, "thoughtSignature": signature})
        out_tokens = max(1, len(json.dumps(parts)) // 4)
        prompt = uncached + read + write
        usage_obj = {"promptTokenCount": prompt, "candidatesTokenCount": out_tokens,
                     "totalTokenCount": prompt + out_tokens,
                     "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}
        if read:
            usage_obj["cachedContentTokenCount"] = read
        response_id = _b62(seed + "resp", 22)
        if not body.get("stream"):
            return self._json(200, {"candidates": [{"content": {"parts": parts, "role": "model"},
                                                    "finishReason": "STOP", "index": 0}],
                                     "usageMetadata": usage_obj, "modelVersion": model, "responseId": response_id})
        self._sse_start()
        # Text streams a few words per chunk; a call arrives whole in the last one.
        chunks = [[{"text": piece}] for p in parts if "text" in p for piece in _pieces(p["text"], 24)]
        calls = [p for p in parts if "functionCall" in p]
        if calls:
            chunks.append(calls)
        for i, chunk_parts in enumerate(chunks):
            last = i == len(chunks) - 1
            candidate = {"content": {"parts": chunk_parts, "role": "model"}, "index": 0}
            if last:
                candidate["finishReason"] = "STOP"
            partial = dict(usage_obj, candidatesTokenCount=out_tokens if last else i + 1,
                           totalTokenCount=prompt + (out_tokens if last else i + 1))
            obj = {"candidates": [candidate], "usageMetadata": partial, "modelVersion": model,
                   "responseId": response_id}
            self._chunk(("data: " + json.dumps(obj, separators=(",", ":")) + "\r\n\r\n").encode())
        self._sse_end()

    # --- chat completions

    def _chat(self, body, action, seed, usage, model):
        uncached, read, write = usage
        chat_id = "chatcmpl-" + _b62(seed + "chat", 29)
        message = {"role": "assistant", "content": None}
        if action[0] == "text":
            message["content"] = action[1]
            finish = "stop"
        else:
            message["content"] = action[3] if len(action) > 3 else None
            message["tool_calls"] = [{"id": "call_" + _b62(seed + "call", 24), "type": "function",
                                      "function": {"name": action[1], "arguments": json.dumps(action[2])}}]
            finish = "tool_calls"
        out_tokens = max(1, len(json.dumps(message)) // 4)
        prompt = uncached + read + write
        usage_obj = {"prompt_tokens": prompt, "completion_tokens": out_tokens, "total_tokens": prompt + out_tokens,
                     "prompt_tokens_details": {"cached_tokens": read, "audio_tokens": 0},
                     "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                   "accepted_prediction_tokens": 0,
                                                   "rejected_prediction_tokens": 0}}
        if not body.get("stream"):
            return self._json(200, {"id": chat_id, "object": "chat.completion", "created": CREATED, "model": model,
                                    "choices": [{"index": 0, "message": dict(message, refusal=None, annotations=[]),
                                                 "logprobs": None, "finish_reason": finish}],
                                    "usage": usage_obj, "service_tier": "default", "system_fingerprint": "fp_scripted"})
        self._sse_start()

        def chunk(delta, finish_reason=None, **extra):
            obj = {"id": chat_id, "object": "chat.completion.chunk", "created": CREATED, "model": model,
                   "service_tier": "default", "system_fingerprint": "fp_scripted",
                   "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
            obj.update(extra)
            self._event(None, obj)

        chunk({"role": "assistant", "content": "", "refusal": None})
        for piece in _pieces(message["content"] or "", 24):
            chunk({"content": piece})
        for i, tc in enumerate(message.get("tool_calls") or []):
            chunk({"tool_calls": [{"index": i, "id": tc["id"], "type": "function",
                                   "function": {"name": tc["function"]["name"], "arguments": ""}}]})
            for piece in _pieces(tc["function"]["arguments"], 16):
                chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
        chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event(None, {"id": chat_id, "object": "chat.completion.chunk", "created": CREATED, "model": model,
                               "service_tier": "default", "system_fingerprint": "fp_scripted", "choices": [],
                               "usage": usage_obj})
        self._event(None, "[DONE]")
        self._sse_end()


def check_signatures(body: dict) -> str | None:
    """Why Gemini 3 would refuse this request's signatures, if it would: a `thoughtSignature`
    it never issued (changed or moved), or a model turn whose first call lost its signature."""
    for i, c in enumerate(body.get("contents") or []):
        if c.get("role") != "model":
            continue
        calls = [p for p in c.get("parts") or [] if "functionCall" in p]
        for p in c.get("parts") or []:
            sig = p.get("thoughtSignature")
            if sig is not None and sig not in SIGNED:
                return f"contents[{i}]: thoughtSignature is not valid"
        if calls and "thoughtSignature" not in calls[0]:
            return f"contents[{i}]: function call is missing a thought_signature"
    return None


def _pieces(s: str, n: int):
    return [s[i:i + n] for i in range(0, len(s), n)] or [""]


def side_answer(dialect: str, body: dict) -> str:
    """A short answer to an agent's side request (titles, topics, summaries)."""
    transcript_of = body.get("messages") or body.get("input") or body.get("contents") or ""
    blob = system_text(dialect, body) + json.dumps(transcript_of)[:4000]
    if "complexity_score" in blob:  # gemini-cli's model router
        return '{"complexity_reasoning": "Single file, specific edit.", "complexity_score": 30}'
    if "isNewTopic" in blob:
        return '{"isNewTopic": false, "title": null}'
    if re.search(r"\btitle\b", blob, re.I) and "json" in blob.lower():
        return '{"title": "Fix retries setting"}'
    return "Fix retries setting"


def main():
    global RECORD_PATH
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--record", required=True, help="append one JSON line per request here")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    RECORD_PATH = args.record
    open(RECORD_PATH, "a").close()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    print(f"listening on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
