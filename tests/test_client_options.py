"""The client's settings are declared once (client/options.py): the constructor validates from
that table, and the README's settings table is that table."""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import pytest

from client_support import BOOL_AND_OS, ScriptedTransport, closed_endpoint
from ldp_telemetry.client import OPTIONS, TelemetryClient
from ldp_telemetry.client import options

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_settings_table_is_the_options_table():
    text = README.read_text()
    start, end = text.index("<!-- client-settings -->\n"), text.index("<!-- /client-settings -->")
    assert text[start + len("<!-- client-settings -->\n"):end].strip() == options.markdown_table(), (
        "regenerate it: python -m ldp_telemetry.client.options")


def test_the_constructor_takes_exactly_the_options():
    parameters = inspect.signature(TelemetryClient).parameters
    assert list(parameters)[:2] == ["endpoint", "schema"] and parameters["options"].kind is inspect.Parameter.VAR_KEYWORD
    assert [o.name for o in OPTIONS][:2] == ["endpoint", "schema"]


def test_every_default_passes_its_own_check():
    for option in OPTIONS:
        if option.default is not options.REQUIRED:
            assert option.check(option.name, option.default) == option.default


def test_an_unknown_setting_is_a_type_error_naming_it(tmp_path):
    with pytest.raises(TypeError, match="max_outbox_size"):
        TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path, max_outbox_size=5)
    with pytest.raises(TypeError, match="max_epsilon"):
        TelemetryClient(closed_endpoint(), BOOL_AND_OS, data_dir=tmp_path)


@pytest.mark.parametrize("name, value", [
    ("max_epsilon_per_day", 0), ("max_epsilon_per_day", math.inf), ("max_pending", -1), ("max_pending", 1.5),
    ("pending_timeout", -1), ("pending_timeout", math.nan), ("max_outbox_bytes", 0), ("max_batch_bytes", 100),
    ("max_report_bytes", True), ("request_timeout", 0), ("request_timeout", math.inf), ("schema_refresh", "1"),
    ("linger", 61), ("transport", object()), ("rng", 4),
])
def test_a_bad_value_is_a_value_error_naming_the_setting(tmp_path, name, value):
    with pytest.raises(ValueError, match=name):
        TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path,
                        **{"transport": ScriptedTransport(), name: value})


@pytest.mark.parametrize("name", [o.name for o in OPTIONS if o.check.what.startswith("a number of seconds")])
def test_every_timing_setting_has_an_upper_bound_that_its_error_names(tmp_path, name):
    # Issue 27: backoff_base, backoff_cap and schema_refresh took any number (1e30 s: a device that
    # as good as never retries, and deadlines whose arithmetic overflows).
    with pytest.raises(ValueError, match=rf"^{name} must be a number of seconds .* at most \d+, got 1e\+30$"):
        TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path,
                        **{"transport": ScriptedTransport(), name: 1e30})


def test_a_report_must_fit_a_batch(tmp_path):
    with pytest.raises(ValueError, match="max_report_bytes"):
        TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=4, data_dir=tmp_path,
                        max_batch_bytes=8192, max_report_bytes=16384)


def test_the_daily_cap_defaults_to_max_epsilon(tmp_path):
    with TelemetryClient(closed_endpoint(), BOOL_AND_OS, max_epsilon=3, data_dir=tmp_path,
                         transport=ScriptedTransport()) as client:
        assert client.settings.max_epsilon_per_day == 3
