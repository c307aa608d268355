"""Estimates out: the refresh that turns changed counters into estimates with intervals
(:mod:`.refresh`), the one query that reads them back for the API and the dashboard
(:mod:`.readout`), and the background jobs that run the refresh and retention (:mod:`.jobs`).

It may import the app-wide modules, the store's interface and ``shared``; never the HTTP layer,
ingest or the dashboard.
"""
