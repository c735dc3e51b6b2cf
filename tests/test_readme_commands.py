"""The README's shell examples work as written: every `manage.py` command runs from a fresh
shell (no SECRET_KEY, no DEBUG), and every file a command names exists in the repository."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parent.parent
README = BASE_DIR / "README.md"
# The README and the docs site's pages (docs/), where the guides' commands now live.
DOCS = [README, *sorted((BASE_DIR / "docs").rglob("*.md"))]
SHELL_BLOCKS = {"", "sh", "bash", "shell", "console"}
FILE_SUFFIXES = (".json", ".jsonl", ".py", ".sh")
OUTPUT_FLAGS = {"-o", "--output", ">", ">>"}
# Servers and workers run until stopped: not a command to run to its end here.
LONG_RUNNING = {"db_worker", "runserver"}


def shell_lines() -> list[list[str]]:
    """The lines of every shell code block of the README and docs/, block by block."""
    blocks: list[list[str]] = []
    fence = re.compile(r"^\s*```\s*([\w-]*)")
    language: str | None = None  # None: outside a block
    lines = [line for doc in DOCS for line in doc.read_text(encoding="utf-8").splitlines()]
    for line in lines:
        match = fence.match(line)
        if match:
            if language is None:
                language = match.group(1)
                blocks.append([])
            else:
                if language not in SHELL_BLOCKS:
                    blocks.pop()
                language = None
        elif language is not None:
            blocks[-1].append(line)
    return blocks


def words(line: str) -> list[str]:
    """A command line's words, without its comment; `VAR=$(cmd)` gives cmd's words."""
    inner = re.search(r"\$\((.*)\)", line)
    text = inner.group(1) if inner and "manage.py" in inner.group(1) else line
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return []


def named_files() -> list[tuple[str, str]]:
    """(path, line) for every file a README command reads (files it writes first excluded)."""
    found = []
    for lines in shell_lines():
        written: set[str] = set()
        for line in lines:
            argv = words(line)
            for before, word in zip(["", *argv], argv, strict=False):
                if "://" in word or not word.endswith(FILE_SUFFIXES) or "=" in word:
                    continue
                if before in OUTPUT_FLAGS:
                    written.add(word)
                elif word not in written:
                    found.append((word, line.strip()))
    return found


def manage_commands() -> list[tuple[str, list[str]]]:
    commands = []
    for lines in shell_lines():
        for line in lines:
            argv = words(line)
            if "manage.py" not in argv:
                continue
            args = argv[argv.index("manage.py") + 1 :]
            if args and args[0] not in LONG_RUNNING:
                commands.append((line.strip(), args))
    return commands


def test_the_readme_shows_commands_to_check():
    assert len(manage_commands()) >= 4
    assert any(args[0] == "create_api_key" for _, args in manage_commands())
    assert len(named_files()) >= 2


@pytest.mark.parametrize(("path", "line"), named_files())
def test_every_file_a_readme_command_names_exists(path, line):
    assert (BASE_DIR / path).exists(), f"README command names a missing file: {line}"


@pytest.fixture(scope="module")
def fresh_shell(tmp_path_factory):
    """A working directory that looks like the checkout (its entries linked) and an
    environment with only PATH, HOME and where the database goes."""
    work = tmp_path_factory.mktemp("checkout")
    for entry in BASE_DIR.iterdir():
        if entry.name not in {"var", ".git"}:
            (work / entry.name).symlink_to(entry)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", ""),
        "AUDITOR_VAR_DIR": str(work / "var"),
    }

    def run(args: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )

    migrated = run(["migrate", "--noinput"])
    assert migrated.returncode == 0, migrated.stderr
    return run


def test_every_manage_command_in_the_readme_runs_from_a_fresh_shell(fresh_shell):
    for line, args in manage_commands():
        out = fresh_shell(args)
        assert out.returncode == 0 and "Traceback" not in out.stderr, (line, out.stderr[-2000:])
        if args[0] == "create_api_key":
            assert re.fullmatch(r"ra_\w+_[\w-]+\n", out.stdout), (line, out.stdout)
        if args[0] == "audit":
            assert len(out.stdout.splitlines()) >= 2, (line, out.stdout)
