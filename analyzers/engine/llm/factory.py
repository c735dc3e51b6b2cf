"""Which model client an analyzer uses for one audit."""

from __future__ import annotations

import os
import threading
from typing import Any

from ..config import LLMConfig
from .client import LLMClient
from .policy import ModelAccessPolicy

SERVICE_NAME = "llm_client"
# The operator's `ModelAccessPolicy` (the Django app passes one built from its settings);
# without one, the strict default: `AUDITOR_LLM_*` keys, public model addresses only.
POLICY_SERVICE = "llm_policy"

_clients: dict[tuple[str, str | None, ModelAccessPolicy], LLMClient] = {}
_lock = threading.Lock()


def client_for_config(llm: LLMConfig, policy: ModelAccessPolicy | None = None) -> LLMClient | None:
    """The shared client for `llm` (one per configuration, key and policy), or None.

    Raises LLMError when the policy does not allow `llm.api_key_env`.
    """
    if not llm.configured:
        return None
    policy = policy or ModelAccessPolicy()
    allowed = policy.key_env_problem(llm.api_key_env) is None
    api_key = (os.environ.get(llm.api_key_env) or None) if allowed else None
    key = (llm.model_dump_json(), api_key, policy)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = LLMClient.from_config(llm, policy=policy)
            _clients[key] = client
    return client


def get_llm_client(context: Any) -> LLMClient | None:
    """`context.services["llm_client"]` when given, else one built from `context.config.llm`
    under `context.services["llm_policy"]`.

    None means no model is configured: judged analyzers fall back to heuristics.
    """
    client = context.services.get(SERVICE_NAME)
    if client is not None:
        return client
    return client_for_config(context.config.llm, context.services.get(POLICY_SERVICE))


def clear_client_cache() -> None:
    """Forget cached clients (tests, configuration reloads)."""
    with _lock:
        _clients.clear()
