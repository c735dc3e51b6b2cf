from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand

from audits.execution.execute import MAX_ATTEMPTS
from audits.execution.recovery import recover_stale_runs
from audits.review.alert_tasks import recover_pending_deliveries


class Command(BaseCommand):
    help = (
        "Re-queue audit runs a dead worker left running and pending ones no queue holds "
        "(the server and db_worker do this by themselves); "
        "runs out of attempts are marked failed. Also re-queues alert deliveries a dead "
        "worker left pending."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--stale-after",
            type=float,
            default=None,
            help="seconds a run may go without a heartbeat before it is "
            "re-queued (default AUDITOR_RECOVER_RUNNING_AFTER_S)",
        )
        parser.add_argument(
            "--pending-after",
            type=float,
            default=None,
            help="seconds a run may stay pending with no queue holding it "
            "(default AUDITOR_RECOVER_PENDING_AFTER_S)",
        )
        parser.add_argument("--max-attempts", type=int, default=MAX_ATTEMPTS)

    def handle(self, *args, **options):
        outcome = recover_stale_runs(
            stale_after=(
                timedelta(seconds=options["stale_after"])
                if options["stale_after"] is not None
                else None
            ),
            pending_after=(
                timedelta(seconds=options["pending_after"])
                if options["pending_after"] is not None
                else None
            ),
            max_attempts=options["max_attempts"],
        )
        alerts = recover_pending_deliveries()
        # An in-process backend runs the re-queued audits in this process: let them finish.
        from django.tasks import task_backends

        backend = task_backends["default"]
        if hasattr(backend, "wait_idle"):
            backend.wait_idle(timeout=600)
        self.stdout.write(
            f"requeued {outcome['requeued']}, failed {outcome['failed']}, "
            f"pending requeued {outcome['pending_requeued']}, alert deliveries requeued {alerts}"
        )
