"""Where the client keeps its outbox: the platform's per-user data folder.

Computed here with the standard library, so an app embedding the client needs nothing but
requests (no platformdirs).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

APP_FOLDER = "ldp-telemetry"


def default_data_dir() -> Path:
    """``%LOCALAPPDATA%`` on Windows, ``~/Library/Application Support`` on macOS, else
    ``$XDG_DATA_HOME`` (when absolute) or ``~/.local/share``; with an ``ldp-telemetry`` folder."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        xdg = os.environ.get("XDG_DATA_HOME", "")
        # The XDG spec says a relative path is invalid and must be ignored.
        base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "share"
    return base / APP_FOLDER


def outbox_path(data_dir: Path, schema_name: str) -> Path:
    """The outbox file of one schema; creates ``data_dir`` (owner-only) if needed.

    One file per schema, whatever the endpoint: the ledger in it is the device's, so pointing an
    app at another server cannot reset the budget spent in a window.
    """
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # A prefix, because a schema may be called "con" or "nul": device names on Windows.
    return data_dir / f"outbox-{schema_name}.sqlite3"
