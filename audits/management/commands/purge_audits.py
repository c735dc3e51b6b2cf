"""`manage.py purge_audits [--older-than-days N] [--dry-run]`: erase the audits older than
N days (default: the configuration's `retention_days`) and print the count."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from analyzers.config_store import load_config
from audits.store.erasure import expired, purge_expired


class Command(BaseCommand):
    help = (
        "Erase the audits older than N days (default: the configuration's retention_days) "
        "and every row derived from them, in batches; prints the count."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than-days",
            type=int,
            default=None,
            help="erase audits created more than this many days ago "
            "(default: retention_days of the configuration)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="only count the audits that would be erased"
        )

    def handle(self, *args, **options):
        days = options["older_than_days"]
        if days is None:
            days = load_config().retention_days
        if days is None:
            raise CommandError(
                "no retention configured (retention_days is null): give --older-than-days"
            )
        if days < 1:
            raise CommandError("--older-than-days must be 1 or more")
        if options["dry_run"]:
            count = expired(days).count()
            self.stdout.write(f"{count} audit(s) older than {days} day(s) would be erased")
            return
        count = purge_expired(days=days, actor="manage.py purge_audits", source="command")
        self.stdout.write(f"{count} audit(s) older than {days} day(s) erased")
