"""The `proxy` section of the configuration: where `POST /v1/chat/completions` sends requests.

```json
"proxy": {"base_url": null, "api_key_env": "AUDITOR_UPSTREAM_API_KEY", "timeout_s": 60, "mode": "clean",
          "extra_text": "audit", "max_held_bytes": 1000000}
```

`timeout_s` bounds the wait for the upstream's next byte (AUDITOR_STREAM_MAX_S bounds a whole
answer). In mode `clean`, `extra_text` says what becomes of an answer's `refusal` and
reasoning text (`reasoning_content`, `reasoning`): audited like `content` (`audit`) or
dropped (`drop`); `max_held_bytes` bounds the frames held behind a paragraph not yet audited.

The section is stored with the global settings (their `extra` JSON) and travels with the
rest of the configuration (admin, `import_config`/`export_config`, `/api/config`). The
operator's environment limits what it may name, so a configuration can never widen them:

- `api_key_env` must match `AUDITOR_PROXY_KEY_ENVS` (exact names, or prefixes ending in
  `*`; `AUDITOR_UPSTREAM_*` by default): the configuration can never make the proxy send
  `SECRET_KEY` or `DATABASE_URL` upstream as a bearer token;
- `base_url` must be http(s) without credentials, and goes through the link checker's SSRF
  guard at every request (public addresses, ports 80/443, resolved once and pinned) unless
  `AUDITOR_PROXY_ALLOW_PRIVATE` (a model server on localhost or the LAN).
"""

from __future__ import annotations

import os
from typing import Any, Literal

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from analyzers.engine.linkcheck import static_url_problem
from analyzers.engine.llm.policy import name_allowed

SECTION = "proxy"


class ProxyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(default=None, max_length=500)
    api_key_env: str = Field(default="AUDITOR_UPSTREAM_API_KEY", min_length=1, max_length=200)
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    mode: Literal["clean", "observe"] = "clean"
    extra_text: Literal["audit", "drop"] = "audit"
    max_held_bytes: int = Field(default=1_000_000, ge=10_000, le=64_000_000)

    def api_key(self) -> str | None:
        """The upstream key from the environment, only when the operator allows the name."""
        if key_env_problem(self.api_key_env):
            return None
        return os.environ.get(self.api_key_env) or None


def key_env_problem(name: str) -> str | None:
    allowed = settings.AUDITOR_PROXY_KEY_ENVS
    if name_allowed(name, allowed):
        return None
    return (
        f"{name!r} is not an allowed key variable; the operator allows "
        f"{', '.join(allowed) or 'none'} (AUDITOR_PROXY_KEY_ENVS)"
    )


def base_url_problem(url: str) -> str | None:
    """What is wrong with `url` without a DNS lookup (every request is guarded again)."""
    problem = static_url_problem(url, allow_private=settings.AUDITOR_PROXY_ALLOW_PRIVATE)
    if problem and not settings.AUDITOR_PROXY_ALLOW_PRIVATE:
        problem += " (an upstream on a private network needs AUDITOR_PROXY_ALLOW_PRIVATE=true)"
    return problem


def proxy_problems(data: Any) -> dict[str, list[str]]:
    """Problems of a `proxy` section, keyed by dotted path (`proxy.base_url`, ...)."""
    try:
        proxy = ProxyConfig.model_validate(data if data is not None else {})
    except ValidationError as exc:
        errors: dict[str, list[str]] = {}
        for err in exc.errors():
            path = ".".join([SECTION, *map(str, err["loc"])])
            errors.setdefault(path, []).append(err["msg"])
        return errors
    errors = {}
    if problem := key_env_problem(proxy.api_key_env):
        errors[f"{SECTION}.api_key_env"] = [problem]
    if proxy.base_url and (problem := base_url_problem(proxy.base_url)):
        errors[f"{SECTION}.base_url"] = [problem]
    return errors


def parse_proxy(data: Any) -> ProxyConfig:
    """A valid section (`None`: the defaults); raises ValueError naming the problems."""
    errors = proxy_problems(data)
    if errors:
        raise ValueError("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
    return ProxyConfig.model_validate(data if data is not None else {})


def stored_proxy(extra: dict[str, Any] | None) -> ProxyConfig:
    """The section as stored in the global settings' `extra` (defaults when missing/invalid)."""
    try:
        return ProxyConfig.model_validate((extra or {}).get(SECTION) or {})
    except ValidationError:
        return ProxyConfig()
