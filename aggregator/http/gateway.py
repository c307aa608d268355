"""The gateway: a relay's shuffled batch of encapsulated requests in (DESIGN.md, "Relay and
amplification", "Gateway").

The batch (``application/ohttp-batch``) is refused whole only for what says it is no relay's
batch: no relay token (401/403, :func:`..auth.require_relay`), another content type (415), more
than ``LDP_MAX_RELAY_BODY`` bytes (413: the one route exempt from ``LDP_MAX_BODY``, and only for a
request that carries a relay's token, :func:`larger_body`), a malformed framing or more than
:data:`...shared.ohttp.MAX_BATCH_REQUESTS` requests (400). Otherwise each request is opened on its own
(:func:`open_request`) and one that fails is refused alone, counted in
``ldp_relay_refused_total{reason}`` by the first step it fails (:data:`..metrics.RELAY_REASONS`):

- ``key``: its header is not ours, or its key id names no key accepted now;
- ``decrypt``: HPKE opening fails (a bad tag, another key's request);
- ``request``: the message is not the one Binary HTTP request of DESIGN.md "Bytes" (non-zero
  padding included), its content is longer than ``LDP_MAX_BODY``, or it holds more than one
  report (two reports in one request would say they come from one device);
- ``report``: the content is not what ``POST /api/v1/reports`` accepts (strict JSON, every
  report valid, the server's window policy): the very same checks.

The valid reports of all requests go through the one write path as one relay batch
(:meth:`..ingest.writer.ReportWriter.write_relayed`): stored once, counted once, with the batch's
crowd per window written in the same transaction. A crowd counts only reports whose requests
this server cannot tell apart: a request's key id and size are in the clear, so a report under
another key (a client that has not yet taken a rotated key) or of another size (a client that pads
otherwise) is a crowd of its own, and the window keeps the smallest. The order within the batch is
the relay's shuffle and means nothing; nothing of it is kept: the reports are stored in id order.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from flask import Flask

from ...shared import ohttp
from .. import context
from ..auth import bearer_of, is_relay
from ..catalog import Catalog
from ..errors import ApiError
from ..ingest.batch import WindowPolicy, window_policy
from ..ingest.reader import BatchReader
from ..ohttp_keys import accepted_keys
from ..store import ReportRow, first_of_each_id
from .body import report_batch

PATH = "/api/v1/relay/batches"


class Refused(Exception):
    """A request of a batch refused alone, for ``reason`` (one of :data:`..metrics.RELAY_REASONS`)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Received:
    """What a batch held: the new reports stored, the valid ones already stored (or repeated), and
    the requests refused, by reason."""

    accepted: int
    duplicates: int
    refused: Counter[str]


def open_request(request: bytes, private_keys: Mapping[int, bytes], reader: BatchReader, catalog: Catalog,
                 policy: WindowPolicy, max_batch: int, max_body: int) -> tuple[list[ReportRow], int]:
    """The reports of one encapsulated request as stored (each id once), and how many it held (an
    id repeated in it is a duplicate, as in a direct post); or :class:`Refused`."""
    try:
        private = private_keys.get(ohttp.request_key_id(request))
    except ValueError:
        raise Refused("key") from None
    if private is None:
        raise Refused("key")
    try:
        message = ohttp.decapsulate(request, private)
    except ValueError:  # DecryptError, or a request too short to hold its encapsulated key
        raise Refused("decrypt") from None
    try:
        content = ohttp.bhttp_content(message)
    except ValueError:
        raise Refused("request") from None
    if len(content) > max_body:
        raise Refused("request")
    try:
        rows, reports = report_batch(content, reader, catalog, policy, max_batch)
    except ApiError:
        raise Refused("report") from None
    if reports != 1:  # two reports in one request would say they come from one device
        raise Refused("request")
    return rows, reports


def receive(app: Flask, requests: Iterable[bytes]) -> Received:
    """Open each of a batch's ``requests`` with the keys accepted now, and store the valid reports
    (see the module)."""
    private_keys = {k.key_id: k.private_key for k in accepted_keys(app) if k.private_key is not None}
    reader, catalog, policy = context.reader(app), context.catalog(app), window_policy(app)
    max_batch, max_body = app.config["LDP_MAX_BATCH"], app.config["LDP_MAX_BODY"]
    rows: list[ReportRow] = []
    looks: dict[str, tuple[int, int]] = {}
    valid = 0
    refused: Counter[str] = Counter()
    for request in requests:
        try:
            opened, held = open_request(request, private_keys, reader, catalog, policy, max_batch, max_body)
        except Refused as exc:
            refused[exc.reason] += 1
            continue
        rows += opened
        valid += held
        for row in opened:  # what this server sees of the request: its key id (byte 0) and size
            looks.setdefault(row.id, (request[0], len(request)))
    # An id in two requests is one report (the first kept); id order: nothing keeps the batch's order.
    unique = sorted(first_of_each_id(rows))
    accepted = context.writer(app).write_relayed(unique, looks) if unique else 0
    return Received(accepted, valid - accepted, refused)


def larger_body(config: Mapping[str, Any]) -> Callable[[str, str, str | None], int | None]:
    """What the RSGI bridge asks before reading a body: ``(method, path, Authorization header)`` ->
    ``LDP_MAX_RELAY_BODY`` for a relay's batch carrying a relay's token, else None (``LDP_MAX_BODY``
    holds). A stranger's request to the gateway is read no further than any other."""
    tokens: tuple[str, ...] = config["LDP_RELAY_TOKENS"]
    limit: int = config["LDP_MAX_RELAY_BODY"]

    def limit_for(method: str, path: str, authorization: str | None) -> int | None:
        return limit if method == "POST" and path == PATH and is_relay(bearer_of(authorization), tokens) else None

    return limit_for
