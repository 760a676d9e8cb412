"""A provider stand-in for the install check: answers every Anthropic Messages request with a
short reply (usage fields as Anthropic sends them) and appends each request body it received to
the file named on the command line, one JSON line each. Prints `listening on URL` when ready."""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RECORD = sys.argv[1]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        with open(RECORD, "a") as f:
            f.write(json.dumps({"path": self.path, "body": body.decode()}) + "\n")
        reply = json.dumps({
            "id": "msg_install_check", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 1200, "output_tokens": 3, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0},
        }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
