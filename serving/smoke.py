"""Smoke test of a running TensorFlow Serving: one REST and one gRPC request per
signature of each model that is loaded, and a table of the results.

    python serving/smoke.py [--host localhost --rest_port 8501 --grpc_port 8500]

The models are those of `models.config` (`--models_config`); a model the server
does not know or has not loaded is listed as absent and skipped. For each
signature of a loaded model (read from the server's metadata), a batch of two
rows is built from the signature's dtypes and shapes (greedy decoding,
`temperature = 0` unless `--temperature`), sent as REST `instances` JSON and as
a gRPC `PredictRequest`, and the two answers must be equal. Exit status: 0 when
every request of at least one model succeeds, else 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from serving import client

_NUMPY_DTYPES = {
    "DT_INT32": np.int32,
    "DT_INT64": np.int64,
    "DT_UINT8": np.uint8,
    "DT_INT8": np.int8,
    "DT_INT16": np.int16,
    "DT_FLOAT": np.float32,
    "DT_DOUBLE": np.float64,
    "DT_BOOL": np.bool_,
    "DT_STRING": object,
}
SENTENCES = ["Ich habe Hunger.", "Guten Morgen, wie geht es dir?"]
# The `direction` of translation models of several directions: one of
# recipes/translate.py's (`--tasks both_directions`).
DIRECTION = b"forward"
# Length given to free (-1) dimensions past the batch dimension, e.g. a primer.
FREE_LENGTH = 8


def model_names(models_config):
    """Model names of a `model_config_list` text proto."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    with open(models_config, encoding="utf-8") as file:
        config = text_format.Parse(file.read(), model_server_config_pb2.ModelServerConfig())
    return [model.name for model in config.model_config_list.config]


def wait_for_server(host, port, seconds):
    """Polls the REST port until it answers (any HTTP status) or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            client.rest_call(host, port, "/v1/models/_", timeout=5)
            return
        except client.ServerError:
            return  # answered (404 for the unknown model)
        except client.ServerUnreachable:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def model_status(host, port, name, timeout):
    """`(version, state)` of the newest version, or `(None, reason)`."""
    try:
        answer = client.rest_call(host, port, client.model_path(name), timeout=timeout)
    except client.ServerError as error:
        return None, f"absent ({error.detail})"
    versions = answer.get("model_version_status", [])
    if not versions:
        return None, "absent (no versions)"
    newest = max(versions, key=lambda status: int(status["version"]))
    return int(newest["version"]), newest["state"]


def signature_specs(host, port, name, version, timeout):
    """`{signature: {"inputs": {key: (dtype, dims)}, "outputs": ...}}` from the metadata."""
    answer = client.rest_call(
        host, port, client.model_path(name, version, "/metadata"), timeout=timeout
    )
    definitions = answer["metadata"]["signature_def"]["signature_def"]
    specs = {}
    for signature, definition in sorted(definitions.items()):
        if signature.startswith("__"):  # __saved_model_init_op
            continue
        specs[signature] = {
            side: {key: _tensor_spec(info) for key, info in definition.get(side, {}).items()}
            for side in ("inputs", "outputs")
        }
    return specs


def _tensor_spec(info):
    shape = info.get("tensor_shape", {})
    if shape.get("unknown_rank"):
        return info["dtype"], None
    # Proto JSON leaves out default values: a missing size is 0.
    return info["dtype"], [int(d.get("size", 0)) for d in shape.get("dim", [])]


def example_inputs(specs, rows=2, temperature=0.0):
    """A valid batch for a signature from its input specs, by input name."""
    rng = np.random.default_rng(0)
    shapes = {}
    for key, (dtype, dims) in specs.items():
        if dims is None:
            raise ValueError(f"input `{key}` has an unknown rank; cannot build an example")
        shapes[key] = [rows] + [d if d > 0 else FREE_LENGTH for d in dims[1:]]
    inputs = {}
    for key, (dtype, _) in specs.items():
        shape, numpy_dtype = shapes[key], _NUMPY_DTYPES.get(dtype)
        if numpy_dtype is None:
            raise ValueError(f"input `{key}` has dtype {dtype}, which this script does not fill")
        if key == "decoding":
            value = np.full(shape, b"sample", dtype=object)
        elif key == "direction":
            value = np.full(shape, DIRECTION, dtype=object)
        elif key == "text" or numpy_dtype is object:
            count = int(np.prod(shape))
            texts = [SENTENCES[i % len(SENTENCES)].encode("utf-8") for i in range(count)]
            value = np.array(texts, dtype=object).reshape(shape)
        elif key == "temperature":
            value = np.full(shape, temperature)
        elif key == "top_p":
            value = np.full(shape, 1.0)
        elif key in ("top_k", "class_label"):
            value = np.zeros(shape)
        elif key == "max_new_tokens":
            value = np.full(shape, 4)
        elif key == "primer_length":
            value = np.full(shape, shapes["primer"][1])
        elif key == "seed":
            value = np.arange(int(np.prod(shape))).reshape(shape)
        elif key == "known_rows":
            height = shapes.get("pixels", [rows, 2 * FREE_LENGTH])[1]
            value = np.full(shape, height // 2)
        elif numpy_dtype is np.uint8:
            value = rng.integers(0, 256, shape)
        elif numpy_dtype is np.bool_:
            value = np.zeros(shape)
        elif np.issubdtype(numpy_dtype, np.integer):
            value = rng.integers(1, 8, shape)  # token ids clear of the reserved 0
        else:
            value = np.full(shape, 0.5)
        inputs[key] = np.asarray(value, dtype=numpy_dtype)
    return inputs


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return bool(np.array_equal(a.astype(np.float32), b.astype(np.float32), equal_nan=True))
    return bool(np.array_equal(a, b))


def check_signature(args, name, version, signature, spec):
    """Sends one REST and one gRPC request; returns a table row (dict)."""
    row = {"model": name, "version": version, "signature": signature}
    dtypes = {key: _NUMPY_DTYPES.get(dtype) for key, (dtype, _) in spec["outputs"].items()}
    try:
        inputs = example_inputs(spec["inputs"], temperature=args.temperature)
    except ValueError as error:
        return {**row, "rest": "-", "grpc": "-", "outputs": f"skipped: {error}", "ok": False}
    answers = {}
    for protocol in ("rest", "grpc"):
        start = time.perf_counter()
        try:
            if protocol == "rest":
                body = client.rest_body(signature, inputs, form="instances")
                response = client.rest_predict(
                    args.host, args.rest_port, name, body, args.timeout, version
                )
                answers[protocol] = client.parse_rest_response(
                    response, output_names=list(dtypes), dtypes=dtypes
                )
            else:
                request = client.predict_request(name, signature, inputs, version)
                response = client.grpc_predict(args.host, args.grpc_port, request, args.timeout)
                answers[protocol] = client.parse_predict_response(response)
            row[protocol] = f"ok {1000 * (time.perf_counter() - start):.0f} ms"
        except client.ClientError as error:
            row[protocol] = f"FAILED: {error}"
    if len(answers) < 2:
        return {**row, "outputs": "-", "ok": False}
    rest, grpc = answers["rest"], answers["grpc"]
    agree = sorted(rest) == sorted(grpc) and all(_same(rest[k], grpc[k]) for k in grpc)
    row["outputs"] = ", ".join(
        f"{key} {grpc[key].dtype.name}{list(grpc[key].shape)}" for key in sorted(grpc)
    )
    row["outputs"] += "" if agree else "  REST != gRPC"
    row["ok"] = agree
    return row


def print_table(rows):
    columns = ("model", "version", "signature", "rest", "grpc", "outputs")
    cells = [[str(row.get(column, "")) for column in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for line in cells:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default=client.DEFAULT_HOST)
    parser.add_argument("--rest_port", type=int, default=client.DEFAULT_REST_PORT)
    parser.add_argument("--grpc_port", type=int, default=client.DEFAULT_GRPC_PORT)
    parser.add_argument(
        "--models_config",
        default=os.path.join(here, "models.config"),
        help="model_config_list naming the models to try (default: %(default)s)",
    )
    parser.add_argument(
        "--wait", type=float, default=0, help="seconds to wait for the server to come up"
    )
    parser.add_argument("--timeout", type=float, default=client.DEFAULT_TIMEOUT)
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="temperature of the generation requests; 0 = greedy (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    try:
        wait_for_server(args.host, args.rest_port, args.wait)
        rows = []
        for name in model_names(args.models_config):
            version, state = model_status(args.host, args.rest_port, name, args.timeout)
            if state != "AVAILABLE":
                row = {"model": name, "version": version or "-", "outputs": state, "ok": None}
                rows.append(row)
                continue
            specs = signature_specs(args.host, args.rest_port, name, version, args.timeout)
            for signature, spec in specs.items():
                rows.append(check_signature(args, name, version, signature, spec))
    except client.ClientError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print_table(rows)
    checked = [row for row in rows if row["ok"] is not None]
    if not checked:
        print("no model of the config is loaded", file=sys.stderr)
        return 1
    return 0 if all(row["ok"] for row in checked) else 1


if __name__ == "__main__":
    sys.exit(main())
