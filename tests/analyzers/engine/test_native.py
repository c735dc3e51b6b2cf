"""The guardrails compiled with mypyc (analyzers.engine.native): used only while built from
the sources as they are, and giving the reports the Python modules give."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from test_safe_output_property import HOSTS, PATHS, SCHEMES

import analyzers.engine.guardrails as guardrails
from analyzers.engine import native

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data"
SAMPLES = ROOT / "tests" / "samples"


@pytest.fixture
def package(tmp_path, monkeypatch):
    """native's paths pointed at a throwaway package of one module."""
    source = tmp_path / "pkg"
    source.mkdir()
    (source / "mod.py").write_text("X = 1\n")
    monkeypatch.setattr(native, "PACKAGE", source)
    monkeypatch.setattr(native, "TARGET", source / "_native")
    monkeypatch.setattr(native, "STAMP", source / "_native" / "STAMP")
    monkeypatch.delenv("AUDITOR_PURE_PYTHON", raising=False)
    (source / "_native").mkdir()
    native.STAMP.write_text(native.fingerprint() + "\n")
    return source


def test_a_current_build_goes_first_on_the_package_path(package):
    path = [str(package)]
    assert native.use_if_current(path)
    assert path == [str(package / "_native"), str(package)]


def test_a_source_edited_since_the_build_runs_as_python(package):
    (package / "mod.py").write_text("X = 2\n")
    path = [str(package)]
    assert not native.use_if_current(path)
    assert path == [str(package)]


def test_a_module_added_since_the_build_runs_as_python(package):
    (package / "new.py").write_text("Y = 1\n")
    assert not native.use_if_current([str(package)])


def test_without_a_build_or_when_asked_it_runs_as_python(package, monkeypatch):
    monkeypatch.setenv("AUDITOR_PURE_PYTHON", "1")
    assert not native.use_if_current([str(package)])
    monkeypatch.delenv("AUDITOR_PURE_PYTHON")
    native.STAMP.unlink()
    assert not native.use_if_current([str(package)])


def test_a_subpackage_module_counts_in_the_stamp(package):
    sub = package / "sub"
    sub.mkdir()
    (sub / "__init__.py").write_text("")
    (sub / "deep.py").write_text("Z = 1\n")
    assert not native.use_if_current([str(package)])
    native.STAMP.write_text(native.fingerprint() + "\n")
    assert native.use_if_current([str(package)])
    (sub / "deep.py").write_text("Z = 2\n")
    assert not native.use_if_current([str(package)])


def test_a_subpackage_takes_the_choice_of_its_parent(package):
    sub = str(package / "sub")
    path = [sub]
    assert native.follow(path, True)
    assert path == [str(package / "_native" / "sub"), sub]
    path = [sub]
    assert not native.follow(path, False)
    assert path == [sub]


COMPILED_MODULES = [
    "analyzers.engine.guardrails."
    + ".".join(path.relative_to(native.PACKAGE).with_suffix("").parts)
    for path in native.sources()
]


@pytest.mark.skipif(not guardrails.COMPILED, reason="the guardrails are not compiled here")
@pytest.mark.parametrize("module", COMPILED_MODULES)
def test_each_module_imported_first_loads_compiled(module):
    """Imported by name before any compiled module pulls it in (which mypyc does natively),
    a module loads its build: subpackages follow their parent's choice."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {module} as m; print(m.__file__)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(native.SUFFIX), done.stdout


def _corpus() -> list[str]:
    """Responses from the samples, the ported URL suites, and random mixes of the property
    test's hostile pieces."""
    texts = [
        json.loads(line)["response"]
        for line in (SAMPLES / "cases.jsonl").read_text().splitlines()
        if line.strip()
    ]
    texts += [
        case[0]
        for case in json.loads((DATA / "openai_guardrails_url_cases.json").read_text())["cases"]
    ]
    for case in json.loads((DATA / "urltestdata.json").read_text()):
        if isinstance(case, dict):
            url = case["input"]
            texts += [f"See {url} now", f"[docs]({url})", f'<a href="{url}">x</a>']
    for unit in (
        "[",
        "[x](",
        "http://",
        '<a href="x">',
        "` `` ``` ",
        "<https://evil.test/a> ",
        "a.b",
        "www.",
        "x@y.",
        "//",
        "<b ",
        "<a",
        "<script>",
        "a.b/",
        "Globex grew 30% with [x](https://evil.test/) and more ",
        "PcComponentes lifted revenue by 12%. ",
    ):
        texts.append(unit * (20_000 // len(unit)))  # bench_guardrails' adversarial shapes
    long_run = "https://evil.example/" + "a.b/" * 300  # judged once per paragraph (a memo)
    texts += [long_run, f"{long_run} and {long_run}\n\n{long_run}"]
    rng = random.Random(20261203)
    pieces = [
        "[{l}]({u})",
        "![{l}]({u})",
        "<{u}>",
        "{u}",
        "See {u}.",
        '<a href="{u}">{l}</a>',
        "<img src={u} onerror=alert(1)>",
        "<script>alert('{u}')</script>",
        "`{u}`",
        "```\n<b>{u}</b>\n```",
        "[ref]: {u}\n\n[{l}][ref]",
        "<b>{l}</b><i onclick=x>y</i>",
        "Globex grew revenue by 40% ({u}).",
        "Typical stores see a 20% lift with {l}.",
    ]
    separators = [" ", "\n", "\n\n", "\t", "\r\n", "\x00", "", "> ", "\n- ", "\n    "]
    for _ in range(600):
        parts = []
        for _ in range(rng.randint(1, 6)):
            url = rng.choice(SCHEMES) + rng.choice(HOSTS) + rng.choice(PATHS)
            label = rng.choice(["docs", "here", url, "", "Acme"])
            parts.append(rng.choice(pieces).format(u=url, l=label) + rng.choice(separators))
        texts.append("".join(parts))
    return texts


REPORTS = """
import json, sys
from analyzers.engine.config import AuditorConfig
import analyzers.engine.guardrails as guardrails
from analyzers.engine import native
from analyzers.engine.guardrails.settings import GuardrailSettings, settings_from_config
from analyzers.engine.guardrails.stream import audit_text

config = AuditorConfig.model_validate(json.load(open(sys.argv[1])))
all_settings = [
    settings_from_config(config),
    GuardrailSettings.build(allowed_hosts=("acme.example", ".docs.acme.example"),
                            bare_urls="defang"),
]
reports = []
for text in json.load(open(sys.argv[2])):
    for settings in all_settings:
        r = audit_text(text, settings, (), config.limits)
        reports.append([
            r.cleaned_response, [(o, a.model_dump()) for o, a in r.annotations],
            [link.model_dump() for link in r.links], r.trace, r.claims, repr(r.pending),
        ])
loaded = [
    name
    for name, module in sys.modules.items()
    if name.startswith("analyzers.engine.guardrails.")
    and (getattr(module, "__file__", None) or "").endswith(native.SUFFIX)
]
json.dump({"compiled": guardrails.COMPILED, "native": loaded, "reports": reports}, sys.stdout)
"""


@pytest.mark.skipif(not guardrails.COMPILED, reason="the guardrails are not compiled here")
def test_the_compiled_guardrails_give_the_reports_python_gives(tmp_path):
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps(_corpus()))

    def reports(pure: bool) -> dict:
        env = {k: v for k, v in os.environ.items() if k != "AUDITOR_PURE_PYTHON"}
        if pure:
            env["AUDITOR_PURE_PYTHON"] = "1"
        done = subprocess.run(
            [sys.executable, "-c", REPORTS, str(SAMPLES / "config.json"), str(corpus)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    compiled, python = reports(pure=False), reports(pure=True)
    assert (compiled["compiled"], python["compiled"]) == (True, False)
    assert set(COMPILED_MODULES) <= set(compiled["native"]), "some ran as Python"
    assert python["native"] == []
    assert len(compiled["reports"]) > 2000
    for i, (a, b) in enumerate(zip(compiled["reports"], python["reports"], strict=True)):
        assert a == b, f"report {i} differs"
