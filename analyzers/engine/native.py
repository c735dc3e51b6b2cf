"""The guardrails compiled to C with mypyc, used only while they match their sources.

`python -m analyzers.engine.native` compiles the modules of `analyzers/engine/guardrails`
and its subpackages (all but `PURE` and the `__init__`s) with mypyc into `guardrails/_native/`
(a subpackage's in the folder of its name there), with a stamp: a digest of those sources
and of the interpreter. The package's `__init__` puts that folder first on its `__path__`
only when the stamp matches the sources it sees, so a module edited since the build runs as
Python, never as its stale build; so does everything when no C compiler was found or
`AUDITOR_PURE_PYTHON` is set. A subpackage follows its parent's choice (`follow`): compiled
modules use their compiled siblings' classes, so the build is used whole or not at all. The compiled modules give the same reports as the
Python ones (tests/analyzers/engine/test_native.py), faster (docs/contributing/performance.md).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent / "guardrails"
TARGET = PACKAGE / "_native"
STAMP = TARGET / "STAMP"
# pydantic models stay Python (mypyc would make native classes of them), and so do the
# packages' `__init__`s, which decide whether the compiled modules are used.
PURE = frozenset({"analyzers.py"})  # paths relative to PACKAGE
GROUP = "analyzers.engine.guardrails.native"  # the shared library: `native__mypyc`
SUFFIX = str(sysconfig.get_config_var("EXT_SUFFIX"))  # of this interpreter's extensions


def sources() -> list[Path]:
    return sorted(
        path
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py" and path.relative_to(PACKAGE).as_posix() not in PURE
    )


def fingerprint() -> str:
    """Digest of the compiled modules' sources and of the interpreter that may load them."""
    digest = hashlib.sha256(sys.version.encode())
    digest.update(SUFFIX.encode())
    for path in sources():
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def current() -> bool:
    try:
        return STAMP.read_text().strip() == fingerprint()
    except OSError:
        return False


def use_if_current(package_path: list[str]) -> bool:
    """Put the compiled modules first on the guardrails package's `__path__` when they
    were built from the sources as they are now (and `AUDITOR_PURE_PYTHON` is unset)."""
    if os.environ.get("AUDITOR_PURE_PYTHON") or not current():
        return False
    package_path.insert(0, str(TARGET))
    return True


def follow(package_path: list[str], compiled: bool) -> bool:
    """Give a subpackage of the guardrails its parent's choice: when compiled, its compiled
    modules (in the folder of its name under TARGET) go first on its `__path__`."""
    if compiled:
        relative = Path(package_path[-1]).resolve().relative_to(PACKAGE)
        package_path.insert(0, str(TARGET / relative))
    return compiled


def build() -> None:
    """Compile the modules into TARGET (replaced whole; the stamp written last)."""
    from mypyc.build import mypycify
    from setuptools import Distribution

    with tempfile.TemporaryDirectory(prefix="auditor-native-") as tmp:
        options = ["--ignore-missing-imports", "--follow-imports=silent"]
        extensions = mypycify(
            options + [str(path) for path in sources()],
            group_name=GROUP,
            target_dir=os.path.join(tmp, "c"),
        )
        dist = Distribution({"name": "auditor-native", "ext_modules": extensions})
        command = dist.get_command_obj("build_ext")
        command.build_lib = os.path.join(tmp, "lib")
        command.build_temp = os.path.join(tmp, "temp")
        command.parallel = os.cpu_count() or 1
        dist.run_command("build_ext")
        built = Path(command.build_lib, *GROUP.split(".")[:-1])
        shutil.rmtree(TARGET, ignore_errors=True)
        TARGET.mkdir()
        for library in built.rglob("*" + SUFFIX):
            copy = TARGET / library.relative_to(built)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(library, copy)
    STAMP.write_text(fingerprint() + "\n")


def main() -> int:
    if current():
        print(f"compiled guardrails current ({TARGET})")
        return 0
    try:
        build()
    except (Exception, SystemExit) as exc:  # mypyc exits on a type error; gcc may be absent
        shutil.rmtree(TARGET, ignore_errors=True)
        print(
            f"warning: the guardrails could not be compiled ({exc!r}); they run as Python",
            file=sys.stderr,
        )
        return 1
    print(f"compiled guardrails into {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
