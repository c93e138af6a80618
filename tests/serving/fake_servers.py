"""Pieces of the fake TensorFlow Serving REST servers of the serving tests."""

import http.server
import json
import socket


def free_port():
    """A local TCP port nothing listens on (for the moment)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that answers with JSON and logs nothing."""

    def send_json(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_json(self):
        """The request's JSON body."""
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def log_message(self, *args):
        pass
