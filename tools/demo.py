"""``ldp-telemetry demo``: the whole system, end to end, on this machine.

It starts the real aggregator (``ldp-telemetry serve``, granian, SQLite in ``./demo-data``),
publishes four demo schemas (settings: booleans and a categorical; usage: a numeric mean and a
histogram; the settings again, memoised; home pages: a string, any site at all), and plays a
population of devices whose true values it knows for each. For the home pages it also adds two
sites to estimate after the reports arrived and runs discovery, which finds the common sites
nobody listed; it waits for their back-fill and prints each beside its true share. In
``demo-app`` the crash rate depends on the OS: the schema lists the breakdown of ``crashed`` by
``os``, and once the reports are in the demo adds ``os`` by ``crashed`` (which OS the crashed
devices run) through the admin API, waits for its back-fill, and prints every breakdown row
beside its true within-b share. Every
device randomises its own record on the device side with the client's code (the OS CSPRNG) and
the randomised report goes to the server over HTTP. Then it refreshes the estimates, prints each
true share beside its estimate and interval, and serves the dashboard until Ctrl-C, SIGTERM or
SIGHUP. The server never outlives the demo, even one killed by SIGKILL (see :data:`WATCHDOG`).

Two kinds of device, because each device is its own client: a client's ledger allows one report
per schema per window, so 20,000 devices are 20,000 ledgers and outboxes, not 20,000 records
through one client.

- The first ``clients`` devices each run a whole :class:`TelemetryClient` (own data folder,
  ledger, outbox on disk, background sender): the path an app takes.
- The rest call the client's :func:`randomize` (the same on-device randomisation, without the
  ledger and outbox). Those of ``demo-app`` send each report alone, padded and encrypted to the
  aggregator, through a relay the demo starts (``ldp-telemetry relay``), which hands them to the
  aggregator in one shuffled batch: the page then shows each window's crowd and the central ε
  beside the local one. Those of the other schemas go out in batches through the client's HTTP
  transport, as a gateway carrying reports for many devices would send them. A full client per
  device (its own data folder, outbox and sender thread) would take minutes for 20,000.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

import numpy as np
import requests

from ..client import RequestsTransport, TelemetryClient, randomize
from ..shared import ohttp
from ..shared.breakdowns import Row, values_of
from ..shared.display import label, most_frequent_first, style_of
from ..shared.schema import Schema, parse_schema
from ..shared.windows import ROLLUP, window_start
from .populations import (ADDED_BREAKDOWN, ADDED_RANKS, DEMO_BREAKDOWNS, DEMO_SCHEMA, MEMO_SCHEMA, USAGE_SCHEMA, Device,
                          demo_sites, homepage_schema, homepages, population)
from .process import ServerProcess, free_port
from .tables import BreakdownTruthRow, TruthRow, breakdown_truth_table, truth_row, truth_table

BATCH = 1000  # reports per POST for the batched devices (the server's default LDP_MAX_BATCH)
CLIENT_GROUP = 100  # full clients alive at once
SERVER_START_TIMEOUT = 60.0
# Home pages come from 10 times as many devices as the other schemas: discovery spreads half of the
# reports over its levels (11 here), and needs thousands a level to find more than the top few.
HOMEPAGE_DEVICES_PER_DEVICE = 10
RELAY_SENDERS = 16  # devices posting to the relay at once, each its own report in its own request
RELAY_TIMEOUT = 120.0  # seconds to wait for the relay's batches to reach the aggregator
BACKFILL_TIMEOUT = 120.0  # seconds to wait for the back-fill of the added and discovered sites, and of a breakdown


@dataclass(frozen=True)
class Options:
    devices: int = 20_000
    days: int = 7
    clients: int = 200  # devices that run a whole TelemetryClient (the slow, complete path)
    data_dir: Path = Path("demo-data")
    port: int = 8000  # 0: any free port; a busy port falls back to a free one
    seed: int = 2017  # of the population's true values (devices randomise with the OS CSPRNG)
    exit: bool = False


class Progress:
    """A plain-text progress bar: redrawn in place on a terminal, every 10% in a log."""

    def __init__(self, total: int, label: str, out: TextIO, width: int = 30):
        self.total, self.label, self.out, self.width = total, label, out, width
        self.tty = out.isatty()
        self.started = time.perf_counter()
        self._last_tenth = -1

    def update(self, done: int) -> None:
        tenth = done * 10 // max(1, self.total)
        if not self.tty and tenth == self._last_tenth:
            return
        self._last_tenth = tenth
        filled = self.width * done // max(1, self.total)
        line = (f"  [{'#' * filled}{'.' * (self.width - filled)}] {done:>7,}/{self.total:,} {self.label} "
                f"{time.perf_counter() - self.started:5.1f} s")
        self.out.write(("\r" + line) if self.tty else line + "\n")
        if self.tty and done >= self.total:
            self.out.write("\n")
        self.out.flush()


# The server dies with the demo, however the demo ends. ServerProcess starts the server in a
# session of its own (so that a Ctrl-C in the terminal does not reach it before the demo stops it
# gracefully), which also means that a demo killed by SIGKILL, or by a signal it does not handle,
# would leave it running, re-parented to PID 1. So the demo's server command is this watchdog:
# it runs ``ldp-telemetry serve`` as its child, in the same process group, and once its own
# parent (the demo, whose pid it is given) is gone, it stops the whole group: SIGTERM, then
# SIGKILL after a grace period. It ignores the SIGTERM that ServerProcess.stop() sends to the
# group and waits for the server to finish, so a normal stop stays graceful. It polls its parent
# pid (portable; a closed pipe would need a file descriptor that ServerProcess does not pass on).
WATCHDOG = """
import os, signal, subprocess, sys, time
parent, command = int(sys.argv[1]), sys.argv[2:]
signal.signal(signal.SIGTERM, lambda signum, frame: None)  # a handler, not SIG_IGN: exec resets it
server = subprocess.Popen(command)
while server.poll() is None:
    if os.getppid() != parent:
        os.killpg(0, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(0, signal.SIGKILL)
        break
    time.sleep(0.2)
code = server.wait()
sys.exit(code if code >= 0 else 128 - code)
"""


class DemoServer(ServerProcess):
    """``ldp-telemetry serve`` on the demo's database, preferring the port asked for.

    It runs under :data:`WATCHDOG`, so it stops when the demo process ends, even by SIGKILL.
    """

    def __init__(self, data_dir: Path, port: int):
        self.admin_token = secrets.token_urlsafe(24)
        self.relay_token = secrets.token_urlsafe(24)  # the demo's relay's, one of LDP_RELAY_TOKENS
        db_path = data_dir / "aggregator.db"
        serve = [sys.executable, "-m", "ldp_telemetry.tools.cli", "serve", "--host", "127.0.0.1",
                 "--port", "{port}", "--workers", "2", "--db", _literal(str(db_path))]
        super().__init__(db_path, workers=2, log_path=data_dir / "server.log",
                         env={"LDP_ADMIN_TOKEN": self.admin_token, "LDP_ESTIMATE_INTERVAL": "10",
                              "LDP_READ_TOKEN": None, "LDP_SCHEDULER": "true", "LDP_RELAY_TOKENS": self.relay_token},
                         command=[sys.executable, "-c", _literal(WATCHDOG), str(os.getpid()), *serve])
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        response = requests.request(method, self.url + path, json=body, timeout=60,
                                    headers={"Authorization": f"Bearer {self.admin_token}"})
        if response.status_code >= 300:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response.json()

    def wait(self) -> None:
        """Block until the server exits or Ctrl-C."""
        assert self.process is not None
        self.process.wait()


class DemoRelay(ServerProcess):
    """``ldp-telemetry relay`` in front of the demo's aggregator, under :data:`WATCHDOG` too. Its
    batches are exactly ``batch`` requests (``--min-batch`` = ``--max-batch``): the demo sends that
    many, so all of them reach the aggregator without waiting for ``--max-wait``."""

    def __init__(self, data_dir: Path, server: DemoServer, batch: int):
        relay = [sys.executable, "-m", "ldp_telemetry.tools.cli", "relay", "--aggregator", server.url,
                 "--port", "{port}", "--db", _literal(str(data_dir / "relay.db")),
                 "--min-batch", str(batch), "--max-batch", str(batch)]
        super().__init__(data_dir / "relay.db", workers=1, log_path=data_dir / "relay.log",
                         env={"LDP_RELAY_TOKEN": server.relay_token},
                         command=[sys.executable, "-c", _literal(WATCHDOG), str(os.getpid()), *relay])

    def forwarded(self) -> int:
        """Requests in the batches the aggregator acknowledged (the relay's own count)."""
        text = requests.get(self.url + "/metrics", timeout=10).text
        found = re.search(r"^ldp_relay_forwarded_requests_total (\S+)$", text, re.M)
        return int(float(found.group(1))) if found else 0


def send_through_relay(server: DemoServer, relay: DemoRelay, schema: Schema, devices: list[Device],
                       progress: Callable[[int], None], done: int) -> None:
    """Each device randomises with the client's ``randomize`` and sends its report alone, padded and
    encrypted to the aggregator (Oblivious HTTP), to the relay, as a client with ``relay=`` does;
    returns once the relay's batches have reached the aggregator. The key configuration is taken
    only where the relay and the aggregator serve the same bytes, as a client takes it (a client
    also lets a minute pass between the two; these devices are simulated, so they do not wait)."""
    keys = requests.get(relay.url + "/ohttp-keys", timeout=60).content
    if keys != requests.get(server.url + "/api/v1/ohttp-keys", timeout=60).content:
        raise RuntimeError("the relay and the aggregator serve different Oblivious HTTP keys")
    config = ohttp.choose_key_config(keys)
    local = threading.local()

    def send(device: Device) -> None:
        report = randomize(schema, device.record, window=device.window, device_secret=device.secret or None)
        request = ohttp.encapsulate_report(config, schema, report)
        if not hasattr(local, "session"):
            local.session = requests.Session()
        answer = local.session.post(relay.url + "/relay", data=request, timeout=60,
                                    headers={"Content-Type": ohttp.REQUEST_MEDIA_TYPE})
        if answer.status_code != 202:
            raise RuntimeError(f"the relay refused a report: {answer.status_code} {answer.text[:300]}")

    with ThreadPoolExecutor(RELAY_SENDERS) as senders:
        for sent, _ in enumerate(senders.map(send, devices), 1):
            if sent % BATCH == 0 or sent == len(devices):
                progress(done + sent)
    deadline = time.monotonic() + RELAY_TIMEOUT
    while relay.forwarded() < len(devices):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the relay did not hand its batches over within {RELAY_TIMEOUT:.0f} s; "
                               f"see {relay.log_path}")
        time.sleep(0.2)


def relay_lines(schema: Schema, estimates: list[dict[str, Any]]) -> list[str]:
    """What the relay did for ``schema``'s reports, from its estimate rows' relay fields: per window
    its crowd and central ε, and the rollup's (the dashboard's privacy panel says the same)."""
    crowds = {r["window"]: r for r in estimates if r["crowd"] is not None}
    if ROLLUP not in crowds:
        return []
    rollup = crowds.pop(ROLLUP)
    windows = ", ".join(f"{w} {r['crowd']:,} (ε {r['epsilon_shuffled']:.2f})" for w, r in sorted(crowds.items()))
    return [f"Through the relay: {rollup['relayed']:.1%} of {schema.name}'s reports. Each is ε = {schema.epsilon:g} "
            f"private on its own, and against the aggregator, which saw it only in its window's shuffled crowd, "
            f"(ε, δ = {rollup['delta']:g})-private with ε = {rollup['epsilon_shuffled']:.2f} in the smallest crowd "
            f"({rollup['crowd']:,} reports). Smallest crowd per window: {windows}."]


def send_through_clients(server: DemoServer, schema: dict[str, Any], devices: list[Device], folder: Path,
                         progress: Callable[[int], None]) -> None:
    """Each device runs a whole TelemetryClient with its own data folder, clocked to its window."""
    done = 0
    for start in range(0, len(devices), CLIENT_GROUP):
        group = devices[start:start + CLIENT_GROUP]
        clients = []
        for i, device in enumerate(group, start):
            moment = window_start(device.window, schema["window"])
            client = TelemetryClient(server.url, schema, max_epsilon=schema["epsilon"],
                                     data_dir=folder / f"device-{i:06d}", clock=lambda moment=moment: moment)
            result = client.record(device.record)
            if not result:
                raise RuntimeError(f"device {i} could not record: {result.reason}")
            clients.append(client)
        for client in clients:
            if not client.flush(60):
                raise RuntimeError("a client could not deliver its report within 60 s; see the server log")
            client.close()
        done += len(group)
        progress(done)


def send_in_batches(server: DemoServer, schema: Schema, devices: list[Device], progress: Callable[[int], None],
                    done: int) -> None:
    """Each device randomises with the client's ``randomize``; reports go out in batches."""
    transport = RequestsTransport()
    try:
        for start in range(0, len(devices), BATCH):
            reports = [randomize(schema, d.record, window=d.window, device_secret=d.secret or None)
                       for d in devices[start:start + BATCH]]
            response = transport.post_json(server.url + "/api/v1/reports", {"reports": reports}, timeout=60)
            if response.status != 202:
                raise RuntimeError(f"the aggregator refused a batch: {response.status} {response.body}")
            progress(done + start + len(reports))
    finally:
        transport.close()


def truth_rows(schema: Schema, devices: list[Device], estimates: list[dict[str, Any]]) -> list[TruthRow]:
    """The rollup estimate of every value beside the population's truth: a share, or a numeric
    attribute's mean of the values as the device clips them."""
    rollup = {(e["attribute"], e["value"]): e for e in estimates if e["window"] == ROLLUP}
    rows = []
    for attribute in schema.attributes:
        # each record value as the device prepares it (clipped, bucketed), then what the population holds
        prepared = np.array([attribute.kind.prepare(attribute, d.record[attribute.name]) for d in devices])
        truths = attribute.kind.realised(attribute, prepared)
        for value, key, truth in zip(attribute.values, attribute.keys, truths):
            rows.append(truth_row(schema, attribute.name, key, truth, rollup[(attribute.name, value)]))
    return rows


def within_truths(schema: Schema, devices: list[Device], of: str, by: str
                   ) -> tuple[dict[tuple[Any, Any], float], dict[Any, float]]:
    """The population's truths for the breakdown of ``of`` by ``by``, keyed as the API keys its
    rows: the share of each value of ``of`` (a numeric one's mean) among the devices whose ``by``
    is each value b, by (value, b), and b's own share. Each record value as the device prepares it,
    then what the devices holding b hold, as :func:`truth_rows` computes the marginal truths."""
    a, b = schema.attribute(of), schema.attribute(by)
    prepared_of = np.array([a.kind.prepare(a, d.record[of]) for d in devices])
    by_values = values_of(b)  # a boolean's True and False; a category's or bucket's name by its index

    def key(prepared: Any) -> Any:
        return bool(prepared) if isinstance(prepared, (bool, np.bool_)) else by_values[prepared]
    held_by = np.array([key(b.kind.prepare(b, d.record[by])) for d in devices], dtype=object)
    within: dict[tuple[Any, Any], float] = {}
    shares: dict[Any, float] = {}
    for value_b in by_values:
        holding = held_by == value_b
        shares[value_b] = float(holding.mean())
        if holding.any():
            within.update({(value, value_b): truth
                           for value, truth in zip(a.values, a.kind.realised(a, prepared_of[holding]))})
    return within, shares


def breakdown_rows(server: DemoServer, schema: Schema) -> tuple[float, list[dict[str, Any]]]:
    """The confidence and every row of ``GET /api/v1/breakdowns`` for ``schema`` (every page)."""
    asked: dict[str, str | int] = {"schema": schema.name, "version": schema.version}
    answer = requests.get(server.url + "/api/v1/breakdowns", params=asked, timeout=60).json()
    rows = list(answer["breakdowns"])
    while answer["next"] is not None:
        answer = requests.get(server.url + "/api/v1/breakdowns", params={**asked, "next": answer["next"]},
                              timeout=60).json()
        rows += answer["breakdowns"]
    return answer["confidence"], rows


def listed_breakdowns(server: DemoServer, schema: Schema) -> list[dict[str, Any]]:
    """``schema``'s breakdowns, listed at publish and added, each with its ``source``."""
    return list(requests.get(f"{server.url}/api/v1/schemas/{schema.name}/{schema.version}/breakdowns",
                             timeout=60).json()["breakdowns"])


def wait_for_breakdowns(server: DemoServer, schema: Schema) -> None:
    """Until every breakdown of ``schema`` (one added later: once its back-fill is done) has its
    rows in the ``all`` rollup, refreshing the estimates while it waits."""
    listed = listed_breakdowns(server, schema)
    deadline = time.monotonic() + BACKFILL_TIMEOUT
    while True:
        estimated = {(r["of"], r["by"]) for r in breakdown_rows(server, schema)[1] if r["window"] == ROLLUP}
        if all((b["of"], b["by"]) in estimated for b in listed):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the back-fill of {schema.name}'s breakdowns took over {BACKFILL_TIMEOUT:.0f} s; "
                               f"see the server log")
        time.sleep(0.5)
        server.admin("POST", "/api/v1/estimates/refresh")


def breakdown_lines(server: DemoServer, schema: Schema, devices: list[Device]) -> list[str]:
    """Each breakdown's table: its rows over every window together, within each value of ``by``
    the true within-b share beside the estimate and its interval (:func:`breakdown_truth_table`)."""
    confidence, rows = breakdown_rows(server, schema)
    lines: list[str] = []
    for breakdown in listed_breakdowns(server, schema):
        of, by = breakdown["of"], breakdown["by"]
        within, shares = within_truths(schema, devices, of, by)
        style = style_of(schema.attribute(of))
        table = [BreakdownTruthRow(of, by, style, within[(r["value"], r["by_value"])], shares[r["by_value"]],
                                   Row(label(r["value"]), label(r["by_value"]), r["estimate"], r["estimate_clipped"],
                                       r["ci_low"], r["ci_high"], r["by_share"], r["n"], r["reason"]))
                 for r in rows if r["window"] == ROLLUP and (r["of"], r["by"]) == (of, by)]
        when = ("listed at publish" if breakdown["source"] == "listed" else
                f"{breakdown['source']} after the reports arrived, back-filled from them")
        lines += ["", f"{schema.name}: {of} within each {by} ({when}), every window together "
                      f"({confidence:.0%} intervals; by truth, by share: each {by} value's true and estimated share):"]
        lines += breakdown_truth_table(table, summary=f" (about {confidence:.0%} should).")
    return lines


def play_homepages(server: DemoServer, options: Options, rng: np.random.Generator, say: Callable[[str], None],
                   out: TextIO) -> tuple[Schema, list[Device]]:
    """The string schema: publish it, send its devices' reports, add two sites afterwards, run
    discovery, and wait until the back-fill of what was added and found is done."""
    schema = parse_schema(server.admin("POST", "/api/v1/schemas", homepage_schema()))
    attribute = schema.attributes[0]
    devices = homepages(options.devices * HOMEPAGE_DEVICES_PER_DEVICE, options.days, datetime.now(timezone.utc), rng)
    say(f"Published schema {schema.name} v{schema.version}: a home page, any site, {len(attribute.candidates)} "
        f"listed; {len(devices):,} devices randomise theirs with randomize() (half of the reports at one of "
        f"{len(attribute.levels)} discovery levels).")
    send_in_batches(server, schema, devices, Progress(len(devices), "devices", out).update, 0)
    sites = demo_sites()
    added = server.admin("POST", f"/api/v1/schemas/{schema.name}/{schema.version}/candidates",
                         {"attribute": attribute.name, "candidates": [sites[i] for i in ADDED_RANKS]})["added"]
    found = server.admin("POST", f"/api/v1/schemas/{schema.name}/{schema.version}/discover")["added"]
    say(f"Added {added} sites to estimate after the reports arrived; discovery found {found} more nobody listed. "
        f"Waiting for their back-fill ...")
    deadline = time.monotonic() + BACKFILL_TIMEOUT
    while not _estimated_all(server, schema):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the back-fill of the new sites took over {BACKFILL_TIMEOUT:.0f} s; see the server log")
        time.sleep(0.5)
    return schema, devices


def _estimated_all(server: DemoServer, schema: Schema) -> bool:
    """Whether every candidate to estimate has its rollup estimate (its back-fill is done)."""
    server.admin("POST", "/api/v1/estimates/refresh")
    listed = requests.get(f"{server.url}/api/v1/schemas/{schema.name}/{schema.version}/candidates",
                          timeout=60).json()["candidates"]
    rows = requests.get(server.url + "/api/v1/estimates", params={"schema": schema.name}, timeout=60).json()
    estimated = {e["value"] for e in rows["estimates"] if e["window"] == ROLLUP}
    return all(c["value"] in estimated for c in listed if c["estimated"])


def homepage_lines(server: DemoServer, schema: Schema, devices: list[Device]) -> list[str]:
    """The home pages' table: each candidate (listed, added, discovered) beside its true share, and
    the ten most common sites with whether the analyst can see them now."""
    answer = requests.get(server.url + "/api/v1/estimates", params={"schema": schema.name}, timeout=60).json()
    listed = requests.get(f"{server.url}/api/v1/schemas/{schema.name}/{schema.version}/candidates",
                          timeout=60).json()["candidates"]
    held = Counter(d.record["home"] for d in devices)
    rollup = {e["value"]: e for e in answer["estimates"] if e["window"] == ROLLUP}
    order = most_frequent_first({c["value"]: rollup[c["value"]]["estimate_clipped"] for c in listed
                                 if c["value"] in rollup})  # as the dashboard lists them
    rows = [truth_row(schema, "home", value, held[value] / len(devices), rollup[value]) for value in order]
    sources = {c["value"]: c["source"] for c in listed}
    lines = [f"{schema.name}, every window together ({answer['confidence']:.0%} intervals; n counts the level-0 "
             f"reports, half of them):"]
    lines += truth_table(rows, summary=f" (about {answer['confidence']:.0%} should).", sources=sources)
    unestimated = [c["value"] for c in listed if not c["estimated"]]
    if unestimated:
        lines.append(f"Also discovered, not estimated (characters outside the alphabet): {', '.join(unestimated)}")
    top = demo_sites()[:10]
    lines.append("The ten most common sites in truth: "
                 + ", ".join(f"{site} {held[site] / len(devices):.1%} ({sources.get(site, 'not found')})" for site in top))
    return lines


def run(options: Options, out: TextIO = sys.stdout) -> list[TruthRow]:
    """Run the demo; returns the table's rows. Serves until Ctrl-C unless ``options.exit``."""
    def say(text: str = "") -> None:
        out.write(text + "\n")
        out.flush()

    data_dir = options.data_dir.resolve()
    _fresh(data_dir)
    port = free_port(prefer=options.port)
    if options.port and port != options.port:
        say(f"port {options.port} is busy; using {port}")
    server = DemoServer(data_dir, port)
    stoppable: list[ServerProcess] = [server]  # the relay joins once started; stopped last first
    # SIGTERM (a script, a service manager) and SIGHUP (the terminal closed) stop the server too,
    # as Ctrl-C does, at any stage; the watchdog covers what no handler can (SIGKILL).
    restore = _handle_stop_signals()
    try:
        say(f"Starting the aggregator on {server.url} (SQLite in {data_dir}) ...")
        server.start(timeout=SERVER_START_TIMEOUT)
        published = server.admin("POST", "/api/v1/schemas", {**DEMO_SCHEMA, "breakdowns": DEMO_BREAKDOWNS})
        schema = parse_schema(published)  # as clients fetch it: its breakdowns are kept beside it
        say(f"Published schema {schema.name} v{schema.version}: epsilon {schema.epsilon:g} per report, "
            f"{len(schema.attributes)} attributes; the breakdown "
            f"{', '.join(b['of'] + ' by ' + b['by'] for b in DEMO_BREAKDOWNS)} (the crash rate depends on the OS).")
        rng = np.random.default_rng(options.seed)
        devices = population(schema, options.devices, options.days, datetime.now(timezone.utc), rng)
        full = min(options.clients, len(devices))
        # The others go through a relay the demo starts, in one shuffled batch: the largest crowds it can make.
        relayed = devices[full:]
        say(f"Simulating {len(devices):,} devices over {options.days} {schema.window} windows: "
            f"{full:,} run a whole TelemetryClient and post to the aggregator; {len(relayed):,} randomise with "
            f"the client's randomize() and send each report alone, encrypted to the aggregator, through a relay "
            f"that hands them over in one shuffled batch.")
        progress = Progress(len(devices), "devices", out)
        started = time.perf_counter()
        send_through_clients(server, published, devices[:full], data_dir / "devices", progress.update)
        if relayed:
            relay = DemoRelay(data_dir, server, len(relayed))
            relay.start(timeout=SERVER_START_TIMEOUT)
            stoppable.append(relay)
            send_through_relay(server, relay, schema, relayed, progress.update, full)
        sent = time.perf_counter() - started
        server.admin("POST", f"/api/v1/schemas/{schema.name}/{schema.version}/breakdowns", ADDED_BREAKDOWN)
        say(f"Added the breakdown {ADDED_BREAKDOWN['of']} by {ADDED_BREAKDOWN['by']} to {schema.name} after its "
            f"reports arrived; the server back-fills it from them while the other schemas play.")
        played = [(schema, devices)]
        for extra in (USAGE_SCHEMA, MEMO_SCHEMA):
            other = parse_schema(server.admin("POST", "/api/v1/schemas", extra))
            say(f"Published schema {other.name} v{other.version}; the same number of devices randomise "
                f"with randomize(){' and their own device secrets' if other.epsilon_permanent else ''}.")
            others = population(other, options.devices, options.days, datetime.now(timezone.utc), rng)
            send_in_batches(server, other, others, Progress(len(others), "devices", out).update, 0)
            played.append((other, others))
        homes = play_homepages(server, options, rng, say, out)
        server.admin("POST", "/api/v1/estimates/refresh")  # every schema's, now that all reports are in
        wait_for_breakdowns(server, schema)  # the added one's back-fill is done by now, as a rule
        say(f"Sent {len(devices):,} reports of {schema.name} in {sent:.1f} s, then the other schemas'; "
            f"the estimates are refreshed.")
        rows = []
        for each, population_of in played:
            answer = requests.get(server.url + "/api/v1/estimates", params={"schema": each.name}, timeout=60).json()
            table = truth_rows(each, population_of, answer["estimates"])
            units = "; a mean in its own units" if any(not r.style.percent for r in table) else ""
            say()
            say(f"{each.name}, every window together ({answer['confidence']:.0%} intervals{units}):")
            for line in truth_table(table, summary=f" (about {answer['confidence']:.0%} should; the population "
                                                    f"is fixed, so a little more do)."):
                say(line)
            for line in relay_lines(each, answer["estimates"]):
                say(line)
            rows += table
        say()
        for line in homepage_lines(server, *homes):
            say(line)
        for line in breakdown_lines(server, schema, devices):
            say(line)
        say()
        if options.exit:
            say(f"Without --exit the dashboard would be served at {server.url}/schemas/{schema.name}; "
                f"--exit stops the aggregator now.")
            return rows
        say(f"Dashboard: {server.url}/schemas/{schema.name} (the home pages: {server.url}/schemas/{homes[0].name})")
        say("Serving until Ctrl-C (estimates refresh every 10 s) ...")
        try:
            server.wait()
        except KeyboardInterrupt:
            _stopped(say, "")
        return rows
    except KeyboardInterrupt:  # before the table: stopping is what was asked for, not an error
        _stopped(say, " before it finished")
        return []
    finally:
        with _stop_signals_ignored():  # a second Ctrl-C or SIGTERM must not break off the servers' stop
            for process in reversed(stoppable):
                process.stop()
        restore()


def _stopped(say: Callable[[str], None], when: str) -> None:
    """The demo's last line when Ctrl-C, SIGTERM or SIGHUP stops it (the server stops right after)."""
    try:
        say(f"\nStopped{when}: the demo's servers (the aggregator, its relay) are stopping; their databases "
            f"stay in the data folder.")
    except OSError:  # after SIGHUP the terminal may be gone
        pass


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _handle_stop_signals() -> Callable[[], None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt, as Ctrl-C does; returns what restores the old handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # only the main thread may set handlers; the watchdog still applies
    names = ("SIGTERM", "SIGHUP")  # no SIGHUP on Windows
    previous = {sig: signal.signal(sig, _interrupt) for sig in (getattr(signal, n) for n in names if hasattr(signal, n))}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return restore


@contextmanager
def _stop_signals_ignored() -> Iterator[None]:
    """Ignore Ctrl-C, SIGTERM and SIGHUP inside the block (main thread only), then put back what was."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = [getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)]
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _literal(text: str) -> str:
    """``text`` unchanged by ServerProcess's ``str.format(port=...)`` of its command."""
    return text.replace("{", "{{").replace("}", "}}")


def _fresh(data_dir: Path) -> None:
    """Start from an empty demo database: a previous run's reports would blur the comparison.

    Everything the server keeps beside its database goes too: ``aggregator.db`` with its WAL and
    lock files, and the ``aggregator.db-inbox`` folder of segments not yet folded; and the relay's
    ``relay.db``.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    for path in [*data_dir.glob("aggregator.db*"), *data_dir.glob("relay.db*")]:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    shutil.rmtree(data_dir / "devices", ignore_errors=True)
