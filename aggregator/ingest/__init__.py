"""Reports in: a batch validated against the published schemas (:mod:`.batch`), stored and counted
exactly once by the one write path (:mod:`.writer`, through SQLite's :mod:`.inbox` or a
:mod:`.groupcommit`), and what a stored report adds to the counters (:mod:`.counting`), which the
writer calls inside the transaction that stores the report.

This area may import the app-wide modules, the store's interface and ``shared``; never the HTTP
layer, estimation or the dashboard.
"""
