"""Tools around the system, apart from the service and the client: the ``ldp-telemetry`` command
(:mod:`.cli`, a thin Click layer), calling the API from it (:mod:`.remote`), tables it prints
(:mod:`.tables`), the end-to-end demo (:mod:`.demo`) and a server run as a child process for the
demo, the benchmark and the tests (:mod:`.process`).

Tools may import the aggregator, the client and ``shared``; nothing in those imports a tool.
"""
