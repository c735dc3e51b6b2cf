"""The test database's schema moved to a migration and back (the migration tests)."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate_to(*nodes: tuple[str, str]) -> Any:
    """Migrate to `nodes` ((app, migration) pairs; none: the latest schema, the one the
    other tests use) and return the models as they are there (`apps.get_model`)."""
    executor = MigrationExecutor(connection)
    targets = list(nodes) or executor.loader.graph.leaf_nodes()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps
