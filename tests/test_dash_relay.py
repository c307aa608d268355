"""The privacy panel's relay section (DESIGN.md, "Dashboard" and "Relay and amplification"): shown
only where reports came through a relay, with the same numbers the API's rows carry, the three
guarantees and when the claim fails."""

from __future__ import annotations

import html
import re

from conftest import ADMIN, settle
from test_agg_relay_gateway import SCHEMA, TODAY, YESTERDAY, app, client, key_config, post_batch, reports, request_of  # noqa: F401

from ldp_telemetry.shared import display


def relay_section(page: str) -> str | None:
    """The text of the panel's "Through a relay" part, tags dropped, or None if the page has none."""
    found = re.search(r'<h3 id="relay">(.*?)<h3>Local versus central', page, re.S)
    return None if found is None else html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found.group(1))))


def test_a_schema_without_relayed_reports_shows_no_relay_section(app, client):
    assert client.post("/api/v1/reports", json={"reports": reports(5)}).status_code == 202
    settle(app)
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    assert relay_section(client.get("/schemas/app-usage").get_data(as_text=True)) is None


def test_the_relay_section_shows_the_rows_numbers_and_says_when_the_claim_fails(app, client):
    config = key_config(client)
    assert post_batch(client, [request_of(config, r) for r in reports(300) + reports(9, YESTERDAY)]).status_code == 200
    assert client.post("/api/v1/reports", json={"reports": reports(10)}).status_code == 202
    settle(app)
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    # today's crowd of 300 is worth something, the rollup's smallest (9) next to nothing
    rows = {r["window"]: r for r in client.get("/api/v1/estimates?schema=app-usage").get_json()["estimates"]}

    text = relay_section(client.get("/schemas/app-usage").get_data(as_text=True))
    assert text is not None
    for window in (TODAY, "all"):  # the latest window and the rollup, each a line of the table
        row = rows[window]
        line = (f"{window} {display.percent(row['relayed'])} {row['crowd']} {display.sig(SCHEMA.epsilon)} "
                f"{display.sig(row['epsilon_shuffled'])} {display.sig(row['delta'])}")
        assert line in text, (line, text)
    assert rows[TODAY]["epsilon_shuffled"] < rows["all"]["epsilon_shuffled"] <= SCHEMA.epsilon
    assert f"at most ε = {display.sig(rows['all']['epsilon_shuffled'])}" in text
    assert "a crowd this small hides a report little" in text  # the rollup's crowd of 9: ε(9) ≈ ε0
    for said in ("Against the relay", "Against this server", "Against both together", "run by the operator",
                 "reports of its own through the relay", "cleared browser storage"):
        assert said in text
