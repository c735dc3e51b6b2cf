"""Prompt templates: versioned text files in `prompts/`, filled with `string.Template`.

A file holds a `[system]` section and a `[user]` section; `$name` placeholders are filled
with the audit's text. Placeholders are substituted once, so a `$` inside the user input
or the response is left alone. Change a prompt by adding `name.v2.txt`, not by editing v1.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

PROMPT_DIR = Path(__file__).resolve().parent / "prompts"
_SECTION = re.compile(r"^\[(system|user)\]\s*$", re.MULTILINE)


class PromptError(Exception):
    pass


@dataclass(frozen=True)
class Prompt:
    name: str
    system: Template | None
    user: Template

    def user_message(self, **values: Any) -> dict[str, str]:
        return {"role": "user", "content": self.user.substitute(values)}

    def messages(self, **values: Any) -> list[dict[str, str]]:
        """The chat messages, every placeholder filled (a missing value is an error)."""
        out = []
        if self.system is not None:
            out.append({"role": "system", "content": self.system.substitute(values)})
        out.append(self.user_message(**values))
        return out


def parse_prompt(name: str, text: str) -> Prompt:
    sections: dict[str, str] = {}
    parts = _SECTION.split(text)
    for key, body in zip(parts[1::2], parts[2::2], strict=True):
        sections[key] = body.strip() + "\n"
    if "user" not in sections:
        raise PromptError(f"prompt {name!r} has no [user] section")
    for key, body in sections.items():
        if not Template(body).is_valid():
            raise PromptError(f"prompt {name!r}: invalid placeholder in [{key}]")
    system = sections.get("system")
    return Prompt(name, Template(system) if system else None, Template(sections["user"]))


@functools.cache
def load_prompt(name: str) -> Prompt:
    """`load_prompt("bias_detect.v1")` reads prompts/bias_detect.v1.txt (cached)."""
    if not re.fullmatch(r"[a-z0-9_]+\.v\d+", name):
        raise PromptError(f"bad prompt name {name!r}")
    path = PROMPT_DIR / f"{name}.txt"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise PromptError(f"no prompt file {path.name}") from exc
    return parse_prompt(name, text)


def format_sources(sources: Iterable[Any], *, limit_chars: int = 2000) -> str:
    """The sources as a numbered plain-text list for a prompt ("(none)" when empty)."""
    lines = []
    for i, source in enumerate(sources, 1):
        text = " ".join((source.text or "").split())
        if len(text) > limit_chars:
            text = text[:limit_chars] + "…"
        url = f" <{source.url}>" if source.url else ""
        lines.append(f"[{i}] {source.title}{url}: {text}")
    return "\n".join(lines) if lines else "(none)"
