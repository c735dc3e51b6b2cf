from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from analyzers.config_store import ConfigError, save_config


class Command(BaseCommand):
    help = "Replace the configuration with a configuration file (JSON, docs/reference/contract.md section 5)."

    def add_arguments(self, parser):
        parser.add_argument("file", help="path to the JSON file, or - for standard input")

    def handle(self, *args, **options):
        path = options["file"]
        try:
            if path == "-":
                import sys

                data = json.load(sys.stdin)
            else:
                with open(path, encoding="utf-8") as fh:
                    data = json.load(fh)
        except (OSError, json.JSONDecodeError) as exc:
            raise CommandError(f"cannot read {path}: {exc}") from exc
        try:
            save_config(data, actor="command:import_config", source="import_config")
        except ConfigError as exc:
            raise CommandError(f"invalid configuration: {exc}") from exc
        self.stdout.write(self.style.SUCCESS(f"Imported the configuration from {path}."))
