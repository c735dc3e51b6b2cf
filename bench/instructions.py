"""Instructions per audit (the engine; an analysis process; a batch request), by callgrind.

On the shared 2-core machine CPU-time rates move by ±20% with the load; the number of
instructions an audit executes does not (it is the same from run to run within a few
per cent), so it tells a small speed-up from noise. It is not time: a regex loop and the
interpreter's dispatch cost different time per instruction.

Run: .venv/bin/python bench/instructions.py [--before PATH] [--audits N]
(`--before`: another tree, e.g. `git archive main | tar -x -C PATH`, counted the same way;
the `2kb` and `bare` shapes read its `tests/samples/config.json` and fall back to a smaller
configuration without it).
Shapes: the 2 KB response of bench_guardrails, the same with bare URLs and HTML tags, and
the end-to-end shape of throughput.audit_body (a source, bare URLs, distinct texts); and
`worker`: what an analysis process does with that shape (`execute.execute_runs` on
batches of 32 stored runs: claim, analyse, store) on a fresh SQLite file, and `submit`:
what the server does with a batch request of 100 of them (validate the items, store the
runs; not the HTTP layer), both counted in user space (the kernel's part of SQLite's
writes is not).
Needs valgrind (skipped with a message when absent). Warm-up audits run uninstrumented;
instrumentation is switched on (`callgrind_control -i on`) only for the counted audits.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ("2kb", "bare", "e2e", "worker", "submit")

# Django on a fresh SQLite file (the worker and submit shapes), the database migrated.
_DJANGO = r"""
import os, sys, time
root, shape, n, flag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, root); sys.path.insert(0, root + "/bench")
os.environ["DATABASE_URL"] = "sqlite:///" + flag + ".sqlite3"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
os.environ["AUDITOR_ANALYSIS_PROCESSES"] = "0"
import django
django.setup()
from django.core.management import call_command
from throughput import audit_body
from audits.execution import execute, queueing
from audits.intake import submit
call_command("migrate", verbosity=0)
"""

_WORKER = (
    _DJANGO
    + r"""
from analyzers.config_store import load_config_with_snapshot
from audits.models import AuditRun
BATCH = 32
config, snapshot = load_config_with_snapshot()
runs = AuditRun.objects.bulk_create(  # stored as submit_audits does, not queued
    AuditRun(user_input=body["user_input"], response=body["response"],
             sources=body["sources"], metadata=body["metadata"], threshold=config.threshold,
             config_snapshot=snapshot)
    for body in map(audit_body, range(2 * BATCH + n)))
ids = [run.pk for run in runs]
for start in range(0, len(ids), BATCH):
    if start == 2 * BATCH:
        open(flag + ".ready", "w").close()
        while not os.path.exists(flag + ".go"):
            time.sleep(0.05)
    outcome = execute.execute_runs(ids[start:start + BATCH])
    assert set(outcome.values()) == {"complete"}, outcome
os._exit(0)
"""
)

_SUBMIT = (
    _DJANGO
    + r"""
from audits.api.router import AuditIn, _item_fields
queueing.enqueue_audits = lambda queued: None  # stored, not queued: the worker's part
BATCH = 100
for start in range(0, 2 * BATCH + n, BATCH):
    if start == 2 * BATCH:
        open(flag + ".ready", "w").close()
        while not os.path.exists(flag + ".go"):
            time.sleep(0.05)
    submit.submit_audits([_item_fields(AuditIn.model_validate(audit_body(i)))
                            for i in range(start, start + BATCH)])
os._exit(0)
"""
)

_CHILD = r"""
import asyncio, os, sys, time
root, shape, n, flag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, root); sys.path.insert(0, root + "/bench")
from bench_guardrails import (load_config, response_2kb, response_2kb_bare_html, Auditor,
                              build_registry, AuditInput)
from throughput import audit_body
from analyzers.engine.config import AuditorConfig
from analyzers.engine.linkcheck import LinkChecker
if shape == "e2e":
    auditor = Auditor(AuditorConfig(), build_registry([]),
                      services={"link_checker": LinkChecker()})
    inputs = [AuditInput.model_validate(audit_body(i)) for i in range(30 + n)]
else:
    auditor = Auditor(load_config(), build_registry(include_entry_points=False))
    text = response_2kb() if shape == "2kb" else response_2kb_bare_html()
    inputs = [AuditInput(response=text, user_input="How do I tune search?")] * (30 + n)
async def run(batch):
    for audit in batch:
        await auditor.audit(audit)
asyncio.run(run(inputs[:30]))
open(flag + ".ready", "w").close()
while not os.path.exists(flag + ".go"):
    time.sleep(0.05)
asyncio.run(run(inputs[30:]))
os._exit(0)
"""


BATCHES = {"worker": 32, "submit": 100}  # audits per call of those shapes' children


def count(tree: Path, shape: str, audits: int) -> float:
    """Thousands of instructions per audit of `shape` in `tree`."""
    if shape in BATCHES:  # whole batches, one at least
        audits = max(BATCHES[shape], audits - audits % BATCHES[shape])
    with tempfile.TemporaryDirectory() as tmp:
        flag = os.path.join(tmp, "flag")
        child = os.path.join(tmp, "child.py")
        Path(child).write_text({"worker": _WORKER, "submit": _SUBMIT}.get(shape, _CHILD))
        proc = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={tmp}/out",
                sys.executable,
                child,
                str(tree),
                shape,
                str(audits),
                flag,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only")},
        )
        while not os.path.exists(flag + ".ready"):
            if proc.poll() is not None:
                raise SystemExit(f"the audit process ended early:\n{proc.stdout.read()}")
            time.sleep(0.2)
        subprocess.run(
            ["callgrind_control", "-i", "on", str(proc.pid)], capture_output=True, check=False
        )
        Path(flag + ".go").touch()
        output, _ = proc.communicate()
    m = re.search(r"Collected : (\d+)", output)
    if m is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{output[-2000:]}")
    return int(m.group(1)) / audits / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another tree, counted the same way")
    parser.add_argument("--audits", type=int, default=300)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("instructions: skipped (valgrind is not installed)")
        return
    trees = [("before", args.before)] if args.before else []
    trees.append(("this tree", ROOT))
    for shape in args.shapes.split(","):
        counts = {name: count(tree, shape, args.audits) for name, tree in trees}
        line = ", ".join(f"{name} {k:,.0f}k" for name, k in counts.items())
        if args.before:
            change = counts["this tree"] / counts["before"] - 1
            line += f" ({change:+.1%})"
        print(f"instructions per audit, {shape}: {line}")


if __name__ == "__main__":
    main()
