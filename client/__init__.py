"""The client library: on-device randomisation that an app can embed and forget.

``TelemetryClient`` randomises each record on the device, keeps the randomised report in a
durable outbox and sends it in the background; ``randomize`` is the plain function for apps that
carry reports themselves. Needs nothing beyond ``requests`` and the standard library.
"""

from ldp_telemetry.shared import randomize

from .client import TelemetryClient
from .options import OPTIONS
from .recorder import RecordResult
from .datadir import default_data_dir
from .transport import RelayTransport, RequestsTransport, Response, Transport

__all__ = ["OPTIONS", "RecordResult", "RelayTransport", "RequestsTransport", "Response", "TelemetryClient",
           "Transport", "default_data_dir", "randomize"]
