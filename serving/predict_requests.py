"""Predict requests and responses of TensorFlow Serving, over REST JSON and gRPC protos.

- `rest_body(signature_name, inputs, form="instances" | "inputs")`: the JSON
  body of `POST /v1/models/<name>:predict`.
- `parse_rest_response(response)`: its answer as `{name: numpy array}`.
- `predict_request(model_name, signature_name, inputs)`: a gRPC `PredictRequest`.
- `parse_predict_response(response)`: a `PredictResponse` as `{name: numpy array}`.

Strings come back as `bytes` in object arrays, as `tf.make_ndarray` gives them. The
REST functions need only the standard library and numpy; the gRPC ones import
`tensorflow-serving-api` and TensorFlow when called.
"""

from __future__ import annotations

import base64
import json

import numpy as np

from serving.client_errors import ServerError


# --------------------------------------------------------------------------
# REST JSON (TensorFlow Serving's rules, tensorflow_serving/util/json_tensor.cc).
# The public helpers are shared with the TF Serving emulator (serving/emulator).


def is_b64_object(value):
    """`{"b64": "<base64>"}`, the only JSON form of binary strings."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def is_named_object(value):
    """A JSON object keyed by tensor names (any object but a b64 one)."""
    return isinstance(value, dict) and not is_b64_object(value)


def b64_object(data):
    """Bytes as the server's `{"b64": ...}` object."""
    return {"b64": base64.b64encode(data).decode("ascii")}


def is_bytes_name(name):
    """Whether strings under `name` travel as b64: the server's convention for
    binary tensors is a name ending in `_bytes`."""
    return name.endswith("_bytes")


def json_shape(value):
    """The shape of a JSON tensor, read from the first element of each nested list."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return tuple(shape)


def _json_string(value, name):
    """One string element as JSON: text as a JSON string, binary as `{"b64": ...}`.

    The server turns a JSON string into its UTF-8 bytes and decodes a
    `{"b64": ...}` object for any `DT_STRING` input. JSON strings can only hold
    text, so bytes that are not valid UTF-8 go as b64, and so does everything
    under a name ending in `_bytes` (the server's convention for binary
    tensors, which it applies to its outputs).
    """
    if isinstance(value, str):
        return b64_object(value.encode("utf-8")) if is_bytes_name(name) else value
    if isinstance(value, (bytes, bytearray, np.bytes_)):
        data = bytes(value)
        if is_bytes_name(name):
            return b64_object(data)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return b64_object(data)
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


def _flatten(value):
    if isinstance(value, list):
        for item in value:
            yield from _flatten(item)
    else:
        yield value


def _string_element(value):
    if is_b64_object(value):
        return base64.b64decode(value["b64"])
    if isinstance(value, str):
        # `surrogateescape` gives back the bytes of a string that was not UTF-8
        # (see `read_json`).
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
    if isinstance(leaf, str) or is_b64_object(leaf) or _is_string_dtype(dtype):
        array = np.empty(json_shape(value), dtype=object)
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
        if rows and all(is_named_object(row) for row in rows):
            names = list(rows[0])
            named = {name: [row[name] for row in rows] for name in names}
        else:
            named = {single_name: rows}
    elif "outputs" in response:
        outputs = response["outputs"]
        named = outputs if is_named_object(outputs) else {single_name: outputs}
    else:
        raise ValueError(
            f'Expected "predictions" or "outputs" in the response, got keys {sorted(response)}'
        )
    dtypes = dtypes or {}
    return {name: _array_from_json(value, dtypes.get(name)) for name, value in named.items()}


def read_json(payload):
    """JSON from the server's bytes. The server writes non-`_bytes` string
    outputs as they are, even when not UTF-8; `surrogateescape` keeps them."""
    return json.loads(payload.decode("utf-8", "surrogateescape"))


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
