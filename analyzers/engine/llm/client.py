"""An async client for OpenAI-compatible chat completions (OpenAI, vLLM, Ollama, llama.cpp...).

It does four things on top of a plain POST: a concurrency limit shared by every caller,
retries with backoff and jitter on 429/5xx/timeouts (honouring Retry-After), JSON output
validated with pydantic with one repair round, and usage/latency accounting.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from ..config import LLMConfig
from ..linkcheck import BlockedURL
from .prompts import load_prompt
from .usage import Usage

T = TypeVar("T")

Message = dict[str, str]


class LLMError(Exception):
    """A model call failed for good: retries exhausted, HTTP error, or unusable output."""


class LLMNotConfigured(LLMError):
    """No model is configured (llm.base_url / llm.model unset)."""


class LLMInvalidOutput(LLMError):
    """The model's reply was not the JSON asked for, even after one repair round."""


@dataclass(frozen=True)
class Completion:
    content: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float


@dataclass
class _LoopState:
    http: httpx.AsyncClient
    semaphore: asyncio.Semaphore


# Checks one request's URL and returns (pinned URL, Host header, TLS server name), or raises
# BlockedURL: the link checker's SSRF guard (`ModelAccessPolicy.pin`).
URLGuard = Callable[[str], Awaitable[tuple[httpx.URL, str, str]]]

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date); None if absent."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a model reply, tolerating ```json fences and chatter around it."""
    text = text.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        start, end = text.find("{"), text.rfind("}")
        if start == -1 or end <= start:
            raise
        value = json.loads(text[start : end + 1])
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class LLMClient:
    """One model endpoint. Safe to share between audits and event loops.

    httpx clients and semaphores belong to an event loop, so each loop gets its own;
    the concurrency limit applies per loop (in practice: per worker).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_concurrency: int = 4,
        max_retries: int = 3,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        max_retry_after_s: float = 30.0,
        json_mode: bool = True,
        temperature: float = 0.0,
        transport: httpx.AsyncBaseTransport | None = None,
        url_guard: URLGuard | None = None,
    ) -> None:
        base = base_url.rstrip("/")
        self.endpoint = base if base.endswith("/chat/completions") else base + "/chat/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.max_retry_after_s = max_retry_after_s
        self.json_mode = json_mode
        self.temperature = temperature
        self._api_key = api_key
        self._transport = transport
        self._url_guard = url_guard
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:  # never shows the key
        return f"<LLMClient {self.model!r} at {self.endpoint!r}>"

    @classmethod
    def from_config(
        cls,
        llm: LLMConfig,
        environ: Mapping[str, str] | None = None,
        *,
        policy: Any = None,
    ) -> LLMClient:
        """A client for `llm`; the API key is read from the env var the config names.

        With a `ModelAccessPolicy`, a key variable it does not allow raises LLMError (the
        key is never read) and every request goes through its SSRF guard.
        """
        if not (llm.base_url and llm.model):
            raise LLMNotConfigured("no model is configured (set llm.base_url and llm.model)")
        if policy is not None:
            problem = policy.key_env_problem(llm.api_key_env)
            if problem:
                raise LLMError(f"llm.api_key_env: {problem}")
        env = os.environ if environ is None else environ
        return cls(
            url_guard=policy.pin if policy is not None else None,
            base_url=llm.base_url,
            model=llm.model,
            api_key=env.get(llm.api_key_env) or None,
            timeout_s=llm.timeout_s,
            max_concurrency=llm.max_concurrency,
            max_retries=llm.max_retries,
            backoff_base_s=llm.backoff_base_s,
            json_mode=llm.json_mode,
            temperature=llm.temperature,
        )

    def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            headers = {"Accept": "application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            http = httpx.AsyncClient(
                headers=headers,
                timeout=httpx.Timeout(self.timeout_s),
                transport=self._transport,
                # A guarded client connects only where the guard pinned it: no env proxies.
                trust_env=self._url_guard is None,
            )
            state = _LoopState(http, asyncio.Semaphore(self.max_concurrency))
            self._loops[loop] = state
        return state

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop."""
        state = self._loops.pop(asyncio.get_running_loop(), None)
        if state is not None:
            await state.http.aclose()

    def backoff_delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds before retry number `attempt + 1`: Retry-After if given, else equal jitter."""
        if retry_after is not None:
            return retry_after + random.uniform(0, min(0.1 * retry_after, 1.0))
        delay = min(self.backoff_max_s, self.backoff_base_s * 2**attempt)
        return delay / 2 + random.uniform(0, delay / 2)

    async def chat(
        self,
        messages: list[Message],
        *,
        usage: Usage | None = None,
        json_mode: bool | None = None,
    ) -> Completion:
        """One chat completion, retried on 429/5xx/timeouts/connection errors."""
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
        }
        if self.json_mode if json_mode is None else json_mode:
            payload["response_format"] = {"type": "json_object"}
        state = self._state()
        attempt = 0
        while True:
            retry_after: float | None = None
            try:
                async with state.semaphore:
                    started = time.perf_counter()
                    async with asyncio.timeout(self.timeout_s):
                        response = await self._post(state.http, payload)
                    latency_ms = (time.perf_counter() - started) * 1000
            except (TimeoutError, httpx.TimeoutException):
                error = f"timed out after {self.timeout_s:g} s"
            except httpx.TransportError as exc:
                error = f"connection error: {_short(str(exc)) or type(exc).__name__}"
            else:
                if response.status_code == 200:
                    completion = self._completion(response, latency_ms)
                    if usage is not None:
                        usage.record(
                            prompt_tokens=completion.prompt_tokens,
                            completion_tokens=completion.completion_tokens,
                            latency_ms=latency_ms,
                        )
                    return completion
                error = f"HTTP {response.status_code}: {_short(response.text, 200)}"
                if response.status_code not in RETRYABLE_STATUS:
                    raise LLMError(f"model API answered {error}")
                retry_after = parse_retry_after(response.headers.get("retry-after"))
                if retry_after is not None and retry_after > self.max_retry_after_s:
                    raise LLMError(
                        f"model API answered {error}; it asks to retry after "
                        f"{retry_after:g} s, more than the {self.max_retry_after_s:g} s allowed"
                    )
            if attempt >= self.max_retries:
                raise LLMError(f"model call failed after {attempt + 1} attempt(s): {error}")
            if usage is not None:
                usage.retries += 1
            await asyncio.sleep(self.backoff_delay(attempt, retry_after))
            attempt += 1

    async def _post(self, http: httpx.AsyncClient, payload: dict[str, Any]) -> httpx.Response:
        """POST to the endpoint; with a URL guard, to the address it checked and pinned."""
        if self._url_guard is None:
            return await http.post(self.endpoint, json=payload)
        try:
            pinned, host_header, server_name = await self._url_guard(self.endpoint)
        except (BlockedURL, httpx.InvalidURL) as exc:
            raise LLMError(f"model URL refused by the SSRF guard: {exc}") from None
        extensions = {"sni_hostname": server_name} if pinned.scheme == "https" else {}
        return await http.post(
            pinned, json=payload, headers={"Host": host_header}, extensions=extensions
        )

    @staticmethod
    def _completion(response: httpx.Response, latency_ms: float) -> Completion:
        try:
            body = response.json()
            content = body["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError(
                f"model API answered 200 without a chat completion: {_short(response.text, 200)}"
            ) from exc
        usage = body.get("usage") or {}
        return Completion(
            content=str(content),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            latency_ms=latency_ms,
        )

    async def complete_json(
        self,
        messages: list[Message],
        schema: type[BaseModel] | None = None,
        *,
        validate: Callable[[dict[str, Any]], T] | None = None,
        usage: Usage | None = None,
    ) -> Any:
        """The model's JSON reply validated by `schema` (or `validate`), repaired once if needed.

        `validate` must raise ValueError (pydantic's ValidationError is one) on bad input.
        """
        check: Callable[[dict[str, Any]], Any]
        if validate is not None:
            check = validate
        elif schema is not None:
            check = schema.model_validate
        else:
            raise TypeError("complete_json needs a schema or a validate function")
        completion = await self.chat(messages, usage=usage)
        try:
            return check(parse_json_object(completion.content))
        except ValueError as exc:
            first_error = exc
        repair = load_prompt("json_repair.v1").user_message(error=_short(str(first_error), 1000))
        retry = [*messages, {"role": "assistant", "content": completion.content}, repair]
        completion = await self.chat(retry, usage=usage)
        try:
            return check(parse_json_object(completion.content))
        except ValueError as exc:
            raise LLMInvalidOutput(
                f"model reply was not valid JSON for this analyzer, even after one repair "
                f"request: {_short(str(exc), 300)}"
            ) from exc
