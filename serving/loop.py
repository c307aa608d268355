"""The event loop granian runs a worker's RSGI app on: uvloop (libuv, in C).

asyncio's own loop is Python: under ingest load it took about a quarter of an aggregator
worker's interpreter time (py-spy, 100-report batches), every request's hand-offs between the
loop and the Flask threads going through it. uvloop does the same work in C (the README's
performance section has the figures). Named here rather than left to granian's ``auto``, which
would take rloop, granian's experimental loop, whenever that happens to be installed.
"""

EVENT_LOOP = "uvloop"
