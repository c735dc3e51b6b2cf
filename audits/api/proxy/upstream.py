"""The upstream model server of the proxy: one guarded httpx request per call.

The URL comes from the `proxy` configuration section, never from the request; it passes
the link checker's SSRF guard (resolved once, the connection pinned to the checked address)
unless the operator set AUDITOR_PROXY_ALLOW_PRIVATE. The key comes from the environment
variable the section names, when the operator allows that name.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from django.conf import settings

from analyzers.engine.linkcheck import BlockedURL, LinkChecker
from analyzers.proxy_config import ProxyConfig, key_env_problem

# Connection pools live per event loop (httpx clients are bound to the loop that made them).
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)


def _client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = httpx.AsyncClient(
            trust_env=False,
            follow_redirects=False,
            limits=httpx.Limits(max_connections=500, max_keepalive_connections=100),
        )
    return client


class ProxyFailure(Exception):
    """An answer in OpenAI's error shape: `status`, the JSON body, extra headers."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "auditor_proxy_error",
        code: str | None = None,
        body: bytes | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ):
        self.status = status
        self.body = body if body is not None else error_body(message, type_, code)
        self.headers = headers or []
        super().__init__(message)


@contextmanager
def upstream_errors(timed_out: str, broke: str, broke_code: str | None = None) -> Iterator[None]:
    """httpx's errors as the proxy's answers: a timeout is a 504, any other a 502."""
    try:
        yield
    except httpx.TimeoutException:
        raise ProxyFailure(
            504, timed_out, type_="upstream_timeout", code="upstream_timeout"
        ) from None
    except httpx.HTTPError as exc:
        raise ProxyFailure(
            502, f"{broke}: {exc.__class__.__name__}", type_="upstream_error", code=broke_code
        ) from None


def error_body(message: str, type_: str = "auditor_proxy_error", code: str | None = None) -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": type_, "param": None, "code": code}}
    ).encode()


def upstream_error(status: int, headers: httpx.Headers) -> ProxyFailure:
    """Our own answer to an upstream error: none of its text (it may echo the credentials
    it received, or be an HTML page), a 4xx kept, a 5xx (or anything odd) a 502."""
    if 400 <= status < 500:
        failure = ProxyFailure(
            status,
            f"the upstream refused the request ({status})",
            type_="upstream_error",
            code=f"upstream_{status}",
        )
    else:
        failure = ProxyFailure(
            502, f"the upstream failed ({status})", type_="upstream_error", code="upstream_error"
        )
    retry = headers.get("retry-after", "")
    if retry.isdigit() and len(retry) <= 6:
        failure.headers.append((b"retry-after", retry.encode()))
    return failure


async def timed_chunks(response: httpx.Response, deadline: float | None) -> AsyncIterator[bytes]:
    """The body's chunks as they arrive, up to `deadline` (loop time): past it, a 504."""
    loop = asyncio.get_running_loop()
    chunks = response.aiter_raw()
    while True:
        left = None if deadline is None else deadline - loop.time()
        try:
            if left is not None and left <= 0:
                raise TimeoutError
            async with asyncio.timeout(left):
                chunk = await anext(chunks)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise ProxyFailure(
                504,
                f"the answer went over its time limit ({settings.AUDITOR_STREAM_MAX_S} s)",
                type_="upstream_timeout",
                code="stream_time_limit",
            ) from None
        yield chunk


class Upstream:
    def __init__(self, config: ProxyConfig):
        if not config.base_url:
            raise ProxyFailure(
                503, "the proxy has no upstream: set proxy.base_url in the configuration"
            )
        if problem := key_env_problem(config.api_key_env):
            raise ProxyFailure(503, f"proxy.api_key_env: {problem}")
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self.timeout = httpx.Timeout(config.timeout_s)

    async def _target(self, path: str) -> tuple[httpx.URL, dict[str, str], dict[str, Any]]:
        guard = LinkChecker(allow_private_networks=settings.AUDITOR_PROXY_ALLOW_PRIVATE)
        try:
            pinned, host_header, server_name = await guard.pin(self.base_url + path)
        except BlockedURL as exc:
            raise ProxyFailure(502, f"the upstream URL is refused: {exc}") from None
        headers = {"Host": host_header, "Accept-Encoding": "identity"}
        if key := self.config.api_key():
            headers["Authorization"] = f"Bearer {key}"
        extensions = {"sni_hostname": server_name} if pinned.scheme == "https" else {}
        return pinned, headers, extensions

    async def send(
        self, method: str, path: str, body: bytes | None = None, accept: str = "application/json"
    ) -> httpx.Response:
        """The upstream response, its body not read yet (the caller closes it)."""
        url, headers, extensions = await self._target(path)
        headers["Accept"] = accept
        if body is not None:
            headers["Content-Type"] = "application/json"
        client = _client()
        request = client.build_request(
            method,
            url,
            content=body,
            headers=headers,
            extensions={**extensions, "timeout": self.timeout.as_dict()},
        )
        with upstream_errors(
            f"the upstream did not answer within {self.config.timeout_s:g} s",
            "the upstream cannot be reached",
            "upstream_unreachable",
        ):
            return await client.send(request, stream=True)


async def read_capped(response: httpx.Response, cap: int, deadline: float | None = None) -> bytes:
    """The whole body, at most `cap` bytes (ProxyFailure 502 beyond), by `deadline`."""
    parts, size = [], 0
    try:
        with upstream_errors("the upstream stopped answering", "the upstream answer broke off"):
            async for chunk in timed_chunks(response, deadline):
                size += len(chunk)
                if size > cap:
                    raise ProxyFailure(502, f"the upstream answer is over {cap} bytes")
                parts.append(chunk)
    finally:
        await response.aclose()
    return b"".join(parts)
