"""The analyzer engine: contract models, the auditor, the analyzers. Imports nothing from Django."""

from .base import Analyzer, AnalyzerSettings, AuditContext
from .config import AuditorConfig
from .contract import AnalyzerResult, AnalyzerRun, Annotation, AuditInput, AuditReport, Source

__all__ = [
    "Analyzer",
    "AnalyzerResult",
    "AnalyzerRun",
    "AnalyzerSettings",
    "Annotation",
    "AuditContext",
    "AuditInput",
    "AuditReport",
    "AuditorConfig",
    "Source",
]
