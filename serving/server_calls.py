"""Calls to a running TensorFlow Serving: REST over HTTP (standard library) and gRPC.

`predict(model_name, signature_name, inputs, protocol=...)` sends one request and
returns `{output name: numpy array}`, raising `RowError` when the server refused a
row (its `status` output is not empty); `rest_call` and `grpc_predict` are the
transports, raising `ServerUnreachable` or `ServerError` with the address.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

from serving.client_errors import RowError, ServerError, ServerUnreachable
from serving.model_signatures import SIGNATURES
from serving.predict_requests import (
    parse_predict_response,
    parse_rest_response,
    predict_request,
    read_json,
    rest_body,
)

DEFAULT_HOST = "localhost"
DEFAULT_REST_PORT = 8501
DEFAULT_GRPC_PORT = 8500
DEFAULT_TIMEOUT = 300.0
# Generated images and logits can pass gRPC's 4 MiB default message size.
GRPC_MAX_MESSAGE_BYTES = 512 * 1024 * 1024


def model_path(model_name, version=None, verb=""):
    """`/v1/models/<name>[/versions/<version>]<verb>`, e.g. verb `:predict` or `/metadata`."""
    path = f"/v1/models/{model_name}"
    if version is not None:
        path += f"/versions/{int(version)}"
    return path + verb


def _error_text(payload):
    try:
        return str(read_json(payload)["error"])
    except (ValueError, KeyError, TypeError):
        return payload.decode("utf-8", "replace").strip() or "(empty body)"


def rest_call(host, port, path, body=None, timeout=DEFAULT_TIMEOUT):
    """GET (`body=None`) or POST JSON to the server; returns the decoded JSON.

    Raises:
        ServerUnreachable: nothing answers at `host:port`.
        ServerError: an HTTP error status (the server's `{"error": ...}` message)
            or no answer within `timeout` seconds.
    """
    url = f"http://{host}:{port}{path}"
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return read_json(answer.read())
    except urllib.error.HTTPError as error:
        detail = _error_text(error.read())
        raise ServerError(f"HTTP {error.code} from {url}: {detail}", detail) from None
    except (socket.timeout, TimeoutError):
        raise ServerError(f"no answer from {url} within {timeout:g} s (--timeout)") from None
    except urllib.error.URLError as error:
        if isinstance(error.reason, (socket.timeout, TimeoutError)):
            raise ServerError(f"no answer from {url} within {timeout:g} s (--timeout)") from None
        raise ServerUnreachable(host, port, "REST", error.reason) from None
    except ConnectionError as error:
        raise ServerUnreachable(host, port, "REST", error) from None


def rest_predict(host, port, model_name, body, timeout=DEFAULT_TIMEOUT, version=None):
    """POSTs a `rest_body` to `/v1/models/<model_name>[/versions/<v>]:predict`."""
    return rest_call(host, port, model_path(model_name, version, ":predict"), body, timeout)


def grpc_predict(host, port, request, timeout=DEFAULT_TIMEOUT):
    """Sends a `PredictRequest` over gRPC; returns the `PredictResponse`."""
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    options = [
        ("grpc.max_send_message_length", GRPC_MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", GRPC_MAX_MESSAGE_BYTES),
    ]
    with grpc.insecure_channel(f"{host}:{port}", options=options) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            return stub.Predict(request, timeout=timeout)
        except grpc.RpcError as error:
            code, details = error.code(), (error.details() or "").replace("\n", " ")
            if code == grpc.StatusCode.UNAVAILABLE and (
                "connect" in details.lower() or "resolution" in details.lower()
            ):
                raise ServerUnreachable(host, port, "gRPC", details) from None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise ServerError(
                    f"no answer from {host}:{port} (gRPC) within {timeout:g} s (--timeout)"
                ) from None
            raise ServerError(f"{code.name}: {details}", details) from None


def predict(
    model_name,
    signature_name,
    inputs,
    *,
    protocol="rest",
    host=DEFAULT_HOST,
    rest_port=DEFAULT_REST_PORT,
    grpc_port=DEFAULT_GRPC_PORT,
    timeout=DEFAULT_TIMEOUT,
    version=None,
    rest_form="instances",
):
    """One predict call over REST or gRPC; returns `{output name: numpy array}`.

    REST outputs get the dtypes of `SIGNATURES` for the generation signatures
    (JSON numbers carry none); gRPC outputs carry their own.

    Raises:
        RowError: a row's `status` output is not empty (the server refused
            that row; the error holds every row's outputs).
    """
    if protocol == "rest":
        body = rest_body(signature_name, inputs, form=rest_form)
        response = rest_predict(host, rest_port, model_name, body, timeout, version)
        outputs = SIGNATURES.get(signature_name, {}).get("outputs", {})
        answer = parse_rest_response(response, output_names=list(outputs) or None, dtypes=outputs)
    elif protocol == "grpc":
        request = predict_request(model_name, signature_name, inputs, version)
        answer = parse_predict_response(grpc_predict(host, grpc_port, request, timeout))
    else:
        raise ValueError(f'`protocol` must be "rest" or "grpc". Received: protocol={protocol!r}')
    check_row_status(answer)
    return answer


def check_row_status(outputs):
    """Raises `RowError` when a row of `outputs` has a non-empty `status`."""
    problems = {
        row: bytes(status).decode("utf-8", "replace")
        for row, status in enumerate(outputs.get("status", ()))
        if len(status)
    }
    if problems:
        raise RowError(problems, outputs)

