"""The README's user paths, run as written (issue 22): the demo, twice in one folder; running the
aggregator for real, the client embedded in an app, the operator's daily commands and the
dashboard they lead to; several nodes on one PostgreSQL (when a server answers, as for the
store's tests).

The blocks are read out of README.md (each follows a ``<!-- readme-path: ... -->`` comment), so
a README that drifts from what the code does fails here. Only what a machine's test must change
is changed: the port (8000 may be taken by another program: the README's port is replaced by a
free one, and ``LDP_URL``, which the README documents, points the CLI at it), the client's
endpoint (``https://telemetry.example.org`` becomes that server) and its data folder (a
temporary ``XDG_DATA_HOME``); for several nodes, the database URL (a fresh PostgreSQL schema)
and the address (127.0.0.1: a test opens no port to the network). ``.venv`` is this test's own
environment, linked into the folder the paths run in (and on ``PATH``, for the README's bare
``ldp-telemetry``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from conftest import APP_USAGE

from ldp_telemetry.shared import randomize
from ldp_telemetry.tools.process import free_port

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def block(tag: str) -> str:
    """The fenced block right after ``<!-- readme-path: <tag> ... -->``."""
    match = re.search(rf"<!-- readme-path: {re.escape(tag)}\b[^>]*-->\n```\w*\n(.*?)```", README, re.S)
    assert match, f"README.md has no block tagged readme-path: {tag}"
    return match[1]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A user's working folder: ``.venv`` is this test's environment."""
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    return tmp_path


def test_make_demo_as_written_runs_twice(folder: Path):
    # README: "make demo DEMO_ARGS=--exit   # for scripts: stop after the table". The data folder
    # and port are the test's, so that it neither touches the checkout's demo-data nor needs 8000.
    line = next(line for line in block("demo").splitlines() if "--exit" in line).split("#")[0].strip()
    assert line == "make demo DEMO_ARGS=--exit"
    args = f"--exit --data-dir {folder / 'demo-data'} --port 0"
    for run in (1, 2):
        done = subprocess.run(["make", "-s", "-C", str(ROOT), "demo", f"DEMO_ARGS={args}"], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, f"run {run}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        assert done.stdout.count("intervals cover the truth") == 6  # a table per demo schema and per breakdown


def test_run_for_real_embed_the_client_and_the_daily_commands(folder: Path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    (folder / "app-usage.json").write_text(block("schema file"))
    (folder / "embed.py").write_text(block("embed").replace("https://telemetry.example.org", url))
    script = "\n".join(["set -e", block("run for real"), ".venv/bin/python embed.py", block("daily commands")])
    env = {**os.environ, "LDP_URL": url, "XDG_DATA_HOME": str(folder / "data")}
    for name in ("LDP_ADMIN_TOKEN", "LDP_READ_TOKEN", "LDP_DB"):
        env.pop(name, None)
    # A session of its own: the server the README starts with "&" outlives the script, and the
    # whole group is stopped at the end. Output goes to files: the server holds them open after
    # the script ends, which a pipe's reader would wait for.
    with open(folder / "out.txt", "w") as out_file, open(folder / "err.txt", "w") as err_file:
        shell = subprocess.Popen(["bash", "-c", script.replace("8000", str(port))], cwd=folder, env=env,
                                 stdout=out_file, stderr=err_file, text=True, start_new_session=True)
    try:
        shell.wait(timeout=180)
        out, err = (folder / "out.txt").read_text(), (folder / "err.txt").read_text()
        assert shell.returncode == 0, out[-3000:] + err[-3000:]
        assert "published: app-usage version 1" in out
        assert re.search(r"^app-usage\s+1\s+2\s+day\s+equal\s+2\s+Which features people use\.$", out, re.M)
        assert re.search(r"^refreshed: \d+ estimate rows written", out, re.M)
        # the one report the embedded client sent is counted, in every row of the rollup
        rows = re.findall(r"^all\s+(dark_mode|os)\s+(\S+)\s+.*\s(\d+)\s+1$", out, re.M)
        assert [(a, v) for a, v, _ in rows] == [("dark_mode", "true"), ("os", "linux"), ("os", "macos"),
                                                ("os", "windows"), ("os", "other")]
        assert {n for _, _, n in rows} == {"1"}
        assert '"mechanism": "rr"' in out  # schema show: the derived schema
        assert re.search(r"^equal\s+dark_mode\s+rr\s+1\s+", out, re.M)  # plan by the published name
        # the dashboard the README sends the analyst to
        page = requests.get(f"{url}/schemas/app-usage", timeout=10)
        assert page.status_code == 200 and "<b>1</b> report<" in page.text
    finally:
        try:
            os.killpg(shell.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        shell.wait(30)  # the script itself; the server's group was sent SIGTERM


@pytest.mark.postgres_only
def test_several_nodes_on_one_postgresql(folder: Path, backend, new_db):
    lines = block("several nodes").splitlines()
    assert lines[0].startswith("export LDP_DB='postgresql://")
    env = {**os.environ, "PATH": f"{folder / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "LDP_ADMIN_TOKEN": "readme-nodes-token", "LDP_SCHEDULER": "false"}
    env.pop("LDP_READ_TOKEN", None)
    location = new_db()  # one database (a fresh PostgreSQL schema) for every node
    script = "\n".join([f"export LDP_DB='{location}'", *lines[1:]]).replace("0.0.0.0", "127.0.0.1")
    urls, nodes = [], []
    try:
        for _ in range(2):  # "on each node": two nodes
            port = free_port()
            nodes.append(subprocess.Popen(["bash", "-c", script.replace("8000", str(port))], cwd=folder, env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
            urls.append(f"http://127.0.0.1:{port}")
        for url in urls:
            _wait_for(url)
        (folder / "app-usage.json").write_text(block("schema file"))
        cli = [str(folder / ".venv" / "bin" / "ldp-telemetry")]
        published = subprocess.run([*cli, "schema", "publish", "app-usage.json", "--url", urls[0]], cwd=folder,
                                   env=env, capture_output=True, text=True, timeout=60)
        assert published.returncode == 0, published.stderr
        # any node answers any request: reports to the second, refresh there, read from the first
        reports = [randomize(APP_USAGE, {"dark_mode": i % 2 == 0, "os": "linux"}) for i in range(50)]
        assert requests.post(urls[1] + "/api/v1/reports", json={"reports": reports}, timeout=30).status_code == 202
        assert subprocess.run([*cli, "refresh", "--url", urls[1]], env=env, timeout=60).returncode == 0
        table = subprocess.run([*cli, "estimates", "app-usage", "--url", urls[0]], env=env, capture_output=True,
                               text=True, timeout=60)
        assert table.returncode == 0, table.stderr
        assert re.findall(r"^all\s+dark_mode\s+true\s+.*\s(\d+)\s+1$", table.stdout, re.M) == ["50"]
    finally:
        for node in nodes:
            try:
                os.killpg(node.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            node.wait(30)


def _wait_for(url: str, timeout: float = 60.0) -> None:
    """Until ``url``'s /healthz answers 200 (the README's ``until curl -fs ...`` loop)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer /healthz within {timeout:g} s")
