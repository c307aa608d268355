"""`ldp-telemetry demo --exit`: the real server, real clients, the truth beside the estimates."""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from datetime import datetime, timezone

import numpy as np
import pytest
from test_demo_lifecycle import stop
import requests

from ldp_telemetry.tools.demo import HOMEPAGE_DEVICES_PER_DEVICE
from ldp_telemetry.tools.populations import DEMO_SCHEMA, STEADY_SHARES, population
from ldp_telemetry.shared import parse_schema

# attribute, value (a bucket name has a space), mechanism, eps, n, truth, estimate (clipped, "*" when
# clipping changed it), interval, covers
ROW = re.compile(r"^(\S+)\s+(\[\S+ \S+[)\]]|\S+)\s+[a-z]+\s+[\d.]+\s+([\d,]+)\s+([\d.]+%?)\s+([\d.]+%?)\*? +"
                 r"\[([\d.]+%?), ([\d.]+%?)\]\s+(yes|NO)$")
# value, source, n, truth, estimate, interval, covers (demo-homepages' table)
SITE_ROW = re.compile(r"^(\S+)\s+(listed|added|discovered)\s+[\d.]+\s+([\d,]+)\s+([\d.]+%)\s+([\d.]+%)\*? +"
                      r"\[([\d.]+%), ([\d.]+%)\]\s+(yes|NO)$")


def number(text: str) -> float:
    """A printed figure: a share in percent as its fraction, a mean in its units as it is."""
    return float(text[:-1]) / 100 if text.endswith("%") else float(text)


def test_demo_prints_intervals_that_cover_the_truth(tmp_path):
    devices, clients = 3000, 30
    result = subprocess.run(
        [sys.executable, "-m", "ldp_telemetry.tools.cli", "demo", "--exit", "--devices", str(devices),
         "--days", "3", "--clients", str(clients), "--data-dir", str(tmp_path / "demo"), "--port", "0"],
        capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    out = result.stdout
    rows = [ROW.match(line) for line in out.splitlines()]
    rows = [m for m in rows if m]
    # demo-app: 3 booleans + 4 categories; demo-usage: a mean + 4 buckets; demo-memoised: 1 + 4
    assert len(rows) == 17
    assert [m[2] for m in rows if m[1] in ("session_minutes", "load_ms")] == [
        "mean", "[0, 50)", "[50, 100)", "[100, 250)", "[250, 1000]"]
    for m in rows:
        n, truth, low, high = int(m[3].replace(",", "")), number(m[4]), number(m[6]), number(m[7])
        assert n == devices
        assert (m[8] == "yes") == (low <= truth <= high)
    # Each 95% interval misses with probability about 0.05 (less: the population is fixed; the
    # memoised rollup's is wider still), so 6 or more misses out of 17 has probability about
    # C(17,6) 0.05^6 ≈ 2e-4.
    assert sum(m[8] == "NO" for m in rows) <= 5
    # --exit stops the server: no "Dashboard:" line for a server that no longer answers
    assert "Dashboard:" not in out
    # Issue 31: "refreshed 0 estimates" came right before full tables (the waits for the back-fill
    # had refreshed them already)
    assert "the estimates are refreshed." in out and "refreshed 0" not in out
    assert re.search(r"Without --exit the dashboard would be served at http://127\.0\.0\.1:\d+/schemas/demo-app", out)
    assert "busy" not in out  # --port 0 asks for any free port
    assert "devices" in out and "[##############################]" in out  # the progress bar finished
    # demo-homepages: its candidates (listed, added, discovered) beside their true shares
    sites = [m for m in map(SITE_ROW.match, out.splitlines()) if m]
    sources = Counter(m[2] for m in sites)
    assert sources["listed"] == 6 and sources["added"] == 2, out[-3000:]
    for m in sites:
        assert int(m[3].replace(",", "")) > 0.45 * HOMEPAGE_DEVICES_PER_DEVICE * devices  # level 0: about half
        truth, low, high = number(m[4]), number(m[6]), number(m[7])
        assert (m[8] == "yes") == (low <= truth <= high)
    # As above: 95% intervals, each misses with probability about 0.05; at most 16 rows (8 listed or
    # added, and the few strings 30,000 reports let discovery find), 5 misses or more: below 1e-3.
    assert sum(m[8] == "NO" for m in sites) <= 4
    assert "The ten most common sites in truth: " in out
    with sqlite3.connect(tmp_path / "demo" / "aggregator.db") as db:
        stored = db.execute("SELECT count(*) FROM reports").fetchone()[0]
        assert stored == (3 + HOMEPAGE_DEVICES_PER_DEVICE) * devices  # three schemas, and the home pages
        windows = db.execute('SELECT count(DISTINCT "window") FROM reports').fetchone()[0]
    assert windows == 3
    assert len(list((tmp_path / "demo" / "devices").iterdir())) == clients  # one data folder per full client


@pytest.mark.timeout(180)
def test_demo_serves_the_dashboard_until_stopped(tmp_path):
    demo = subprocess.Popen(
        [sys.executable, "-m", "ldp_telemetry.tools.cli", "demo", "--devices", "600", "--days", "2",
         "--clients", "5", "--data-dir", str(tmp_path / "demo"), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        while not lines or not lines[-1].startswith("Serving until Ctrl-C"):
            line = demo.stdout.readline()
            assert line, "".join(lines)  # the demo ended before serving
            lines.append(line)
        url = re.search(r"Dashboard: (http://127\.0\.0\.1:\d+)/schemas/demo-app", "".join(lines))[1]
        page = requests.get(url + "/schemas/demo-app", timeout=10)
        assert page.status_code == 200 and "<b>600</b> reports" in page.text
        demo.send_signal(signal.SIGTERM)  # as Ctrl-C: the demo stops its server and exits
        assert demo.wait(30) == 0
        with pytest.raises(requests.ConnectionError):
            requests.get(url + "/healthz", timeout=5)
    finally:
        stop(demo)  # SIGTERM first: the demo then stops the server it started


def test_population_holds_the_stated_shares_each_day():
    schema = parse_schema(DEMO_SCHEMA)
    devices = population(schema, 7001, 7, datetime(2026, 11, 21, tzinfo=timezone.utc), np.random.default_rng(3))
    assert len(devices) == 7001
    by_window = Counter(d.window for d in devices)
    assert sorted(by_window) == [f"2026-11-{day}" for day in range(15, 22)]
    assert set(by_window.values()) == {1000, 1001}
    for window in by_window:
        day = [d.record for d in devices if d.window == window]
        os_share = Counter(r["os"] for r in day)
        for category, share in zip(schema.attribute("os").categories, STEADY_SHARES["os"]):
            assert abs(os_share[category] / len(day) - share) <= 1 / len(day) + 1e-9  # exact up to rounding
    first = [d.record["dark_mode"] for d in devices if d.window == "2026-11-15"]
    last = [d.record["dark_mode"] for d in devices if d.window == "2026-11-21"]
    assert abs(np.mean(first) - 0.35) < 0.002 and abs(np.mean(last) - 0.50) < 0.002


def test_the_demo_runs_twice_in_one_folder(tmp_path):
    # The second run finds the first one's database, its WAL and the inbox folder of segments
    # (a folder, which unlink cannot remove) and starts afresh from an empty database.
    demo_dir = tmp_path / "demo"
    for run in (1, 2):
        result = subprocess.run(
            [sys.executable, "-m", "ldp_telemetry.tools.cli", "demo", "--exit", "--devices", "300", "--days", "2",
             "--clients", "3", "--data-dir", str(demo_dir), "--port", "0"],
            capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, f"run {run}: " + result.stdout[-2000:] + result.stderr[-2000:]
        assert (demo_dir / "aggregator.db-inbox").is_dir()
        with sqlite3.connect(demo_dir / "aggregator.db") as db:
            stored = db.execute("SELECT count(*) FROM reports").fetchone()[0]
            assert stored == (3 + HOMEPAGE_DEVICES_PER_DEVICE) * 300  # this run's only


def test_the_demos_help_counts_the_schemas_it_publishes():
    # Issue 31: `demo --help` said "three demo schemas" while the demo published four.
    from click.testing import CliRunner

    from ldp_telemetry.tools import populations
    from ldp_telemetry.tools.cli import main

    published = [populations.DEMO_SCHEMA, populations.USAGE_SCHEMA, populations.MEMO_SCHEMA,
                 populations.homepage_schema()]
    words = {3: "three", 4: "four", 5: "five"}
    help_text = " ".join(CliRunner().invoke(main, ["demo", "--help"]).output.split())
    assert f"publishes {words[len(published)]} demo schemas" in help_text
