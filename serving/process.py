"""What the aggregator's and the relay's processes share under granian: a port checked free before
it is taken, and workers that die with their master."""

from __future__ import annotations

import signal
import socket
import sys


class CannotListen(ValueError):
    """The address a server was asked to listen on is taken, or is no address of this machine."""


def check_can_listen(host: str, port: int) -> None:
    """:class:`CannotListen` if ``host``:``port`` cannot be bound now: no address of this machine,
    or another process listens there. granian binds with
    SO_REUSEPORT, so a second server on a taken port would start without a word and share it with
    the first: requests would go to either at random (two databases, two key lists). A bind without
    SO_REUSEPORT fails while anyone listens there. Port 0 (any free port) is not checked."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed server's TIME_WAIT is no user
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise CannotListen(f"cannot listen on {host}:{port} (--host, --port): {exc.strerror or exc}") from None


def die_with_master() -> None:
    """On Linux, have the kernel kill this worker when granian's master dies (``kill -9``, the OOM
    killer). An orphaned worker would go on answering on the port beside a restarted server (granian
    binds it with SO_REUSEPORT) with its old settings: a revoked relay token still taken, the
    relay's forwarder lock still held. Call it first thing in a worker."""
    if sys.platform != "linux":
        return
    import ctypes

    pr_set_pdeathsig = 1  # <linux/prctl.h>
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
