"""The deterministic guardrails (links, bare URLs, markup, claims, prompt leaks).

Compiled with mypyc when a current build exists (`analyzers.engine.native`)."""

from ..native import use_if_current

COMPILED = use_if_current(__path__)
