"""The ``ldp-telemetry`` command: a thin Click layer over the Python API."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from ..shared.estimators import DEFAULT_CONFIDENCE
from ..shared.schema import parse_schema

# The population `simulate` uses when no schema is given: 8 attributes, 1 unit of ε each.
SIMULATION_SCHEMA: dict[str, Any] = {
    "name": "simulation",
    "version": 1,
    "epsilon": 8.0,
    "window": "day",
    "split": "equal",
    "description": "Eight attributes of a simulated app, for `ldp-telemetry simulate`.",
    "attributes": [
        {"name": "dark_mode", "type": "boolean"},
        {"name": "notifications", "type": "boolean"},
        {"name": "beta_channel", "type": "boolean"},
        {"name": "sync_enabled", "type": "boolean"},
        {"name": "crashed", "type": "boolean"},
        {"name": "paid_plan", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]},
        # 16 categories at ε = 1: `auto` resolves to OUE here (d - 2 >= 3e^ε), GRR for `os`.
        {"name": "language", "type": "categorical",
         "categories": ["en", "zh", "es", "hi", "ar", "pt", "bn", "ru", "ja", "de", "fr", "ko", "it", "tr", "pl",
                        "other"]},
    ],
}
SIMULATION_SHARES: dict[str, Any] = {
    "dark_mode": 0.42,
    "notifications": 0.78,
    "beta_channel": 0.03,
    "sync_enabled": 0.5,
    "crashed": 0.0,
    "paid_plan": 0.97,
    "os": [0.45, 0.25, 0.25, 0.05],
    "language": [0.3, 0.2, 0.1, 0.08, 0.07, 0.05, 0.05, 0.04, 0.03, 0.02, 0.02, 0.02, 0.01, 0.01, 0.0, 0.0],
}


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
    header = f"{'attribute':<16} {'value':<12} {'mech':<7} {'eps':>6} {'n':>9} {'truth':>9} " \
             f"{'estimate':>9} {'interval':>21} covers"
    click.echo(header)
    click.echo("-" * len(header))
    for row in rows:
        attribute = schema.attribute(row.attribute)
        e = row.estimate
        # a share to 4 decimals; a mean (in its units) to 6 significant digits
        show = "{:.4f}".format if attribute.mech.estimand.percent else "{:.6g}".format
        click.echo(
            f"{row.attribute:<16.16} {str(row.value).lower() if row.value is True else row.value:<12.12} "
            f"{attribute.mechanism:<7} {attribute.epsilon:>6.3g} {e.n:>9} {show(row.truth):>9} {show(e.estimate):>9} "
            f"{f'[{show(e.ci_low)}, {show(e.ci_high)}]':>21} {'yes' if row.covered else 'NO'}"
        )
    covered = sum(r.covered for r in rows)
    click.echo(f"{covered} of {len(rows)} intervals cover the truth; "
               f"simulated in {elapsed:.2f} s ({devices / elapsed:,.0f} devices/s)")


@main.command()
@click.argument("schema_file", metavar="SCHEMA", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--reports", "-n", default=10_000, show_default=True, type=click.IntRange(min=1),
              help="Reports of the schema (per window, or over the range an analyst reads).")
@click.option("--half-width", default=0.01, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="The half-width wanted, for the reports-needed column (a share, or a mean's units).")
@click.option("--confidence", default=DEFAULT_CONFIDENCE, show_default=True,
              type=click.FloatRange(0, 1, min_open=True, max_open=True), help="Confidence level of the intervals.")
def plan(schema_file: Path, reports: int, half_width: float, confidence: float) -> None:
    """Plan a schema: each attribute's interval with --reports reports, the reports a --half-width
    needs, and the smallest share it can tell from zero, as published and under the other splits."""
    from ..shared.planner import alternatives

    try:  # a JSONDecodeError or UnicodeDecodeError is a ValueError too
        options = alternatives(json.loads(schema_file.read_text()), confidence=confidence)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{reports:,} reports, {confidence:.0%} intervals; 'needed' is for ±{half_width:g}")
    header = f"{'split':<13} {'attribute':<16} {'mech':<7} {'eps':>6} {'± now':>9} {'needed':>12} {'detects':>8}"
    click.echo(header)
    click.echo("-" * len(header))
    for split, plans in options.items():
        if isinstance(plans, str):
            click.echo(f"{split:<13} not possible: {plans}")
            continue
        for p in plans:
            detects = p.detection_threshold(reports)
            try:
                needed = p.reports_for(half_width)
            except ValueError as exc:  # narrower than the planner plans for (a millionth of the scale)
                raise click.ClickException(f"{p.attribute.name}: {exc}") from None
            click.echo(f"{split:<13} {p.attribute.name:<16.16} {p.attribute.mechanism:<7} {p.attribute.epsilon:>6.3g} "
                       f"{p.half_width(reports):>9.4g} {needed:>12,} "
                       f"{'' if detects is None else f'{detects:.4f}':>8}")


def _setting_options(command):
    """One ``serve`` flag per setting (``LDP_MAX_BATCH`` -> ``--max-batch``); unset flags defer to the env."""
    from ..aggregator.settings import SETTINGS

    for setting in reversed(SETTINGS):
        default = setting.default
        default = "unset" if default is None else ",".join(default) if isinstance(default, tuple) else default
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

    config = {name.upper(): value for name, value in flags.items() if value is not None}
    try:
        # A bad setting or an unusable database stops here, before any worker starts.
        values = load(config, config_source="command line")
        migrated_database(values)[0].close()
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        run_server(config, host=host, port=port, workers=workers, access_log=access_log)
    finally:
        # Count what the stopped workers acknowledged and had not counted yet (migrated_database settles).
        migrated_database(values)[0].close()


def _endpoint_options(token_help: str, token_variables: tuple[str, ...] = ("LDP_ADMIN_TOKEN",)):
    def decorate(command):
        command = click.option("--db", type=click.Path(dir_okay=False),
                               help="Work on this database file directly instead of a running server.")(command)
        command = click.option("--token", envvar=list(token_variables), help=token_help)(command)
        return click.option("--url", default="http://127.0.0.1:8000", show_default=True, envvar="LDP_URL",
                            help="Base URL of a running aggregator.")(command)
    return decorate


@main.group()
def schema() -> None:
    """Manage schemas."""


@schema.command("publish")
@click.argument("file", type=click.File("r"))
@_endpoint_options("Admin token [env LDP_ADMIN_TOKEN].")
def schema_publish(file, url: str, token: str | None, db: str | None) -> None:
    """Publish the schema in FILE (JSON; - for stdin), over HTTP or straight into --db."""
    from .remote import call

    try:
        body = json.load(file)
    except ValueError as exc:
        raise click.ClickException(f"{file.name} is not JSON: {exc}") from None
    status, answer = call("POST", "/api/v1/schemas", url=url, db=db, token=token, body=body)
    if status not in (200, 201):
        raise click.ClickException(f"{status}: {answer.get('error', answer)}")
    click.echo(f"{'published' if status == 201 else 'already published, identical'}: "
               f"{answer['name']} version {answer['version']}")
    click.echo(json.dumps(answer, indent=2))


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
    """Print the latest estimates of SCHEMA as a table."""
    from urllib.parse import urlencode

    from ..shared.schema import BOOLEAN_KEY
    from ..shared.windows import ROLLUP
    from .remote import call

    query = {"schema": schema_name, "version": schema_version, "attribute": attribute}
    path = "/api/v1/estimates?" + urlencode({k: v for k, v in query.items() if v is not None})
    status, answer = call("GET", path, url=url, db=db, token=token)
    if status != 200:
        raise click.ClickException(f"{status}: {answer.get('error', answer)}")
    rows = [e for e in answer["estimates"] if (e["window"] == ROLLUP) == (windows == "all")]
    click.echo(f"schema {answer['schema']} v{answer['version']}, {answer['confidence']:.0%} intervals")
    if not rows:
        click.echo("no estimates yet (the scheduler computes them every LDP_ESTIMATE_INTERVAL seconds)")
        return
    header = f"{'window':<13} {'attribute':<16} {'value':<16} {'estimate':>9} {'interval':>17} {'n':>9} {'eps':>6}"
    click.echo(header)
    click.echo("-" * len(header))
    for e in rows:
        value = BOOLEAN_KEY if e["value"] is True else e["value"]
        click.echo(f"{e['window']:<13} {e['attribute']:<16.16} {value:<16.16} {e['estimate']:>9.4f} "
                   f"[{e['ci_low']:.4f}, {e['ci_high']:.4f}] {e['n']:>9} {e['epsilon']:>6.3g}")


@main.command()
@click.option("--devices", "-n", default=20_000, show_default=True, type=click.IntRange(min=1),
              help="How many devices to simulate.")
@click.option("--days", default=7, show_default=True, type=click.IntRange(1, 28),
              help="Spread the devices over this many day windows, up to today.")
@click.option("--clients", default=200, show_default=True, type=click.IntRange(min=0),
              help="How many of the devices run a whole TelemetryClient (the rest post in batches).")
@click.option("--data-dir", default="demo-data", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder of the demo's database, device folders and server log (emptied first).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535),
              help="Port on 127.0.0.1; a busy one falls back to any free port.")
@click.option("--seed", default=2017, show_default=True, type=int, help="Seed of the population's true values.")
@click.option("--exit", "exit_after", is_flag=True, help="Stop after printing the table instead of serving.")
def demo(devices: int, days: int, clients: int, data_dir: Path, port: int, seed: int, exit_after: bool) -> None:
    """Run the whole system: aggregator, devices with known truth, estimates beside the truth.

    Starts the aggregator on SQLite in --data-dir, publishes a demo schema, simulates the devices
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
