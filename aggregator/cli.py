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
        {"name": "theme", "type": "categorical", "categories": ["light", "dark", "sepia", "contrast", "system"]},
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
    "theme": [0.3, 0.4, 0.05, 0.0, 0.25],
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


@main.command()
@click.option("--devices", "-n", default=1_000_000, show_default=True, type=click.IntRange(min=1),
              help="How many devices to simulate.")
@click.option("--schema", "schema_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A schema JSON file (default: a built-in schema of 8 attributes).")
@click.option("--share", "share_specs", multiple=True, metavar="NAME=SHARE[,SHARE...]",
              help="True share of True for a boolean, or one share per category; repeatable.")
@click.option("--epsilon", type=float, help="Override the schema's total epsilon.")
@click.option("--seed", default=2017, show_default=True, type=int, help="Seed of the simulation's generator.")
@click.option("--confidence", default=DEFAULT_CONFIDENCE, show_default=True, type=float,
              help="Confidence level of the intervals.")
def simulate(devices: int, schema_file: Path | None, share_specs: tuple[str, ...], epsilon: float | None,
             seed: int, confidence: float) -> None:
    """Simulate a population of devices with known true shares, randomise, and estimate.

    Prints each value's truth, estimate and interval, and whether the interval covers the truth.
    """
    import numpy as np

    from ..shared.simulation import simulate as run_simulation

    raw = json.loads(schema_file.read_text()) if schema_file else dict(SIMULATION_SCHEMA)
    if epsilon is not None:
        raw = {**raw, "epsilon": epsilon, "attributes": [
            {k: v for k, v in a.items() if k not in ("epsilon", "p", "q")} for a in raw.get("attributes", [])
        ]}
    shares = dict(SIMULATION_SHARES) if schema_file is None else {}
    shares.update(_parse_share(s) for s in share_specs)
    try:
        schema = parse_schema(raw)
        started = time.perf_counter()
        rows = run_simulation(schema, shares, devices, rng=np.random.default_rng(seed), confidence=confidence)
        elapsed = time.perf_counter() - started
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"schema {schema.name} v{schema.version}: epsilon {schema.epsilon:g} per report, "
               f"split {schema.split}, {devices:,} devices, {confidence:.0%} intervals")
    header = f"{'attribute':<16} {'value':<12} {'mech':<4} {'eps':>6} {'n':>9} {'truth':>7} " \
             f"{'estimate':>9} {'interval':>17} covers"
    click.echo(header)
    click.echo("-" * len(header))
    for row in rows:
        attribute = schema.attribute(row.attribute)
        e = row.estimate
        click.echo(
            f"{row.attribute:<16.16} {str(row.value).lower() if row.value is True else row.value:<12.12} "
            f"{attribute.mechanism:<4} {attribute.epsilon:>6.3g} {e.n:>9} {row.truth:>7.4f} {e.estimate:>9.4f} "
            f"[{e.ci_low:.4f}, {e.ci_high:.4f}] {'yes' if row.covered else 'NO'}"
        )
    covered = sum(r.covered for r in rows)
    click.echo(f"{covered} of {len(rows)} intervals cover the truth; "
               f"simulated in {elapsed:.2f} s ({devices / elapsed:,.0f} devices/s)")


if __name__ == "__main__":
    main()
