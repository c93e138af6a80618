"""TensorFlow Serving's REST and gRPC predict APIs on local ports, answered by
the emulator (`serving.emulator.c_api_loader.CApiSavedModel`: TensorFlow's C API
loader, the server's request rules) for the SavedModels under an export base,
`<export_base>/<name>/<version>/` as `models.config` lays them out.

A model is loaded on its first request (its newest version unless the request
names one), so a server started before the export answers once it is there.
"""

import re
import threading
from concurrent import futures
from pathlib import Path

from serving.emulator.c_api_loader import CApiSavedModel, ServingError
from tests.serving.fake_servers import JsonHandler

PREDICT_PATH = re.compile(r"^/v1/models/([^/:]+)(?:/versions/(\d+))?:predict$")


class EmulatedServing:
    """REST on `rest_port` and gRPC on `grpc_port` of 127.0.0.1; use as a context manager."""

    def __init__(self, export_base):
        self.export_base = Path(export_base)
        self._models = {}
        self._lock = threading.Lock()
        self.requests = []  # (protocol, model name, signature name) of each answered request
        self._rest = _start_rest(self)
        self._grpc, self.grpc_port = _start_grpc(self)
        self.rest_port = self._rest.server_address[1]

    def model(self, name, version=None):
        """The loaded model `name` at `version` (default: the newest exported)."""
        folder = self.export_base / name
        if version is None:
            versions = [int(p.name) for p in folder.glob("*") if p.name.isdigit()] if folder.is_dir() else []
            if not versions:
                raise ServingError("NOT_FOUND", f"Servable not found for request: Latest({name})")
            version = max(versions)
        path = folder / str(version)
        if not (path / "saved_model.pb").is_file():
            raise ServingError("NOT_FOUND", f"Servable not found for request: Specific({name}, {version})")
        with self._lock:
            if path not in self._models:
                self._models[path] = CApiSavedModel(path)
            return self._models[path]

    def close(self):
        self._rest.shutdown()
        self._rest.server_close()
        self._grpc.stop(None)
        for model in self._models.values():
            model.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _start_rest(serving):
    import http.server

    class Handler(JsonHandler):
        def do_POST(self):
            match = PREDICT_PATH.match(self.path)
            if match is None:
                self.send_json(404, {"error": f"Malformed request: POST {self.path}"})
                return
            name, version = match.group(1), match.group(2)
            try:
                model = serving.model(name, version and int(version))
            except ServingError as error:
                self.send_json(404, {"error": error.message})
                return
            body = self.read_json()
            answer = model.rest(body)
            serving.requests.append(("rest", name, body.get("signature_name", "serving_default")))
            self.send_json(400 if "error" in answer else 200, answer)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _start_grpc(serving):
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    class Servicer(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):
            spec = request.model_spec
            try:
                model = serving.model(spec.name, spec.version.value if spec.HasField("version") else None)
                response = model.predict(request)
            except ServingError as error:
                context.abort(getattr(grpc.StatusCode, error.code, grpc.StatusCode.UNKNOWN), error.message)
            serving.requests.append(("grpc", spec.name, spec.signature_name or "serving_default"))
            return response

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port
