"""Static files with DEBUG off: content-hashed names and gzip copies (WhiteNoise serves both).

gzip only: brotli at its default quality spends about a minute of CPU on the admin's files
on every `collectstatic`, for a few per cent less transfer on files browsers cache for ever.
"""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage


class CompressedHashedStorage(CompressedManifestStaticFilesStorage):
    def create_compressor(self, **kwargs):
        return super().create_compressor(use_brotli=False, **kwargs)
