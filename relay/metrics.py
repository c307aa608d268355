"""The relay's Prometheus metrics (``GET /metrics``): what it holds, what it sent, what failed,
what it discarded, and whether it stopped sending.

One process serves and forwards (``ldp-telemetry relay`` runs one worker), so one registry holds
everything; counters start at zero with each start, as Prometheus counters do.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

from .store import Usage


class RelayMetrics:
    def __init__(self, usage: Usage) -> None:
        self.registry = CollectorRegistry()
        stored = Gauge("ldp_relay_stored_requests", "Requests stored (waiting, or in the batch in flight).",
                       registry=self.registry)
        stored.set_function(lambda: usage.requests)
        stored_bytes = Gauge("ldp_relay_stored_bytes", "Bytes of the requests stored.", registry=self.registry)
        stored_bytes.set_function(lambda: usage.bytes)
        self.received = Counter("ldp_relay_received", "Requests stored and answered 202.", registry=self.registry)
        # Not ldp_relay_refused: that is the aggregator's count of the requests its gateway refused.
        self.refused = Counter("ldp_relay_post_refused", "POST /relay requests refused, by reason (size, media_type, "
                               "key, no_keys, full).", ["reason"], registry=self.registry)
        self.in_flight = Gauge("ldp_relay_batch_requests", "Requests in the batch formed and not yet acknowledged "
                               "(0: none).", registry=self.registry)
        self.batches_sent = Counter("ldp_relay_batches_sent", "Batches the aggregator acknowledged (2xx).",
                                    registry=self.registry)
        self.forwarded = Counter("ldp_relay_forwarded_requests", "Requests in the acknowledged batches.",
                                 registry=self.registry)
        self.failures = Counter("ldp_relay_forward_failures", "Sends of a batch that failed, by HTTP status "
                                "(\"network\": no answer).", ["status"], registry=self.registry)
        self.discarded = Counter("ldp_relay_discarded", "Requests discarded unsent, older than --max-age.",
                                 registry=self.registry)
        self.stopped = Gauge("ldp_relay_stopped", "1 when sending stopped on an answer only an operator can mend "
                             "(401, 403, 413, 415 or another 4xx; the batch is kept; restart once mended).",
                             registry=self.registry)
        self.stopped_status = Gauge("ldp_relay_stopped_status", "The HTTP status that stopped sending (0: running).",
                                    registry=self.registry)

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text format and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
