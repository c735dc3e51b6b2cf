"""The OpenAI-compatible auditing proxy (`/v1/chat/completions`, `/v1/models`); see app.py."""

from .app import PATHS, proxy_endpoint

__all__ = ["PATHS", "proxy_endpoint"]
