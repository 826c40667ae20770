"""An OTLP/HTTP receiver on 127.0.0.1 for the tests: keeps every POST body and decodes
them with the official `opentelemetry-proto` messages (`ExportTraceServiceRequest`).
Started in a thread on a random port; `stop()` shuts it down."""

from __future__ import annotations

import http.server
import threading
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_service


class Receiver:
    """An OTLP/HTTP receiver on 127.0.0.1: keeps every POST body to /v1/traces."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        bodies, paths = self.bodies, self.paths

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                paths.append(self.path)
                bodies.append(self.rfile.read(length))
                reply = trace_service.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def requests(self) -> list[Any]:
        out = []
        for body in self.bodies:
            message = trace_service.ExportTraceServiceRequest()
            message.ParseFromString(body)
            out.append(message)
        return out


def spans_of(request: Any) -> list[Any]:
    return [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
