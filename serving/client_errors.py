"""Errors of the serving client, each reported by the command line in one line."""


class ClientError(Exception):
    """An error the command line reports in one line (exit status 1)."""


class ServerUnreachable(ClientError):
    """No server answers at the address."""

    def __init__(self, host, port, protocol, reason):
        super().__init__(
            f"cannot reach TensorFlow Serving at {host}:{port} ({protocol}): {reason}. "
            "Start it with `docker compose up` in serving/ (see serving/README.md), "
            "or pass --host/--rest_port/--grpc_port"
        )


class ServerError(ClientError):
    """The server answered with an error (e.g. InvalidArgument from a signature's checks).

    Attributes:
        detail: the server's own message (without the address or status).
    """

    def __init__(self, message, detail=None):
        super().__init__(message)
        self.detail = message if detail is None else detail
