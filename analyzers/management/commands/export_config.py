from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from analyzers.config_store import export_config


class Command(BaseCommand):
    help = "Print the configuration as JSON (what import_config and PUT /api/config take)."

    def add_arguments(self, parser):
        parser.add_argument("-o", "--output", help="write to this file instead of stdout")

    def handle(self, *args, **options):
        text = json.dumps(export_config(), indent=2, ensure_ascii=False) + "\n"
        if options.get("output"):
            with open(options["output"], "w", encoding="utf-8") as fh:
                fh.write(text)
        else:
            self.stdout.write(text, ending="")
