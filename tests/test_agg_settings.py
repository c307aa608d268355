"""Settings: declared once, read from LDP_* variables and the config dict, bad values stop start-up."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ldp_telemetry.aggregator import create_app
from ldp_telemetry.aggregator.settings import SETTINGS, SettingsError, load

README = Path(__file__).resolve().parent.parent / "README.md"


def test_defaults():
    values = load({}, environ={})
    assert values == {s.name: s.default for s in SETTINGS}
    assert (values["LDP_MAX_BATCH"], values["LDP_MAX_BODY"], values["LDP_CONFIDENCE"]) == (1000, 1 << 20, 0.95)
    assert (values["LDP_RETENTION_DAYS"], values["LDP_CLOCK_SKEW"]) == (30, 300)


def test_environment_then_config():
    environ = {"LDP_MAX_BATCH": "50", "LDP_CONFIDENCE": "0.9", "LDP_SCHEDULER": "off", "LDP_READ_TOKEN": ""}
    values = load({"LDP_MAX_BATCH": 7}, environ=environ)
    assert (values["LDP_MAX_BATCH"], values["LDP_CONFIDENCE"], values["LDP_SCHEDULER"]) == (7, 0.9, False)
    assert values["LDP_READ_TOKEN"] is None


@pytest.mark.parametrize("name, value", [
    ("LDP_MAX_BATCH", "0"), ("LDP_MAX_BATCH", "1e3"), ("LDP_MAX_BATCH", "many"), ("LDP_MAX_BODY", "-1"),
    ("LDP_CONFIDENCE", "1"), ("LDP_CONFIDENCE", "0"), ("LDP_CONFIDENCE", "nan"), ("LDP_ESTIMATE_INTERVAL", "0"),
    ("LDP_RETENTION_DAYS", "-3"), ("LDP_CLOCK_SKEW", "inf"), ("LDP_SCHEDULER", "maybe"),
    ("LDP_ADMIN_TOKEN", "short"), ("LDP_DB", ""),
])
def test_a_bad_value_names_the_setting(name, value):
    with pytest.raises(SettingsError, match=f"^{name} \\(from the environment\\) must"):
        load({}, environ={name: value})


@pytest.mark.parametrize("environ, said", [
    ({"LDP_RELAY_TOKENS": "relay-token-0123456789,"}, "no empty one"),
    ({"LDP_RELAY_TOKENS": "relay-token-0123456789,relay-token-0123456789"}, "listed twice"),
    ({"LDP_RELAY_TOKENS": "short"}, "at least 16"),
    ({"LDP_ADMIN_TOKEN": "a" * 32, "LDP_RELAY_TOKENS": "a" * 32}, "must not be the admin's"),
    ({"LDP_RELAY_KEY_GRACE": "1e300"}, "LDP_RELAY_KEY_GRACE"),  # the hourly job could not store it
    ({"LDP_MAX_RELAY_BODY": "65536"}, "LDP_MAX_RELAY_BODY"),  # below one framed request of 64 KiB
])
def test_relay_settings_that_cannot_work_stop_start_up(environ, said):
    # The tester's findings: each of these started, and failed later or gave a relay admin rights.
    with pytest.raises(SettingsError, match=said):
        load({}, environ=environ)


def test_an_unknown_setting_is_an_error(tmp_path):
    with pytest.raises(SettingsError, match="LDP_MAX_BATHC"):
        create_app({"LDP_DB": str(tmp_path / "x.db"), "LDP_MAX_BATHC": 5})


def test_create_app_reads_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LDP_DB", str(tmp_path / "env.db"))
    monkeypatch.setenv("LDP_MAX_BATCH", "12")
    app = create_app({"LDP_SCHEDULER": False})
    assert (app.config["LDP_MAX_BATCH"], app.config["MAX_CONTENT_LENGTH"]) == (12, 1 << 20)
    assert (tmp_path / "env.db").exists()


def test_every_setting_is_documented_in_the_readme():
    table = README.read_text()
    for setting in SETTINGS:
        assert re.search(rf"^\| `{setting.name}` \| `{setting.flag}` \|", table, re.M), setting.name


def test_an_unusable_database_stops_start_up(tmp_path):
    not_a_database = tmp_path / "notes.db"
    not_a_database.write_text("these are my notes, not a database" * 100)
    for path in (tmp_path / "missing-folder" / "x.db", not_a_database):
        with pytest.raises(SettingsError, match="^LDP_DB .* cannot be used: "):
            create_app({"LDP_DB": str(path), "LDP_SCHEDULER": False})


def test_the_clock_must_be_callable(tmp_path):
    with pytest.raises(SettingsError, match="LDP_CLOCK must be a callable"):
        create_app({"LDP_DB": str(tmp_path / "c.db"), "LDP_SCHEDULER": False, "LDP_CLOCK": "2026-11-21"})
