"""The dashboard blueprint: server-rendered pages of the estimates, their intervals and the
privacy parameters (:mod:`.views`), what each page shows (:mod:`.pages`), chart geometry
(:mod:`.charts`), pages kept per refresh (:mod:`.pagecache`), and its templates/ and static/.

It reads estimates through :mod:`..estimation.readout` and may import the app-wide modules, the
store's interface and ``shared``; never the HTTP layer or ingest.
"""
