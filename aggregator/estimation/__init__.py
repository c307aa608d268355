"""Estimates out: the refresh that turns changed counters into estimates with intervals
(:mod:`.refresh`) and the one query that reads them back for the API and the dashboard
(:mod:`.readout`). The scheduled jobs that run the refresh are app-wide (:mod:`..jobs`).

It may import the app-wide modules, the store's interface and ``shared``; never the HTTP layer,
ingest or the dashboard.
"""
