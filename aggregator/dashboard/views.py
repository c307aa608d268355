"""The dashboard (server-rendered HTML): an index of schemas and a page per schema.

Pages are plain HTML with inline SVG charts (:mod:`.charts`) and one static stylesheet: no
JavaScript library, no CDN, so it works offline. Jinja's autoescape covers every name, category
and description. A page reloads itself while open at the estimate interval: a few lines of
inline script that keep the open panels open and wait while a field has focus (a meta refresh
without JavaScript).

When ``LDP_READ_TOKEN`` is set a browser opens the dashboard once with ``?token=<token>``: the
dashboard stores it in an HttpOnly, SameSite=Strict cookie and redirects to the page without it,
so the token leaves the address bar. A bearer header (as for the API) works too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import Blueprint, current_app, render_template, request, url_for
from werkzeug.wrappers import Response

from ...shared import display
from ...shared.planner import typed_half_width
from ...shared.schema import Schema
from ...shared.windows import LENGTH, ROLLUP, window_of
from .. import auth
from ..questions import candidates
from . import breakdowns, pages
from .. import context
from ..catalog import version_number
from ..retention import retention_cutoff
from ..estimation.readout import ReadError, check_range, read, window_bound
from ..store import Activity, Store

# Templates and the stylesheet live in this package's templates/ and static/ folders, which the
# app itself serves (create_app names them), outside this blueprint and so outside its read-token
# check: the stylesheet is not secret.
bp = Blueprint("dashboard", __name__)

# The page reloads at the estimate interval, but neither faster than this nor slower than that.
REFRESH_BOUNDS = (10, 300)
PRESETS = {"day": ((7, "last 7 days"),), "hour": ((24, "last 24 hours"), (24 * 7, "last 7 days"))}
# Windows shown unless a range is asked for: a page's work stays bounded however old the data.
LATEST_WINDOWS = 30
WINDOW_FORMATS = {"day": "YYYY-MM-DD", "hour": "YYYY-MM-DDTHH"}


@dataclass(frozen=True)
class Counts:
    """What the index and the schema page say a schema has received."""

    reports: int
    windows: int
    computed_at: str | None
    pending: bool
    # A discovering string attribute's counters count its level-0 reports alone (its other reports
    # carry discovery's prefixes); where the count rests on those, discovery's reports are not in it.
    level_zero_only: bool = False


def counts(schema: Schema, seen: Activity) -> Counts:
    """Reports received: under ``split: "sample"`` each carries one attribute, else every one; a
    discovering attribute's count is of its level-0 reports, so under ``equal`` another attribute's
    count, where there is one, is the schema's."""
    discovering = {a.name for a in schema.attributes if a.discover}
    whole = [n for a, n in seen.carried.items() if a not in discovering]
    if schema.split == "sample":
        reports, level_zero_only = sum(seen.carried.values()), bool(discovering & set(seen.carried))
    elif whole:
        reports, level_zero_only = max(whole), False
    else:
        reports, level_zero_only = max(seen.carried.values(), default=0), bool(seen.carried)
    return Counts(reports, seen.windows, seen.computed_at, seen.pending, level_zero_only)


# -- read token ---------------------------------------------------------------------------------

@bp.before_request
def _reader_only() -> Response | tuple[str, int] | None:
    if current_app.config["LDP_READ_TOKEN"] is None:
        return None
    offered = request.args.get("token")
    if offered is not None:
        # Only the read token goes in a URL: the admin token must not land in history and logs.
        if not auth.matches(offered, current_app.config["LDP_READ_TOKEN"]):
            return _refuse(403, "That token is not this dashboard's read token.")
        response = auth.without_token(request.path, request.args)
        response.set_cookie(auth.TOKEN_COOKIE, offered, httponly=True, samesite="Strict", secure=request.is_secure)
        return response
    token = auth.reader_token()
    if token is None:
        return _refuse(401, "This dashboard needs the read token: open it once as /?token=<LDP_READ_TOKEN>.")
    if not auth.is_reader(token):
        return _refuse(403, "The read token this browser holds is wrong; open the dashboard with ?token=<LDP_READ_TOKEN>.")
    return None


def _refuse(status: int, message: str) -> tuple[str, int]:
    return render_template("error.html", title="Read token needed" if status == 401 else "Wrong read token",
                           message=message), status


# -- pages --------------------------------------------------------------------------------------

# Every figure is written by shared/display.py, which the CLI's tables use too.
for _name, _filter in (("pct", display.percent), ("sig", display.sig), ("times", display.times),
                       ("plural", display.plural), ("num", display.count)):
    bp.add_app_template_filter(_filter, _name)


@bp.app_template_filter("shown")
def _shown(value: float, style: display.Style) -> str:
    """An estimate or an interval's end, in its attribute's style."""
    return style.value(value)


@bp.app_template_filter("width")
def _width(value: float, style: display.Style) -> str:
    """A half-width: in percentage points for a share, in the attribute's units for a mean."""
    return style.width(value)


def _refresh_seconds() -> int:
    low, high = REFRESH_BOUNDS
    return int(min(high, max(low, current_app.config["LDP_ESTIMATE_INTERVAL"])))


def _render(template: str, status: int = 200, **values: Any) -> tuple[str, int]:
    return render_template(template, refresh_seconds=_refresh_seconds(),
                           estimate_interval=current_app.config["LDP_ESTIMATE_INTERVAL"], **values), status


@bp.get("/")
def index() -> tuple[str, int]:
    store, catalog = context.store(), context.catalog()
    schemas = []
    for schema in catalog.latest():
        schemas.append({"schema": schema, "counts": counts(schema, _activity(store, schema))})
    return _render("index.html", schemas=schemas)


@bp.get("/schemas/<name>")
def schema_page(name: str) -> tuple[str, int]:
    version_param = request.args.get("version", "")
    version = version_number(version_param) if version_param else None
    schema = context.catalog().schema(name, version) if version != 0 else None
    if schema is None:
        what = f"{name} version {version_param}" if version_param else name
        return _render("error.html", 404, title="No such schema", message=f"No schema {what!r} is published.")
    since, until, range_error = _range(schema)
    targets, target_error = _targets(schema)
    store = context.store()
    first = since or _latest_since(schema)
    view = current_app.extensions["ldp"]["pages"].get(
        (schema.name, schema.version, first, until), store.run_tx("estimates_generation", lambda tx: tx.estimates_generation(), write=False), lambda: _view(schema, first, until))
    csv_query: dict[str, Any] = {"schema": schema.name, "version": schema.version, "format": "csv",
                                 **{k: v for k, v in (("since", since), ("until", until)) if v}}
    return _render(
        "schema.html",
        page=view.page,
        counts=counts(schema, _activity(store, schema)),
        versions=store.run_tx("schema_versions", lambda tx: tx.schema_versions(schema.name), write=False),
        truncated=view.truncated,
        version_param=version_param,
        since=since,
        until=until,
        range_error=range_error,
        presets=_presets(schema, version_param),
        window_format=WINDOW_FORMATS[schema.window],
        csv_url=url_for("api.get_estimates", **csv_query),
        csv_url_external=url_for("api.get_estimates", _external=True, **csv_query),
        read_token_set=current_app.config["LDP_READ_TOKEN"] is not None,
        confidence=view.confidence,
        plans=pages.plan_lines(schema, view.page.attributes, targets, view.confidence),
        target_error=target_error,
        too_wide=pages.TOO_WIDE,
        breakdowns=view.breakdowns,
    )


TARGET_PREFIX = "half_width."


def _targets(schema: Schema) -> tuple[dict[str, float], str | None]:
    """The half-widths an analyst typed into the planner lines (``half_width.<attribute>``): a
    share's in percentage points, a mean's in its units; on the estimate's scale."""
    out, errors = {}, []
    for name in schema.attribute_names:
        text = request.args.get(TARGET_PREFIX + name, "").strip()
        if not text:
            continue
        try:
            out[name] = typed_half_width(schema.attribute(name), text)
        except ValueError as exc:
            errors.append(str(exc))
    return out, "; ".join(errors) or None


@dataclass(frozen=True)
class View:
    """What a schema page shows from the estimates, kept until they change (:mod:`.pagecache`); its
    report counts are read afresh, as reports arrive between refreshes."""

    page: pages.SchemaPage
    truncated: bool  # the range held more estimate rows than one read returns
    confidence: float
    breakdowns: list[breakdowns.BreakdownView]


def _view(schema: Schema, since: str, until: str | None) -> View:
    readout = read(current_app, schema, since=since, until=until)
    added = candidates.sources(context.store().run_tx(
        "candidates", lambda tx: tx.candidates(schema.name, schema.version), write=False))
    stored, rollup, sums = context.store().run_tx("breakdowns", lambda tx: (
        tx.breakdowns(schema.name, schema.version),
        tx.window_breakdown_estimates(schema.name, schema.version, [ROLLUP])[ROLLUP].values(),
        tx.window_counters(schema.name, schema.version, [ROLLUP])[ROLLUP].breakdowns), write=False)
    page = pages.schema_page(schema, readout.rows, readout.confidence, added, readout.crowds,
                             current_app.config["LDP_SHUFFLE_DELTA"])
    return View(page, readout.next is not None,
                readout.confidence,
                breakdowns.breakdown_views(schema, stored, sorted(rollup, key=lambda r: r.rank), sums,
                                           readout.confidence))


def _range(schema: Schema) -> tuple[str | None, str | None, str | None]:
    """The ``since``/``until`` windows asked for; a malformed one is dropped with a message."""
    bounds: dict[str, str | None] = {}
    errors = []
    for key in ("since", "until"):
        text = request.args.get(key, "").strip()
        bounds[key] = None
        if text:
            try:
                bounds[key] = window_bound(schema, key, text)
            except ReadError:
                errors.append(f"'{text[:40]}' is not a {schema.window} window ({WINDOW_FORMATS[schema.window]}, UTC); "
                              f"showing the latest windows instead.")
    try:
        check_range(bounds["since"], bounds["until"])
    except ReadError:
        errors.append(f"'{bounds['since']}' is after '{bounds['until']}'; showing the latest windows instead.")
        bounds["since"] = bounds["until"] = None
    return bounds["since"], bounds["until"], " ".join(errors) or None


def _latest_since(schema: Schema) -> str:
    """The first of the latest :data:`LATEST_WINDOWS` windows: what the page shows unless asked."""
    return window_of(context.now() - (LATEST_WINDOWS - 1) * LENGTH[schema.window], schema.window)


def _presets(schema: Schema, version_param: str) -> list[tuple[str, str]]:
    """Links to the latest windows (the default), a few other spans, and every retained window."""
    now: datetime = context.now()
    base: dict[str, Any] = {"name": schema.name, **({"version": version_param} if version_param else {})}
    links = [(f"latest {LATEST_WINDOWS} {schema.window}s", url_for("dashboard.schema_page", **base))]
    for count, label in PRESETS[schema.window]:
        since = window_of(now - (count - 1) * LENGTH[schema.window], schema.window)
        links.append((label, url_for("dashboard.schema_page", since=since, **base)))
    oldest = window_of(retention_cutoff(now, current_app.config["LDP_RETENTION_DAYS"]), schema.window)
    links.append(("every retained window", url_for("dashboard.schema_page", since=oldest, **base)))
    return links


def _activity(store: Store, schema: Schema) -> Activity:
    return store.run_tx("activity", lambda tx: tx.activity(schema.name, schema.version), write=False)
