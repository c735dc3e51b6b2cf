from __future__ import annotations

from django.core.management.base import BaseCommand

from analyzers.models import ApiKey


class Command(BaseCommand):
    help = "Create an API key and print it once (only a hash is stored)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument(
            "--scope", choices=[c for c, _ in ApiKey.Scope.choices], default="ingest"
        )
        parser.add_argument(
            "--rate-limit",
            type=int,
            default=None,
            help="requests per minute (default: the server setting)",
        )

    def handle(self, *args, **options):
        _, raw = ApiKey.create_key(
            options["name"],
            scope=options["scope"],
            rate_limit_per_minute=options["rate_limit"],
        )
        self.stderr.write(
            f"Created {options['scope']} key {options['name']!r}; it is shown only once:"
        )
        self.stdout.write(raw)
