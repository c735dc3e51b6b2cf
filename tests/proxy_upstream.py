"""A scripted OpenAI-compatible upstream for the proxy's tests and benchmark.

Real HTTP on 127.0.0.1 (port 0), threaded. Each `POST /v1/chat/completions` takes the next
scripted `Completion` (or the `default`): a JSON completion, or with `stream: true` an SSE
stream of `chat.completion.chunk`s, one token at a time with `token_delay` between them,
tool calls, usage when `stream_options.include_usage`, and `[DONE]`; or an error status,
or a hang. A hostile upstream is scripted with `frames` (the SSE frames sent instead),
`body` (the raw answer or error body), `content_type` and `echo_credentials` (an error
body that repeats the Authorization header it received). It records the requests and
notices a client that goes away (`disconnected`). `GET /v1/models` lists one model, or
answers `models` when that is set.
"""

from __future__ import annotations

import json
import re
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = re.compile(r"\s*\S+|\s+")


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


@dataclass
class Completion:
    content: str = ""
    tool_calls: list[dict[str, str]] = field(default_factory=list)  # {id, name, arguments}
    status: int = 200
    error: str | None = None  # raw error body (with status >= 400)
    headers: dict[str, str] = field(default_factory=dict)
    token_delay: float = 0.0
    first_delay: float = 0.0  # before the first byte (status line) of the answer
    pause_after: int | None = None  # stream this many tokens, then wait `pause` seconds
    pause: float = 0.0
    completion_id: str = "chatcmpl-test"
    model: str = "upstream-model"
    frames: Callable[[], Iterable[bytes]] | None = None  # the stream's frames, as they are
    body: bytes | None = None  # the answer's (or error's) body, as it is
    content_type: str = "application/json"
    echo_credentials: bool = False  # the error body repeats the Authorization header


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    json: Any


class UpstreamServer:
    def __init__(self, default: Completion | None = None) -> None:
        self.default = default or Completion(content="Hello.")
        self.script: deque[Completion] = deque()
        self.requests: list[Recorded] = []
        self.disconnected = threading.Event()
        self.sent: list[bytes] = []  # every streamed answer's bytes, in order of completion
        self.lock = threading.Lock()
        self.models: Completion | None = None  # what GET /v1/models answers instead
        self._httpd: ThreadingHTTPServer | None = None

    def enqueue(self, *completions: Completion) -> None:
        with self.lock:
            self.script.extend(completions)

    def _next(self) -> Completion:
        with self.lock:
            return self.script.popleft() if self.script else self.default

    @property
    def base_url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> UpstreamServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models" and server.models is not None:
                    self._scripted(server.models)
                elif self.path.rstrip("/") == "/v1/models":
                    self._json(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": "upstream-model",
                                    "object": "model",
                                    "created": 0,
                                    "owned_by": "test",
                                }
                            ],
                        },
                    )
                else:
                    self._json(404, {"error": {"message": "not found", "type": "not_found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                with server.lock:
                    server.requests.append(Recorded(self.path, dict(self.headers), body))
                reply = server._next()
                if reply.first_delay and self._wait(reply.first_delay):
                    return
                if reply.status >= 400 or (reply.body is not None and not body.get("stream")):
                    self._scripted(reply)
                elif body.get("stream"):
                    self._stream(reply, body)
                else:
                    self._json(200, completion(reply))

            def _scripted(self, reply: Completion) -> None:
                """An error (or a raw body) as scripted."""
                raw = (
                    reply.body
                    or (
                        reply.error
                        or json.dumps(
                            {
                                "error": {
                                    "message": f"scripted {reply.status}",
                                    "type": "scripted",
                                    "param": None,
                                    "code": None,
                                }
                            }
                        )
                    ).encode()
                )
                if reply.echo_credentials:
                    raw = json.dumps(
                        {
                            "error": {
                                "message": f"invalid key: {self.headers.get('Authorization')}",
                                "headers": dict(self.headers),
                            }
                        }
                    ).encode()
                self._send(reply.status, raw, reply.content_type, reply.headers)

            def _wait(self, seconds: float) -> bool:
                """Sleep; True when the client closed the connection meanwhile."""
                deadline = time.monotonic() + seconds
                while (left := deadline - time.monotonic()) > 0:
                    readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
                    if readable and not self.connection.recv(1, 2):  # MSG_PEEK
                        server.disconnected.set()
                        return True
                return False

            def _send(
                self, status: int, raw: bytes, kind: str, headers: dict[str, str] | None = None
            ) -> None:
                headers = headers or {}
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(raw)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(raw)

            def _json(self, status: int, data: Any) -> None:
                self._send(status, json.dumps(data).encode(), "application/json")

            def _stream(self, reply: Completion, body: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                sent = []
                try:
                    frames = reply.frames() if reply.frames else stream_frames(reply, body)
                    for i, frame in enumerate(frames):
                        if i > 1 and reply.token_delay and self._wait(reply.token_delay):
                            return
                        if (
                            reply.pause_after is not None
                            and i == reply.pause_after + 1
                            and self._wait(reply.pause)
                        ):
                            return
                        self.wfile.write(frame)
                        self.wfile.flush()
                        if not reply.frames:
                            sent.append(frame)
                except (BrokenPipeError, ConnectionResetError):
                    server.disconnected.set()
                    return
                with server.lock:
                    server.sent.append(b"".join(sent))

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._httpd is not None
        self._httpd.shutdown()
        self._httpd.server_close()


def completion(reply: Completion) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in reply.tool_calls
        ]
    return {
        "id": reply.completion_id,
        "object": "chat.completion",
        "created": 1700000000,
        "model": reply.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 11,
            "completion_tokens": len(tokens(reply.content)),
            "total_tokens": 11 + len(tokens(reply.content)),
        },
    }


def stream_frames(reply: Completion, body: dict[str, Any]) -> list[bytes]:
    """Every SSE frame of a streamed answer, in order."""
    base = {
        "id": reply.completion_id,
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": reply.model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = {
            **base,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    frames = [chunk({"role": "assistant", "content": ""})]
    frames += [chunk({"content": tok}) for tok in tokens(reply.content)]
    for i, call in enumerate(reply.tool_calls):
        frames.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        args = call["arguments"]
        for start in range(0, len(args), 7):
            frames.append(
                chunk(
                    {
                        "tool_calls": [
                            {"index": i, "function": {"arguments": args[start : start + 7]}}
                        ]
                    }
                )
            )
    frames.append(chunk({}, "tool_calls" if reply.tool_calls else "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        n = len(tokens(reply.content))
        frames.append(
            b"data: "
            + json.dumps(
                {
                    **base,
                    "choices": [],
                    "usage": {"prompt_tokens": 11, "completion_tokens": n, "total_tokens": 11 + n},
                }
            ).encode()
            + b"\n\n"
        )
    frames.append(b"data: [DONE]\n\n")
    return frames
