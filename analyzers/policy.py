"""The operator's limits on what the configuration may name (settings, i.e. the environment).

The configuration is edited by admin API keys and staff; these limits come from the
environment, so a configuration can never widen them:

- `AUDITOR_LLM_KEY_ENVS`: the environment variables `llm.api_key_env` may name;
- `AUDITOR_LLM_ALLOW_PRIVATE`: whether `llm.base_url` may reach private networks;
- `AUDITOR_VALIDATOR_MODULES`: the module prefixes redflag's custom `validators` may use.

`configuration_problems()` is checked when a configuration is saved (PUT /api/config,
import_config, the admin); the engine enforces the same limits again when it runs
(`audit_services()`), so rows written before a limit existed are still refused.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from analyzers.engine.builtin.redflag import VALIDATOR_MODULES_SERVICE, validator_allowed
from analyzers.engine.config import AuditorConfig, LLMConfig
from analyzers.engine.llm import POLICY_SERVICE, ModelAccessPolicy

REDFLAG_ID = "redflag"


def model_access_policy() -> ModelAccessPolicy:
    return ModelAccessPolicy(
        key_envs=tuple(settings.AUDITOR_LLM_KEY_ENVS),
        allow_private=settings.AUDITOR_LLM_ALLOW_PRIVATE,
    )


def validator_modules() -> tuple[str, ...]:
    return tuple(settings.AUDITOR_VALIDATOR_MODULES)


def audit_services() -> dict[str, Any]:
    """The engine services that carry these limits into every audit."""
    return {POLICY_SERVICE: model_access_policy(), VALIDATOR_MODULES_SERVICE: validator_modules()}


def llm_problems(llm: LLMConfig | dict[str, Any]) -> dict[str, list[str]]:
    """Problems of the `llm` section, keyed by field name."""
    data = llm.model_dump() if isinstance(llm, LLMConfig) else llm
    policy = model_access_policy()
    errors: dict[str, list[str]] = {}
    key_env = data.get("api_key_env")
    if isinstance(key_env, str):
        problem = policy.key_env_problem(key_env)
        if problem:
            errors["api_key_env"] = [problem]
    base_url = data.get("base_url")
    if isinstance(base_url, str) and base_url:
        problem = policy.base_url_problem(base_url)
        if problem:
            errors["base_url"] = [problem]
    return errors


def validator_problems(section: dict[str, Any]) -> list[str]:
    """Problems of redflag's `validators` (paths outside AUDITOR_VALIDATOR_MODULES)."""
    paths = section.get("validators")
    if not isinstance(paths, list):
        return []
    allowed = validator_modules()
    refused = [p for p in paths if not (isinstance(p, str) and validator_allowed(p, allowed))]
    if not refused:
        return []
    return [
        f"validators: {', '.join(map(repr, refused))} not allowed; the operator allows "
        f"modules {', '.join(allowed) or '(none)'} (AUDITOR_VALIDATOR_MODULES)"
    ]


def configuration_problems(config: AuditorConfig) -> dict[str, list[str]]:
    """Every limit the configuration oversteps, keyed by its dotted path."""
    errors = {f"llm.{k}": v for k, v in llm_problems(config.llm).items()}
    section = config.analyzers.get(REDFLAG_ID)
    if section:
        messages = validator_problems(section)
        if messages:
            errors[f"analyzers.{REDFLAG_ID}.validators"] = messages
    return errors
