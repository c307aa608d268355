"""Schemathesis hooks for tests/test_agg_openapi.py (named by ``SCHEMATHESIS_HOOKS``): a relay's
batch is opaque bytes, sent as schemathesis sends ``application/octet-stream``."""

import schemathesis

schemathesis.serializer.alias("application/ohttp-batch", "application/octet-stream")
