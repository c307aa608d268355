"""The dashboard (server-rendered HTML): an index of schemas and a page per schema."""

from __future__ import annotations

from flask import Blueprint, abort, render_template

from . import context
from .auth import require_reader

bp = Blueprint("dashboard", __name__)


@bp.before_request
def _reader_only() -> None:
    require_reader()


@bp.get("/")
def index() -> str:
    return render_template("index.html", schemas=context.store().latest_schemas())


@bp.get("/schemas/<name>")
def schema_page(name: str) -> str:
    schema = context.catalog().schema(name)
    if schema is None:
        abort(404)
    return render_template("schema.html", schema=schema)
