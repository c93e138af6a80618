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


class RowError(ClientError):
    """The server answered, but refused some rows of the request: their
    `status` output names the problem (e.g. `top_p` outside (0, 1]).

    Attributes:
        problems: `{row index: the row's status message}`.
        outputs: the whole answer `{output name: numpy array}`; the other
            rows are answered as if they had come alone.
    """

    def __init__(self, problems, outputs):
        rows = "; ".join(f"row {row}: {message}" for row, message in sorted(problems.items()))
        super().__init__(f"the server refused {len(problems)} row(s) of the request: {rows}")
        self.problems = problems
        self.outputs = outputs
