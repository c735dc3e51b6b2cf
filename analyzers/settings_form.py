"""Admin form fields generated from a pydantic settings model (an analyzer's `Settings`,
a custom judge's `JudgeDefinition`): one field per setting, with its type, default and
description, so nobody has to guess keys in a JSON box.

Types map to fields: bool -> on / off / default, int/float -> number (with the model's bounds),
str -> text, `Literal[...]` -> select, `list[str]` -> text area with one item per line;
anything nested (dicts, objects, lists of non-strings) -> a JSON box. `X | None` fields
may be left empty (None). The model itself validates the result, as before.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

import annotated_types
from django import forms
from pydantic import BaseModel
from pydantic.fields import FieldInfo

FIELD_PREFIX = "setting__"  # form field names: never clash with the model's own fields


@dataclass(frozen=True)
class SettingSpec:
    """One setting of a pydantic model, as the admin shows it."""

    key: str
    kind: str  # "bool", "int", "float", "str", "choice", "lines", "json"
    optional: bool
    default: Any
    required: bool
    description: str
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None

    @property
    def form_name(self) -> str:
        return FIELD_PREFIX + self.key

    def help_text(self) -> str:
        parts = [self.description.rstrip(".") + "." if self.description else ""]
        if self.required:
            parts.append("Required.")
        else:
            parts.append(f"Default: {_shown(self.default)}.")
        if self.optional:
            parts.append("Empty: none.")
        elif self.kind in ("int", "float", "str", "choice"):
            parts.append("Empty: the default.")
        return " ".join(p for p in parts if p)

    def form_field(self) -> forms.Field:
        common = {"required": False, "label": self.key, "help_text": self.help_text()}
        if self.kind == "bool":
            # Three states, so that "not set" (the default) is a value a form can post.
            empty = "— none —" if self.optional else f"— default ({_shown(self.default)}) —"
            return forms.ChoiceField(
                choices=[("", empty), ("true", "on"), ("false", "off")], **common
            )
        if self.kind == "int":
            return forms.IntegerField(
                min_value=_int_or_none(self.minimum), max_value=_int_or_none(self.maximum), **common
            )
        if self.kind == "float":
            return forms.FloatField(
                min_value=self.minimum,
                max_value=self.maximum,
                widget=forms.NumberInput(attrs={"step": "any"}),
                **common,
            )
        if self.kind == "choice":
            empty = "— none —" if self.optional else f"— default ({_shown(self.default)}) —"
            options = [("", empty), *((str(c), str(c)) for c in self.choices)]
            return forms.ChoiceField(choices=options, **common)
        if self.kind == "lines":
            return forms.CharField(
                widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
                **{**common, "help_text": "One per line. " + common["help_text"]},
            )
        if self.kind == "json":
            return forms.JSONField(
                widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
                **{**common, "help_text": "JSON. " + common["help_text"]},
            )
        return forms.CharField(widget=forms.TextInput(attrs={"size": 60}), **common)

    def to_form(self, value: Any) -> Any:
        """A stored value as the form field shows it."""
        if self.kind == "lines":
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return "\n".join(value)
            return json.dumps(value)  # not a list of strings: shown as is, the model says why
        if self.kind == "choice":
            return "" if value is None else str(value)
        if self.kind == "bool":
            return "" if value is None else ("true" if value else "false")
        return value

    def from_form(self, value: Any) -> tuple[bool, Any]:
        """(set, value) from a cleaned form value; `set` False means "use the default"."""
        if self.kind == "lines":
            items = [line.strip() for line in (value or "").splitlines() if line.strip()]
            return True, items
        if value in (None, ""):
            return (True, None) if self.optional else (False, None)
        if self.kind == "bool":
            return True, value == "true"
        if self.kind == "choice":
            return True, next((c for c in self.choices if str(c) == value), value)
        return True, value


def _int_or_none(value: float | None) -> int | None:
    return None if value is None else int(value)


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, dict)):
        return json.dumps(value) if value else ("[]" if isinstance(value, list) else "{}")
    return str(value)


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0], True
    return annotation, False


def _kind(annotation: Any) -> tuple[str, tuple[Any, ...]]:
    if annotation is bool:
        return "bool", ()
    if annotation is int:
        return "int", ()
    if annotation is float:
        return "float", ()
    if annotation is str:
        return "str", ()
    if typing.get_origin(annotation) is Literal:
        return "choice", typing.get_args(annotation)
    if typing.get_origin(annotation) in (list, tuple) and typing.get_args(annotation)[:1] == (str,):
        return "lines", ()
    return "json", ()


def _bounds(info: FieldInfo) -> tuple[float | None, float | None]:
    low = high = None
    for meta in info.metadata:
        if isinstance(meta, annotated_types.Ge):
            low = meta.ge
        elif isinstance(meta, annotated_types.Le):
            high = meta.le
    return low, high


def setting_specs(
    model: type[BaseModel], *, exclude: frozenset[str] | set[str] = frozenset()
) -> list[SettingSpec]:
    """The settings of `model`, in declaration order, without `exclude`."""
    specs = []
    for key, info in model.model_fields.items():
        if key in exclude:
            continue
        annotation, optional = _unwrap_optional(info.annotation)
        kind, choices = _kind(annotation)
        required = info.is_required()
        default = None if required else info.get_default(call_default_factory=True)
        low, high = _bounds(info)
        specs.append(
            SettingSpec(
                key=key,
                kind=kind,
                optional=optional,
                default=default,
                required=required,
                description=info.description or "",
                choices=choices,
                minimum=low,
                maximum=high,
            )
        )
    return specs


def merge_settings(
    specs: list[SettingSpec], cleaned: dict[str, Any], stored: dict[str, Any], extra: dict[str, Any]
) -> dict[str, Any]:
    """The settings to store: `extra` (the JSON box) plus every generated field whose key
    was stored already or whose value differs from the default (defaults stay implicit,
    so a later change of a default reaches analyzers nobody tuned). A key typed in the JSON
    box wins over its field (the box starts without the keys the fields show)."""
    merged = dict(extra)
    for spec in specs:
        if spec.key in extra:
            continue
        is_set, value = spec.from_form(cleaned.get(spec.form_name))
        if not is_set:
            merged.pop(spec.key, None)
            continue
        if spec.key in stored or spec.required or value != spec.default:
            merged[spec.key] = value
        else:
            merged.pop(spec.key, None)
    return merged


def error_fields(messages: list[str], specs: list[SettingSpec]) -> list[tuple[str | None, str]]:
    """Pydantic messages ("key: msg") placed on their generated field when there is one."""
    by_key = {spec.key: spec.form_name for spec in specs}
    placed = []
    for message in messages:
        key, sep, rest = message.partition(":")
        head = key.split(".")[0].strip()
        if sep and head in by_key:
            placed.append((by_key[head], rest.strip() if key.strip() == head else message))
        else:
            placed.append((None, message))
    return placed
