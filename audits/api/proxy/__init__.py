"""The OpenAI-compatible auditing proxy (`/v1/chat/completions`, `/v1/models`); see app.py."""

from audits.api.proxy.app import PATHS, proxy_endpoint

__all__ = ["PATHS", "proxy_endpoint"]
