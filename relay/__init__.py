"""The relay (``ldp-telemetry relay``): its own small service, run by someone other than the
aggregator's operator, that takes each client's encrypted report (Oblivious HTTP, RFC 9458), keeps
it with the hour it came and nothing else, and hands the aggregator shuffled batches, so that the
aggregator sees each report only as one of a crowd (DESIGN.md, "Relay and amplification").

It imports ``shared`` and nothing of the aggregator or the client: :mod:`.settings` (its flags),
:mod:`.store` (its SQLite file), :mod:`.upstream` (the aggregator's keys and schemas, cached),
:mod:`.forwarder` (batches), :mod:`.metrics`, :mod:`.app` (HTTP, RSGI) and :mod:`.server` (granian).
"""
