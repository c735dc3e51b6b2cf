"""The fault drill, shortened (bench/drill.py, `make drill`): workers, a server, PostgreSQL
and Redis broken while audits arrive through two servers; nothing accepted is lost or
stored twice, and both servers' live feeds show what either server takes once the faults
are over. Runs in the PostgreSQL tier only (`make test-postgres`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.services import PgCluster
from tests.live_support import BASE_DIR


def test_the_drill_loses_nothing_and_the_feeds_heal():
    if PgCluster.from_environment() is None:
        pytest.skip("the PostgreSQL tier only (`make test-postgres`)")
    run = subprocess.run(
        [sys.executable, "bench/drill.py", "--audits", "400", "--quick", "--json"],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.stdout.strip(), run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["accepted"] == 400, result
    assert (result["lost"], result["duplicated"], result["failed"]) == (0, 0, 0), result
    assert all(result["processes_alive"].values()), result
    for feed in result["feeds"]:  # each sees what both servers take once the faults are over
        assert feed["after_the_faults"] == result["sent_after_the_faults"] > 0, result
