"""Client for keras_selfattn models served by TensorFlow Serving (REST and gRPC).

Request builders (importable; `serving/` is not a package, so add it to
`sys.path` first):

- `predict_request(model_name, signature_name, inputs)`: a gRPC `PredictRequest`.
- `rest_body(signature_name, inputs, form="instances" | "inputs")`: the JSON
  body of `POST /v1/models/<name>:predict`.
- `parse_rest_response(response)` and `parse_predict_response(response)`:
  the outputs as `{name: numpy array}` (strings as `bytes` in object arrays,
  as `tf.make_ndarray` gives them).
- `predict(...)`: one request over either protocol.

Command line (`python serving/client.py --help`):

    python serving/client.py music --primer in.mid --out out.mid
    python serving/client.py translate "Ich habe Hunger."
    python serving/client.py sample --out grid.png
    python serving/client.py complete in.png --known_rows 4 --out grid.png
    python serving/client.py super_resolve in.png out.png

The REST path needs only the standard library and numpy; gRPC needs `grpcio`
and `tensorflow-serving-api` (which imports TensorFlow).
"""

from __future__ import annotations

import argparse
import base64
import json
import socket
import sys
import time
import urllib.error
import urllib.request

import numpy as np

# Model names of `serving/models.config`, one per recipe.
MODEL_NAMES = {
    "music": "music",
    "translation": "translation",
    "image_generation": "image_generation",
    "super_resolution": "super_resolution",
}

# The generation signatures every export carries (besides `serving_default`,
# the forward pass), by model name of `models.config`.
MODEL_SIGNATURES = {
    "music": ("generate",),
    "translation": ("translate",),
    "image_generation": ("sample", "complete"),
    "super_resolution": ("super_resolve",),
}

# Inputs and outputs of each generation signature: name -> dtype. Every
# input and output has a leading batch dimension. `class_label` is present only
# for class-conditional image models.
SIGNATURES = {
    "generate": {
        "inputs": {
            "primer": "int32",  # [B, T]
            "max_new_tokens": "int32",  # [B]
            "temperature": "float32",  # [B]
            "top_k": "int32",  # [B]
            "top_p": "float32",  # [B]
            "seed": "int32",  # [B]
        },
        "outputs": {"tokens": "int32"},  # [B, T + max(max_new_tokens)]
    },
    "translate": {
        "inputs": {"text": "string"},  # [B]
        "outputs": {"translation": "string", "tokens": "int32", "score": "float32"},
    },
    "sample": {
        "inputs": {"seed": "int32", "temperature": "float32", "class_label": "int32"},
        "outputs": {"pixels": "uint8"},  # [B, H, W, C]
    },
    "complete": {
        "inputs": {
            "pixels": "uint8",  # [B, H, W, C]
            "known_rows": "int32",  # [B]
            "seed": "int32",
            "temperature": "float32",
            "class_label": "int32",
        },
        "outputs": {"pixels": "uint8"},
    },
    "super_resolve": {
        "inputs": {"low_resolution": "uint8", "seed": "int32", "temperature": "float32"},
        "outputs": {"pixels": "uint8"},  # [B, H, W, C]
    },
}

DEFAULT_HOST = "localhost"
DEFAULT_REST_PORT = 8501
DEFAULT_GRPC_PORT = 8500
DEFAULT_TIMEOUT = 300.0
# Generated images and logits can pass gRPC's 4 MiB default message size.
GRPC_MAX_MESSAGE_BYTES = 512 * 1024 * 1024
_BYTES_SUFFIX = "_bytes"


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


# --------------------------------------------------------------------------
# REST JSON (TensorFlow Serving's rules, tensorflow_serving/util/json_tensor.cc)


def _is_b64_object(value):
    """`{"b64": "<base64>"}`, the only JSON form of binary strings."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _is_named_object(value):
    return isinstance(value, dict) and not _is_b64_object(value)


def _b64(data):
    return {"b64": base64.b64encode(data).decode("ascii")}


def _json_string(value, name):
    """One string element as JSON: text as a JSON string, binary as `{"b64": ...}`.

    The server turns a JSON string into its UTF-8 bytes and decodes a
    `{"b64": ...}` object for any `DT_STRING` input. JSON strings can only hold
    text, so bytes that are not valid UTF-8 go as b64, and so does everything
    under a name ending in `_bytes` (the server's convention for binary
    tensors, which it applies to its outputs).
    """
    if isinstance(value, str):
        return _b64(value.encode("utf-8")) if name.endswith(_BYTES_SUFFIX) else value
    if isinstance(value, (bytes, bytearray, np.bytes_)):
        data = bytes(value)
        if name.endswith(_BYTES_SUFFIX):
            return _b64(data)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return _b64(data)
    raise TypeError(
        f"Input `{name}` holds {type(value).__name__} elements; string inputs take str or bytes"
    )


def _map_nested(value, function):
    if isinstance(value, list):
        return [_map_nested(item, function) for item in value]
    return function(value)


def _as_array(name, value):
    array = np.asarray(value)
    if array.dtype.kind not in "biufOSU":
        raise TypeError(
            f"Input `{name}` has dtype {array.dtype}; TensorFlow Serving's JSON takes "
            "booleans, integers, floats and strings"
        )
    return array


def _json_value(name, array):
    """A numpy array (or one row of it) in the server's nested-list JSON form."""
    if array.dtype.kind in "OSU":
        return _map_nested(array.tolist(), lambda item: _json_string(item, name))
    return array.tolist()


def rest_body(signature_name, inputs, form="instances"):
    """The JSON body (a dict) of a REST predict request.

    Args:
        signature_name: signature to call (`None` leaves the server's default,
            `serving_default`).
        inputs: dict of input name -> array-like (numpy arrays, lists).
        form: `"instances"` (row form: a list with one `{name: value}` object
            per row; every input needs the same leading batch dimension) or
            `"inputs"` (columnar form: `{name: whole tensor}`).

    Returns:
        A dict to send with `json.dumps`. Numbers and booleans are JSON values,
        text strings JSON strings, and binary strings (bytes that are not UTF-8,
        or any string under a name ending in `_bytes`) `{"b64": base64}` objects.
    """
    if form not in ("instances", "inputs"):
        raise ValueError(f'`form` must be "instances" or "inputs". Received: form={form!r}')
    if not inputs:
        raise ValueError("`inputs` must name at least one input. Received: inputs={}")
    arrays = {name: _as_array(name, value) for name, value in inputs.items()}
    body = {} if signature_name is None else {"signature_name": signature_name}
    if form == "inputs":
        body["inputs"] = {name: _json_value(name, array) for name, array in arrays.items()}
        return body
    sizes = {}
    for name, array in arrays.items():
        if array.ndim == 0:
            raise ValueError(
                f"Input `{name}` is a scalar; row form (`instances`) needs a leading batch "
                'dimension on every input. Use form="inputs" or add the batch dimension.'
            )
        sizes[name] = array.shape[0]
    if len(set(sizes.values())) != 1:
        raise ValueError(
            "Row form (`instances`) needs the same batch size on every input. "
            f'Received batch sizes {sizes}; use form="inputs" for mixed sizes.'
        )
    rows = next(iter(sizes.values()))
    body["instances"] = [
        {name: _json_value(name, _row(array, row)) for name, array in arrays.items()}
        for row in range(rows)
    ]
    return body


def _row(array, row):
    """Row `row` of `array`, kept an array (object arrays give elements otherwise)."""
    return np.asarray(array[row], dtype=array.dtype)


def _nested_shape(value):
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return tuple(shape)


def _flatten(value):
    if isinstance(value, list):
        for item in value:
            yield from _flatten(item)
    else:
        yield value


def _string_element(value):
    if _is_b64_object(value):
        return base64.b64decode(value["b64"])
    if isinstance(value, str):
        # `surrogateescape` gives back the bytes of a string that was not UTF-8
        # (see `_loads`).
        return value.encode("utf-8", "surrogateescape")
    raise ValueError(f"Expected a string or a b64 object in a string output, got {value!r}")


def _is_string_dtype(dtype):
    if dtype is None:
        return False
    return dtype in ("string", str, bytes, object) or np.dtype(dtype).kind in "OSU"


def _array_from_json(value, dtype=None):
    """A JSON tensor (nested lists) as a numpy array; strings as bytes objects."""
    leaf = value
    while isinstance(leaf, list) and leaf:
        leaf = leaf[0]
    if isinstance(leaf, str) or _is_b64_object(leaf) or _is_string_dtype(dtype):
        array = np.empty(_nested_shape(value), dtype=object)
        array.reshape(-1)[:] = [_string_element(item) for item in _flatten(value)]
        return array
    return np.asarray(value, dtype=dtype)


def parse_rest_response(response, output_names=None, dtypes=None):
    """Outputs of a REST predict response as numpy arrays.

    Args:
        response: the decoded JSON (dict): `{"predictions": ...}` (answer to a
            row-form request) or `{"outputs": ...}` (columnar); `{"error": ...}`
            raises `ServerError`.
        output_names: names of the signature's outputs. The server leaves the
            name out when a signature has one output; it is then keyed by
            `output_names[0]`, or `"output"` if not given.
        dtypes: optional dict of output name -> numpy dtype (or `"string"`).
            JSON numbers carry no dtype: without one, integers come back int64
            and floats float64. The server writes float32 values so that they
            round-trip exactly when cast back to float32.

    Returns:
        dict of output name -> numpy array (strings: object arrays of bytes;
        `{"b64": ...}` values decoded).
    """
    if not isinstance(response, dict):
        raise ValueError(f"Expected a JSON object as the response, got {type(response).__name__}")
    if "error" in response:
        raise ServerError(str(response["error"]))
    single_name = output_names[0] if output_names and len(output_names) == 1 else "output"
    if "predictions" in response:
        rows = response["predictions"]
        if not isinstance(rows, list):
            raise ValueError(f'"predictions" must be a list, got {type(rows).__name__}')
        if rows and all(_is_named_object(row) for row in rows):
            names = list(rows[0])
            named = {name: [row[name] for row in rows] for name in names}
        else:
            named = {single_name: rows}
    elif "outputs" in response:
        outputs = response["outputs"]
        named = outputs if _is_named_object(outputs) else {single_name: outputs}
    else:
        raise ValueError(
            f'Expected "predictions" or "outputs" in the response, got keys {sorted(response)}'
        )
    dtypes = dtypes or {}
    return {name: _array_from_json(value, dtypes.get(name)) for name, value in named.items()}


# --------------------------------------------------------------------------
# gRPC protos (tensorflow-serving-api)


def predict_request(model_name, signature_name, inputs, version=None):
    """A `tensorflow_serving.apis.predict_pb2.PredictRequest`.

    Args:
        model_name: the model's name in `models.config`.
        signature_name: the signature to call.
        inputs: dict of input name -> numpy array (or array-like); each goes
            through `tf.make_tensor_proto`, so its dtype is what the server sees
            (give int32/float32/uint8 arrays as the signature wants; strings as
            str or bytes arrays).
        version: optional model version (int); the latest if `None`.
    """
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    if signature_name is not None:
        request.model_spec.signature_name = signature_name
    if version is not None:
        request.model_spec.version.value = int(version)
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(_as_array(name, value)))
    return request


def parse_predict_response(response):
    """Outputs of a `PredictResponse` as `{name: numpy array}` (`tf.make_ndarray`)."""
    import tensorflow as tf

    return {name: tf.make_ndarray(tensor) for name, tensor in response.outputs.items()}


# --------------------------------------------------------------------------
# Transport


def _loads(payload):
    """JSON from the server's bytes. The server writes non-`_bytes` string
    outputs as they are, even when not UTF-8; `surrogateescape` keeps them."""
    return json.loads(payload.decode("utf-8", "surrogateescape"))


def model_path(model_name, version=None, verb=""):
    """`/v1/models/<name>[/versions/<version>]<verb>`, e.g. verb `:predict` or `/metadata`."""
    path = f"/v1/models/{model_name}"
    if version is not None:
        path += f"/versions/{int(version)}"
    return path + verb


def _error_text(payload):
    try:
        return str(_loads(payload)["error"])
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
            return _loads(answer.read())
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
    """
    if protocol == "rest":
        body = rest_body(signature_name, inputs, form=rest_form)
        response = rest_predict(host, rest_port, model_name, body, timeout, version)
        outputs = SIGNATURES.get(signature_name, {}).get("outputs", {})
        return parse_rest_response(response, output_names=list(outputs) or None, dtypes=outputs)
    if protocol == "grpc":
        request = predict_request(model_name, signature_name, inputs, version)
        return parse_predict_response(grpc_predict(host, grpc_port, request, timeout))
    raise ValueError(f'`protocol` must be "rest" or "grpc". Received: protocol={protocol!r}')


# --------------------------------------------------------------------------
# Images


def read_image(path, channels=None):
    """A PNG/JPEG file as uint8 `[H, W, C]`; `channels` 1 or 3 converts (default:
    1 for greyscale files, else 3)."""
    from PIL import Image

    with Image.open(path) as image:
        if channels is None:
            channels = 1 if image.mode in ("1", "L", "I", "I;16", "F") else 3
        if channels not in (1, 3):
            raise ValueError(f"`channels` must be 1 or 3. Received: channels={channels}")
        image = image.convert("L" if channels == 1 else "RGB")
        array = np.asarray(image, dtype=np.uint8)
    return array[..., None] if channels == 1 else array


def image_grid(pixels, columns=None, border=2):
    """`[B, H, W, C]` uint8 images tiled into one `[rows*H', columns*W', C]` image."""
    pixels = np.asarray(pixels)
    if pixels.ndim != 4:
        raise ValueError(f"`pixels` must be [B, H, W, C]. Received shape {pixels.shape}")
    count, height, width, channels = pixels.shape
    columns = columns or int(np.ceil(np.sqrt(count)))
    rows = int(np.ceil(count / columns))
    grid = np.full(
        (rows * (height + border) + border, columns * (width + border) + border, channels),
        255,
        dtype=np.uint8,
    )
    for index in range(count):
        top = border + (index // columns) * (height + border)
        left = border + (index % columns) * (width + border)
        grid[top : top + height, left : left + width] = pixels[index]
    return grid


def write_image(path, pixels, scale=1):
    """Writes `[H, W, C]` uint8 (C = 1 or 3) as an image file (PNG by extension),
    each pixel repeated `scale` times in both directions."""
    from PIL import Image

    pixels = np.asarray(pixels, dtype=np.uint8)
    if scale > 1:
        pixels = pixels.repeat(scale, axis=0).repeat(scale, axis=1)
    mode = {1: "L", 3: "RGB"}.get(pixels.shape[-1])
    if mode is None:
        raise ValueError(f"Images need 1 or 3 channels. Received shape {pixels.shape}")
    Image.fromarray(pixels[..., 0] if mode == "L" else pixels, mode=mode).save(path)


# --------------------------------------------------------------------------
# Command line


def _connection(args):
    return dict(
        protocol=args.protocol,
        host=args.host,
        rest_port=args.rest_port,
        grpc_port=args.grpc_port,
        timeout=args.timeout,
        version=args.model_version,
        rest_form=args.rest_form,
    )


def _column(value, dtype, rows):
    return np.full([rows], value, dtype=dtype)


def _continuation_length(tokens, primer_length):
    """Tokens after the primer up to the last non-zero one: the signature
    fills a row past its own count with zeros (PAD)."""
    generated = np.asarray(tokens[primer_length:])
    nonzero = np.flatnonzero(generated)
    return 0 if nonzero.size == 0 else int(nonzero[-1]) + 1


def run_music(args):
    try:
        from keras_selfattn.data.music import events_to_midi, midi_to_events
    except ImportError as error:
        raise ClientError(
            f"the music command needs keras_selfattn.data.music ({error}); "
            "install the project with its music extra: pip install -e '.[music]'"
        ) from None
    events = np.asarray(midi_to_events(args.primer), dtype=np.int32).reshape(-1)
    if args.primer_tokens is not None:
        events = events[: args.primer_tokens]
    if events.size == 0:
        raise ClientError(f"no events in the primer {args.primer} (an empty MIDI file?)")
    inputs = {
        "primer": events[None],
        "max_new_tokens": _column(args.max_new_tokens, np.int32, 1),
        "temperature": _column(args.temperature, np.float32, 1),
        "top_k": _column(args.top_k, np.int32, 1),
        "top_p": _column(args.top_p, np.float32, 1),
        "seed": _column(args.seed, np.int32, 1),
    }
    tokens = predict(args.model_name, "generate", inputs, **_connection(args))["tokens"][0]
    generated = _continuation_length(tokens, events.size)
    events_to_midi(np.asarray(tokens[: events.size + generated], dtype=np.int32), args.out)
    print(f"wrote {args.out}: {events.size} primer events + {generated} generated events")


def run_translate(args):
    text = np.array([line.encode("utf-8") for line in args.text], dtype=object)
    outputs = predict(args.model_name, "translate", {"text": text}, **_connection(args))
    for translation, score in zip(outputs["translation"], outputs["score"]):
        print(f"{bytes(translation).decode('utf-8', 'replace')}\t(score {float(score):.4f})")


def run_sample(args):
    inputs = {
        "seed": args.seed + np.arange(args.batch, dtype=np.int32),
        "temperature": _column(args.temperature, np.float32, args.batch),
    }
    if args.class_label is not None:
        inputs["class_label"] = _column(args.class_label, np.int32, args.batch)
    pixels = predict(args.model_name, "sample", inputs, **_connection(args))["pixels"]
    write_image(args.out, image_grid(pixels), scale=args.scale)
    print(f"wrote {args.out}: {len(pixels)} samples of {'x'.join(map(str, pixels.shape[1:]))}")


def run_complete(args):
    image = read_image(args.image, args.channels)
    if not 0 <= args.known_rows <= image.shape[0]:
        raise ClientError(
            f"--known_rows must be in [0, {image.shape[0]}] for {args.image}; got {args.known_rows}"
        )
    inputs = {
        "pixels": np.repeat(image[None], args.batch, axis=0),
        "known_rows": _column(args.known_rows, np.int32, args.batch),
        "seed": args.seed + np.arange(args.batch, dtype=np.int32),
        "temperature": _column(args.temperature, np.float32, args.batch),
    }
    if args.class_label is not None:
        inputs["class_label"] = _column(args.class_label, np.int32, args.batch)
    pixels = predict(args.model_name, "complete", inputs, **_connection(args))["pixels"]
    write_image(args.out, image_grid(np.concatenate([image[None], pixels])), scale=args.scale)
    print(f"wrote {args.out}: the input, then {len(pixels)} completions")


def run_super_resolve(args):
    image = read_image(args.input, args.channels)
    inputs = {
        "low_resolution": image[None],
        "seed": _column(args.seed, np.int32, 1),
        "temperature": _column(args.temperature, np.float32, 1),
    }
    pixels = predict(args.model_name, "super_resolve", inputs, **_connection(args))["pixels"][0]
    write_image(args.output, pixels)
    print(
        f"wrote {args.output}: {pixels.shape[1]}x{pixels.shape[0]} from "
        f"{image.shape[1]}x{image.shape[0]}"
    )


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def _add_connection_flags(parser, model_name):
    group = parser.add_argument_group("server")
    group.add_argument("--host", default=DEFAULT_HOST, help="server host (default: %(default)s)")
    group.add_argument(
        "--rest_port", type=int, default=DEFAULT_REST_PORT, help="REST port (default: %(default)s)"
    )
    group.add_argument(
        "--grpc_port", type=int, default=DEFAULT_GRPC_PORT, help="gRPC port (default: %(default)s)"
    )
    group.add_argument(
        "--protocol",
        choices=("rest", "grpc"),
        default="rest",
        help="REST (JSON over HTTP) or gRPC (default: %(default)s)",
    )
    group.add_argument(
        "--rest_form",
        choices=("instances", "inputs"),
        default="instances",
        help="REST request form: row (instances) or columnar (inputs) (default: %(default)s)",
    )
    group.add_argument(
        "--model_name",
        default=model_name,
        help="model name in models.config (default: %(default)s)",
    )
    group.add_argument(
        "--model_version", type=int, default=None, help="model version (default: the latest)"
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds to wait for an answer (default: %(default)s)",
    )


def _add_sampling_flags(parser, temperature=1.0):
    parser.add_argument(
        "--temperature",
        type=float,
        default=temperature,
        help="sampling temperature; 0 = greedy (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="client.py",
        description=(
            "Send requests to keras_selfattn models served by TensorFlow Serving "
            "(start the server with `docker compose up` in serving/; see serving/README.md). "
            "Each command calls one generation signature over REST or gRPC."
        ),
        epilog=(
            "examples:\n"
            "  python serving/client.py music --primer in.mid --out out.mid --max_new_tokens 512\n"
            '  python serving/client.py translate "Ich habe Hunger." --protocol grpc\n'
            "  python serving/client.py sample --out grid.png --batch 16 --temperature 0.9\n"
            "  python serving/client.py complete digit.png --known_rows 4 --out grid.png\n"
            "  python serving/client.py super_resolve in.png out.png\n"
            "Run `python serving/client.py COMMAND --help` for a command's flags."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    music = commands.add_parser(
        "music",
        help="continue a MIDI primer (signature `generate`)",
        description="Continue a MIDI performance: the primer's events go to the `generate` "
        "signature; the output MIDI holds the primer followed by the continuation.",
    )
    music.add_argument("--primer", required=True, help="primer MIDI file")
    music.add_argument("--out", required=True, help="output MIDI file")
    music.add_argument(
        "--primer_tokens",
        type=_positive_int,
        default=None,
        help="keep only the first N primer events (default: all; the model's maximum "
        "length bounds primer + new tokens)",
    )
    music.add_argument(
        "--max_new_tokens",
        type=_positive_int,
        default=256,
        help="events to generate (default: %(default)s)",
    )
    _add_sampling_flags(music)
    music.add_argument(
        "--top_k",
        type=int,
        default=0,
        help="sample among the k most likely events; 0 = all (default: %(default)s)",
    )
    music.add_argument(
        "--top_p",
        type=float,
        default=1.0,
        help="nucleus sampling mass in (0, 1]; 1 = all (default: %(default)s)",
    )
    _add_connection_flags(music, MODEL_NAMES["music"])
    music.set_defaults(run=run_music)

    translate = commands.add_parser(
        "translate",
        help="translate text (signature `translate`)",
        description="Translate one or more sentences; prints one line per sentence: the "
        "translation, a tab, and the beam-search score.",
    )
    translate.add_argument("text", nargs="+", help="sentence(s) to translate")
    _add_connection_flags(translate, MODEL_NAMES["translation"])
    translate.set_defaults(run=run_translate)

    sample = commands.add_parser(
        "sample",
        help="sample images into a PNG grid (signature `sample`)",
        description="Sample a batch of images (row i uses seed + i) and write them as one grid.",
    )
    sample.add_argument("--out", required=True, help="output image (PNG)")
    sample.add_argument(
        "--batch", type=_positive_int, default=4, help="images to sample (default: %(default)s)"
    )
    _add_sampling_flags(sample)
    sample.add_argument(
        "--class_label",
        type=int,
        default=None,
        help="class to sample, for class-conditional models",
    )
    sample.add_argument(
        "--scale",
        type=_positive_int,
        default=4,
        help="pixel repeat factor of the grid (default: %(default)s)",
    )
    _add_connection_flags(sample, MODEL_NAMES["image_generation"])
    sample.set_defaults(run=run_sample)

    complete = commands.add_parser(
        "complete",
        help="complete the lower rows of an image (signature `complete`)",
        description="Keep the top --known_rows rows of an image (of the model's size) and "
        "generate the rest; writes the input and the completions as one grid.",
    )
    complete.add_argument("image", help="input image, of the model's height, width and channels")
    complete.add_argument("--out", required=True, help="output image (PNG)")
    complete.add_argument("--known_rows", type=int, required=True, help="rows kept from the input")
    complete.add_argument(
        "--batch", type=_positive_int, default=4, help="completions (default: %(default)s)"
    )
    complete.add_argument(
        "--channels", type=int, choices=(1, 3), default=None, help="1 or 3 (default: from the file)"
    )
    _add_sampling_flags(complete)
    complete.add_argument(
        "--class_label",
        type=int,
        default=None,
        help="class of the image, for class-conditional models",
    )
    complete.add_argument(
        "--scale",
        type=_positive_int,
        default=4,
        help="pixel repeat factor of the grid (default: %(default)s)",
    )
    _add_connection_flags(complete, MODEL_NAMES["image_generation"])
    complete.set_defaults(run=run_complete)

    super_resolve = commands.add_parser(
        "super_resolve",
        help="upscale an image (signature `super_resolve`)",
        description="Upscale a low-resolution image of the model's input size.",
    )
    super_resolve.add_argument("input", help="low-resolution input image")
    super_resolve.add_argument("output", help="output image (PNG)")
    super_resolve.add_argument(
        "--channels", type=int, choices=(1, 3), default=None, help="1 or 3 (default: from the file)"
    )
    _add_sampling_flags(super_resolve)
    _add_connection_flags(super_resolve, MODEL_NAMES["super_resolution"])
    super_resolve.set_defaults(run=run_super_resolve)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    start = time.perf_counter()
    try:
        args.run(args)
    except ClientError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"({args.protocol}, {time.perf_counter() - start:.2f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
