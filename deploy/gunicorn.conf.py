"""Gunicorn settings for the ldp-telemetry aggregator.

    gunicorn -c deploy/gunicorn.conf.py 'ldp_telemetry.aggregator:create_app()'

The aggregator promises to keep nothing that could link a report to a person, and a web
server's logs are the usual leak: by default gunicorn logs every client's address, user agent
and referer. Here the access log holds the method, the path (without the query string, which
may carry a read token), the status, the size and the duration; no time stamp either (journald
or Docker add their own, to the second, which says nothing about a report: stored reports carry
no receive time). The logger below also blanks those fields if someone changes the format, and
redacts the one error line gunicorn writes with a client address (a malformed request).
The aggregator's own settings come from LDP_* variables (see deploy/README.md).
"""

import os
import shutil
import tempfile


# Inside a container bind 0.0.0.0 (LDP_BIND) and publish the port to the host's loopback only.
bind = os.environ.get("LDP_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("LDP_WORKERS", "2"))
worker_class = "gthread"
threads = int(os.environ.get("LDP_THREADS", "4"))
timeout = 30
graceful_timeout = 20
# Restart workers now and then so that no leak can grow for ever.
max_requests = 10_000
max_requests_jitter = 1_000
# Trust X-Forwarded-Proto from the reverse proxy on this host only, so a request that came in over
# HTTPS is seen as secure (the read-token cookie is then set Secure). Gunicorn takes no client
# address from these headers, and nginx-site.conf blanks X-Forwarded-For anyway.
forwarded_allow_ips = os.environ.get("LDP_PROXY_IPS", "127.0.0.1,::1")
proxy_protocol = False
# gunicorn 27's control socket would be created in $HOME; nothing here uses it.
control_socket_disable = True

accesslog = os.environ.get("LDP_ACCESS_LOG", "-")
errorlog = os.environ.get("LDP_ERROR_LOG", "-")
loglevel = os.environ.get("LDP_LOG_LEVEL", "info")
access_log_format = '"%(m)s %(U)s %(H)s" %(s)s %(B)s %(M)sms'

# Atoms of gunicorn's access-log format that name or fingerprint the client.
_CLIENT_ATOMS = {"h": "-", "a": "-", "f": "-", "q": "-", "u": "-", "l": "-"}
# With several workers, each counts its own requests: prometheus-client's multiprocess mode keeps
# the counts in files so that /metrics sums them. The variable must be set before the workers
# import prometheus_client, so here, in the master, before anything of ours is imported.
_metrics_dir = None
if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    _metrics_dir = os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="ldp-telemetry-metrics-")

# Only now may anything of ours be imported (see above).
from ldp_telemetry.aggregator.server import NoClientAddressLogger as _RedactingLogger  # noqa: E402
from ldp_telemetry.aggregator.server import child_exit  # noqa: E402,F401  a dead worker's files go


class NoClientAddressLogger(_RedactingLogger):
    """The logger of ``ldp-telemetry serve`` (client addresses redacted from the error log), with an
    access log unable to write a client's address, agent, referer or query."""

    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        atoms.update(_CLIENT_ATOMS)
        atoms["r"] = f"{atoms['m']} {atoms['U']} {atoms['H']}"
        # request headers ({x-forwarded-for}i, {cookie}i, ...) and the WSGI environ ({remote_addr}e)
        for key in [k for k in atoms if k.endswith("}i") or k.endswith("}e")]:
            del atoms[key]
        return atoms


logger_class = NoClientAddressLogger


def on_exit(server):
    if _metrics_dir:
        shutil.rmtree(_metrics_dir, ignore_errors=True)
