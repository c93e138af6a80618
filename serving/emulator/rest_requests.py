"""REST predict bodies as input arrays, and outputs as REST answers, as TF Serving does.

Row form `{"instances": [...]}`: a list of rows, each a value (one input) or an object
naming every input, all rows of one shape; answered with `{"predictions": [...]}`, a list
of values for one output, else a list of objects. Columnar form `{"inputs": ...}`: a value
(one input) or an object of named inputs; answered with `{"outputs": ...}`, a value for
one output, else an object. `"signature_name"` defaults to "serving_default". The
function names in parentheses are the server's (tensorflow_serving/util/json_tensor.cc).
"""

import json

import numpy as np

from serving.emulator.json_tensors import json_text, json_to_array, json_values, rest_error
from serving.emulator.serving_requests import DEFAULT_SIGNATURE, find_signature
from serving.emulator.tensor_wire import ServingError
from serving.predict_requests import is_b64_object, is_named_object


def _parse_body(body):
    """The request body as a dict: JSON text is parsed, anything but an object refused."""
    if isinstance(body, (str, bytes)):
        if not body:
            raise rest_error("JSON Parse error: The document is empty")
        try:
            body = json.loads(body)
        except ValueError as error:
            raise rest_error(f"JSON Parse error: {error}") from None
    if not isinstance(body, dict):
        raise rest_error(f"JSON Value: {json_text(body)} Is not object")
    return body


def rest_inputs(body, signatures):
    """A REST predict body's signature, form and input arrays, checked as the server does.

    Args:
        body: the JSON text or its parsed dict.
        signatures: the model's `read_signatures` dict.

    Returns:
        `(signature_name, form, {key: array})` with form "instances" or "inputs".
    """
    body = _parse_body(body)
    signature_name = body.get("signature_name", DEFAULT_SIGNATURE)
    if not isinstance(signature_name, str):
        raise rest_error(
            f"JSON Value: {json_text(body)} not formatted correctly. 'signature_name' "
            "key must be a string value."
        )
    signature = find_signature(signatures, signature_name)
    inputs = {key: spec["dtype"] for key, spec in signature["inputs"].items()}
    if not inputs:
        raise rest_error(f"Failed to get input map for signature: {signature_name}")
    if "instances" in body and "inputs" in body:
        raise rest_error(
            f"JSON Value: {json_text(body)} Not formatted correctly expecting only one "
            "of 'inputs' or 'instances' keys to exist "
        )
    if "instances" in body:
        return signature_name, "instances", _instances_to_inputs(body["instances"], inputs)
    if "inputs" in body:
        return signature_name, "inputs", _columns_to_inputs(body["inputs"], inputs)
    raise rest_error("Missing 'inputs' or 'instances' key")


def rest_answer(form, outputs, output_specs):
    """The answer to a request of `form`: `{"predictions": ...}` or `{"outputs": ...}`."""
    if form == "instances":
        return {"predictions": _predictions(outputs, output_specs)}
    return {"outputs": _columnar_outputs(outputs, output_specs)}


def _instances_to_inputs(instances, inputs):
    """The row (`instances`) form as input arrays (`FillTensorMapFromInstancesList`)."""
    if not isinstance(instances, list):
        raise rest_error("Excepting 'instances' to be an list/array")
    if not instances:
        raise rest_error("No values in 'instances' array")
    if not isinstance(instances[0], dict) and len(inputs) > 1:
        raise rest_error(
            "instances is a plain list, but expecting list of objects as multiple input "
            "tensors required as per tensorinfo_map"
        )
    names = sorted(inputs)
    rows = {name: [] for name in names}
    for index, element in enumerate(instances):
        if is_named_object(instances[0]):
            _add_named_row(element, index, inputs, rows)
        elif is_named_object(element):
            raise rest_error(f"Expecting value/list but got object at item {index} of input list")
        else:
            name = names[0]
            rows[name].append(_instance_item(element, inputs[name], index, rows[name]))
    return {name: np.stack(arrays) for name, arrays in rows.items()}


def _add_named_row(element, index, inputs, rows):
    """Appends one `{name: value}` row of the instances to `rows`."""
    if not is_named_object(element):
        raise rest_error(f"Expecting object but got list at item {index} of input list")
    for key, value in element.items():
        if key not in inputs:
            raise rest_error(
                f"Failed to process element: {index} key: {key} of 'instances' list. "
                f"Error: INVALID_ARGUMENT: JSON object: does not have named input: {key}"
            )
        rows[key].append(_instance_item(value, inputs[key], index, rows[key]))
    if sorted(element) != sorted(inputs):
        raise rest_error(
            f"Failed to process element: {index} of 'instances' list. JSON object: "
            f"{json_text(element)} must only have keys: {','.join(sorted(inputs))}"
        )


def _instance_item(value, dtype_name, index, previous):
    """One row's value of an input, of the first row's shape (`AddInstanceItem`)."""
    try:
        array = json_to_array(value, dtype_name)
        if previous and previous[0].size != array.size:
            raise rest_error(f"Expecting tensor size: {previous[0].size} but got: {array.size}")
        if previous and previous[0].shape != array.shape:
            raise rest_error(
                f"Expecting shape {_shape_text(previous[0].shape)} but got: "
                f"{_shape_text(array.shape)}"
            )
    except ServingError as error:
        raise rest_error(
            f"Failed to process element: {index} of 'instances' list. Error: {error}"
        ) from None
    return array


def _shape_text(shape):
    return "[" + ",".join(str(size) for size in shape) + "]"


def _columns_to_inputs(columns, inputs):
    """The columnar (`inputs`) form as input arrays (`FillTensorMapFromInputsMap`)."""
    if not isinstance(columns, dict) or is_b64_object(columns):
        if len(inputs) > 1:
            raise rest_error(
                "inputs is a plain value/list, but expecting an object as multiple input "
                "tensors required as per tensorinfo_map"
            )
        (name, dtype_name), = inputs.items()
        return {name: json_to_array(columns, dtype_name)}
    arrays = {}
    for name in sorted(inputs):  # keys the signature does not name are not read
        if name not in columns:
            raise rest_error(f"Missing named input: {name} in 'inputs' object.")
        arrays[name] = json_to_array(columns[name], inputs[name])
    return arrays


def _output_columns(outputs, output_specs):
    return {
        key: json_values(array, key, output_specs[key]["dtype"]) for key, array in outputs.items()
    }


def _batch_size(outputs):
    """The outputs' common batch size, which the row form needs."""
    batch = 0
    for key, array in outputs.items():
        if array.ndim == 0:
            raise rest_error(f"Tensor name: {key} has no shape information ")
        if array.shape[0] < 1:
            raise rest_error(f"Tensor name: {key} has invalid batch size: {array.shape[0]}")
        if batch and array.shape[0] != batch:
            raise rest_error(
                f"Tensor name: {key} has inconsistent batch size: {array.shape[0]} "
                f"expecting: {batch}"
            )
        batch = array.shape[0]
    return batch


def _predictions(outputs, output_specs):
    """The row form's `predictions` (`MakeRowFormatJsonFromTensors`)."""
    batch = _batch_size(outputs)
    columns = _output_columns(outputs, output_specs)
    if len(columns) == 1:
        return next(iter(columns.values()))
    return [{key: column[row] for key, column in columns.items()} for row in range(batch)]


def _columnar_outputs(outputs, output_specs):
    """The columnar form's `outputs` (`MakeColumnarFormatJsonFromTensors`)."""
    columns = _output_columns(outputs, output_specs)
    return next(iter(columns.values())) if len(columns) == 1 else columns
