"""A small OpenAI-compatible chat-completions server for tests and benchmarks.

Real HTTP on 127.0.0.1 (port 0). It plays back a script of replies (completions, malformed
JSON, 429 with Retry-After, 500s, hangs), or asks a `responder` function when the script is
empty, with an optional latency; it records every request it receives::

    with ScriptedLLMServer() as server:
        server.enqueue(Reply(status=429, headers={"Retry-After": "0"}), Reply(content={"a": 1}))
        client = LLMClient(base_url=server.base_url, model="test")
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer. `content` may be a dict (sent as JSON text) or raw text."""

    content: str | dict[str, Any] | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    hang: bool = False
    body: str | None = None  # raw body, overrides the completion envelope
    prompt_tokens: int = 11
    completion_tokens: int = 7


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    json: Any

    @property
    def task(self) -> str:
        """The `Task: name` line of the system prompt, or "" (to tell prompts apart)."""
        for message in (self.json or {}).get("messages", []):
            for line in str(message.get("content", "")).splitlines():
                if line.startswith("Task: "):
                    return line.removeprefix("Task: ").strip()
        return ""


Responder = Callable[[RecordedRequest], "Reply | dict[str, Any] | str"]


def _as_reply(value: Reply | dict[str, Any] | str) -> Reply:
    return value if isinstance(value, Reply) else Reply(content=value)


class ScriptedLLMServer:
    def __init__(self, *, latency: float = 0.0, responder: Responder | None = None) -> None:
        self.latency = latency
        self.responder = responder
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- script ---------------------------------------------------------------------------

    def enqueue(self, *replies: Reply | dict[str, Any] | str) -> None:
        with self._lock:
            self._script.extend(_as_reply(r) for r in replies)

    def tasks(self) -> list[str]:
        with self._lock:
            return [r.task for r in self.requests]

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._script:
                return self._script.popleft()
        if self.responder is not None:
            return _as_reply(self.responder(request))
        return Reply(content={})

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> ScriptedLLMServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    payload = json.loads(raw)
                except ValueError:
                    payload = None
                request = RecordedRequest(self.path, dict(self.headers.items()), payload)
                if not self.path.endswith("/chat/completions"):
                    self._send(404, '{"error": "not found"}', {})
                    return
                reply = server._next_reply(request)
                server._enter()
                try:
                    if reply.hang:
                        server._stopping.wait(60)
                        return
                    time.sleep(server.latency + reply.delay)
                finally:
                    server._leave()
                if reply.body is not None:
                    body = reply.body
                elif reply.status == 200:
                    content = reply.content
                    if isinstance(content, dict):
                        content = json.dumps(content)
                    body = json.dumps(
                        {
                            "id": "chatcmpl-test",
                            "object": "chat.completion",
                            "model": (payload or {}).get("model", ""),
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": content},
                                    "finish_reason": "stop",
                                }
                            ],
                            "usage": {
                                "prompt_tokens": reply.prompt_tokens,
                                "completion_tokens": reply.completion_tokens,
                                "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                            },
                        }
                    )
                else:
                    body = json.dumps({"error": {"message": f"scripted {reply.status}"}})
                self._send(reply.status, body, reply.headers)

            def _send(self, status: int, body: str, headers: dict[str, str]) -> None:
                data = body.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout); nothing to do

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def by_task(replies: dict[str, Reply | dict[str, Any] | str]) -> Responder:
    """A responder answering each prompt (`Task: name` line) with its own reply."""

    def respond(request: RecordedRequest) -> Reply | dict[str, Any] | str:
        try:
            return replies[request.task]
        except KeyError:
            return Reply(status=400, body=json.dumps({"error": f"no reply for {request.task!r}"}))

    return respond
