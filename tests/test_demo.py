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
from ldp_telemetry.tools.populations import CRASH_RATES, DEMO_SCHEMA, STEADY_SHARES, population
from ldp_telemetry.shared import parse_schema

# attribute, value (a bucket name has a space), mechanism, eps, n, truth, estimate (clipped, "*" when
# clipping changed it), interval, covers
ROW = re.compile(r"^(\S+)\s+(\[\S+ \S+[)\]]|\S+)\s+[a-z]+\s+[\d.]+\s+([\d,]+)\s+([\d.]+%?)\s+([\d.]+%?)\*? +"
                 r"\[([\d.]+%?), ([\d.]+%?)\]\s+(yes|NO)$")
# value, source, n, truth, estimate, interval, covers (demo-homepages' table)
SITE_ROW = re.compile(r"^(\S+)\s+(listed|added|discovered)\s+[\d.]+\s+([\d,]+)\s+([\d.]+%)\s+([\d.]+%)\*? +"
                      r"\[([\d.]+%), ([\d.]+%)\]\s+(yes|NO)$")

# demo-app's breakdown tables: of, value, by, by value, by truth, by share, n, truth, estimate
# (clipped, "*" when clipping changed it), interval, covers
BREAKDOWN_ROW = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+([\d.]+%)\s+(-?[\d.]+%)\s+([\d,]+)\s+([\d.]+%)\s+"
                           r"([\d.]+%)\*? +\[([\d.]+%), ([\d.]+%)\]\s+(yes|NO)$")
# and its rows with a reason, set apart: ... n, truth, estimate or "—", reason
BREAKDOWN_APART = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+([\d.]+%)\s+(\S+)\s+([\d,]+)\s+([\d.]+%)\s+(\S+)\s+"
                             r"(by_share_not_distinct_from_0|memoised_rollup|too_few_reports)$")


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
    # demo-app: 4 booleans + 4 categories; demo-usage: a mean + 4 buckets; demo-memoised: 1 + 4
    assert len(rows) == 18
    assert [m[2] for m in rows if m[1] in ("session_minutes", "load_ms")] == [
        "mean", "[0, 50)", "[50, 100)", "[100, 250)", "[250, 1000]"]
    for m in rows:
        n, truth, low, high = int(m[3].replace(",", "")), number(m[4]), number(m[6]), number(m[7])
        assert n == devices
        assert (m[8] == "yes") == (low <= truth <= high)
    # Each 95% interval misses with probability about 0.05 (less: the population is fixed; the
    # memoised rollup's is wider still), so 6 or more misses out of 18 has probability about
    # C(18,6) 0.05^6 ≈ 3e-4.
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
    # demo-app's breakdowns: crashed by os, listed at publish, and os by crashed, added after the
    # reports arrived; each row's true within-b share beside its estimate and interval
    assert "Added the breakdown os by crashed to demo-app after its reports arrived" in out
    assert "demo-app: crashed within each os (listed at publish), every window together" in out
    assert "demo-app: os within each crashed (added after the reports arrived, back-filled from them)" in out
    assert out.index("The ten most common sites in truth: ") < out.index("demo-app: crashed within each os")
    shown = [m for m in map(BREAKDOWN_ROW.match, out.splitlines()) if m]
    apart = [m for m in map(BREAKDOWN_APART.match, out.splitlines()) if m]
    printed = {(m[1], m[2], m[3], m[4]): m for m in shown + apart}
    assert len(printed) == len(shown) + len(apart) == 4 + 8, out[-4000:]
    # the truths: each within-b share of the population (exact per day, rounded), from the demo's rates
    schema = parse_schema(DEMO_SCHEMA)
    truth_devices = population(schema, devices, 3, datetime.now(timezone.utc), np.random.default_rng(2017))
    records = [d.record for d in truth_devices]
    for os in schema.attribute("os").categories:
        on = [r for r in records if r["os"] == os]
        assert abs(sum(r["crashed"] for r in on) / len(on) - CRASH_RATES[os]) < 0.02
        m = printed[("crashed", "true", "os", os)]
        assert number(m[8]) == pytest.approx(sum(r["crashed"] for r in on) / len(on), abs=6e-5)
        assert number(m[5]) == pytest.approx(len(on) / devices, abs=6e-4)
        for crashed in (True, False):
            among = [r for r in records if r["crashed"] is crashed]
            m = printed[("os", os, "crashed", str(crashed).lower())]
            assert number(m[8]) == pytest.approx(sum(r["os"] == os for r in among) / len(among), abs=6e-5)
    for m in shown:
        assert int(m[7].replace(",", "")) == devices  # every report carries both attributes
        truth, low, high = number(m[8]), number(m[10]), number(m[11])
        assert (m[12] == "yes") == (low <= truth <= high)
    # 95% intervals over 12 rows, but the two breakdowns share their joint cells (crashed and an OS),
    # so misses come in pairs: 7 or more (4 or more of about 8 near-independent misses at 0.05 each)
    # has probability about C(8,4) 0.05^4 ≈ 4e-4.
    assert sum(m[12] == "NO" for m in shown) <= 6
    for m in apart:  # a row with a reason: the other's share not told from 0 at 3,000 reports
        assert m[10] in ("by_share_not_distinct_from_0", "too_few_reports") and m[9] == "—"
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
        for category, rate in CRASH_RATES.items():  # the crash rate within each OS, exact up to rounding
            on = [r["crashed"] for r in day if r["os"] == category]
            assert abs(sum(on) / len(on) - rate) <= 0.5 / len(on) + 1e-9
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
