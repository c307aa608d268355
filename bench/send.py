"""One send of the client's transport: ``RequestsTransport.post_json`` of a batch, end to end.

The server is a minimal HTTP/1.1 keep-alive server in its own process that reads the body and
acknowledges it (``202 {"accepted", "duplicates"}``) without looking at it, so the figure is the
client's side of a send (encoding the body, the request, the deadline's bookkeeping, reading and
parsing the answer) and not the aggregator's ingest, which ``ingest`` measures.

    python -m bench.send --serve    # the server alone: prints its port, answers until killed
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from ldp_telemetry.client import RequestsTransport
from ldp_telemetry.shared import randomize

from . import encoders

ACK = b'{"accepted": 1, "duplicates": 0}'


class _Acknowledge(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the client reuses its connection, as in production
    # The answer goes out in two writes (head, body); with Nagle's algorithm the second waits for
    # the client's delayed ACK (40 ms on Linux), which would be all the figure measured.
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(202)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ACK)))
        self.end_headers()
        self.wfile.write(ACK)


def serve() -> None:
    """Serve on 127.0.0.1 (one connection at a time is all one client uses); print the port."""
    server = HTTPServer(("127.0.0.1", 0), _Acknowledge)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def run(sends: int = 1000, rounds: int = 3) -> dict[str, Any]:
    """Median milliseconds of one ``post_json`` for a batch of 1 and of 100 reports (medians over
    ``rounds`` of ``sends`` sends each, on one keep-alive connection)."""
    server = subprocess.Popen([sys.executable, "-m", "bench.send", "--serve"], stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{int(server.stdout.readline())}/api/v1/reports"  # type: ignore[union-attr]
        out: dict[str, Any] = {}
        for size in (1, 100):
            body = {"reports": [randomize(encoders.BENCH_SCHEMA, encoders.RECORD) for _ in range(size)]}
            medians, p99s = [], []
            for _ in range(rounds):
                transport = RequestsTransport()
                try:
                    transport.post_json(url, body, 10)  # the connection, opened once
                    times = []
                    for _ in range(sends):
                        started = time.perf_counter_ns()
                        response = transport.post_json(url, body, 10)
                        times.append((time.perf_counter_ns() - started) / 1e6)
                        assert response.status == 202, response
                finally:
                    transport.close()
                times.sort()
                medians.append(times[len(times) // 2])
                p99s.append(times[int(len(times) * 0.99)])
            out[f"batch{size}"] = {"median_ms": round(statistics.median(medians), 3),
                                   "p99_ms": round(statistics.median(p99s), 3)}
        return out
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    serve()
