"""Background jobs (placeholder until the scheduler lands)."""

from __future__ import annotations

from flask import Flask


def init_app(app: Flask) -> None:
    return None
