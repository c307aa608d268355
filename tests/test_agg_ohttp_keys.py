"""The aggregator's Oblivious HTTP keys (DESIGN.md, "Keys"): made once at the first start however
many processes start at once, rotated under the smallest key id not accepted, a retired key
accepted through its grace and then forgotten, served as application/ohttp-keys; on both stores."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner
from conftest import APP_USAGE, publish, read, sql, store_of

from ldp_telemetry.aggregator import ohttp_keys
from ldp_telemetry.aggregator.settings import SettingsError, load
from ldp_telemetry.shared import ohttp, randomize
from ldp_telemetry.tools.cli import main

pytestmark = pytest.mark.backends

START = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
DAY = 86400
GRACE = 14 * DAY
RELAY_TOKEN = "relay-token-0123456789"
RELAY = {"Authorization": f"Bearer {RELAY_TOKEN}", "Content-Type": ohttp.BATCH_MEDIA_TYPE}


class Clock:
    """A clock a test moves."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def served(client) -> list[ohttp.KeyConfig]:
    """The key configurations the aggregator serves, in order (parsed here, not by the module under test)."""
    data, out = client.get("/api/v1/ohttp-keys").data, []
    while data:
        length = int.from_bytes(data[:2], "big")
        config, data = data[2:2 + length], data[2 + length:]
        assert config[1:3] == b"\x00\x20" and config[35:41] == b"\x00\x04\x00\x01\x00\x01"
        out.append(ohttp.KeyConfig(config[0], config[3:35]))
    return out


def stored_keys(app) -> list:
    return read(store_of(app), "ohttp_keys")


def test_the_first_start_makes_one_key_and_later_starts_none(make_app, new_db):
    location = new_db()
    app = make_app(LDP_DB=location, LDP_CLOCK=Clock())
    keys = stored_keys(app)
    assert [(k.key_id, k.retired, k.created) for k in keys] == [(0, None, int(START.timestamp()))]
    assert keys[0].public_key == ohttp.public_key_of(keys[0].private_key)
    make_app(LDP_DB=location, LDP_CLOCK=Clock())
    assert stored_keys(app) == keys


def test_processes_starting_at_once_make_exactly_one_key(new_db, tmp_path):
    location = new_db()
    # Each process waits for the same moment, then builds the app (migrating and making the first key).
    at = time.time() + 3
    script = textwrap.dedent(f"""
        import time
        from ldp_telemetry.aggregator import create_app
        time.sleep(max(0.0, {at!r} - time.time()))
        create_app({{"LDP_DB": {location!r}, "LDP_SCHEDULER": False}}).extensions["ldp"]["store"].close()
    """)
    processes = [subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path) for _ in range(4)]
    assert [p.wait(timeout=120) for p in processes] == [0, 0, 0, 0]
    rows = sql(location, "SELECT key_id, retired FROM ohttp_keys")
    assert rows == [(0, None)]


def test_keys_bytes_and_headers(make_app):
    app = make_app(LDP_CLOCK=Clock())
    client = app.test_client()
    answer = client.get("/api/v1/ohttp-keys", headers={"Origin": "https://app.example.org"})
    assert answer.status_code == 200 and answer.mimetype == ohttp.KEYS_MEDIA_TYPE
    assert answer.headers["Cache-Control"] == "max-age=3600"
    assert answer.headers["Access-Control-Allow-Origin"] == "*"
    (key,) = stored_keys(app)
    assert answer.data == (41).to_bytes(2, "big") + bytes([key.key_id]) + b"\x00\x20" + key.public_key + \
        b"\x00\x04\x00\x01\x00\x01"
    assert answer.data == ohttp.encode_key_configs([ohttp.KeyConfig(key.key_id, key.public_key)])
    preflight = client.options("/api/v1/ohttp-keys", headers={"Origin": "https://app.example.org",
                                                              "Access-Control-Request-Method": "GET"})
    assert preflight.status_code == 204 and "GET" in preflight.headers["Access-Control-Allow-Methods"]
    # the other answers still are not to be kept
    assert client.get("/api/v1/schemas").headers["Cache-Control"] == "no-store"


def relayed(client, config: ohttp.KeyConfig, when: datetime):
    report = randomize(APP_USAGE, {"dark_mode": True, "os": "linux"}, window=when.strftime("%Y-%m-%d"))
    message = ohttp.bhttp_request(json.dumps({"reports": [report]}, separators=(",", ":")).encode(), 2048)
    return client.post("/api/v1/relay/batches", data=ohttp.frame_batch([ohttp.encapsulate(config, message)]),
                       headers=RELAY).get_json()


def test_rotation_keeps_the_retired_key_through_its_grace_then_forgets_it(make_app):
    clock = Clock()
    app = make_app(LDP_CLOCK=clock, LDP_RELAY_TOKENS=RELAY_TOKEN, LDP_RETENTION_DAYS=60)
    client = app.test_client()
    publish(client)
    store = store_of(app)
    (first,) = served(client)

    clock.now = START + timedelta(days=1)
    second = ohttp_keys.rotate(store, int(clock.now.timestamp()))
    assert second.key_id == 1
    assert [c.key_id for c in served(client)] == [1, 0]  # newest first
    assert ohttp.choose_key_config(client.get("/api/v1/ohttp-keys").data).key_id == 1
    assert relayed(client, first, clock.now) == {"accepted": 1, "duplicates": 0, "refused": 0}

    clock.now += timedelta(seconds=GRACE - 1)  # the last second of the grace
    assert ohttp_keys.forget_expired(app) == []
    assert relayed(client, first, clock.now)["accepted"] == 1
    clock.now += timedelta(seconds=1)
    assert [c.key_id for c in served(client)] == [1]  # no longer accepted, whether or not the job ran
    assert relayed(client, first, clock.now) == {"accepted": 0, "duplicates": 0, "refused": 1}
    assert ohttp_keys.forget_expired(app) == [0]
    assert [(k.key_id, k.private_key is None) for k in stored_keys(app)] == [(1, False), (0, True)]

    # the next rotation takes the smallest id not accepted: 0 again, a new key under it
    third = ohttp_keys.rotate(store, int(clock.now.timestamp()))
    assert third.key_id == 0 and third.public_key != first.public_key
    assert [c.key_id for c in served(client)] == [0, 1]
    assert relayed(client, first, clock.now) == {"accepted": 0, "duplicates": 0, "refused": 1}  # the old key 0
    assert relayed(client, ohttp.KeyConfig(0, third.public_key), clock.now)["accepted"] == 1
    assert relayed(client, ohttp.KeyConfig(1, second.public_key), clock.now)["accepted"] == 1  # retired now: in grace


def test_a_rotation_never_reuses_the_id_of_a_key_not_yet_forgotten(make_app):
    # A rotation run where LDP_RELAY_KEY_GRACE is shorter than the servers' must not replace a key
    # they still accept: an id is free only once its key's private half is gone.
    clock = Clock()
    app = make_app(LDP_CLOCK=clock, LDP_RELAY_TOKENS=RELAY_TOKEN)
    store = store_of(app)
    clock.now = START + timedelta(days=1)
    assert ohttp_keys.rotate(store, int(clock.now.timestamp())).key_id == 1
    clock.now += timedelta(seconds=GRACE)  # key 0 is past its grace, its private half not yet deleted
    assert ohttp_keys.rotate(store, int(clock.now.timestamp())).key_id == 2
    assert ohttp_keys.forget_expired(app) == [0]
    assert ohttp_keys.rotate(store, int(clock.now.timestamp())).key_id == 0


def test_the_current_key_is_never_forgotten_and_a_start_makes_none_beside_it(make_app, new_db):
    clock = Clock()
    location = new_db()
    app = make_app(LDP_DB=location, LDP_CLOCK=clock)
    clock.now += timedelta(days=1)
    ohttp_keys.rotate(store_of(app), int(clock.now.timestamp()))
    clock.now += timedelta(days=15)
    ohttp_keys.forget_expired(app)
    # the current key is never forgotten: a start finds it and makes none
    make_app(LDP_DB=location, LDP_CLOCK=clock)
    assert [(k.key_id, k.retired is None) for k in stored_keys(app)] == [(1, True), (0, False)]


def test_relay_key_rotate_on_a_database(make_app, new_db):
    location = new_db()
    app = make_app(LDP_DB=location)
    result = CliRunner().invoke(main, ["relay-key", "rotate", "--db", location], env={"LDP_DB": None})
    assert result.exit_code == 0, result.output
    assert result.output.startswith("new key id 1 ")
    assert "key id 0 retired: accepted until " in result.output
    keys = stored_keys(app)
    assert [(k.key_id, k.retired is None) for k in keys] == [(1, True), (0, False)]
    assert keys[0].public_key.hex() in result.output


@pytest.mark.sqlite_only
def test_key_settings_are_checked_at_start():
    with pytest.raises(SettingsError, match="LDP_RELAY_KEY_GRACE"):
        load({"LDP_RELAY_KEY_GRACE": 8 * DAY})
    assert load({"LDP_RELAY_KEY_GRACE": 8 * DAY + 1})["LDP_RELAY_KEY_GRACE"] == 8 * DAY + 1
    with pytest.raises(SettingsError, match="LDP_RELAY_TOKENS"):
        load({"LDP_RELAY_TOKENS": "long-enough-token-1,short"})
    for delta in (0, 1e-4, -1e-9, "nan"):
        with pytest.raises(SettingsError, match="LDP_SHUFFLE_DELTA"):
            load({"LDP_SHUFFLE_DELTA": delta})
    assert load({"LDP_SHUFFLE_DELTA": "1e-6"})["LDP_SHUFFLE_DELTA"] == 1e-6
