"""What the operator lets a configuration do with the model client (issue 17, finding 2).

The configuration is edited by admin API keys and staff; the environment by the operator.
So the configuration may only *name* what the environment allows:

- `llm.api_key_env` must match one of the allowed names (`AUDITOR_LLM_*` by default; an
  entry ending in `*` is a prefix, any other entry an exact name), so a configuration can
  never make the server send `SECRET_KEY` or `DATABASE_URL` as a bearer token;
- `llm.base_url` goes through the link checker's SSRF guard (public addresses, ports
  80/443, resolved once and pinned) unless the operator allows private networks for the
  model (a local model server on localhost is a legitimate case, so it is a switch).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from ..linkcheck import BlockedURL, LinkChecker, static_url_problem

DEFAULT_KEY_ENVS = ("AUDITOR_LLM_*",)


def name_allowed(name: str, allowed: Iterable[str]) -> bool:
    """True when `name` equals an entry, or starts with an entry written as `PREFIX*`."""
    for entry in allowed:
        if entry.endswith("*"):
            if name.startswith(entry[:-1]) and len(name) > len(entry) - 1:
                return True
        elif name == entry:
            return True
    return False


@dataclass(frozen=True)
class ModelAccessPolicy:
    """Which key variables the configuration may name, and whether the model may be private."""

    key_envs: tuple[str, ...] = DEFAULT_KEY_ENVS
    allow_private: bool = False

    def key_env_problem(self, name: str) -> str | None:
        if name_allowed(name, self.key_envs):
            return None
        return (
            f"{name!r} is not an allowed key variable; the operator allows "
            f"{', '.join(self.key_envs) or 'none'} (AUDITOR_LLM_KEY_ENVS)"
        )

    def base_url_problem(self, url: str) -> str | None:
        """What is wrong with `url` without a DNS lookup (the request-time guard resolves)."""
        problem = static_url_problem(url, allow_private=self.allow_private)
        if problem and not self.allow_private:
            problem += " (a model on a private network needs AUDITOR_LLM_ALLOW_PRIVATE=true)"
        return problem

    async def pin(self, url: str) -> tuple[httpx.URL, str, str]:
        """The guarded, pinned address of one request (raises BlockedURL)."""
        return await LinkChecker(allow_private_networks=self.allow_private).pin(url)


__all__ = ["BlockedURL", "DEFAULT_KEY_ENVS", "ModelAccessPolicy", "name_allowed"]
