"""django-tasks-db's `db_worker`, plus recovery: nothing is left pending without a flag.

At start and every `AUDITOR_RECOVERY_INTERVAL` s the worker takes over the task rows and
audit runs of dead workers and re-queues pending runs that no queue holds; while it runs a
task its heartbeat keeps the rows fresh (see audits.recovery). Its database connection
stays open between tasks (AUDITOR_TASK_CONN_MAX_AGE). Same options as the stock command.
"""

from __future__ import annotations

from django_tasks_db.management.commands.db_worker import Command as StockCommand

from audits import recovery
from audits.workers import keep_connections


class Command(StockCommand):
    help = StockCommand.help + ", taking over the work of dead workers (audits.recovery)"

    def handle(self, *args, **options):
        recovery.start()
        keep_connections()  # one connection for every task (AUDITOR_TASK_CONN_MAX_AGE)
        return super().handle(*args, **options)
