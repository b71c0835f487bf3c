#!/usr/bin/python3
"""A mock OpenAI-compatible server for `servesim bench`'s tests (standard library only).

POST /v1/completions and /v1/chat/completions stream server-sent events over
chunked HTTP/1.1: the first chunk --first-delay s after the request arrived,
then each --gap s after the previous one was sent, each carrying
--chunk-tokens tokens of text, the last with finish_reason "length"; then (with stream_options.include_usage) a usage
chunk with prompt_tokens and completion_tokens, then "data: [DONE]".
prompt_tokens is len(prompt) for token ids; for chat, the words of the
messages plus CHAT_TEMPLATE_TOKENS (a stand-in for a chat template).
Marked requests, chosen by max_tokens so a test knows which they are:
  --bad-max-tokens N:  HTTP 400 with an OpenAI-style error body
  --drop-max-tokens N: half of the chunks, then the connection is dropped
GET /v1/models lists --model. Streamed answers say "Connection: close" unless
--keep-alive; --idle-close S closes a kept-alive connection idle S seconds;
--drop-reused closes one, unanswered, when its second request arrives. Every request is logged as one JSON line in
--log (its body, the outcome, and times on the monotonic clock: start when it
arrived, released just before the last write that lets the client finish --
so a client's next request always starts after it -- and end).
The chosen port is written to --port-file once the server listens.
"""

import argparse
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHAT_TEMPLATE_TOKENS = 7


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # many clients connect at once


def make_handler(args, log_lock, log_file):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # --idle-close: a kept-alive connection idle this long is closed (as uvicorn does after 5 s).
        timeout = args.idle_close or None

        def log_message(self, fmt, *a):  # quiet
            pass

        def log_request_line(self, entry):
            with log_lock:
                log_file.write(json.dumps(entry) + "\n")
                log_file.flush()

        def send_json(self, status, obj):
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [{"id": args.model, "object": "model"}]})
            else:
                self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

        def chunk(self, payload):
            data = payload.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def do_POST(self):
            t0 = time.monotonic()
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            entry = {"path": self.path, "body": body, "start": t0, "client_port": self.client_address[1]}
            chat = self.path == "/v1/chat/completions"
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                entry["outcome"] = "404"
                self.send_json(404, {"error": {"message": f"no route {self.path}"}})
                entry["end"] = time.monotonic()
                self.log_request_line(entry)
                return
            self.served = getattr(self, "served", 0) + 1  # requests on this connection
            if args.drop_reused and self.served > 1:
                entry["outcome"] = "dropped reused"
                entry["end"] = entry["released"] = time.monotonic()
                self.log_request_line(entry)
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            max_tokens = int(body.get("max_tokens") or 16)
            if max_tokens == args.bad_max_tokens:
                entry["outcome"] = "400"
                entry["released"] = time.monotonic()
                self.send_json(400, {"error": {"message": f"mock: max_tokens {max_tokens} is marked bad",
                                               "type": "invalid_request_error", "code": 400}})
                entry["end"] = time.monotonic()
                self.log_request_line(entry)
                return
            if chat:
                words = sum(len(m.get("content", "").split()) for m in body.get("messages", []))
                prompt_tokens = words + CHAT_TEMPLATE_TOKENS
            else:
                prompt = body.get("prompt")
                prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            if not args.keep_alive:
                self.send_header("Connection", "close")
            self.end_headers()
            n_chunks = (max_tokens + args.chunk_tokens - 1) // args.chunk_tokens
            drop_at = n_chunks // 2 if max_tokens == args.drop_max_tokens else None
            sent_tokens = 0
            entry["chunk_times"] = []
            try:
                due = t0 + args.first_delay
                for i in range(n_chunks):
                    time.sleep(max(0.0, due - time.monotonic()))
                    # Each gap counts from the chunk actually sent: a late chunk never bunches the next ones.
                    due = max(due, time.monotonic()) + args.gap
                    if drop_at is not None and i == drop_at:
                        entry["outcome"] = "dropped"
                        entry["released"] = time.monotonic()
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        break
                    k = min(args.chunk_tokens, max_tokens - sent_tokens)
                    sent_tokens += k
                    text = "tok " * k
                    last = i == n_chunks - 1
                    if chat:
                        choice = {"index": 0, "delta": {"content": text}, "finish_reason": "length" if last else None}
                        obj = {"id": "m", "object": "chat.completion.chunk", "choices": [choice], "usage": None}
                    else:
                        choice = {"index": 0, "text": text, "finish_reason": "length" if last else None}
                        obj = {"id": "m", "object": "text_completion", "choices": [choice], "usage": None}
                    entry["chunk_times"].append(time.monotonic())
                    self.chunk("data: " + json.dumps(obj) + "\n\n")
                else:
                    if (body.get("stream_options") or {}).get("include_usage") and not args.no_usage:
                        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": sent_tokens,
                                 "total_tokens": prompt_tokens + sent_tokens}
                        self.chunk("data: " + json.dumps({"id": "m", "choices": [], "usage": usage}) + "\n\n")
                    entry["released"] = time.monotonic()
                    self.chunk("data: [DONE]\n\n")
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    entry["outcome"] = "ok"
            except (BrokenPipeError, ConnectionResetError):
                entry["outcome"] = "client gone"
            if not args.keep_alive or entry.get("outcome") != "ok":
                self.close_connection = True
            entry["end"] = time.monotonic()
            self.log_request_line(entry)

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--model", default="mock-model")
    ap.add_argument("--first-delay", type=float, default=0.05)
    ap.add_argument("--gap", type=float, default=0.01)
    ap.add_argument("--chunk-tokens", type=int, default=1)
    ap.add_argument("--bad-max-tokens", type=int, default=-1)
    ap.add_argument("--drop-max-tokens", type=int, default=-1)
    ap.add_argument("--no-usage", action="store_true", help="never send the usage chunk")
    ap.add_argument("--keep-alive", action="store_true",
                    help="keep connections open after a streamed answer (default: Connection: close)")
    ap.add_argument("--idle-close", type=float, default=0, help="close a connection idle this many seconds")
    ap.add_argument("--drop-reused", action="store_true",
                    help="close a kept-alive connection, unanswered, when a second request comes on it")
    args = ap.parse_args()
    log_file = open(args.log, "a")
    server = Server(("127.0.0.1", 0), make_handler(args, threading.Lock(), log_file))
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
