"""The model client of the judged analyzers (bias, tone, custom judges)."""

from __future__ import annotations

from .client import (
    Completion,
    LLMClient,
    LLMError,
    LLMInvalidOutput,
    LLMNotConfigured,
    parse_json_object,
    parse_retry_after,
)
from .evidence import locate_quote
from .factory import (
    POLICY_SERVICE,
    SERVICE_NAME,
    clear_client_cache,
    client_for_config,
    get_llm_client,
)
from .policy import ModelAccessPolicy
from .prompts import Prompt, PromptError, format_sources, load_prompt
from .usage import Usage

__all__ = [
    "POLICY_SERVICE",
    "SERVICE_NAME",
    "ModelAccessPolicy",
    "Completion",
    "LLMClient",
    "LLMError",
    "LLMInvalidOutput",
    "LLMNotConfigured",
    "Prompt",
    "PromptError",
    "Usage",
    "clear_client_cache",
    "client_for_config",
    "format_sources",
    "get_llm_client",
    "load_prompt",
    "locate_quote",
    "parse_json_object",
    "parse_retry_after",
]
