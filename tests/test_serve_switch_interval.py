"""The shipped server hands the interpreter lock on sooner than Python's default."""

from __future__ import annotations

import sys

import pytest

from auditor_site import serve


def test_the_server_applies_the_switch_interval_setting(settings):
    before = sys.getswitchinterval()
    try:
        settings.AUDITOR_SWITCH_INTERVAL_US = 1000
        serve.apply_switch_interval()
        assert sys.getswitchinterval() == pytest.approx(0.001)
        settings.AUDITOR_SWITCH_INTERVAL_US = 0  # not a valid interval: the shortest one
        serve.apply_switch_interval()
        assert sys.getswitchinterval() == pytest.approx(1e-6)
    finally:
        sys.setswitchinterval(before)


def test_the_default_is_one_millisecond():
    from django.conf import settings

    assert settings.AUDITOR_SWITCH_INTERVAL_US == 1000
