"""Reading a request's body from granian's RSGI protocol, within a limit."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # granian is there whenever a server runs; the types are for the checker
    from granian.rsgi import HTTPProtocol


class BrokenBody(Exception):
    """A chunked body that ended early or holds a malformed chunk."""


async def read_body(proto: HTTPProtocol, length_known: bool, limit: int) -> bytes:
    """The body; at most ``limit + 1`` bytes of it (enough for the caller to see it is too large).

    A body whose length was declared has been checked against ``limit`` already: granian reads it
    in one go. A chunked one is read chunk by chunk, and granian's iterator turns a read error (a
    malformed chunk, a connection cut before the last chunk) into an empty chunk and goes on to its
    end, which it marks with one more empty chunk: an empty chunk that is not the last means the
    body is broken (:class:`BrokenBody`)."""
    if length_known:
        return await proto()
    body = bytearray()
    empty = 0
    async for chunk in proto:
        if not chunk:
            empty += 1
        elif empty:
            raise BrokenBody
        else:
            body += chunk
            if len(body) > limit:
                return bytes(body[:limit + 1])
    if empty > 1:
        raise BrokenBody
    return bytes(body)
