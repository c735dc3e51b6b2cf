"""Which model client an analyzer uses for one audit."""

from __future__ import annotations

import os
import threading
from typing import Any

from ..config import LLMConfig
from .client import LLMClient

SERVICE_NAME = "llm_client"

_clients: dict[tuple[str, str | None], LLMClient] = {}
_lock = threading.Lock()


def client_for_config(llm: LLMConfig) -> LLMClient | None:
    """The shared client for `llm` (one per distinct configuration and key), or None."""
    if not llm.configured:
        return None
    api_key = os.environ.get(llm.api_key_env) or None
    key = (llm.model_dump_json(), api_key)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = LLMClient.from_config(llm)
    return client


def get_llm_client(context: Any) -> LLMClient | None:
    """`context.services["llm_client"]` when given, else one built from `context.config.llm`.

    None means no model is configured: judged analyzers fall back to heuristics.
    """
    client = context.services.get(SERVICE_NAME)
    if client is not None:
        return client
    return client_for_config(context.config.llm)


def clear_client_cache() -> None:
    """Forget cached clients (tests, configuration reloads)."""
    with _lock:
        _clients.clear()
