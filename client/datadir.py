"""Where the client keeps its outbox and the device's secret: the platform's per-user data folder.

Computed here with the standard library, so an app embedding the client needs nothing but
requests (no platformdirs).
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from pathlib import Path

from ldp_telemetry.shared.reports import DEVICE_SECRET_BYTES

APP_FOLDER = "ldp-telemetry"
SECRET_FILE = "device-secret"


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


def device_secret(data_dir: Path) -> bytes:
    """The device's secret: 32 random bytes in ``data_dir/device-secret`` (owner-only), made on
    first use. Memoised schemas derive each value's permanent response from it, so it must never
    change: a new secret is a new device, and spends ε∞ afresh.

    Two processes starting at once agree on one secret: it is written to a private temporary file
    and linked into place, which fails if another process linked its own first.
    """
    path = data_dir / SECRET_FILE
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():
        fd, temporary = tempfile.mkstemp(dir=data_dir, prefix=".device-secret-")  # mode 0600
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(secrets.token_bytes(DEVICE_SECRET_BYTES))
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(temporary, path)
            except FileExistsError:
                pass  # another process made it first: use theirs
        finally:
            os.unlink(temporary)
    secret = path.read_bytes()
    if len(secret) != DEVICE_SECRET_BYTES:
        raise OSError(f"{path} is damaged: {len(secret)} bytes, not {DEVICE_SECRET_BYTES}")
    return secret
