"""The SignatureDefs of a SavedModel's "serve" MetaGraphDef, read from saved_model.pb."""

from pathlib import Path

from serving.emulator.tensor_wire import DTYPES

SERVE_TAG = "serve"
# TF2 SavedModels keep their init op as a SignatureDef by this name; it is no endpoint.
_INIT_OP_SIGNATURE = "__saved_model_init_op"


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
    dtype = DTYPES[info.dtype][0] if info.dtype in DTYPES else f"unsupported_dtype_{info.dtype}"
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
