"""`manage.py audit FILE`: the engine alone over a JSONL file."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

SAMPLES = Path(__file__).resolve().parents[2] / "samples"  # the sample cases and configuration


def run_audit(path: Path, **options) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("audit", str(path), stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def write_lines(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_it_prints_one_audit_per_line_in_input_order(tmp_path):
    path = write_lines(
        tmp_path,
        {"user_input": "q", "response": "", "external_id": "first", "ignored_field": 1},
        {"user_input": "q", "response": "The answer is 4. Maybe 5.", "external_id": "second"},
    )
    out, _ = run_audit(path)
    audits = [json.loads(line) for line in out.splitlines()]
    assert [a["external_id"] for a in audits] == ["first", "second"]
    first = audits[0]
    assert set(first) >= {
        "id",
        "external_id",
        "created_at",
        "finished_at",
        "status",
        "user_input",
        "response",
        "cleaned_response",
        "sources",
        "metadata",
        "threshold",
        "overall_score",
        "results",
        "surfaced_results",
        "links",
        "trace",
    }
    types = {a["type"] for r in first["surfaced_results"] for a in r["annotations"]}
    assert "EMPTY_OUTPUT" in types
    second_types = {a["type"] for r in audits[1]["results"] for a in r["annotations"]}
    assert "SELF_CONTRADICTION" in second_types


def test_collision_detection_sees_earlier_lines_first(tmp_path):
    line = {"user_input": "same question", "response": "Same answer."}
    out, _ = run_audit(write_lines(tmp_path, line, line))
    flags = [
        {a["type"] for r in json.loads(doc)["results"] for a in r["annotations"]}
        for doc in out.splitlines()
    ]
    assert "COLLISION_DETECTED" not in flags[0]
    assert "COLLISION_DETECTED" in flags[1]


def test_options_apply_per_line(tmp_path):
    path = write_lines(
        tmp_path,
        {"response": '{"move": "A"}', "options": {"redflag": {"required_fields": ["next.peg"]}}},
        {"response": '{"move": "A"}'},
    )
    out, _ = run_audit(path)
    flags = [
        {a["type"] for r in json.loads(d)["results"] for a in r["annotations"]}
        for d in out.splitlines()
    ]
    assert flags[0] == {"REQUIRED_FIELD_MISSING"}
    assert "REQUIRED_FIELD_MISSING" not in flags[1]


def test_bad_lines_name_their_number_and_the_rest_is_still_audited(tmp_path):
    path = write_lines(
        tmp_path,
        {"response": "ok one"},
        "{not json",
        {"user_input": "no response field"},
        '["a list"]',
        {"response": "ok two"},
    )
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError, match="3 line"):
        call_command("audit", str(path), stdout=out, stderr=err)
    assert len(out.getvalue().splitlines()) == 2
    errors = err.getvalue()
    assert "line 2: not valid JSON" in errors
    assert "line 3: response: Field required" in errors
    assert "line 4: expected a JSON object" in errors


def test_table_format_is_readable(tmp_path):
    out, _ = run_audit(write_lines(tmp_path, {"response": ""}), format="table")
    header, row = out.splitlines()
    assert "score" in header and "EMPTY_OUTPUT" in row and "CARD" in row


def test_table_format_leads_with_the_highest_score_not_the_mean(tmp_path):
    out, _ = run_audit(write_lines(tmp_path, {"response": ""}), format="table")
    header, row = out.splitlines()
    assert "top score" in header
    assert row.split()[1] == "1.00", row  # EMPTY_OUTPUT scores 1.00; the mean is lower


def test_config_file_is_applied_and_errors_are_clear(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"analyzers": {"redflag": {"enabled": True, "max_chars": 3}}}))
    out, _ = run_audit(write_lines(tmp_path, {"response": "abcd"}), config=str(config))
    assert "TOO_MANY_CHARS" in out
    config.write_text(json.dumps({"threshold": 7}))
    with pytest.raises(CommandError, match="invalid config"):
        run_audit(write_lines(tmp_path, {"response": "abcd"}), config=str(config))


def test_a_progress_bar_is_shown_for_long_files(tmp_path):
    path = write_lines(tmp_path, *({"response": f"answer {i}"} for i in range(300)))
    out, err = StringIO(), StringIO()
    import sys

    real = sys.stderr
    sys.stderr = err
    try:
        call_command("audit", str(path), stdout=out)
    finally:
        sys.stderr = real
    assert "300/300" in err.getvalue()
    assert len(out.getvalue().splitlines()) == 300


def test_every_sample_case_gives_its_expected_result():
    out, _ = run_audit(SAMPLES / "cases.jsonl", config=str(SAMPLES / "config.json"))
    cases = [json.loads(line) for line in (SAMPLES / "cases.jsonl").read_text().splitlines()]
    audits = [json.loads(line) for line in out.splitlines()]
    assert len(audits) == len(cases)
    for case, audit in zip(cases, audits, strict=True):
        types = {a["type"] for r in audit["results"] for a in r["annotations"]}
        for code in case.get("expect_types", []):
            assert code in types, f"{case['id']}: expected {code}, got {types}"
        for code in case.get("forbid_types", []):
            assert code not in types, f"{case['id']}: {code} must not appear"
        for text in case.get("cleaned_must_contain", []):
            assert text in audit["cleaned_response"], f"{case['id']}: cleaned lacks {text!r}"
        for text in case.get("cleaned_must_not_contain", []):
            assert text not in audit["cleaned_response"], f"{case['id']}: cleaned keeps {text!r}"


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_a_line_whose_strings_hold_a_unicode_line_separator_is_one_audit(tmp_path, separator):
    path = tmp_path / "cases.jsonl"
    line = {"response": f"First part{separator}second part.", "external_id": "one"}
    # ensure_ascii=False keeps the separator raw inside the JSON string
    path.write_text(
        json.dumps(line, ensure_ascii=False) + "\r\n" + json.dumps({"response": "x"}) + "\n",
        encoding="utf-8",
    )
    out, err = run_audit(path)
    assert err == ""
    audits = [json.loads(doc) for doc in out.split("\n") if doc]
    assert len(audits) == 2
    assert audits[0]["response"] == f"First part{separator}second part."
