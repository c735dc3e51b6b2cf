"""auditor_site.sqlite: Django's SQLite backend with placeholders converted by str.replace
where no literal "%" can be mistaken for one."""

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

if connection.vendor != "sqlite":
    pytest.skip("the SQLite backend", allow_module_level=True)


def run(sql, params):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def test_the_project_uses_the_backend_and_its_cursor():
    from auditor_site.sqlite.base import SQLiteCursorWrapper

    assert connection.settings_dict["ENGINE"] == "auditor_site.sqlite"
    with connection.cursor() as cursor:
        assert type(cursor.cursor) is SQLiteCursorWrapper


def test_placeholders_become_question_marks():
    assert run("SELECT %s, %s || 'b', %s", [1, "a", None]) == (1, "ab", None)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT %s, '100%%'", (7, "100%")),
        ("SELECT %s, '%%s'", (7, "%s")),  # a literal "%s", not a placeholder
        ("SELECT %s, '%%%%s'", (7, "%%s")),
    ],
)
def test_escaped_percent_signs_stay_literal(sql, expected):
    assert run(sql, [7]) == expected


def test_named_parameters_still_work():
    assert run("SELECT %(a)s, %(b)s", {"a": 1, "b": "two"}) == (1, "two")
