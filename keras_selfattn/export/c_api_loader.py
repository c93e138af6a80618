"""Runs a SavedModel the way TensorFlow Serving does, through TensorFlow's C API.

TensorFlow Serving loads a SavedModel with TensorFlow's C++ SavedModel loader, links
the tensorflow-text ops, and runs with XLA JIT off. `CApiSavedModel` does the same in a
separate process: a small C program (`c_api_loader.c`, built with gcc at first use
against the C API headers and libraries inside the pip `tensorflow` wheel) registers the
tensorflow-text op libraries with `TF_LoadLibrary`, loads the model with
`TF_LoadSessionFromSavedModel` (tag "serve"), and answers requests on a pipe. Python
maps signature keys to graph tensors from `saved_model.pb`'s SignatureDefs and applies
the server's request rules: the gRPC `PredictRequest` path (`predict`) and the REST JSON
`instances` / `inputs` forms (`rest`).

Example:

```python
with CApiSavedModel("exports/music/1") as model:
    outputs = model.run("serving_default", {"tokens": np.zeros([1, 8], np.int32)})
    report = model.load_test("serving_default", {"tokens": ...}, clients=8)
```
"""

import base64
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import shutil
import struct
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

SERVE_TAG = "serve"
DEFAULT_SIGNATURE = "serving_default"
# TF2 SavedModels keep their init op as a SignatureDef by this name; it is no endpoint.
_INIT_OP_SIGNATURE = "__saved_model_init_op"
SOURCE_PATH = Path(__file__).with_name("c_api_loader.c")

# TF_Code values (tensorflow/c/tf_status.h), by number.
STATUS_CODES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
)

# TF_DataType (= DataType proto) number -> (name, numpy dtype, TensorProto value field).
_STRING = 7
_DTYPES = {
    1: ("float32", np.dtype(np.float32), "float_val"),
    2: ("float64", np.dtype(np.float64), "double_val"),
    3: ("int32", np.dtype(np.int32), "int_val"),
    4: ("uint8", np.dtype(np.uint8), "int_val"),
    5: ("int16", np.dtype(np.int16), "int_val"),
    6: ("int8", np.dtype(np.int8), "int_val"),
    _STRING: ("string", np.dtype(object), "string_val"),
    9: ("int64", np.dtype(np.int64), "int64_val"),
    10: ("bool", np.dtype(np.bool_), "bool_val"),
    17: ("uint16", np.dtype(np.uint16), "int_val"),
    19: ("float16", np.dtype(np.float16), "half_val"),
    22: ("uint32", np.dtype(np.uint32), "uint32_val"),
    23: ("uint64", np.dtype(np.uint64), "uint64_val"),
}
_DTYPE_NUMBERS = {name: number for number, (name, _, _) in _DTYPES.items()}
_RUN, _LOAD_TEST, _HAS_OPS, _QUIT = 1, 2, 3, 4


class ServingError(Exception):
    """A request the server would refuse, or a failed run.

    Attributes:
        code: the TF_Code name, e.g. "INVALID_ARGUMENT".
        message: the error text (TensorFlow's own for failed runs).
    """

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


# --------------------------------------------------------------------- build


def _package_dir(name):
    """The directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the `{name}` package is required for the C API loader")
    return Path(list(spec.submodule_search_locations)[0])


def tensorflow_paths():
    """`(include_dir, lib_dir)` of the pip `tensorflow` wheel.

    The same directories as `tf.sysconfig.get_include()` and `tf.sysconfig.get_lib()`,
    found without importing TensorFlow.
    """
    lib_dir = _package_dir("tensorflow")
    return lib_dir / "include", lib_dir


def op_libraries():
    """The tensorflow-text op libraries (`_*.so` under its `python/` folder), sorted."""
    text_dir = _package_dir("tensorflow_text")
    return sorted(str(path) for path in (text_dir / "python").rglob("_*.so"))


def _cache_root():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "keras_selfattn" / "c_api_loader"


def build_loader(cache_dir=None):
    """Builds the loader program with gcc, once per source and TensorFlow version.

    Args:
        cache_dir: where builds are kept; defaults to
            `$XDG_CACHE_HOME/keras_selfattn/c_api_loader` (`~/.cache/...`).

    Returns:
        The path of the executable, `<cache_dir>/<hash>/c_api_loader`.
    """
    include_dir, lib_dir = tensorflow_paths()
    source = SOURCE_PATH.read_bytes()
    key = hashlib.sha256(
        source + importlib.metadata.version("tensorflow").encode() + str(lib_dir).encode()
    ).hexdigest()[:16]
    binary = Path(cache_dir or _cache_root()) / key / "c_api_loader"
    if binary.exists():
        return binary
    compiler = os.environ.get("CC", "gcc")
    if shutil.which(compiler) is None:
        raise RuntimeError(f"the C API loader needs a C compiler; `{compiler}` was not found")
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f"c_api_loader.{os.getpid()}.partial")
    command = [
        compiler, "-O2", "-std=c11", "-pthread", f"-I{include_dir}", str(SOURCE_PATH),
        "-o", str(partial), f"-L{lib_dir}", "-l:libtensorflow_cc.so.2",
        "-l:libtensorflow_framework.so.2", f"-Wl,-rpath,{lib_dir}",
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(
            f"building the C API loader failed:\n{' '.join(command)}\n{result.stderr}"
        )
    os.replace(partial, binary)  # atomic, so concurrent builders agree
    return binary


def session_config():
    """The serialized ConfigProto the loader runs with: XLA JIT off, as the server sets it."""
    from tensorflow.core.protobuf import config_pb2

    config = config_pb2.ConfigProto()
    config.graph_options.optimizer_options.global_jit_level = config_pb2.OptimizerOptions.OFF
    return config.SerializeToString()


# --------------------------------------------------------------------- signatures


def _read_meta_graph(path):
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    binary, text = Path(path) / "saved_model.pb", Path(path) / "saved_model.pbtxt"
    if binary.exists():
        saved_model.ParseFromString(binary.read_bytes())
    elif text.exists():
        text_format.Parse(text.read_text(), saved_model)
    else:
        raise FileNotFoundError(
            f"`path` must be a SavedModel directory; no saved_model.pb in {path}"
        )
    for meta_graph in saved_model.meta_graphs:
        if SERVE_TAG in meta_graph.meta_info_def.tags:
            return meta_graph
    raise ValueError(f"the SavedModel at {path} has no MetaGraphDef tagged {SERVE_TAG!r}")


def _tensor_spec(info):
    shape = None
    if not info.tensor_shape.unknown_rank:
        shape = tuple(None if dim.size < 0 else dim.size for dim in info.tensor_shape.dim)
    dtype = _DTYPES[info.dtype][0] if info.dtype in _DTYPES else f"unsupported_dtype_{info.dtype}"
    return {"name": info.name, "dtype": dtype, "shape": shape}


def read_signatures(path):
    """The "serve" MetaGraphDef's SignatureDefs of a SavedModel.

    Returns:
        `{signature: {"inputs": {key: spec}, "outputs": {key: spec}}}` where each spec is
        `{"name": graph tensor name, "dtype": e.g. "int32" or "string", "shape": tuple
        with None for free dimensions, or None for an unknown rank}`.
    """
    meta_graph = _read_meta_graph(path)
    return {
        name: {
            "inputs": {key: _tensor_spec(info) for key, info in signature.inputs.items()},
            "outputs": {key: _tensor_spec(info) for key, info in signature.outputs.items()},
        }
        for name, signature in meta_graph.signature_def.items()
        if name != _INIT_OP_SIGNATURE
    }


# --------------------------------------------------------------------- wire format


def _pack_string(value):
    return struct.pack("<Q", len(value)) + value


def _as_bytes(value):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, np.bytes_):
        return bytes(value)
    raise TypeError(f"a string tensor holds bytes or str, got {type(value).__name__}")


def _pack_tensor(array, dtype_name):
    number = _DTYPE_NUMBERS[dtype_name]
    header = struct.pack(f"<II{array.ndim}q", number, array.ndim, *array.shape)
    if number == _STRING:
        return header + b"".join(_pack_string(_as_bytes(item)) for item in array.reshape(-1))
    data = np.ascontiguousarray(array).tobytes()
    return header + struct.pack("<Q", len(data)) + data


class _Reader:
    """Reads replies from the loader's stdout; a short read means the process died."""

    def __init__(self, stream, on_eof):
        self._stream = stream
        self._on_eof = on_eof

    def exact(self, size):
        data = self._stream.read(size) if size else b""
        if len(data) != size:
            self._on_eof()
        return data

    def u32(self):
        return struct.unpack("<I", self.exact(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.exact(8))[0]

    def string(self):
        return self.exact(self.u64())

    def status(self):
        number = self.u32()
        code = STATUS_CODES[number] if number < len(STATUS_CODES) else f"CODE_{number}"
        return code, self.string().decode("utf-8", "replace")

    def tensor(self):
        number, rank = struct.unpack("<II", self.exact(8))
        shape = struct.unpack(f"<{rank}q", self.exact(8 * rank))
        if number == _STRING:
            count = int(np.prod(shape, dtype=np.int64))
            values = np.empty(count, dtype=object)
            for i in range(count):
                values[i] = self.string()
            return values.reshape(shape)
        data = self.string()
        if number not in _DTYPES:
            raise ServingError("UNIMPLEMENTED", f"output dtype number {number} is not supported")
        return np.frombuffer(data, dtype=_DTYPES[number][1]).reshape(shape).copy()


# --------------------------------------------------------------------- request rules


def _check_input_keys(signature, keys):
    """The server's checks of a request's input keys against the SignatureDef."""
    expected = set(signature["inputs"])
    sent = set(keys)
    if len(sent) != len(expected):
        extra = ",".join(sorted(sent - expected))
        missing = ",".join(sorted(expected - sent))
        raise ServingError(
            "INVALID_ARGUMENT",
            f"input size does not match signature: {len(sent)}!={len(expected)} "
            f"len({{{','.join(sorted(sent))}}}) != len({{{','.join(sorted(expected))}}}). "
            f"Sent extra: {{{extra}}}. Missing but required: {{{missing}}}.",
        )
    unknown = sorted(sent - expected)
    if unknown:
        raise ServingError(
            "INVALID_ARGUMENT",
            f"input tensor alias not found in signature: {unknown[0]}. Inputs expected to "
            f"be in the set {{{','.join(sorted(expected))}}}.",
        )


def _dtype_error(key, expected, given):
    return ServingError(
        "INVALID_ARGUMENT",
        f"input {key!r} of the signature expects {expected}, but {given} was sent",
    )


def _to_input_array(key, value, dtype_name):
    """An input value as an array of the signature's dtype.

    numpy arrays must already have it (as in a TensorProto); lists and scalars are
    converted to it.
    """
    if dtype_name not in _DTYPE_NUMBERS:
        raise ServingError(
            "UNIMPLEMENTED", f"input {key!r} has a dtype the loader does not send: {dtype_name}"
        )
    is_string = dtype_name == "string"
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if is_string:
            if array.dtype.kind not in "OSU":
                raise _dtype_error(key, "string", array.dtype.name)
            return array
        if array.dtype != _DTYPES[_DTYPE_NUMBERS[dtype_name]][1]:
            raise _dtype_error(key, dtype_name, array.dtype.name)
        return array
    if is_string:
        array = np.array(value, dtype=object)
        if array.size and not all(isinstance(item, (bytes, str)) for item in array.reshape(-1)):
            raise _dtype_error(key, "string", "a non-string value")
        return array
    return np.asarray(value, dtype=_DTYPES[_DTYPE_NUMBERS[dtype_name]][1])


def _tensor_proto_to_array(alias, proto):
    """`Tensor::FromProto` semantics: short value lists repeat their last value."""
    if proto.dtype not in _DTYPES:
        raise ServingError("INVALID_ARGUMENT", f"tensor parsing error: {alias}")
    name, dtype, field = _DTYPES[proto.dtype]
    shape = tuple(dim.size for dim in proto.tensor_shape.dim)
    if proto.tensor_shape.unknown_rank or any(size < 0 for size in shape):
        raise ServingError("INVALID_ARGUMENT", f"tensor parsing error: {alias}")
    count = int(np.prod(shape, dtype=np.int64))
    if proto.tensor_content and proto.dtype != _STRING:
        if len(proto.tensor_content) != count * dtype.itemsize:
            raise ServingError("INVALID_ARGUMENT", f"tensor parsing error: {alias}")
        return np.frombuffer(proto.tensor_content, dtype=dtype).reshape(shape).copy()
    values = list(getattr(proto, field))
    if name == "float16":
        values = np.array(values, dtype=np.uint16).view(np.float16).tolist()
    if not values:
        values = [b"" if name == "string" else 0]
    values = values[:count] + values[-1:] * max(count - len(values), 0)
    if name == "string":
        array = np.empty(count, dtype=object)
        array[:] = values[:count]
        return array.reshape(shape)
    return np.array(values[:count], dtype=dtype).reshape(shape)


def _array_to_tensor_proto(array, dtype_name):
    """`Tensor::AsProtoField`: the values in the dtype's typed field."""
    from tensorflow.core.framework import tensor_pb2

    number = _DTYPE_NUMBERS[dtype_name]
    proto = tensor_pb2.TensorProto(dtype=number)
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    flat = array.reshape(-1)
    field = getattr(proto, _DTYPES[number][2])
    if dtype_name == "string":
        field.extend(_as_bytes(item) for item in flat)
    elif dtype_name == "float16":
        field.extend(flat.view(np.uint16).tolist())
    else:
        field.extend(flat.tolist())
    return proto


# REST JSON, by the rules of TF Serving's tensorflow_serving/util/json_tensor.cc.

_INT32_RANGE = (-(2**31), 2**31 - 1)
# dtype -> the range of JSON integers the server takes for it (int_val holds int32).
_JSON_INT_RANGES = {
    "int32": _INT32_RANGE, "int16": _INT32_RANGE, "int8": _INT32_RANGE, "uint8": _INT32_RANGE,
    "int64": (-(2**63), 2**63 - 1), "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1),
}
_JSON_FLOATS = {"float32": np.float32, "float64": np.float64}
_JSON_OUTPUT_DTYPES = {"string", "bool", *_JSON_INT_RANGES, *_JSON_FLOATS}


def _rest_error(message):
    return ServingError("INVALID_ARGUMENT", message)


def _is_b64(value):
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _json_text(value):
    return json.dumps(value, separators=(",", ":"))


def _json_type(value):
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    return {dict: "Object", list: "Array", str: "String"}.get(type(value), "Number")


def _json_leaf(value, dtype_name):
    """One JSON value as an element of the dtype (`AddValueToTensor`)."""
    type_error = _rest_error(
        f"JSON Value: {_json_text(value)} Type: {_json_type(value)} is not of expected "
        f"type: {dtype_name}"
    )
    if isinstance(value, dict):
        if dtype_name != "string":
            raise type_error
        if not _is_b64(value):
            raise _rest_error(
                f"JSON Value: {_json_text(value)} not formatted correctly for base64 data"
            )
        try:
            return base64.b64decode(value["b64"], validate=True)
        except ValueError:
            raise _rest_error("Unable to base64 decode") from None
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
        info = np.finfo(_JSON_FLOATS[dtype_name])
        exact = 2 ** (info.nmant + 1) - 1  # largest integer the type holds exactly
        lossy = abs(value) > exact if isinstance(value, int) else (
            math.isfinite(value) and not info.min <= value <= info.max
        )
        if lossy:
            name = "float" if dtype_name == "float32" else "double"
            raise _rest_error(
                f"Cannot convert JSON value: {_json_text(value)} to {name} without loss of "
                "precision."
            )
        return value
    raise ServingError(
        "UNIMPLEMENTED", f"Conversion of JSON Value: {_json_text(value)} to type: {dtype_name}"
    )


def _json_shape(value):
    """The shape the server reads from the first element of each nested list."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return tuple(shape)


def _json_fill(value, level, shape, dtype_name, flat):
    """Checks the nesting against `shape` and appends the leaves (`FillTensorProto`)."""
    if not isinstance(value, list):
        if level != len(shape):
            raise _rest_error(
                f"JSON Value: {_json_text(value)} found at incorrect level: {level + 1} in "
                f"the JSON DOM. Expected at level: {len(shape)}"
            )
        flat.append(_json_leaf(value, dtype_name))
        return
    if level >= len(shape):
        raise _rest_error(
            f"Encountered list at unexpected level: {level} expected < {len(shape)}"
        )
    if len(value) != shape[level]:
        raise _rest_error(
            f"Encountered list at unexpected size: {len(value)} at level: {level} expected "
            f"size: {shape[level]}"
        )
    for item in value:
        _json_fill(item, level + 1, shape, dtype_name, flat)


def _json_to_array(value, dtype_name):
    """A JSON value (scalar or nested lists) as an array of the signature's dtype."""
    shape = _json_shape(value)
    flat = []
    _json_fill(value, 0, shape, dtype_name, flat)
    if dtype_name == "string":
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
        return array.reshape(shape)
    if dtype_name in _JSON_INT_RANGES:  # as TensorProto int values, cast to the dtype
        wide = np.uint64 if dtype_name == "uint64" else np.int64
        return np.array(flat, dtype=wide).astype(_numpy_dtype(dtype_name)).reshape(shape)
    return np.array(flat, dtype=_numpy_dtype(dtype_name)).reshape(shape)


def _numpy_dtype(dtype_name):
    return _DTYPES[_DTYPE_NUMBERS[dtype_name]][1]


def _instances_to_inputs(instances, inputs):
    """The row (`instances`) form as input arrays (`FillTensorMapFromInstancesList`)."""
    if not isinstance(instances, list):
        raise _rest_error("Excepting 'instances' to be an list/array")
    if not instances:
        raise _rest_error("No values in 'instances' array")
    if not isinstance(instances[0], dict) and len(inputs) > 1:
        raise _rest_error(
            "instances is a plain list, but expecting list of objects as multiple input "
            "tensors required as per tensorinfo_map"
        )

    def is_object(value):
        return isinstance(value, dict) and not _is_b64(value)

    names = sorted(inputs)
    rows = {name: [] for name in names}
    for index, element in enumerate(instances):
        if is_object(instances[0]):
            if not is_object(element):
                raise _rest_error(f"Expecting object but got list at item {index} of input list")
            for key, value in element.items():
                if key not in inputs:
                    raise _rest_error(
                        f"Failed to process element: {index} key: {key} of 'instances' list. "
                        f"Error: INVALID_ARGUMENT: JSON object: does not have named input: {key}"
                    )
                rows[key].append(_instance_item(value, inputs[key], index, rows[key]))
            if sorted(element) != names:
                raise _rest_error(
                    f"Failed to process element: {index} of 'instances' list. JSON object: "
                    f"{_json_text(element)} must only have keys: {','.join(names)}"
                )
        else:
            if is_object(element):
                raise _rest_error(
                    f"Expecting value/list but got object at item {index} of input list"
                )
            name = names[0]
            rows[name].append(_instance_item(element, inputs[name], index, rows[name]))
    return {name: np.stack(arrays) for name, arrays in rows.items()}


def _instance_item(value, dtype_name, index, previous):
    """One row's value of an input, of the first row's shape (`AddInstanceItem`)."""
    try:
        array = _json_to_array(value, dtype_name)
        if previous and previous[0].size != array.size:
            raise _rest_error(f"Expecting tensor size: {previous[0].size} but got: {array.size}")
        if previous and previous[0].shape != array.shape:
            raise _rest_error(
                f"Expecting shape {_shape_text(previous[0].shape)} but got: "
                f"{_shape_text(array.shape)}"
            )
    except ServingError as error:
        raise _rest_error(
            f"Failed to process element: {index} of 'instances' list. Error: {error}"
        ) from None
    return array


def _shape_text(shape):
    return "[" + ",".join(str(size) for size in shape) + "]"


def _columns_to_inputs(columns, inputs):
    """The columnar (`inputs`) form as input arrays (`FillTensorMapFromInputsMap`)."""
    if not isinstance(columns, dict) or _is_b64(columns):
        if len(inputs) > 1:
            raise _rest_error(
                "inputs is a plain value/list, but expecting an object as multiple input "
                "tensors required as per tensorinfo_map"
            )
        (name, dtype_name), = inputs.items()
        return {name: _json_to_array(columns, dtype_name)}
    arrays = {}
    for name in sorted(inputs):  # keys the signature does not name are not read
        if name not in columns:
            raise _rest_error(f"Missing named input: {name} in 'inputs' object.")
        arrays[name] = _json_to_array(columns[name], inputs[name])
    return arrays


def _json_values(array, key, dtype_name):
    """An output array as JSON values (`AddTensorValues`)."""
    if dtype_name not in _JSON_OUTPUT_DTYPES:
        raise _rest_error(f"Failed to write JSON value for tensor type: {dtype_name}")
    if dtype_name == "string":
        if key.endswith("_bytes"):
            encode = _b64_object
        else:
            encode = _utf8_text
        return np.frompyfunc(encode, 1, 1)(array).tolist() if array.ndim else encode(array.item())
    if dtype_name == "float32":
        # The server writes a float's shortest round-trip text (0.1, not 0.100000001).
        values = np.empty(array.size, dtype=object)
        values[:] = [float(str(value)) for value in array.reshape(-1)]
        return values.reshape(array.shape).tolist()
    return array.tolist()


def _b64_object(item):
    return {"b64": base64.b64encode(_as_bytes(item)).decode("ascii")}


def _utf8_text(item):
    # The server writes the bytes as they are; invalid UTF-8 is replaced here.
    return _as_bytes(item).decode("utf-8", "replace")


def _predictions(outputs, specs):
    """The row form's `predictions` (`MakeRowFormatJsonFromTensors`)."""
    batch = 0
    for key, array in outputs.items():
        if array.ndim == 0:
            raise _rest_error(f"Tensor name: {key} has no shape information ")
        if array.shape[0] < 1:
            raise _rest_error(f"Tensor name: {key} has invalid batch size: {array.shape[0]}")
        if batch and array.shape[0] != batch:
            raise _rest_error(
                f"Tensor name: {key} has inconsistent batch size: {array.shape[0]} "
                f"expecting: {batch}"
            )
        batch = array.shape[0]
    columns = {key: _json_values(array, key, specs[key]["dtype"]) for key, array in outputs.items()}
    if len(columns) == 1:
        return next(iter(columns.values()))
    return [{key: column[row] for key, column in columns.items()} for row in range(batch)]


def _columnar_outputs(outputs, specs):
    """The columnar form's `outputs` (`MakeColumnarFormatJsonFromTensors`)."""
    columns = {key: _json_values(array, key, specs[key]["dtype"]) for key, array in outputs.items()}
    return next(iter(columns.values())) if len(columns) == 1 else columns


# --------------------------------------------------------------------- the model


class CApiSavedModel:
    """A SavedModel loaded through TensorFlow's C API in a long-lived child process.

    Args:
        path: the SavedModel directory (e.g. `export_base/name/1`).
        op_library_paths: op libraries to load first; defaults to `op_libraries()`, every
            tensorflow-text op library.
        cache_dir: where the loader program is built; see `build_loader`.
        env: extra environment variables for the child process.

    Attributes:
        signatures: `{name: {"inputs": {key: (dtype, shape)}, "outputs": {...}}}` with
            dtype names such as "int32", "float32", "string", shapes with None for free
            dimensions.
        op_library_status: `{library path: None, or the error of loading it}`.
        pid: the child's process id.

    Raises:
        ServingError: the SavedModel does not load (TF's code and message).
    """

    def __init__(self, path, *, op_library_paths=None, cache_dir=None, env=None):
        self.path = str(path)
        self._signatures = read_signatures(self.path)
        self.signatures = {
            name: {
                side: {key: (spec["dtype"], spec["shape"]) for key, spec in specs.items()}
                for side, specs in signature.items()
            }
            for name, signature in self._signatures.items()
        }
        libraries = op_libraries() if op_library_paths is None else list(op_library_paths)
        self._lock = threading.Lock()
        self._stderr = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            [str(build_loader(cache_dir)), self.path, session_config().hex(), *libraries],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=self._child_env(env),
        )
        self.pid = self._process.pid
        self._reader = _Reader(self._process.stdout, self._died)
        self.op_library_status = {}
        if self._reader.u32() != len(libraries):
            self._died()
        for library in libraries:
            code, message = self._reader.status()
            self.op_library_status[library] = None if code == "OK" else f"{code}: {message}"
        code, message = self._reader.status()
        if code != "OK":
            self._process.wait()
            self._stderr.close()
            raise ServingError(code, message)

    @staticmethod
    def _child_env(extra):
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        # The server's default: no auto-clustering; the session config sets JIT OFF too.
        env["TF_XLA_FLAGS"] = "--tf_xla_auto_jit=0 --tf_xla_cpu_global_jit=false"
        env.update(extra or {})
        return env

    def _stderr_tail(self, size=4000):
        try:
            self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(self._stderr.tell() - size, 0))
            return self._stderr.read().decode("utf-8", "replace")
        except (ValueError, OSError):
            return ""

    def _died(self):
        returncode = self._process.wait()
        raise ServingError(
            "UNAVAILABLE",
            f"the C API loader process exited with code {returncode}; its stderr ends:\n"
            f"{self._stderr_tail()}",
        )

    # -- process --------------------------------------------------------------

    def close(self):
        """Stops the child process (idempotent)."""
        if self._process.poll() is None:
            try:
                self._process.stdin.write(struct.pack("<I", _QUIT))
                self._process.stdin.close()
                self._process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
        for stream in (self._process.stdin, self._process.stdout, self._stderr):
            if not stream.closed:
                stream.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __del__(self):
        if getattr(self, "_process", None) is not None and hasattr(self, "_stderr"):
            try:
                self.close()
            except Exception:  # interpreter shutdown
                pass

    @property
    def alive(self):
        """Whether the child process is running."""
        return self._process.poll() is None

    def _send(self, payload):
        if not self.alive or self._process.stdin.closed:
            self._died()
        try:
            self._process.stdin.write(payload)
            self._process.stdin.flush()
        except (BrokenPipeError, ValueError):
            self._died()

    # -- requests -------------------------------------------------------------

    def _signature(self, name):
        if name not in self._signatures:
            raise ServingError(
                "FAILED_PRECONDITION", f'Serving signature key "{name}" not found.'
            )
        return self._signatures[name]

    def _prepare(self, signature_name, inputs, output_keys=None):
        """Checks inputs like the server; returns the RUN body and the output keys."""
        signature = self._signature(signature_name)
        _check_input_keys(signature, inputs)
        feeds = []
        for key in sorted(inputs):
            spec = signature["inputs"][key]
            array = _to_input_array(key, inputs[key], spec["dtype"])
            feeds.append(_pack_string(spec["name"].encode()) + _pack_tensor(array, spec["dtype"]))
        if output_keys is None:
            output_keys = sorted(signature["outputs"])
        for key in output_keys:
            if key not in signature["outputs"]:
                raise ServingError(
                    "INVALID_ARGUMENT",
                    f"output tensor alias not found in signature: {key} Outputs expected to "
                    f"be in the set {{{','.join(sorted(signature['outputs']))}}}.",
                )
        fetches = [_pack_string(signature["outputs"][key]["name"].encode()) for key in output_keys]
        body = (
            struct.pack("<I", len(feeds)) + b"".join(feeds)
            + struct.pack("<I", len(fetches)) + b"".join(fetches)
        )
        return body, list(output_keys)

    def run(self, signature_name, inputs, output_keys=None):
        """Runs a signature through `TF_SessionRun`.

        Args:
            signature_name: e.g. "serving_default".
            inputs: `{key: value}` with every input key of the signature. numpy arrays
                must have the signature's dtype (strings: object, bytes or str arrays);
                lists and scalars are converted to it.
            output_keys: the outputs to fetch; defaults to all.

        Returns:
            `{key: np.ndarray}`; strings as object arrays of bytes.

        Raises:
            ServingError: INVALID_ARGUMENT for a missing or extra key or a wrong dtype,
                FAILED_PRECONDITION for an unknown signature, TensorFlow's code and
                message for a failed run (the process stays up), UNAVAILABLE when the
                process has died.
        """
        body, output_keys = self._prepare(signature_name, inputs, output_keys)
        with self._lock:
            self._send(struct.pack("<I", _RUN) + body)
            code, message = self._reader.status()
            if code != "OK":
                raise ServingError(code, message)
            count = self._reader.u32()
            outputs = [self._reader.tensor() for _ in range(count)]
        return dict(zip(output_keys, outputs))

    def has_ops(self, names):
        """`{op name: registered}` in the loader's op registry (core and loaded libraries)."""
        names = list(names)
        payload = struct.pack("<II", _HAS_OPS, len(names)) + b"".join(
            _pack_string(name.encode()) for name in names
        )
        with self._lock:
            self._send(payload)
            count = self._reader.u32()
            flags = self._reader.exact(count)
        return {name: bool(flag) for name, flag in zip(names, flags)}

    def load_test(self, signature_name, inputs, clients=8, requests_per_client=50):
        """Runs the same request from `clients` C threads on the one session.

        Args:
            signature_name: the signature to run.
            inputs: as for `run`.
            clients: concurrent threads (pthreads), each calling `TF_SessionRun`.
            requests_per_client: calls per thread.

        Returns:
            `{"failures": int, "p50_ms": float, "p99_ms": float, "latencies_ms": [...],
            "first_error": None or "CODE: message"}`.
        """
        if int(clients) < 1 or int(requests_per_client) < 1:
            raise ValueError(
                f"`clients` and `requests_per_client` must be positive, got {clients} and "
                f"{requests_per_client}"
            )
        body, _ = self._prepare(signature_name, inputs)
        with self._lock:
            self._send(struct.pack("<III", _LOAD_TEST, clients, requests_per_client) + body)
            code, message = self._reader.status()
            if code != "OK":
                raise ServingError(code, message)
            failures = self._reader.u32()
            count = self._reader.u32()
            latencies = np.frombuffer(self._reader.exact(8 * count), dtype=np.float64)
            first_code, first_message = self._reader.status()
        return {
            "failures": failures,
            "p50_ms": float(np.percentile(latencies, 50)),
            "p99_ms": float(np.percentile(latencies, 99)),
            "latencies_ms": latencies.tolist(),
            "first_error": None if first_code == "OK" else f"{first_code}: {first_message}",
        }

    # -- gRPC Predict ---------------------------------------------------------

    def _version(self):
        name = os.path.basename(os.path.normpath(self.path))
        return int(name) if name.isdigit() else None

    def predict(self, request):
        """Answers a `predict_pb2.PredictRequest` as the server's Predict does.

        The request's TensorProtos are parsed like `Tensor::FromProto` (`tensor_content`
        or typed values, a short value list repeats its last value), their dtype must be
        the signature's, `output_filter` selects outputs, and the response holds the
        outputs as typed-value TensorProtos and the model spec with the signature name.

        Raises:
            ServingError: as `run` does.
        """
        from tensorflow_serving.apis import predict_pb2

        signature_name = request.model_spec.signature_name or DEFAULT_SIGNATURE
        signature = self._signature(signature_name)
        _check_input_keys(signature, request.inputs)
        inputs = {}
        for alias, proto in request.inputs.items():
            expected = signature["inputs"][alias]["dtype"]
            given = _DTYPES.get(proto.dtype, (f"dtype number {proto.dtype}",))[0]
            if given != expected:
                raise _dtype_error(alias, expected, given)
            inputs[alias] = _tensor_proto_to_array(alias, proto)
        output_keys = list(request.output_filter) or None
        outputs = self.run(signature_name, inputs, output_keys)
        response = predict_pb2.PredictResponse()
        response.model_spec.CopyFrom(request.model_spec)
        response.model_spec.signature_name = signature_name
        version = self._version()
        if version is not None and not request.model_spec.HasField("version"):
            response.model_spec.version.value = version
        for key, array in outputs.items():
            response.outputs[key].CopyFrom(
                _array_to_tensor_proto(array, signature["outputs"][key]["dtype"])
            )
        return response

    # -- REST -----------------------------------------------------------------

    def rest(self, body):
        """Answers a REST predict body (`POST /v1/models/<name>:predict`) as the server does.

        Follows TF Serving's JSON rules. Row form `{"instances": [...]}`: a list of rows,
        each a value (one input) or an object naming every input, all rows of one shape;
        answered with `{"predictions": [...]}`, a list of values for one output, else a
        list of objects. Columnar form `{"inputs": ...}`: a value (one input) or an object
        of named inputs; answered with `{"outputs": ...}`, a value for one output, else an
        object. `{"b64": "..."}` gives bytes for a string input; string outputs whose key
        ends in `_bytes` come back as `{"b64": ...}`. `"signature_name"` defaults to
        "serving_default". JSON numbers must fit the input's dtype (no float for an int).

        Args:
            body: the JSON text or its parsed dict.

        Returns:
            The response dict, or `{"error": message}` as the server answers errors.
        """
        try:
            return self._rest(body)
        except ServingError as error:
            return {"error": error.message}

    def _rest(self, body):
        if isinstance(body, (str, bytes)):
            if not body:
                raise _rest_error("JSON Parse error: The document is empty")
            try:
                body = json.loads(body)
            except ValueError as error:
                raise _rest_error(f"JSON Parse error: {error}") from None
        if not isinstance(body, dict):
            raise _rest_error(f"JSON Value: {_json_text(body)} Is not object")
        signature_name = body.get("signature_name", DEFAULT_SIGNATURE)
        if not isinstance(signature_name, str):
            raise _rest_error(
                f"JSON Value: {_json_text(body)} not formatted correctly. 'signature_name' "
                "key must be a string value."
            )
        signature = self._signature(signature_name)
        inputs = {key: spec["dtype"] for key, spec in signature["inputs"].items()}
        if not inputs:
            raise _rest_error(f"Failed to get input map for signature: {signature_name}")
        if "instances" in body and "inputs" in body:
            raise _rest_error(
                f"JSON Value: {_json_text(body)} Not formatted correctly expecting only one "
                "of 'inputs' or 'instances' keys to exist "
            )
        if "instances" in body:
            arrays = _instances_to_inputs(body["instances"], inputs)
            outputs = self.run(signature_name, arrays)
            return {"predictions": _predictions(outputs, signature["outputs"])}
        if "inputs" in body:
            arrays = _columns_to_inputs(body["inputs"], inputs)
            outputs = self.run(signature_name, arrays)
            return {"outputs": _columnar_outputs(outputs, signature["outputs"])}
        raise _rest_error("Missing 'inputs' or 'instances' key")


__all__ = [
    "CApiSavedModel",
    "ServingError",
    "build_loader",
    "op_libraries",
    "read_signatures",
    "session_config",
    "tensorflow_paths",
]
