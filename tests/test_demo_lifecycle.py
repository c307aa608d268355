"""`ldp-telemetry demo`: its aggregator never outlives it, and it says which port it took.

The server runs in a session of its own (tools/process.py), so only the demo can stop it:
on SIGTERM, SIGHUP and Ctrl-C it does so itself; on SIGKILL its watchdog does.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

pytestmark = pytest.mark.timeout(180)


def demo_command(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "ldp_telemetry.tools.cli", "demo", "--devices", "60", "--days", "1",
            "--clients", "2", "--data-dir", str(data_dir), *args]


def start_serving(data_dir: Path) -> tuple[subprocess.Popen, str, list[str]]:
    """The demo (not --exit), once it serves: the process, the server's URL, its output so far."""
    demo = subprocess.Popen(demo_command(data_dir, "--port", "0"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = read_until(demo, "Serving until Ctrl-C")
    url = re.search(r"Dashboard: (http://127\.0\.0\.1:\d+)/schemas/demo-app", "".join(lines))[1]
    assert requests.get(url + "/healthz", timeout=5).status_code == 200
    return demo, url, lines


def read_until(demo: subprocess.Popen, prefix: str) -> list[str]:
    """The demo's lines up to the first that starts with ``prefix``; fails if it ends before."""
    lines: list[str] = []
    while not lines or not lines[-1].startswith(prefix):
        line = demo.stdout.readline()
        if not line:
            demo.wait(30)
            pytest.fail(f"the demo ended before {prefix!r}:\n" + "".join(lines))
        lines.append(line)
    return lines


def answers(url: str) -> bool:
    try:
        requests.get(url + "/healthz", timeout=1)
    except requests.ConnectionError:
        return False
    return True


def stops_answering(url: str, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not answers(url):
            return True
        time.sleep(0.2)
    return not answers(url)


def processes_on(data_dir: Path) -> list[int]:
    """Every process (watchdog, server master, workers) whose command names the demo's database."""
    needle = str(data_dir / "aggregator.db").encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except (OSError, ValueError):
            pass
    return found


def all_gone(data_dir: Path, within: float) -> bool:
    """Poll until no process of the demo's server is left (the port closes before they all exit)."""
    deadline = time.monotonic() + within
    while processes_on(data_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not processes_on(data_dir)


def kill_leftovers(data_dir: Path) -> None:
    """SIGKILL the process group of anything still running on the demo's database (Linux /proc)."""
    for pid in processes_on(data_dir):
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except OSError:
            pass


def stop(demo: subprocess.Popen) -> None:
    if demo.poll() is None:
        demo.send_signal(signal.SIGTERM)
        try:
            demo.wait(30)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()
    demo.stdout.close()


def test_the_server_dies_with_a_sigkilled_demo(tmp_path):
    data_dir = tmp_path / "demo"
    demo, url, _ = start_serving(data_dir)
    try:
        demo.kill()  # SIGKILL: no handler runs, no finally; the watchdog stops the server
        demo.wait(10)
        assert stops_answering(url, within=10), "the server outlived the SIGKILLed demo"
        assert all_gone(data_dir, within=20), f"left running: {processes_on(data_dir)}"
    finally:
        stop(demo)
        kill_leftovers(data_dir)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT], ids=["sighup", "ctrl_c"])
def test_a_stop_signal_while_serving_stops_the_demo_and_its_servers_with_status_0(tmp_path, sig):
    # SIGHUP: the terminal closed. Ctrl-C (issue 31): how a newcomer ends `make demo`; what was
    # asked for, not an error. Either way the demo stops its servers.
    data_dir = tmp_path / "demo"
    demo, url, _ = start_serving(data_dir)
    try:
        demo.send_signal(sig)
        assert demo.wait(30) == 0
        rest = demo.stdout.read()
        assert "Stopped: the demo's servers (the aggregator, its relay) are stopping" in rest and "Error" not in rest, rest
        assert not answers(url)
        assert all_gone(data_dir, within=20), f"left running: {processes_on(data_dir)}"
    finally:
        stop(demo)
        kill_leftovers(data_dir)


def test_a_busy_port_is_named_with_the_one_used_instead(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(demo_command(tmp_path / "demo", "--port", str(port), "--exit"),
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    used = re.search(rf"^port {port} is busy; using (\d+)$", result.stdout, re.MULTILINE)
    assert used and int(used[1]) != port, result.stdout[:2000]
    assert f"Starting the aggregator on http://127.0.0.1:{used[1]} " in result.stdout




def test_ctrl_c_before_the_table_stops_cleanly_with_status_0(tmp_path):
    # Issue 31: Ctrl-C while the devices were still sending printed "Error: interrupted; the
    # aggregator is stopped" and exited 1 (make then added "Error 1").
    data_dir = tmp_path / "demo"
    demo = subprocess.Popen(demo_command(data_dir, "--port", "0", "--exit"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        read_until(demo, "Published schema demo-app")
        demo.send_signal(signal.SIGINT)
        assert demo.wait(60) == 0
        rest = demo.stdout.read()
        assert "Stopped before it finished: the demo's servers (the aggregator, its relay) are stopping" in rest and "Error" not in rest, rest
        assert "intervals cover the truth" not in rest  # it did stop before the table
        assert all_gone(data_dir, within=20), f"left running: {processes_on(data_dir)}"
    finally:
        stop(demo)
        kill_leftovers(data_dir)
