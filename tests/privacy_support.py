"""Where a value could still be in the database: every table's text, and the SQLite files'
raw bytes after a checkpoint (free pages and the WAL included)."""

from __future__ import annotations

import random
import string
import subprocess
import sys
import time
from pathlib import Path

from django.db import connection
from stdnum import luhn


def fresh_card() -> str:
    """A Luhn-valid Visa number no earlier test wrote (so its bytes can only be ours)."""
    body = "4" + "".join(random.choices(string.digits, k=14))
    number = body + luhn.calc_check_digit(body)
    return " ".join(number[i : i + 4] for i in range(0, 16, 4))


def fresh_key() -> str:
    """An OpenAI project key of a fresh random body (letters and digits mixed)."""
    body = "".join(random.choices(string.ascii_letters, k=20)) + "".join(
        random.choices(string.digits, k=20)
    )
    return "sk-" + "proj-" + "".join(random.sample(body, len(body)))


CARD = fresh_card()
KEY = fresh_key()
RAW = (CARD, CARD.replace(" ", ""), KEY)
TEXT = f"Your card {CARD} and the key {KEY} are on file."


def tables_holding(values: tuple[str, ...] = RAW) -> list[str]:
    """`table.column` of every stored value that contains one of `values`."""
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            quoted = connection.ops.quote_name(table)
            cursor.execute(f"SELECT * FROM {quoted}")
            columns = [c[0] for c in cursor.description]
            for row in cursor.fetchall():
                for column, value in zip(columns, row, strict=True):
                    text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
                    if any(v in text for v in values):
                        found.append(f"{table}.{column}")
    return sorted(set(found))


def files_holding(values: tuple[str, ...] = RAW) -> list[str]:
    """The SQLite files (database, WAL) whose raw bytes contain one of `values`, after a
    TRUNCATE checkpoint (retried while another connection holds it up)."""
    if connection.vendor != "sqlite":
        return []
    with connection.cursor() as cursor:
        for _ in range(50):
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if cursor.fetchone()[0] == 0:
                break
            time.sleep(0.1)
    name = Path(connection.settings_dict["NAME"])
    found = []
    for path in (name, Path(f"{name}-wal")):
        if path.exists():
            data = raw_bytes(path)
            found += [f"{path.name}: {v[:8]}…" for v in values if v.encode() in data]
    return found


def raw_bytes(path: Path) -> bytes:
    """The file's bytes, read by a child process: closing a descriptor of the database file
    in this process would drop every POSIX lock SQLite holds on it here, and another
    process's last close would then delete the WAL under this process's open connection
    (https://sqlite.org/howtocorrupt.html, 2.2)."""
    read = "import sys; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read())"
    return subprocess.run(
        [sys.executable, "-c", read, str(path)], capture_output=True, check=True
    ).stdout
