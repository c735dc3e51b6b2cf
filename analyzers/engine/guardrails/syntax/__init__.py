"""How a renderer reads the text the guardrails judge: spans and code fences, Markdown links,
URLs and bare URLs. Imports nothing else of the guardrails.

Compiled with the rest of the guardrails, and used compiled exactly when they are
(`analyzers.engine.native`)."""

from ...native import follow
from .. import COMPILED as _PARENT_COMPILED

COMPILED = follow(__path__, _PARENT_COMPILED)
