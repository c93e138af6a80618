"""TensorFlow Serving's checks of a request against a SignatureDef, and its protos.

Signatures are `read_signatures` dicts: `{"inputs": {key: spec}, "outputs": {key: spec}}`
with each spec `{"name", "dtype", "shape"}`. The gRPC path parses a `PredictRequest`'s
TensorProtos like `Tensor::FromProto` and answers with `Tensor::AsProtoField`'s typed
values; the messages of the refusals are the server's.
"""

import numpy as np

from serving.emulator.tensor_wire import (
    DTYPE_NUMBERS,
    DTYPES,
    STRING,
    ServingError,
    as_bytes,
    numpy_dtype,
)

DEFAULT_SIGNATURE = "serving_default"


def find_signature(signatures, name):
    """The signature `name`; FAILED_PRECONDITION when the model has none by that name."""
    if name not in signatures:
        raise ServingError("FAILED_PRECONDITION", f'Serving signature key "{name}" not found.')
    return signatures[name]


def check_input_keys(signature, keys):
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


def check_output_keys(signature, output_keys):
    """The output keys to fetch, all of the signature's (sorted) when None."""
    if output_keys is None:
        return sorted(signature["outputs"])
    for key in output_keys:
        if key not in signature["outputs"]:
            raise ServingError(
                "INVALID_ARGUMENT",
                f"output tensor alias not found in signature: {key} Outputs expected to "
                f"be in the set {{{','.join(sorted(signature['outputs']))}}}.",
            )
    return list(output_keys)


def _dtype_error(key, expected, given):
    return ServingError(
        "INVALID_ARGUMENT",
        f"input {key!r} of the signature expects {expected}, but {given} was sent",
    )


def to_input_array(key, value, dtype_name):
    """An input value as an array of the signature's dtype.

    numpy arrays must already have it (as in a TensorProto); lists and scalars are
    converted to it.
    """
    if dtype_name not in DTYPE_NUMBERS:
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
        if array.dtype != numpy_dtype(dtype_name):
            raise _dtype_error(key, dtype_name, array.dtype.name)
        return array
    if is_string:
        array = np.array(value, dtype=object)
        if array.size and not all(isinstance(item, (bytes, str)) for item in array.reshape(-1)):
            raise _dtype_error(key, "string", "a non-string value")
        return array
    return np.asarray(value, dtype=numpy_dtype(dtype_name))


def _tensor_proto_to_array(alias, proto):
    """`Tensor::FromProto` semantics: short value lists repeat their last value."""
    if proto.dtype not in DTYPES:
        raise ServingError("INVALID_ARGUMENT", f"tensor parsing error: {alias}")
    name, field = DTYPES[proto.dtype]
    dtype = numpy_dtype(name)
    shape = tuple(dim.size for dim in proto.tensor_shape.dim)
    if proto.tensor_shape.unknown_rank or any(size < 0 for size in shape):
        raise ServingError("INVALID_ARGUMENT", f"tensor parsing error: {alias}")
    count = int(np.prod(shape, dtype=np.int64))
    if proto.tensor_content and proto.dtype != STRING:
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

    number = DTYPE_NUMBERS[dtype_name]
    proto = tensor_pb2.TensorProto(dtype=number)
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    flat = array.reshape(-1)
    field = getattr(proto, DTYPES[number][1])
    if dtype_name == "string":
        field.extend(as_bytes(item) for item in flat)
    elif dtype_name == "float16":
        field.extend(flat.view(np.uint16).tolist())
    else:
        field.extend(flat.tolist())
    return proto


def predict_inputs(request, signatures):
    """A `PredictRequest`'s signature name and input arrays, checked as Predict checks them.

    Returns:
        `(signature_name, {alias: array}, output keys or None for all)`.
    """
    signature_name = request.model_spec.signature_name or DEFAULT_SIGNATURE
    signature = find_signature(signatures, signature_name)
    check_input_keys(signature, request.inputs)
    inputs = {}
    for alias, proto in request.inputs.items():
        expected = signature["inputs"][alias]["dtype"]
        given = DTYPES.get(proto.dtype, (f"dtype number {proto.dtype}",))[0]
        if given != expected:
            raise _dtype_error(alias, expected, given)
        inputs[alias] = _tensor_proto_to_array(alias, proto)
    return signature_name, inputs, list(request.output_filter) or None


def predict_response(request, signature_name, outputs, output_specs, version=None):
    """The `PredictResponse`: typed-value outputs and the model spec with the signature name.

    Args:
        request: the `PredictRequest` answered.
        signature_name: the signature that ran.
        outputs: `{key: array}`.
        output_specs: the signature's `{key: spec}` of outputs.
        version: the model version, set when the request names none; None leaves it out.
    """
    from tensorflow_serving.apis import predict_pb2

    response = predict_pb2.PredictResponse()
    response.model_spec.CopyFrom(request.model_spec)
    response.model_spec.signature_name = signature_name
    if version is not None and not request.model_spec.HasField("version"):
        response.model_spec.version.value = version
    for key, array in outputs.items():
        response.outputs[key].CopyFrom(_array_to_tensor_proto(array, output_specs[key]["dtype"]))
    return response
