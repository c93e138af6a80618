"""serving/smoke.py: against fake servers here, against `docker compose up` where Docker runs.

The Docker test exports a tiny music model, starts `tensorflow/serving:2.20.0`
with serving/docker-compose.yml, and runs the smoke script (real REST and gRPC
requests). It is skipped, with the reason, where there is no `docker` command,
no Compose v2 plugin or no daemon.
"""

import http.server
import os
import shutil
import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path

import numpy as np
import pytest

from serving import client, smoke
from tests.serving.fake_servers import JsonHandler, free_port

SERVING_DIR = Path(client.__file__).resolve().parent
TF_ONLY = pytest.mark.backends("tensorflow", reason="tensorflow-serving-api protos need TensorFlow")

# dtypes of the client's signature table -> DataType names of the server's metadata.
DATA_TYPES = {"int32": "DT_INT32", "float32": "DT_FLOAT", "uint8": "DT_UINT8", "string": "DT_STRING"}


def metadata_specs(dtypes, dims):
    """`{key: (DataType name, dims)}` of a table's `{key: dtype}`; dims from
    `dims` by key, else `[-1]` (one value a row)."""
    return {key: (DATA_TYPES[dtype], dims.get(key, [-1])) for key, dtype in dtypes.items()}


GENERATE = client.SIGNATURES["generate"]
# A fake `music` model: `generate` as the client's table describes it, and a forward pass.
FAKE_SIGNATURES = {
    "generate": {
        "inputs": metadata_specs(GENERATE["inputs"], {"primer": [-1, -1]}),
        "outputs": metadata_specs(GENERATE["outputs"], {"tokens": [-1, -1]}),
    },
    "serving_default": {
        "inputs": {"tokens": ("DT_INT32", [-1, -1])},
        "outputs": {"logits": ("DT_FLOAT", [-1, -1, 3])},
    },
}


def fake_run(signature, inputs):
    """What the fake model computes (numpy in, numpy out)."""
    if signature == "generate":
        primer, counts = inputs["primer"], inputs["max_new_tokens"]
        new = np.zeros([len(primer), counts.max()], np.int32)
        for row, count in enumerate(counts):
            new[row, :count] = primer[row, -1] + 1 + inputs["seed"][row]
        status = np.array([b""] * len(primer), object)
        return {"tokens": np.concatenate([primer, new], axis=1), "status": status}
    logits = inputs["tokens"][..., None] * np.array([0.1, 0.2, 0.3], np.float32)
    return {"logits": logits.astype(np.float32)}


def _metadata_json():
    def tensor(dtype, dims):
        shape = {"dim": [{"size": str(d), "name": ""} for d in dims]}
        return {"dtype": dtype, "tensor_shape": shape}

    definitions = {
        name: {
            side: {key: tensor(*spec) for key, spec in signature[side].items()}
            for side in ("inputs", "outputs")
        }
        for name, signature in FAKE_SIGNATURES.items()
    }
    definitions["__saved_model_init_op"] = {"outputs": {}}
    return {
        "model_spec": {"name": "music", "version": "3"},
        "metadata": {"signature_def": {"signature_def": definitions}},
    }


class FakeRestServer(http.server.ThreadingHTTPServer):
    """TF Serving's REST API for one model `music`, version 3 (row-form predict only)."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), FakeRestHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class FakeRestHandler(JsonHandler):
    def do_GET(self):
        if self.path == "/v1/models/music":
            self.send_json(200, {"model_version_status": [{"version": "3", "state": "AVAILABLE"}]})
        elif self.path == "/v1/models/music/versions/3/metadata":
            self.send_json(200, _metadata_json())
        else:
            name = self.path.split("/")[3]
            self.send_json(404, {"error": f"Servable not found for request: Latest({name})"})

    def do_POST(self):
        body = self.read_json()
        assert self.path == "/v1/models/music/versions/3:predict", self.path
        spec = FAKE_SIGNATURES[body["signature_name"]]
        dtypes = {"DT_INT32": np.int32, "DT_FLOAT": np.float32}
        rows = body["instances"]
        inputs = {
            key: np.array([row[key] for row in rows], dtypes[dtype])
            for key, (dtype, _) in spec["inputs"].items()
        }
        outputs = fake_run(body["signature_name"], inputs)
        if len(outputs) == 1:  # one output: the server leaves its name out
            (value,) = outputs.values()
            self.send_json(200, {"predictions": value.tolist()})
            return
        columns = {name: [_json_value(item) for item in value] for name, value in outputs.items()}
        rows = [dict(zip(columns, row)) for row in zip(*columns.values())]
        self.send_json(200, {"predictions": rows})


def _json_value(value):
    return value.decode("utf-8") if isinstance(value, bytes) else value.tolist()


def start_fake_grpc(offset=0):
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    class Servicer(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):
            assert request.model_spec.name == "music" and request.model_spec.version.value == 3
            inputs = {key: tf.make_ndarray(value) for key, value in request.inputs.items()}
            response = predict_pb2.PredictResponse()
            for name, value in fake_run(request.model_spec.signature_name, inputs).items():
                shifted = value if value.dtype == object else value + offset
                response.outputs[name].CopyFrom(tf.make_tensor_proto(shifted))
            return response

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


@pytest.fixture
def fake_servers():
    started = []

    def start(grpc_offset=0):
        rest = FakeRestServer()
        grpc_server, grpc_port = start_fake_grpc(grpc_offset)
        started.append((rest, grpc_server))
        return rest.server_address[1], grpc_port

    yield start
    for rest, grpc_server in started:
        rest.shutdown()
        rest.server_close()
        grpc_server.stop(None)


def test_example_inputs_are_valid_requests_for_each_contract_signature():
    specs = metadata_specs(client.SIGNATURES["complete"]["inputs"], {"pixels": [-1, 6, 4, 3]})
    inputs = smoke.example_inputs(specs, rows=2)
    assert inputs["pixels"].shape == (2, 6, 4, 3) and inputs["pixels"].dtype == np.uint8
    np.testing.assert_array_equal(inputs["known_rows"], [3, 3])
    np.testing.assert_array_equal(inputs["seed"], [0, 1])
    assert inputs["temperature"].dtype == np.float32 and (inputs["temperature"] == 0).all()
    assert inputs["class_label"].dtype == np.int32 and (inputs["class_label"] == 0).all()
    specs = metadata_specs(client.SIGNATURES["super_resolve"]["inputs"], {"low_resolution": [-1, 4, 4, 1]})
    assert smoke.example_inputs(specs)["decoding"].tolist() == [b"sample", b"sample"]
    text = smoke.example_inputs({"text": ("DT_STRING", [-1])})["text"]
    assert text.dtype == object and all(isinstance(t, bytes) and t for t in text)
    translate = smoke.example_inputs({"text": ("DT_STRING", [-1]), "direction": ("DT_STRING", [-1])})
    assert translate["direction"].tolist() == [b"forward", b"forward"]
    generate = smoke.example_inputs(FAKE_SIGNATURES["generate"]["inputs"])
    assert generate["primer"].shape == (2, smoke.FREE_LENGTH) and generate["primer"].min() >= 1
    assert (generate["top_p"] == 1).all() and (generate["top_k"] == 0).all()
    with pytest.raises(ValueError, match="`x` has an unknown rank"):
        smoke.example_inputs({"x": ("DT_INT32", None)})


@TF_ONLY
def test_smoke_sends_rest_and_grpc_requests_per_signature(fake_servers, capsys):
    rest_port, grpc_port = fake_servers()
    status = smoke.main(
        ["--host", "127.0.0.1", "--rest_port", str(rest_port), "--grpc_port", str(grpc_port)]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    lines = out.splitlines()
    assert lines[0].split() == ["model", "version", "signature", "rest", "grpc", "outputs"]
    generate = next(line for line in lines if " generate " in line)
    assert "tokens int32[2, 12]" in generate and generate.count(" ok ") == 2
    forward = next(line for line in lines if " serving_default " in line)
    assert "logits float32[2, 8, 3]" in forward
    assert "__saved_model_init_op" not in out
    # The other models of serving/models.config are not loaded on the fake server.
    for name in ("translation", "image_generation", "super_resolution", "accompaniment"):
        assert next(line for line in lines if line.startswith(name)).count("absent") == 1


@TF_ONLY
def test_smoke_fails_when_rest_and_grpc_disagree(fake_servers, capsys):
    rest_port, grpc_port = fake_servers(grpc_offset=1)
    status = smoke.main(
        ["--host", "127.0.0.1", "--rest_port", str(rest_port), "--grpc_port", str(grpc_port)]
    )
    assert status == 1
    assert capsys.readouterr().out.count("REST != gRPC") == 2


def test_smoke_reports_an_unreachable_server(capsys):
    port = free_port()
    assert smoke.main(["--host", "127.0.0.1", "--rest_port", str(port)]) == 1
    assert f"127.0.0.1:{port}" in capsys.readouterr().err


# --------------------------------------------------------------------------
# Docker


def docker_unavailable_reason():
    """Why `docker compose up` cannot run here, or None."""
    if shutil.which("docker") is None:
        return "no `docker` command on PATH"
    checks = [
        (["docker", "compose", "version"], "no Docker Compose v2 plugin (`docker compose`)"),
        (["docker", "info", "--format", "{{.ServerVersion}}"], "no Docker daemon"),
    ]
    for command, reason in checks:
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{reason}: {error}"
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            return f"{reason}: {detail[0] if detail else 'exit status ' + str(result.returncode)}"
    return None


@pytest.mark.slow
@TF_ONLY
def test_compose_serves_an_exported_model(tmp_path):
    reason = docker_unavailable_reason()
    if reason:
        pytest.skip(reason)
    from keras_selfattn import export
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    from keras_selfattn.models import music_transformer

    models = tmp_path / "models"
    export.export_for_serving(music_transformer(16, preset="tiny"), str(models), name="music")
    # Only the exported model: the server waits at start-up for every listed one.
    config = text_format.Parse(
        (SERVING_DIR / "models.config").read_text(), model_server_config_pb2.ModelServerConfig()
    )
    kept = [model for model in config.model_config_list.config if model.name == "music"]
    del config.model_config_list.config[:]
    config.model_config_list.config.extend(kept)
    (tmp_path / "models.config").write_text(text_format.MessageToString(config))

    rest_port, grpc_port = free_port(), free_port()
    env = dict(
        os.environ,
        SERVING_EXPORT_DIR=str(models),
        MODELS_CONFIG=str(tmp_path / "models.config"),
        REST_PORT=str(rest_port),
        GRPC_PORT=str(grpc_port),
    )
    compose = ["docker", "compose", "--project-name", f"keras-selfattn-smoke-{os.getpid()}"]
    subprocess.run(compose + ["up", "--detach"], cwd=SERVING_DIR, env=env, check=True, timeout=1800)
    try:
        result = subprocess.run(
            [sys.executable, str(SERVING_DIR / "smoke.py"), "--host", "127.0.0.1"]
            + ["--rest_port", str(rest_port), "--grpc_port", str(grpc_port)]
            + ["--models_config", str(tmp_path / "models.config"), "--wait", "300"],
            capture_output=True,
            text=True,
            timeout=1200,
        )
        if result.returncode != 0:
            logs = subprocess.run(
                compose + ["logs", "--tail", "80"],
                cwd=SERVING_DIR,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            pytest.fail(f"smoke failed:\n{result.stdout}\n{result.stderr}\n{logs.stdout}")
        assert "generate" in result.stdout and "REST != gRPC" not in result.stdout
    finally:
        subprocess.run(compose + ["down"], cwd=SERVING_DIR, env=env, timeout=300)
