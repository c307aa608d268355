"""The ``ldp-telemetry`` command: a thin Click layer over the Python API."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from collections.abc import Callable
from typing import Any, TextIO, TypeVar
from urllib.parse import quote

from ..shared.estimators import DEFAULT_CONFIDENCE
from ..shared.schema import parse_schema

Command = TypeVar("Command", bound=Callable[..., Any])  # a command function, as click's decorators take it
# The command comes with the aggregator's extra; a client-only install (``pip install
# ldp-telemetry``, as an app does) gets the console script too, but not Click, Flask and the rest.
NEEDS_AGGREGATOR = ("ldp-telemetry: this install has the client only (pip install ldp-telemetry); the "
                    "ldp-telemetry command needs the aggregator's extra: pip install 'ldp-telemetry[aggregator]'")
# The modules of that extra (by import name) whose absence means the extra is not installed.
AGGREGATOR_MODULES = frozenset({"click", "flask", "sqlite_utils", "apscheduler", "numpy", "prometheus_client",
                                "granian", "cryptography"})

try:
    import click

    from ..aggregator.settings import SETTINGS  # serve's flags, made when this module is read
except ModuleNotFoundError as missing:
    if missing.name not in AGGREGATOR_MODULES:
        raise
    # a sentence, not a traceback: SystemExit prints it and exits 1
    raise SystemExit(f"{NEEDS_AGGREGATOR} (missing: {missing.name})") from None


@click.group()
@click.version_option(package_name="ldp-telemetry")
def main() -> None:
    """ldp-telemetry: local-differential-privacy telemetry."""


def _parse_share(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    try:
        if not sep:
            raise ValueError
        numbers = [float(v) for v in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"expected NAME=SHARE or NAME=S1,S2,... got {text!r}") from None
    return name, numbers[0] if len(numbers) == 1 else numbers


def _with_total_epsilon(raw: Any, epsilon: float) -> dict[str, Any]:
    """``raw`` with another total ε, its derived per-attribute values dropped so they are derived again."""
    if not isinstance(raw, dict):
        raise ValueError(f"the schema file must hold a JSON object, got {type(raw).__name__}")
    attributes = raw.get("attributes")
    if isinstance(attributes, list):
        attributes = [{k: v for k, v in a.items() if k not in ("epsilon", "p", "q")} if isinstance(a, dict) else a
                      for a in attributes]
    return {**raw, "epsilon": epsilon, "attributes": attributes}


PLAN_REPORTS = 10_000  # what ``plan`` assumes a window holds when no --reports is given


def _endpoint_options(token_help: str,
                      token_variables: tuple[str, ...] = ("LDP_ADMIN_TOKEN",)) -> Callable[[Command], Command]:
    def decorate(command: Command) -> Command:
        command = click.option("--db", type=click.Path(dir_okay=False),
                               help="Work on this database file directly instead of a running server.")(command)
        command = click.option("--token", envvar=list(token_variables), help=token_help)(command)
        return click.option("--url", default="http://127.0.0.1:8000", show_default=True, envvar="LDP_URL",
                            help="Base URL of a running aggregator.")(command)
    return decorate


@main.command()
@click.option("--devices", "-n", default=1_000_000, show_default=True, type=click.IntRange(min=1),
              help="How many devices to simulate.")
@click.option("--schema", "schema_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A schema JSON file (default: a built-in schema of 8 attributes).")
@click.option("--share", "share_specs", multiple=True, metavar="NAME=SHARE[,SHARE...]",
              help="True share of True for a boolean, one share per category or bucket, or a numeric "
                   "attribute's true mean in its units; repeatable.")
@click.option("--epsilon", type=float, help="Override the schema's total epsilon.")
@click.option("--seed", default=2017, show_default=True, type=click.IntRange(min=0),
              help="Seed of the simulation's generator.")
@click.option("--confidence", default=DEFAULT_CONFIDENCE, show_default=True, type=float,
              help="Confidence level of the intervals.")
def simulate(devices: int, schema_file: Path | None, share_specs: tuple[str, ...], epsilon: float | None,
             seed: int, confidence: float) -> None:
    """Simulate a population of devices with known true shares (or means), randomise, and estimate.

    Prints each value's truth, estimate and interval, and whether the interval covers the truth.
    """
    import numpy as np

    from ..shared.simulation import simulate as run_simulation
    from .populations import SIMULATION_SCHEMA, SIMULATION_SHARES
    from .tables import truth_row, truth_table

    shares = dict(SIMULATION_SHARES) if schema_file is None else {}
    shares.update(_parse_share(s) for s in share_specs)
    try:  # a JSONDecodeError or UnicodeDecodeError is a ValueError too
        raw = json.loads(schema_file.read_text()) if schema_file else dict(SIMULATION_SCHEMA)
        if epsilon is not None:
            raw = _with_total_epsilon(raw, epsilon)
        schema = parse_schema(raw)
        started = time.perf_counter()
        rows = run_simulation(schema, shares, devices, rng=np.random.default_rng(seed), confidence=confidence)
        elapsed = time.perf_counter() - started
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"schema {schema.name} v{schema.version}: epsilon {schema.epsilon:g} per report, "
               f"split {schema.split}, {devices:,} devices, {confidence:.0%} intervals")
    table = [truth_row(schema, r.attribute, r.value, r.truth, asdict(r.estimate)) for r in rows]
    for line in truth_table(table, summary=f"; simulated in {elapsed:.2f} s ({devices / elapsed:,.0f} devices/s)"):
        click.echo(line)


def _parse_half_width(text: str) -> tuple[str | None, str]:
    name, sep, value = text.rpartition("=")
    return (name if sep else None), value


@main.command()
@click.argument("schema_ref", metavar="SCHEMA")
@click.option("--version", "schema_version", type=click.IntRange(min=1),
              help="For a published schema: its version (default: latest).")
@click.option("--reports", "-n", default=PLAN_REPORTS, show_default=True, type=click.IntRange(min=1),
              help="Reports of the schema a window (what devices send; a discovering string attribute is "
                   "estimated from the level-0 half of them).")
@click.option("--half-width", "half_widths", multiple=True, metavar="[NAME=]NUMBER",
              help="The half-width wanted, for the 'needed' column, as the dashboard's planner takes it: a "
                   "share's in percentage points (2 is ±2 points), a mean's in its units; NUMBER for every "
                   "share attribute, NAME=NUMBER for one attribute; repeatable. Default, as the dashboard: 1% "
                   "of the scale (1 point of a share, 1% of a mean's range).")
@click.option("--confidence", default=DEFAULT_CONFIDENCE, show_default=True,
              type=click.FloatRange(0, 1, min_open=True, max_open=True), help="Confidence level of the intervals.")
@_endpoint_options("Read (or admin) token, when the server needs one [env LDP_READ_TOKEN, else LDP_ADMIN_TOKEN].",
                   ("LDP_READ_TOKEN", "LDP_ADMIN_TOKEN"))
def plan(schema_ref: str, schema_version: int | None, reports: int, half_widths: tuple[str, ...], confidence: float,
         url: str, token: str | None, db: str | None) -> None:
    """Plan SCHEMA (a published schema's name, or a schema JSON file): each attribute's interval
    at most with --reports reports a window, the reports a --half-width needs, and the smallest
    share it can tell from zero, as published and under the other splits."""
    from ..shared.planner import alternatives, typed_half_width
    from .remote import ok
    from .tables import plan_table

    path = Path(schema_ref)
    if path.is_file():
        try:  # a JSONDecodeError or UnicodeDecodeError is a ValueError too
            definition = json.loads(path.read_text())
        except ValueError as exc:
            raise click.ClickException(f"{schema_ref} is not JSON: {exc}") from None
    else:
        definition = ok("GET", _schema_path(schema_ref, schema_version), url=url, db=db, token=token)
    try:
        options = alternatives(definition, confidence=confidence)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    published = parse_schema(definition)
    targets = {}
    for name, value in map(_parse_half_width, half_widths):
        if name is not None and name not in published.attribute_names:
            raise click.ClickException(f"--half-width names no attribute of {published.name}: {name!r}")
        for a in published.attributes:
            if name == a.name or (name is None and a.mech.estimand.percent):
                try:
                    targets[a.name] = typed_half_width(a, value)
                except ValueError as exc:
                    raise click.ClickException(f"--half-width: {exc}") from None
    assumed = "the default; --reports sets it" if reports == PLAN_REPORTS else "--reports"
    click.echo(f"schema {published.name} v{published.version}: with {reports:,} reports of the schema a window "
               f"({assumed}), {confidence:.0%} intervals at their widest; 'needed' is the reports a window for "
               f"the half-width 'for ±' (a share's in percentage points, a mean's in its units); 'detects' is "
               f"the smallest share those reports tell from zero, 'finds' the smallest share discovery finds "
               f"from them (about half the time)")
    if any(a.discover for a in published.attributes):
        click.echo("a discovering string attribute is estimated from the level-0 half of the reports; "
                   "discovery reads every retained window's reports, so give --reports as all of them for 'finds'")
    for line in plan_table(options, reports, targets):
        click.echo(line)


def _schema_path(name: str, version: int | None) -> str:
    return f"/api/v1/schemas/{quote(name, safe='')}" + (f"/{version}" if version is not None else "")


def _setting_options(command: Command) -> Command:
    """One ``serve`` flag per setting (``LDP_MAX_BATCH`` -> ``--max-batch``); unset flags defer to the env."""
    for setting in reversed(SETTINGS):
        default = setting.default
        default = "unset" if default in (None, ()) else ",".join(default) if isinstance(default, tuple) else default
        command = click.option(setting.flag, setting.name.lower(), default=None, metavar="VALUE",
                               help=f"{setting.help} [env {setting.name}; default: {default}]")(command)
    return command


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="Port to listen on.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64), help="Worker processes.")
@click.option("--access-log/--no-access-log", default=False, show_default=True,
              help="Log each request's method, path (no query), status and duration; never a client address.")
@_setting_options
def serve(host: str, port: int, workers: int, access_log: bool, **flags: str | None) -> None:
    """Run the aggregator under granian (a production HTTP server that slow clients cannot hold).

    Every setting comes from its flag, else its LDP_* environment variable, else its default.
    Prefer the environment for tokens: flags show up in the process list.
    """
    from ..aggregator import migrated_database
    from ..aggregator.http.server import serve as run_server
    from ..aggregator.settings import SettingsError, load

    from ..serving.process import CannotListen, check_can_listen

    config = {name.upper(): value for name, value in flags.items() if value is not None}
    try:
        # A bad setting, an unusable database or a taken port stops here, before any worker starts.
        values = load(config, config_source="command line")
        check_can_listen(host, port)
        migrated_database(values).store.close()
    except (SettingsError, CannotListen) as exc:
        raise click.ClickException(str(exc)) from None
    note = tcp_migrate_note(workers, values["LDP_WORKER_MAX_RSS"])
    if note:
        click.echo(note, err=True)
    try:
        run_server(config, host=host, port=port, workers=workers, access_log=access_log)
    finally:
        # Count what the stopped workers acknowledged and had not counted yet (migrated_database settles).
        migrated_database(values).store.close()


def _relay_options(command: Command) -> Command:
    """One ``relay`` flag per relay setting (``LDP_RELAY_MIN_BATCH`` -> ``--min-batch``)."""
    from ..relay.settings import SETTINGS as RELAY_SETTINGS

    for setting in reversed(RELAY_SETTINGS):
        default = "required" if setting.default is None else f"default: {setting.default}"
        command = click.option(setting.flag, setting.variable.lower(), default=None, metavar="VALUE",
                               help=f"{setting.help} [env {setting.variable}; {default}]")(command)
    return command


@main.command()
@_relay_options
def relay(**flags: str | None) -> None:
    """Run a relay: it takes each client's encrypted report, stores it with the hour it came, and
    hands the aggregator shuffled batches, so the aggregator sees each report only in a crowd.

    Run it apart from the aggregator's operator (DESIGN.md, "Relay and amplification"). Every
    setting comes from its flag, else its LDP_RELAY_* variable, else its default. Prefer the
    environment for the token: flags show up in the process list.
    """
    import os

    from ..relay.server import serve as run_relay
    from ..relay.settings import RelaySettingsError, load
    from ..relay.store import RelayStore, StoreUnusable, Usage
    from ..serving.process import CannotListen, check_can_listen

    given = {name.upper(): value for name, value in flags.items() if value is not None}
    try:
        settings = load(os.environ, source=given)
        check_can_listen(settings.host, settings.port)
        RelayStore(settings.db, Usage()).close()  # a file that cannot be used stops start-up here
    except (RelaySettingsError, StoreUnusable, CannotListen) as exc:
        raise click.ClickException(str(exc)) from None
    run_relay(settings, os.environ)


TCP_MIGRATE_REQ = Path("/proc/sys/net/ipv4/tcp_migrate_req")


def tcp_migrate_note(workers: int, max_rss: int | None, sysctl: Path = TCP_MIGRATE_REQ) -> str | None:
    """What granian's start-up warning about ``net.ipv4.tcp_migrate_req`` means for this server,
    when granian gives it (Linux, several workers, each replaced past LDP_WORKER_MAX_RSS, the
    sysctl off); else None."""
    if not (sys.platform == "linux" and workers > 1 and max_rss):
        return None
    try:
        if sysctl.read_text().strip() == "1":
            return None
    except OSError:  # no such sysctl (a kernel before 5.14): granian warns all the same
        pass
    return ("ldp-telemetry serve: granian warns below that net.ipv4.tcp_migrate_req is off. It matters only when "
            "a worker is replaced (past LDP_WORKER_MAX_RSS): connections queued for it are reset, and clients "
            "retry them. To move them to another worker instead: sysctl net.ipv4.tcp_migrate_req=1 (Linux "
            "5.14+; deploy/README.md).")


@main.group()
def schema() -> None:
    """Manage schemas."""


@schema.command("publish")
@click.argument("file", type=click.File("r"))
@_endpoint_options("Admin token [env LDP_ADMIN_TOKEN].")
def schema_publish(file: TextIO, url: str, token: str | None, db: str | None) -> None:
    """Publish the schema in FILE (JSON; - for stdin), over HTTP or straight into --db."""
    from .remote import call, refused

    try:
        body = json.load(file)
    except ValueError as exc:
        raise click.ClickException(f"{file.name} is not JSON: {exc}") from None
    status, answer = call("POST", "/api/v1/schemas", url=url, db=db, token=token, body=body)
    if status not in (200, 201):
        raise click.ClickException(refused("POST", "/api/v1/schemas", status, answer, url=url, db=db))
    click.echo(f"{'published' if status == 201 else 'already published, identical'}: "
               f"{answer['name']} version {answer['version']}")
    click.echo(json.dumps(answer, indent=2))


@schema.command("list")
@_endpoint_options("Read (or admin) token, when the server needs one [env LDP_READ_TOKEN, else LDP_ADMIN_TOKEN].",
                   ("LDP_READ_TOKEN", "LDP_ADMIN_TOKEN"))
def schema_list(url: str, token: str | None, db: str | None) -> None:
    """List the published schemas, the latest version of each."""
    from .remote import ok
    from .tables import schemas_table

    definitions = ok("GET", "/api/v1/schemas", url=url, db=db, token=token)["schemas"]
    if not definitions:
        click.echo("no schema is published yet (ldp-telemetry schema publish FILE)")
        return
    for line in schemas_table(definitions):
        click.echo(line)


@schema.command("show")
@click.argument("name")
@click.option("--version", "schema_version", type=click.IntRange(min=1), help="Schema version (default: latest).")
@_endpoint_options("Read (or admin) token, when the server needs one [env LDP_READ_TOKEN, else LDP_ADMIN_TOKEN].",
                   ("LDP_READ_TOKEN", "LDP_ADMIN_TOKEN"))
def schema_show(name: str, schema_version: int | None, url: str, token: str | None, db: str | None) -> None:
    """Print the derived schema NAME as the server serves it (JSON): each attribute's epsilon,
    mechanism and the parameters its encoder and estimator use."""
    from .remote import ok

    click.echo(json.dumps(ok("GET", _schema_path(name, schema_version), url=url, db=db, token=token), indent=2))


@main.command()
@_endpoint_options("Admin token [env LDP_ADMIN_TOKEN].")
def refresh(url: str, token: str | None, db: str | None) -> None:
    """Recompute the estimates now (the scheduler does it every LDP_ESTIMATE_INTERVAL seconds)."""
    from .remote import ok

    from ..shared.display import plural

    answer = ok("POST", "/api/v1/estimates/refresh", url=url, db=db, token=token)
    click.echo(f"refreshed: {plural(answer['written'], 'estimate row')} written, "
               f"{plural(answer['windows'], 'window')} recomputed")


@main.command()
@click.argument("schema_name", metavar="SCHEMA")
@click.option("--version", "schema_version", type=click.IntRange(min=1), help="Schema version (default: latest).")
@_endpoint_options("Admin token [env LDP_ADMIN_TOKEN].")
def discover(schema_name: str, schema_version: int | None, url: str, token: str | None, db: str | None) -> None:
    """Discover the common strings of SCHEMA's discovering attributes now (the scheduler does it
    hourly); they become candidates marked discovered, estimated once their back-fill is done."""
    from .remote import ok

    version = schema_version or ok("GET", _schema_path(schema_name, None), url=url, db=db, token=token)["version"]
    answer = ok("POST", f"{_schema_path(schema_name, version)}/discover", url=url, db=db, token=token)
    click.echo(f"discovered: {answer['added']:,} new candidate(s) in {schema_name} version {version}")


@main.command()
@click.argument("schema_name", metavar="SCHEMA")
@click.option("--version", "schema_version", type=click.IntRange(min=1), help="Schema version (default: latest).")
@click.option("--attribute", help="Only this attribute.")
@click.option("--window", "windows", type=click.Choice(["all", "each"]), default="all", show_default=True,
              help="The rollup over all windows, or every window.")
@_endpoint_options("Read (or admin) token, when the server needs one [env LDP_READ_TOKEN, else LDP_ADMIN_TOKEN].",
                   ("LDP_READ_TOKEN", "LDP_ADMIN_TOKEN"))
def estimates(schema_name: str, schema_version: int | None, attribute: str | None, windows: str, url: str,
              token: str | None, db: str | None) -> None:
    """Print the latest estimates of SCHEMA as a table, with the numbers the dashboard shows."""
    from urllib.parse import urlencode

    from ..shared.windows import ROLLUP
    from .remote import ok
    from .tables import estimates_table

    query = {"schema": schema_name, "version": schema_version, "attribute": attribute}
    answer = ok("GET", "/api/v1/estimates?" + urlencode({k: v for k, v in query.items() if v is not None}),
                url=url, db=db, token=token)
    published = parse_schema(ok("GET", _schema_path(answer["schema"], answer["version"]), url=url, db=db, token=token))
    rows = [e for e in answer["estimates"] if (e["window"] == ROLLUP) == (windows == "all")]
    click.echo(f"schema {answer['schema']} v{answer['version']}, {answer['confidence']:.0%} intervals")
    if not rows:
        click.echo("no estimates yet (the scheduler computes them every LDP_ESTIMATE_INTERVAL seconds; "
                   "ldp-telemetry refresh computes them now)")
        return
    # the rollup rows too: a string attribute's candidates are ranked by them in every window
    for line in estimates_table(published, rows, rollup=[e for e in answer["estimates"]
                                                                  if e["window"] == ROLLUP]):
        click.echo(line)


@main.command()
@click.argument("schema_name", metavar="SCHEMA")
@click.option("--version", "schema_version", type=click.IntRange(min=1), help="Schema version (default: latest).")
@click.option("--of", "of", help="Only the breakdowns of this attribute.")
@click.option("--by", "by", help="Only the breakdowns by this attribute.")
@click.option("--window", "windows", type=click.Choice(["all", "each"]), default="all", show_default=True,
              help="The rollup over all windows, or every window.")
@_endpoint_options("Read (or admin) token, when the server needs one [env LDP_READ_TOKEN, else LDP_ADMIN_TOKEN].",
                   ("LDP_READ_TOKEN", "LDP_ADMIN_TOKEN"))
def breakdowns(schema_name: str, schema_version: int | None, of: str | None, by: str | None, windows: str, url: str,
               token: str | None, db: str | None) -> None:
    """Print SCHEMA's breakdowns (OF within each value of BY) as a table, with the numbers the
    dashboard shows: every page of GET /api/v1/breakdowns."""
    from urllib.parse import urlencode

    from ..shared.windows import ROLLUP
    from .remote import ok
    from .tables import breakdowns_table

    query = {"schema": schema_name, "version": schema_version, "of": of, "by": by}
    asked = {k: v for k, v in query.items() if v is not None}
    answer = ok("GET", "/api/v1/breakdowns?" + urlencode(asked), url=url, db=db, token=token)
    rows = answer["breakdowns"]
    while answer["next"] is not None:
        answer = ok("GET", "/api/v1/breakdowns?" + urlencode({**asked, "next": answer["next"]}), url=url, db=db,
                    token=token)
        rows += answer["breakdowns"]
    published = parse_schema(ok("GET", _schema_path(answer["schema"], answer["version"]), url=url, db=db, token=token))
    rows = [r for r in rows if (r["window"] == ROLLUP) == (windows == "all")]
    click.echo(f"schema {answer['schema']} v{answer['version']}, {answer['confidence']:.0%} intervals")
    if not rows:
        click.echo("no breakdown rows yet (the scheduler computes them every LDP_ESTIMATE_INTERVAL seconds; "
                   "ldp-telemetry refresh computes them now)")
        return
    for line in breakdowns_table(published, rows):
        click.echo(line)


@main.command("add-breakdown")
@click.argument("schema_name", metavar="SCHEMA")
@click.option("--version", "schema_version", type=click.IntRange(min=1), help="Schema version (default: latest).")
@click.option("--of", "of", required=True, help="The attribute estimated within each value of --by.")
@click.option("--by", "by", required=True, help="The attribute whose values divide the reports.")
@_endpoint_options("Admin token [env LDP_ADMIN_TOKEN].")
def add_breakdown(schema_name: str, schema_version: int | None, of: str, by: str, url: str, token: str | None,
                  db: str | None) -> None:
    """Add the breakdown of OF by BY to a published version of SCHEMA: its sums are back-filled
    from the retained reports by a job, and it is estimated once that is done."""
    from .remote import ok

    version = schema_version or ok("GET", _schema_path(schema_name, None), url=url, db=db, token=token)["version"]
    answer = ok("POST", f"{_schema_path(schema_name, version)}/breakdowns", url=url, db=db, token=token,
                body={"of": of, "by": by})
    what = "added (back-filled by a job)" if answer["added"] else "already there"
    click.echo(f"breakdown of {of} by {by} in {schema_name} version {version}: {what}")


@main.group("relay-key")
def relay_key() -> None:
    """The aggregator's Oblivious HTTP keys, which relayed reports are encrypted to."""


@relay_key.command("rotate")
@click.option("--db", type=click.Path(dir_okay=False),
              help="The aggregator's database (a file, or a postgresql:// URL) [env LDP_DB].")
def relay_key_rotate(db: str | None) -> None:
    """Make a new key (under the smallest key id not held by a key still kept) and retire the current one: it
    stays accepted for LDP_RELAY_KEY_GRACE seconds, then its private half is deleted. Clients and
    relays take the new key within a day (they refetch the keys then); every node reads it from the
    database."""
    from ..aggregator import migrated_database, ohttp_keys
    from ..aggregator.settings import SettingsError, load

    try:
        values = load({"LDP_DB": db} if db is not None else {}, config_source="command line")
        database = migrated_database(values)
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        now, grace = int(time.time()), values["LDP_RELAY_KEY_GRACE"]
        key = ohttp_keys.rotate(database.store, now)
        others = [k for k in ohttp_keys.accepted(database.store.run_tx("ohttp_keys", lambda tx: tx.ohttp_keys(),
                                                                       write=False), now, grace) if k != key]
    finally:
        database.store.close()
    click.echo(f"new key id {key.key_id} (public key {key.public_key.hex()})")
    for k in others:
        until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime((k.retired or now) + grace))
        click.echo(f"key id {k.key_id} retired: accepted until {until}")


@main.command()
@click.option("--devices", "-n", default=20_000, show_default=True, type=click.IntRange(min=1),
              help="How many devices to simulate.")
@click.option("--days", default=7, show_default=True, type=click.IntRange(1, 28),
              help="Spread the devices over this many day windows, up to today.")
@click.option("--clients", default=200, show_default=True, type=click.IntRange(min=0),
              help="How many of the devices run a whole TelemetryClient (the rest post in batches).")
@click.option("--data-dir", default="demo-data", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder of the demo's database, device folders and server log (a previous run's "
                   "database and device folders are removed first).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535),
              help="Port on 127.0.0.1; a busy one falls back to any free port.")
@click.option("--seed", default=2017, show_default=True, type=int, help="Seed of the population's true values.")
@click.option("--exit", "exit_after", is_flag=True, help="Stop after printing the table instead of serving.")
def demo(devices: int, days: int, clients: int, data_dir: Path, port: int, seed: int, exit_after: bool) -> None:
    """Run the whole system: aggregator, devices with known truth, estimates beside the truth.

    Starts the aggregator on SQLite in --data-dir, publishes four demo schemas (settings, usage
    measurements, the settings memoised, and home pages: any site, some found by discovery),
    simulates the devices
    (each randomises on its side and sends over HTTP), refreshes, prints each true share beside
    its estimate and interval, and serves the dashboard until Ctrl-C (or stops with --exit).
    """
    from .demo import Options, run

    try:
        run(Options(devices=devices, days=days, clients=clients, data_dir=data_dir, port=port, seed=seed,
                    exit=exit_after))
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None


if __name__ == "__main__":
    main()
