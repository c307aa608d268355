"""The aggregator: a Flask app that ingests randomised reports and serves debiased estimates.

``create_app(config)`` builds it: settings from ``LDP_*`` variables overridden by ``config``
(see :mod:`.settings`), the database migrated, the API, dashboard and operations blueprints,
and, when ``LDP_SCHEDULER`` is on, the background jobs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

try:
    from flask import Flask
    from flask.json.provider import DefaultJSONProvider
except ModuleNotFoundError as exc:  # a client-only install running `ldp-telemetry`
    raise ModuleNotFoundError(
        f"the aggregator needs {exc.name}, which comes with the extra: pip install 'ldp-telemetry[aggregator]'",
        name=exc.name,
    ) from exc

from . import errors, settings
from .catalog import Catalog
from .cells import Limit
from . import context
from .context import system_clock
from .dashboard.pagecache import PageCache
from . import jobs, ohttp_keys
from .http import cors, headers, logs
from .ingest.counting import Counting
from .ingest.reader import BatchReader
from .ingest.writer import ReportWriter
from .metrics import Metrics
from .store import Store, StoreError, is_postgres, open_store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Database:
    """The parts around one ``LDP_DB``: its store, the catalog of its published schemas, and the
    writer that stores and counts reports in it (counting looks schemas up in the catalog)."""

    store: Store
    catalog: Catalog
    writer: ReportWriter


def open_database(location: str, synchronous: str = "full", metrics: Metrics | None = None) -> Database:
    """The database ``LDP_DB`` names, not yet migrated; its transactions' durations and late
    duplicates go to ``metrics``."""
    store = open_store(location, synchronous, metrics.observe_transaction if metrics else None)
    catalog = Catalog(store)
    late = metrics.late_duplicates.inc if metrics else (lambda n: None)
    return Database(store, catalog, ReportWriter(store, Counting(catalog.lookup), late))


def migrated_database(values: Mapping[str, Any], metrics: Metrics | None = None) -> Database:
    """The database of checked settings ``values``, migrated; :class:`settings.SettingsError` if
    unusable. What processes that died had acknowledged and not counted is counted first."""
    try:
        database = open_database(values["LDP_DB"], values["LDP_SYNCHRONOUS"], metrics)
        database.store.migrate()
    except StoreError as exc:  # a missing folder, no permission, a file that is no database
        raise settings.SettingsError(f"LDP_DB {values['LDP_DB']!r} cannot be used: {exc}") from None
    try:
        # What a process that died had acknowledged and not counted (live ones count their own).
        database.writer.settle(wait=False)
    except StoreError as exc:
        # Busy, or a full disk: what is acknowledged stays where it is, and the next settle (every
        # refresh does one) counts it. A start must not fail for it, nor set it aside.
        log.warning("could not yet count what stopped processes acknowledged (%s); the next refresh will", exc)
    return database


class DocumentedOrder(DefaultJSONProvider):
    sort_keys = False  # JSON fields in the documented order, not sorted


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """The aggregator app. Raises :class:`settings.SettingsError` for a bad setting."""
    config = dict(config or {})
    values = settings.load(config)
    # An explicit instance path: Flask cannot find one for our namespace-style package layout.
    instance = Path.cwd() if is_postgres(values["LDP_DB"]) else Path(values["LDP_DB"]).resolve().parent
    # The dashboard's templates and stylesheet, served by the app itself (outside the dashboard
    # blueprint and so outside its read-token check: the stylesheet is not secret).
    app = Flask(__name__, instance_path=str(instance), template_folder="dashboard/templates",
                static_folder="dashboard/static")
    app.config.update(values)
    app.config.update({k: v for k, v in config.items() if not k.startswith("LDP_")})  # Flask's own, e.g. TESTING
    app.config["LDP_CLOCK"] = config.get("LDP_CLOCK", system_clock)
    if not callable(app.config["LDP_CLOCK"]):
        raise settings.SettingsError("LDP_CLOCK must be a callable returning the current datetime")
    # The body limit's one home: Werkzeug refuses a longer Content-Length (413), http/body.py a
    # longer body of unknown length, and the RSGI bridge stops reading one byte past it.
    app.config["MAX_CONTENT_LENGTH"] = app.config["LDP_MAX_BODY"]
    app.json = DocumentedOrder(app)

    metrics = Metrics()
    database = migrated_database(values, metrics)
    # The first Oblivious HTTP key, made once whoever starts first (DESIGN.md, "Keys").
    ohttp_keys.ensure_key(database.store, int(context.now(app).timestamp()), values["LDP_RELAY_KEY_GRACE"])
    for sentence in database.catalog.over(Limit.of(values)):
        log.warning("%s (published under other settings: kept, and served)", sentence)
    app.extensions["ldp"] = {"store": database.store, "catalog": database.catalog, "writer": database.writer,
                             "reader": BatchReader(database.catalog.lookup), "metrics": metrics, "pages": PageCache()}

    from .http import api, ops
    from .dashboard import views

    app.register_blueprint(api.bp)
    app.register_blueprint(views.bp)
    app.register_blueprint(ops.bp)
    errors.init_app(app)
    headers.init_app(app)
    cors.init_app(app)
    logs.init_app(app)
    jobs.init_app(app)
    return app
