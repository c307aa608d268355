"""What the aggregator (``ldp-telemetry serve``) and the relay (``ldp-telemetry relay``) share of
serving HTTP on granian's RSGI: two services run by different parties, one way of reading a request.
It imports neither of them."""
