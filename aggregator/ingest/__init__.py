"""Reports in: a batch validated against the published schemas and handed to the store
(:mod:`.batch`), and what a stored report adds to the counters (:mod:`.counting`).

Counting is given to the store once (``create_app``); the store applies it to the reports it
finds new, in the same transaction, whichever backend it is. This area may import the app-wide
modules, the store's interface and ``shared``; never the HTTP layer, estimation or the dashboard.
"""
