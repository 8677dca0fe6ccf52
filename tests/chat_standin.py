"""A local HTTP server that speaks the OpenAI chat-completions protocol: the only stand-in the tests use.

No LLM runs here, so the tests answer with a `responder(messages) -> str` they
choose. Everything else is the real wire protocol: POST /v1/chat/completions,
a JSON body back when `stream` is false, Server-Sent Events (`data: {chunk}`
lines, then `data: [DONE]`) when it is true. Each request is recorded, so a test
can assert what was (or was not) sent; `fail_next` makes the next requests fail
with a status code, to exercise retries.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Responder = Callable[[list[dict]], str]


class ChatStandIn:
    def __init__(self, responder: Responder | None = None, *, api_key: str = "", chunk_words: int = 2):
        self.responder = responder or (lambda messages: "")
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.api_key = api_key
        self.chunk_words = chunk_words
        self._failures: list[int] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> ChatStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail_next(self, *statuses: int) -> None:
        with self._lock:
            self._failures.extend(statuses)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.headers.clear()
            self._failures.clear()

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def handle_one_request(self):
                try:
                    super().handle_one_request()
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (a timeout test); nothing to answer

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with standin._lock:
                    standin.requests.append(body)
                    standin.headers.append(dict(self.headers))
                    failure = standin._failures.pop(0) if standin._failures else None
                if self.path != "/v1/chat/completions":
                    return self._json(404, {"error": {"message": f"no route {self.path}"}})
                if standin.api_key and self.headers.get("Authorization") != f"Bearer {standin.api_key}":
                    return self._json(401, {"error": {"message": "invalid api key"}})
                if failure:
                    return self._json(failure, {"error": {"message": f"simulated failure {failure}"}})
                text = standin.responder(body["messages"])
                if body.get("stream"):
                    return self._stream(body["model"], text)
                return self._json(200, {
                    "id": "chatcmpl-standin", "object": "chat.completion", "created": int(time.time()),
                    "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                })

            def _json(self, status: int, payload: dict):
                send_json(self, status, payload)

            def _stream(self, model: str, text: str):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                words = text.split(" ")
                pieces = [" ".join(words[i:i + standin.chunk_words]) + " "
                          for i in range(0, len(words), standin.chunk_words)]
                if pieces:
                    pieces[-1] = pieces[-1].rstrip(" ")
                deltas = [{"role": "assistant", "content": ""}, *({"content": p} for p in pieces)]
                for delta in deltas:
                    self._chunk(model, delta, None)
                self._chunk(model, {}, "stop")
                self._write(b"data: [DONE]\n\n")
                self._write(b"")

            def _chunk(self, model: str, delta: dict, finish: str | None):
                event = {"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": int(time.time()),
                         "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                self._write(f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode())

            def _write(self, data: bytes):
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        return Handler


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: dict) -> None:
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def cite_source_containing(*needles: str, sentence: str) -> Responder:
    """A responder that writes `sentence` citing the number of the first source containing a needle.

    `sentence` has a `{n}` placeholder; with no matching source it answers with the
    system prompt's refusal line, as the prompt instructs a model to.
    """

    def respond(messages: list[dict]) -> str:
        user = messages[-1]["content"]
        blocks = user.split("\n[")
        for block in blocks[1:]:
            number, _, rest = block.partition("]")
            if number.isdigit() and any(needle in rest for needle in needles):
                return sentence.format(n=number)
        system = messages[0]["content"]
        return system.split("reply with exactly: ", 1)[1].split("\n", 1)[0].strip()

    return respond
