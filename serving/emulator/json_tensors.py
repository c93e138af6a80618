"""One tensor as REST JSON and back, by TF Serving's tensorflow_serving/util/json_tensor.cc.

A JSON value (a scalar or nested lists, all lists of one level of one length) becomes an
array of the signature's dtype: JSON numbers must fit it without loss, `{"b64": ...}`
gives bytes for a string. Outputs go back as nested lists; string outputs whose key ends
in `_bytes` as `{"b64": ...}` objects. Refusals are INVALID_ARGUMENT with the server's
messages. The rules the client applies too (b64 objects, `_bytes` names, the shape of
nested lists) are serving/predict_requests.py's.
"""

import base64
import json
import math

import numpy as np

from serving.emulator.tensor_wire import ServingError, as_bytes, numpy_dtype
from serving.predict_requests import b64_object, is_b64_object, is_bytes_name, json_shape

_INT32_RANGE = (-(2**31), 2**31 - 1)
# dtype -> the range of JSON integers the server takes for it (int_val holds int32).
_JSON_INT_RANGES = {
    "int32": _INT32_RANGE, "int16": _INT32_RANGE, "int8": _INT32_RANGE, "uint8": _INT32_RANGE,
    "int64": (-(2**63), 2**63 - 1), "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1),
}
_JSON_FLOATS = {"float32": np.float32, "float64": np.float64}
_JSON_OUTPUT_DTYPES = {"string", "bool", *_JSON_INT_RANGES, *_JSON_FLOATS}


def rest_error(message):
    """The INVALID_ARGUMENT error the server answers a malformed REST request with."""
    return ServingError("INVALID_ARGUMENT", message)


def json_text(value):
    """A JSON value written compactly, as the server quotes it in messages."""
    return json.dumps(value, separators=(",", ":"))


def _json_type(value):
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    return {dict: "Object", list: "Array", str: "String"}.get(type(value), "Number")


def _b64_bytes(value):
    if not is_b64_object(value):
        raise rest_error(f"JSON Value: {json_text(value)} not formatted correctly for base64 data")
    try:
        return base64.b64decode(value["b64"], validate=True)
    except ValueError:
        raise rest_error("Unable to base64 decode") from None


def _check_float(value, dtype_name):
    """Refuses a JSON number the float dtype cannot hold without loss."""
    info = np.finfo(_JSON_FLOATS[dtype_name])
    exact = 2 ** (info.nmant + 1) - 1  # largest integer the type holds exactly
    lossy = abs(value) > exact if isinstance(value, int) else (
        math.isfinite(value) and not info.min <= value <= info.max
    )
    if lossy:
        name = "float" if dtype_name == "float32" else "double"
        raise rest_error(
            f"Cannot convert JSON value: {json_text(value)} to {name} without loss of precision."
        )


def _json_leaf(value, dtype_name):
    """One JSON value as an element of the dtype (`AddValueToTensor`)."""
    type_error = rest_error(
        f"JSON Value: {json_text(value)} Type: {_json_type(value)} is not of expected "
        f"type: {dtype_name}"
    )
    if isinstance(value, dict):
        if dtype_name != "string":
            raise type_error
        return _b64_bytes(value)
    if dtype_name == "string":
        if isinstance(value, str):
            return value.encode("utf-8")
        raise type_error
    if dtype_name == "bool":
        if isinstance(value, bool):
            return value
        raise type_error
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise type_error
    if dtype_name in _JSON_INT_RANGES:
        low, high = _JSON_INT_RANGES[dtype_name]
        if isinstance(value, int) and low <= value <= high:
            return value
        raise type_error
    if dtype_name in _JSON_FLOATS:
        _check_float(value, dtype_name)
        return value
    raise ServingError(
        "UNIMPLEMENTED", f"Conversion of JSON Value: {json_text(value)} to type: {dtype_name}"
    )


def _json_fill(value, level, shape, dtype_name, flat):
    """Checks the nesting against `shape` and appends the leaves (`FillTensorProto`)."""
    if not isinstance(value, list):
        if level != len(shape):
            raise rest_error(
                f"JSON Value: {json_text(value)} found at incorrect level: {level + 1} in "
                f"the JSON DOM. Expected at level: {len(shape)}"
            )
        flat.append(_json_leaf(value, dtype_name))
        return
    if level >= len(shape):
        raise rest_error(f"Encountered list at unexpected level: {level} expected < {len(shape)}")
    if len(value) != shape[level]:
        raise rest_error(
            f"Encountered list at unexpected size: {len(value)} at level: {level} expected "
            f"size: {shape[level]}"
        )
    for item in value:
        _json_fill(item, level + 1, shape, dtype_name, flat)


def json_to_array(value, dtype_name):
    """A JSON value (scalar or nested lists) as an array of the signature's dtype."""
    shape = json_shape(value)
    flat = []
    _json_fill(value, 0, shape, dtype_name, flat)
    if dtype_name == "string":
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
        return array.reshape(shape)
    if dtype_name in _JSON_INT_RANGES:  # as TensorProto int values, cast to the dtype
        wide = np.uint64 if dtype_name == "uint64" else np.int64
        return np.array(flat, dtype=wide).astype(numpy_dtype(dtype_name)).reshape(shape)
    return np.array(flat, dtype=numpy_dtype(dtype_name)).reshape(shape)


def _b64_object(item):
    return b64_object(as_bytes(item))


def _utf8_text(item):
    # The server writes the bytes as they are; invalid UTF-8 is replaced here.
    return as_bytes(item).decode("utf-8", "replace")


def json_values(array, key, dtype_name):
    """An output array as JSON values (`AddTensorValues`)."""
    if dtype_name not in _JSON_OUTPUT_DTYPES:
        raise rest_error(f"Failed to write JSON value for tensor type: {dtype_name}")
    if dtype_name == "string":
        encode = _b64_object if is_bytes_name(key) else _utf8_text
        return np.frompyfunc(encode, 1, 1)(array).tolist() if array.ndim else encode(array.item())
    if dtype_name == "float32":
        # The server writes a float's shortest round-trip text (0.1, not 0.100000001).
        values = np.empty(array.size, dtype=object)
        values[:] = [float(str(value)) for value in array.reshape(-1)]
        return values.reshape(array.shape).tolist()
    return array.tolist()
