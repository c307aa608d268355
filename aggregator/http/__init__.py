"""The HTTP layer: the API and operations blueprints, strict request bodies, response headers,
the OpenAPI document, and the server that runs the app (granian and its RSGI bridge).

It owns what a request looks like on the wire and nothing of what is done with it: a view reads
and checks the request, calls :mod:`..ingest` or :mod:`..estimation` and answers. It may import
those areas, the app-wide modules beside it (settings, context, metrics, errors, auth,
retention), the store's interface and ``shared``; nothing imports it but ``create_app`` and the
tools that start a server.
"""
