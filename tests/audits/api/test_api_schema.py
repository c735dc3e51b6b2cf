"""Schemathesis against /api/openapi.json: no 5xx, responses match the schema.

The app is served through Django's WSGI handler in-process (same database as the test).
"""

from __future__ import annotations

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from analyzers.models import ApiKey

app = get_wsgi_application()
# POST /api/audits/stream is documented in the schema but served by a plain ASGI app in
# front of Django (its NDJSON body is read as it arrives): tests/audits/api/test_stream_endpoint.py
# and tests/audits/api/test_api_schema_errors_and_session_export.py drive it.
schema = schemathesis.openapi.from_wsgi("/api/openapi.json", app).exclude(path="/api/audits/stream")


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    """Like django.test.Client: the handler must not close the test's DB connection."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def admin_bearer(db):
    _, raw = ApiKey.create_key("schemathesis", scope="admin", rate_limit_per_minute=1_000_000)
    return raw


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
@pytest.mark.django_db
def test_api_conforms_to_its_schema(case, admin_bearer):
    # What the issue asks: no 5xx, documented status codes and content types, responses
    # matching the schema. (Not "schema-valid data is accepted": a 422 can have reasons a
    # schema cannot say, such as an unknown analyzer in `options`.)
    case.call_and_validate(
        headers={"Authorization": f"Bearer {admin_bearer}"},
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
