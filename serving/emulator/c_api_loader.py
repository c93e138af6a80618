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

The parts live beside this module: `loader_build` (the program, its libraries and
settings), `signature_defs` (reading SignatureDefs), `tensor_wire` (the pipe's framed
protocol and `ServingError`), `serving_requests` (the server's input checks and
PredictRequest / PredictResponse protos), `json_tensors` and `rest_requests` (the REST
JSON rules).

Example:

```python
with CApiSavedModel("exports/music/1") as model:
    outputs = model.run("serving_default", {"tokens": np.zeros([1, 8], np.int32)})
    report = model.load_test("serving_default", {"tokens": ...}, clients=8)
```
"""

import os
import struct
import subprocess
import tempfile
import threading

import numpy as np

from serving.emulator import tensor_wire
from serving.emulator.loader_build import (
    build_loader,
    child_env,
    op_libraries,
    session_config,
    tensorflow_paths,
)
from serving.emulator.rest_requests import rest_answer, rest_inputs
from serving.emulator.serving_requests import (
    check_input_keys,
    check_output_keys,
    find_signature,
    predict_inputs,
    predict_response,
    to_input_array,
)
from serving.emulator.signature_defs import read_signatures
from serving.emulator.tensor_wire import ServingError


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
            env=child_env(env),
        )
        self.pid = self._process.pid
        self._reader = tensor_wire.Reader(self._process.stdout, self._died)
        self.op_library_status = self._read_library_status(libraries)
        code, message = self._reader.status()
        if code != "OK":
            self._process.wait()
            self._stderr.close()
            raise ServingError(code, message)

    def _read_library_status(self, libraries):
        """`{library: None or "CODE: message"}` as the child reports loading each."""
        if self._reader.u32() != len(libraries):
            self._died()
        status = {}
        for library in libraries:
            code, message = self._reader.status()
            status[library] = None if code == "OK" else f"{code}: {message}"
        return status

    # -- process --------------------------------------------------------------

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

    def close(self):
        """Stops the child process (idempotent)."""
        if self._process.poll() is None:
            try:
                self._process.stdin.write(struct.pack("<I", tensor_wire.QUIT))
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

    def _read_ok(self):
        """Reads a reply's status; a failed one raises its ServingError."""
        code, message = self._reader.status()
        if code != "OK":
            raise ServingError(code, message)

    # -- requests -------------------------------------------------------------

    def _prepare(self, signature_name, inputs, output_keys=None):
        """Checks inputs like the server; returns the RUN body and the output keys."""
        signature = find_signature(self._signatures, signature_name)
        check_input_keys(signature, inputs)
        feeds = []
        for key in sorted(inputs):
            spec = signature["inputs"][key]
            array = to_input_array(key, inputs[key], spec["dtype"])
            feeds.append((spec["name"], array, spec["dtype"]))
        output_keys = check_output_keys(signature, output_keys)
        fetches = [signature["outputs"][key]["name"] for key in output_keys]
        return tensor_wire.pack_session_run(feeds, fetches), output_keys

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
            self._send(struct.pack("<I", tensor_wire.RUN) + body)
            self._read_ok()
            count = self._reader.u32()
            outputs = [self._reader.tensor() for _ in range(count)]
        return dict(zip(output_keys, outputs))

    def input_names(self, signature_name):
        """The input keys of a signature, sorted."""
        return sorted(find_signature(self._signatures, signature_name)["inputs"])

    def has_ops(self, names):
        """`{op name: registered}` in the loader's op registry (core and loaded libraries)."""
        names = list(names)
        with self._lock:
            self._send(tensor_wire.pack_has_ops(names))
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
        header = struct.pack("<III", tensor_wire.LOAD_TEST, clients, requests_per_client)
        with self._lock:
            self._send(header + body)
            self._read_ok()
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

    # -- gRPC Predict and REST -------------------------------------------------

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
        signature_name, inputs, output_keys = predict_inputs(request, self._signatures)
        outputs = self.run(signature_name, inputs, output_keys)
        output_specs = self._signatures[signature_name]["outputs"]
        return predict_response(request, signature_name, outputs, output_specs, self._version())

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
            signature_name, form, inputs = rest_inputs(body, self._signatures)
            outputs = self.run(signature_name, inputs)
            return rest_answer(form, outputs, self._signatures[signature_name]["outputs"])
        except ServingError as error:
            return {"error": error.message}


__all__ = [
    "CApiSavedModel",
    "ServingError",
    "build_loader",
    "op_libraries",
    "read_signatures",
    "session_config",
    "tensorflow_paths",
]
