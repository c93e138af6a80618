"""serving/: configs, request builders and the client command line, without a server.

Configs parse with TensorFlow Serving's own protos; requests round-trip through
`tf.make_ndarray`; REST JSON is compared with hand-written bodies following the
server's documented rules (tensorflow_serving/g3doc/api_rest.md and
util/json_tensor.cc); the command line runs against small local fake servers
(HTTP and gRPC) that record what they receive.
"""

import base64
import http.server
import json
import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path

import numpy as np
import pytest

from serving import client
from tests.serving.fake_servers import JsonHandler, free_port

SERVING_DIR = Path(client.__file__).resolve().parent
TF_ONLY = pytest.mark.backends("tensorflow", reason="tensorflow-serving-api protos need TensorFlow")
MODELS = {"music", "translation", "image_generation", "super_resolution", "accompaniment"}

# BatchingParameters of tensorflow_serving/servables/tensorflow/session_bundle_config.proto
# at tag 2.20.0: (name, number, type, wrapper message or None, repeated).
# The pip package tensorflow-serving-api does not ship that module.
BATCHING_PARAMETERS_2_20 = [
    ("max_batch_size", 1, "message", "Int64Value", False),
    ("batch_timeout_micros", 2, "message", "Int64Value", False),
    ("max_enqueued_batches", 3, "message", "Int64Value", False),
    ("num_batch_threads", 4, "message", "Int64Value", False),
    ("thread_pool_name", 5, "message", "StringValue", False),
    ("allowed_batch_sizes", 6, "int64", None, True),
    ("pad_variable_length_inputs", 7, "bool", None, False),
    ("enable_large_batch_splitting", 8, "message", "BoolValue", False),
    ("max_execution_batch_size", 9, "message", "Int64Value", False),
]


def batching_parameters_class():
    """`BatchingParameters`: TF Serving's module if installed, else the same
    message built from the 2.20.0 field list."""
    try:
        from tensorflow_serving.servables.tensorflow import session_bundle_config_pb2

        return session_bundle_config_pb2.BatchingParameters
    except ImportError:
        pass
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    pool = descriptor_pool.DescriptorPool()
    wrappers = descriptor_pb2.FileDescriptorProto()
    wrappers_pb2.DESCRIPTOR.CopyToProto(wrappers)
    pool.Add(wrappers)
    file = descriptor_pb2.FileDescriptorProto(
        name="session_bundle_config_test.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    message = file.message_type.add(name="BatchingParameters")
    types = descriptor_pb2.FieldDescriptorProto
    for name, number, kind, wrapper, repeated in BATCHING_PARAMETERS_2_20:
        field = message.field.add(name=name, number=number)
        field.label = types.LABEL_REPEATED if repeated else types.LABEL_OPTIONAL
        field.type = {
            "message": types.TYPE_MESSAGE,
            "int64": types.TYPE_INT64,
            "bool": types.TYPE_BOOL,
        }[kind]
        if wrapper:
            field.type_name = f".google.protobuf.{wrapper}"
    pool.Add(file)
    descriptor = pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters")
    return message_factory.GetMessageClass(descriptor)


# --------------------------------------------------------------------------
# Configs


@TF_ONLY
def test_models_config_names_the_five_models_with_a_version_policy():
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    text = (SERVING_DIR / "models.config").read_text()
    config = text_format.Parse(text, model_server_config_pb2.ModelServerConfig())
    models = {model.name: model for model in config.model_config_list.config}
    assert set(models) == MODELS == set(client.MODEL_NAMES.values()) == set(client.MODEL_SIGNATURES)
    for name, model in models.items():
        assert model.base_path == f"/models/{name}"
        assert model.model_platform == "tensorflow"
        assert model.model_version_policy.WhichOneof("policy_choice") == "latest"
        assert model.model_version_policy.latest.num_versions == 2


def test_batching_config_parses_and_meets_the_servers_requirements():
    from google.protobuf import text_format

    text = (SERVING_DIR / "batching.config").read_text()
    parameters = text_format.Parse(text, batching_parameters_class()())
    for field in ("max_batch_size", "batch_timeout_micros", "num_batch_threads"):
        assert parameters.HasField(field), field
    assert parameters.HasField("max_enqueued_batches")
    sizes = list(parameters.allowed_batch_sizes)
    # BatchingSession refuses allowed sizes that are not increasing or do not
    # end with max_batch_size.
    assert sizes == sorted(set(sizes)) and sizes[0] >= 1
    assert sizes[-1] == parameters.max_batch_size.value
    assert parameters.num_batch_threads.value >= 1
    assert 0 < parameters.batch_timeout_micros.value <= 10_000
    # `generate` primers of different lengths merge, padded (see `primer_length`).
    assert parameters.pad_variable_length_inputs


def test_compose_file_runs_the_matching_server_with_the_configs_mounted():
    import yaml

    compose = yaml.safe_load((SERVING_DIR / "docker-compose.yml").read_text())
    (service,) = compose["services"].values()
    assert service["image"] == "tensorflow/serving:2.20.0"
    assert {"${REST_PORT:-8501}:8501", "${GRPC_PORT:-8500}:8500"} == set(service["ports"])
    flags = dict(flag.lstrip("-").split("=", 1) for flag in service["command"])
    assert flags["port"] == "8500" and flags["rest_api_port"] == "8501"
    assert flags["enable_batching"] == "true"
    assert flags["model_config_file_poll_wait_seconds"] == "60"
    mounts = {volume["target"]: volume["source"] for volume in service["volumes"]}
    assert mounts["/models"] == "${SERVING_EXPORT_DIR:-../runs/serving}"
    for flag in ("model_config_file", "batching_parameters_file"):
        source = mounts[flags[flag]]  # the file the flag names is mounted
        default = source.split(":-", 1)[1].rstrip("}")
        assert (SERVING_DIR / default).is_file(), source


# --------------------------------------------------------------------------
# gRPC PredictRequest


@TF_ONLY
def test_predict_request_round_trips_through_make_ndarray():
    import tensorflow as tf

    inputs = {
        "primer": np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32),
        "temperature": np.array([0.1, 1.5], dtype=np.float32),
        "low_resolution": np.arange(2 * 2 * 3 * 3, dtype=np.uint8).reshape(2, 2, 3, 3),
        "text": np.array(["Ich habe Hunger.", "Grüße"]),
        "raw": np.array([b"\xff\x00bytes", b""], dtype=object),
    }
    request = client.predict_request("music", "generate", inputs, version=3)
    assert request.model_spec.name == "music"
    assert request.model_spec.signature_name == "generate"
    assert request.model_spec.version.value == 3
    assert set(request.inputs) == set(inputs)
    for name in ("primer", "temperature", "low_resolution"):
        back = tf.make_ndarray(request.inputs[name])
        assert back.dtype == inputs[name].dtype, name
        np.testing.assert_array_equal(back, inputs[name])
    assert request.inputs["text"].dtype == tf.string.as_datatype_enum
    assert tf.make_ndarray(request.inputs["text"]).tolist() == [
        "Ich habe Hunger.".encode(),
        "Grüße".encode(),
    ]
    assert tf.make_ndarray(request.inputs["raw"]).tolist() == [b"\xff\x00bytes", b""]


@TF_ONLY
def test_parse_predict_response_gives_numpy_arrays():
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    response = predict_pb2.PredictResponse()
    response.outputs["tokens"].CopyFrom(tf.make_tensor_proto(np.array([[7, 8]], np.int32)))
    response.outputs["translation"].CopyFrom(tf.make_tensor_proto(np.array([b"I am hungry."])))
    outputs = client.parse_predict_response(response)
    assert outputs["tokens"].dtype == np.int32
    np.testing.assert_array_equal(outputs["tokens"], [[7, 8]])
    assert outputs["translation"].tolist() == [b"I am hungry."]


# --------------------------------------------------------------------------
# REST JSON

REST_INPUTS = {
    "primer": np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32),
    "temperature": np.array([0.5, 1.0], dtype=np.float32),
    "pixels": np.array([[[0, 255]], [[7, 8]]], dtype=np.uint8),
    "text": np.array(["Grüße", b"\xff\xfe"], dtype=object),  # text, then bytes not UTF-8
    "image_bytes": np.array([b"PNG", b"GIF"], dtype=object),  # `_bytes`: always b64
}


def test_rest_body_row_form_is_one_object_per_row():
    body = client.rest_body("generate", REST_INPUTS, form="instances")
    assert body == {
        "signature_name": "generate",
        "instances": [
            {
                "primer": [1, 2, 3],
                "temperature": 0.5,
                "pixels": [[0, 255]],
                "text": "Grüße",
                "image_bytes": {"b64": "UE5H"},
            },
            {
                "primer": [4, 5, 6],
                "temperature": 1.0,
                "pixels": [[7, 8]],
                "text": {"b64": "//4="},
                "image_bytes": {"b64": "R0lG"},
            },
        ],
    }
    json.dumps(body, allow_nan=False)  # plain JSON


def test_rest_body_columnar_form_is_one_tensor_per_name():
    body = client.rest_body("generate", REST_INPUTS, form="inputs")
    assert body == {
        "signature_name": "generate",
        "inputs": {
            "primer": [[1, 2, 3], [4, 5, 6]],
            "temperature": [0.5, 1.0],
            "pixels": [[[0, 255]], [[7, 8]]],
            "text": ["Grüße", {"b64": "//4="}],
            "image_bytes": [{"b64": "UE5H"}, {"b64": "R0lG"}],
        },
    }


def test_rest_body_sends_text_under_a_bytes_name_as_b64():
    body = client.rest_body("s", {"note_bytes": np.array(["hi"])}, form="inputs")
    assert body == {"signature_name": "s", "inputs": {"note_bytes": [{"b64": "aGk="}]}}


def test_rest_body_float32_values_read_back_exactly():
    values = np.array([0.1, 1 / 3, 1e-30, 3.4e38], dtype=np.float32)
    body = json.loads(json.dumps(client.rest_body("s", {"x": values}, form="inputs")))
    np.testing.assert_array_equal(np.array(body["inputs"]["x"], dtype=np.float32), values)


def test_rest_body_without_signature_name_uses_the_servers_default():
    assert client.rest_body(None, {"tokens": np.array([[3]], np.int32)}) == {
        "instances": [{"tokens": [3]}]
    }


@pytest.mark.parametrize(
    "inputs, form, message",
    [
        ({"seed": np.int32(3)}, "instances", "`seed` is a scalar"),
        ({"a": np.zeros([2]), "b": np.zeros([3])}, "instances", "same batch size"),
        ({"a": np.zeros([2])}, "rows", "`form` must be"),
        ({}, "inputs", "at least one input"),
    ],
)
def test_rest_body_rejects_what_the_server_cannot_read(inputs, form, message):
    with pytest.raises(ValueError, match=message):
        client.rest_body("generate", inputs, form=form)


def test_parse_rest_response_row_form_with_several_outputs():
    response = {
        "predictions": [
            {"translation": "I am hungry.", "tokens": [5, 6, 0], "score": -1.25},
            {"translation": "Grüße", "tokens": [9, 0, 0], "score": 0.1},
        ]
    }
    dtypes = {"translation": "string", "tokens": np.int32, "score": np.float32}
    outputs = client.parse_rest_response(response, dtypes=dtypes)
    assert outputs["translation"].tolist() == [b"I am hungry.", "Grüße".encode()]
    assert outputs["tokens"].dtype == np.int32
    np.testing.assert_array_equal(outputs["tokens"], [[5, 6, 0], [9, 0, 0]])
    assert outputs["score"].dtype == np.float32
    np.testing.assert_array_equal(outputs["score"], np.array([-1.25, 0.1], np.float32))


def test_parse_rest_response_columnar_form_and_a_single_unnamed_output():
    outputs = client.parse_rest_response(
        {"outputs": {"tokens": [[1, 2]], "score": [0.5]}}, dtypes={"tokens": np.int32}
    )
    assert outputs["tokens"].dtype == np.int32 and outputs["score"].tolist() == [0.5]
    # One output: the server leaves its name out, in both forms.
    rows = client.parse_rest_response({"predictions": [[[1, 2]], [[3, 4]]]}, ["pixels"])
    np.testing.assert_array_equal(rows["pixels"], [[[1, 2]], [[3, 4]]])
    columns = client.parse_rest_response({"outputs": [[1, 2]]}, ["tokens"], {"tokens": "int32"})
    assert columns["tokens"].dtype == np.int32 and set(columns) == {"tokens"}
    assert set(client.parse_rest_response({"outputs": [1]})) == {"output"}


def test_parse_rest_response_decodes_b64_and_keeps_bytes_that_are_not_utf8():
    image = b"\x89PNG\r\n\x1a\n\x00"
    encoded = base64.b64encode(image).decode()
    # A single `_bytes` output per row is a b64 object, not a named row.
    rows = client.parse_rest_response({"predictions": [{"b64": encoded}]}, ["image_bytes"])
    assert rows["image_bytes"].tolist() == [image]
    named = client.parse_rest_response(
        {"outputs": {"image_bytes": [[{"b64": encoded}]], "n": [1]}}
    )
    assert named["image_bytes"].shape == (1, 1) and named["image_bytes"][0, 0] == image
    # The server writes other string outputs unescaped, valid UTF-8 or not.
    raw = client.read_json(b'{"outputs": ["\xff\xfe", "ok"], "x": NaN}')
    assert client.parse_rest_response(raw)["output"].tolist() == [b"\xff\xfe", b"ok"]


def test_parse_rest_response_raises_the_servers_error():
    with pytest.raises(client.ServerError, match="top_p must be in"):
        client.parse_rest_response({"error": "top_p must be in (0, 1]"})
    with pytest.raises(ValueError, match='"predictions" or "outputs"'):
        client.parse_rest_response({"result": []})


def test_image_grid_tiles_images_in_rows():
    pixels = np.arange(3 * 2 * 2 * 1, dtype=np.uint8).reshape(3, 2, 2, 1)
    grid = client.image_grid(pixels, columns=2, border=1)
    assert grid.shape == (2 * 3 + 1, 2 * 3 + 1, 1)
    np.testing.assert_array_equal(grid[1:3, 1:3], pixels[0])
    np.testing.assert_array_equal(grid[1:3, 4:6], pixels[1])
    np.testing.assert_array_equal(grid[4:6, 1:3], pixels[2])
    assert (grid[4:6, 4:6] == 255).all()  # no fourth image


# --------------------------------------------------------------------------
# Command line against fake servers


class FakeRest:
    """An HTTP server answering every POST with `(status, JSON)` from `answer(path, body)`."""

    def __init__(self, answer):
        self.requests = []
        fake = self

        class Handler(JsonHandler):
            def do_POST(self):
                body = self.read_json()
                fake.requests.append((self.path, body))
                self.send_json(*answer(self.path, body))

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_rest():
    servers = []

    def start(answer):
        servers.append(FakeRest(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def run_cli(capsys, *argv):
    status = client.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_help_lists_every_command():
    result = subprocess.run(
        [sys.executable, str(SERVING_DIR / "client.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    for command in ("music", "translate", "sample", "complete", "super_resolve", "docker compose"):
        assert command in result.stdout


@pytest.mark.parametrize("command", ["music", "translate", "sample", "complete", "super_resolve"])
def test_each_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        client.main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--host", "--rest_port", "--grpc_port", "--protocol", "--model_name", "--timeout"):
        assert flag in out


def test_unreachable_rest_server_is_one_line_naming_the_address():
    port = free_port()
    result = subprocess.run(
        [sys.executable, str(SERVING_DIR / "client.py"), "translate", "Hallo"]
        + ["--rest_port", str(port)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"localhost:{port}" in lines[0] and "docker compose up" in lines[0]


@TF_ONLY
def test_unreachable_grpc_server_is_one_line_naming_the_address(capsys):
    port = free_port()
    flags = ("--protocol", "grpc", "--grpc_port", str(port), "--timeout", "20")
    status, out, err = run_cli(capsys, "translate", "Hallo", *flags)
    assert status == 1 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert f"localhost:{port} (gRPC)" in err and "docker compose up" in err


def test_translate_over_rest_sends_the_row_form_and_prints_each_translation(fake_rest, capsys):
    answer = {
        "predictions": [
            {"translation": "I am hungry.", "tokens": [5, 6, 0], "score": -1.25},
            {"translation": "Good morning.", "tokens": [7, 0, 0], "score": -0.5},
        ]
    }
    server = fake_rest(lambda path, body: (200, answer))
    status, out, _ = run_cli(
        capsys, "translate", "Ich habe Hunger.", "Guten Morgen.", "--rest_port", str(server.port)
    )
    assert status == 0
    assert out.splitlines() == ["I am hungry.\t(score -1.2500)", "Good morning.\t(score -0.5000)"]
    assert server.requests == [
        (
            "/v1/models/translation:predict",
            {
                "signature_name": "translate",
                "instances": [{"text": "Ich habe Hunger."}, {"text": "Guten Morgen."}],
            },
        )
    ]


def test_translate_sends_the_direction_of_each_row_when_given(fake_rest, capsys):
    answer = {"predictions": [{"translation": "A.", "tokens": [5], "score": -1.0, "status": ""}] * 2}
    server = fake_rest(lambda path, body: (200, answer))
    status, _, err = run_cli(capsys, "translate", "Le chat.", "Le chien.", "--direction", "reverse",
                             "--rest_port", str(server.port))
    assert status == 0, err
    rows = [{"text": "Le chat.", "direction": "reverse"}, {"text": "Le chien.", "direction": "reverse"}]
    assert server.requests[0][1] == {"signature_name": "translate", "instances": rows}


def test_server_error_is_printed_with_a_non_zero_exit(fake_rest, capsys):
    message = "top_p must be in (0, 1]; received 2"
    server = fake_rest(lambda path, body: (400, {"error": message}))
    status, out, err = run_cli(
        capsys, "translate", "x", "--rest_port", str(server.port), "--model_version", "2"
    )
    assert status == 1 and out == ""
    assert message in err and "HTTP 400" in err
    assert server.requests[0][0] == "/v1/models/translation/versions/2:predict"


def test_a_refused_row_is_an_error_naming_the_row_and_its_problem(fake_rest, capsys):
    answer = {
        "predictions": [
            {"translation": "I am hungry.", "tokens": [5, 6, 0], "score": -1.25, "status": ""},
            {"translation": "", "tokens": [0, 0, 0], "score": 0.0, "status": "`text` must not be empty"},
        ]
    }
    server = fake_rest(lambda path, body: (200, answer))
    status, out, err = run_cli(capsys, "translate", "Ich habe Hunger.", " ", "--rest_port", str(server.port))
    assert status == 1 and out == ""
    assert "row 1: `text` must not be empty" in err and "row 0" not in err
    with pytest.raises(client.RowError) as error:
        client.predict("translation", "translate", {"text": np.array(["a", " "])}, rest_port=server.port)
    assert error.value.problems == {1: "`text` must not be empty"}
    assert error.value.outputs["translation"].tolist() == [b"I am hungry.", b""]


def test_rows_with_an_empty_status_are_answered():
    outputs = {"status": np.array([b"", b""], object), "tokens": np.zeros([2, 3], "int32")}
    client.check_row_status(outputs)  # raises nothing
    client.check_row_status({"pixels": np.zeros([1, 2, 2, 3], "uint8")})  # no status output


def test_sample_writes_the_returned_pixels_as_a_grid(fake_rest, capsys, tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (3, 4, 5, 3)).astype(np.uint8)
    server = fake_rest(lambda path, body: (200, {"outputs": {"pixels": pixels.tolist(), "status": [""] * 3}}))
    out_path = tmp_path / "grid.png"
    status, _, err = run_cli(
        capsys,
        "sample", "--out", str(out_path), "--batch", "3", "--seed", "10", "--temperature", "0.5",
        "--class_label", "2", "--scale", "1", "--rest_form", "inputs",
        "--rest_port", str(server.port),
    )
    assert status == 0, err
    assert server.requests == [
        (
            "/v1/models/image_generation:predict",
            {
                "signature_name": "sample",
                "inputs": {"seed": [10, 11, 12], "temperature": [0.5] * 3, "class_label": [2] * 3},
            },
        )
    ]
    written = np.asarray(Image.open(out_path))
    np.testing.assert_array_equal(written, client.image_grid(pixels))


def test_super_resolve_sends_the_image_and_writes_the_answer(fake_rest, capsys, tmp_path):
    from PIL import Image

    low = np.random.default_rng(1).integers(0, 256, (4, 6, 3)).astype(np.uint8)
    high = low.repeat(2, axis=0).repeat(2, axis=1)
    Image.fromarray(low).save(tmp_path / "in.png")
    server = fake_rest(lambda path, body: (200, {"predictions": [{"pixels": high.tolist(), "status": ""}]}))
    status, _, err = run_cli(
        capsys, "super_resolve", str(tmp_path / "in.png"), str(tmp_path / "out.png"),
        "--rest_port", str(server.port), "--seed", "3",
    )
    assert status == 0, err
    ((path, body),) = server.requests
    assert path == "/v1/models/super_resolution:predict"
    assert body == {
        "signature_name": "super_resolve",
        "instances": [{"low_resolution": low.tolist(), "seed": 3, "temperature": 1.0, "decoding": "sample"}],
    }
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "out.png")), high)
    status, _, err = run_cli(
        capsys, "super_resolve", str(tmp_path / "in.png"), str(tmp_path / "out.png"),
        "--rest_port", str(server.port), "--decoding", "posterior_mean",
    )
    assert status == 0, err
    assert server.requests[-1][1]["instances"][0]["decoding"] == "posterior_mean"


def test_complete_sends_the_image_per_row_and_writes_input_and_completions(
    fake_rest, capsys, tmp_path
):
    from PIL import Image

    image = np.random.default_rng(2).integers(0, 256, (4, 3)).astype(np.uint8)
    Image.fromarray(image).save(tmp_path / "in.png")  # greyscale: one channel
    completions = np.stack([image[..., None] // 2, image[..., None] // 3])
    answer = {"outputs": {"pixels": completions.tolist(), "status": [""] * len(completions)}}
    server = fake_rest(lambda path, body: (200, answer))
    status, _, err = run_cli(
        capsys, "complete", str(tmp_path / "in.png"), "--known_rows", "2", "--batch", "2",
        "--class_label", "5", "--scale", "1", "--out", str(tmp_path / "out.png"),
        "--rest_port", str(server.port), "--rest_form", "inputs",
    )
    assert status == 0, err
    ((path, body),) = server.requests
    assert path == "/v1/models/image_generation:predict"
    assert body == {
        "signature_name": "complete",
        "inputs": {
            "pixels": [image[..., None].tolist()] * 2,
            "known_rows": [2, 2],
            "seed": [0, 1],
            "temperature": [1.0, 1.0],
            "class_label": [5, 5],
        },
    }
    expected = client.image_grid(np.concatenate([image[None, ..., None], completions]))
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "out.png")), expected[..., 0])


def test_complete_rejects_known_rows_past_the_image(capsys, tmp_path):
    from PIL import Image

    Image.fromarray(np.zeros((4, 4), np.uint8)).save(tmp_path / "in.png")
    status, _, err = run_cli(
        capsys, "complete", str(tmp_path / "in.png"), "--known_rows", "5", "--out", "x.png"
    )
    assert status == 1 and "--known_rows must be in [0, 4]" in err


@TF_ONLY
def test_translate_over_grpc_sends_a_predict_request(capsys):
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    received = []

    class Servicer(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):
            received.append(request)
            texts = tf.make_ndarray(request.inputs["text"])
            if texts[0] == b"":
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "text must not be empty")
            response = predict_pb2.PredictResponse()
            outputs = {
                "translation": np.array([t.upper() for t in texts]),
                "tokens": np.ones([len(texts), 2], np.int32),
                "score": np.full([len(texts)], -2.0, np.float32),
            }
            for name, value in outputs.items():
                response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
            return response

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        common = ("--protocol", "grpc", "--host", "127.0.0.1", "--grpc_port", str(port))
        status, out, err = run_cli(capsys, "translate", "Grüße", *common)
        assert status == 0, err
        assert out == "GRüßE\t(score -2.0000)\n"  # bytes.upper() leaves non-ASCII
        assert received[0].model_spec.name == "translation"
        assert received[0].model_spec.signature_name == "translate"
        assert tf.make_ndarray(received[0].inputs["text"]).tolist() == ["Grüße".encode()]
        status, out, err = run_cli(capsys, "translate", "", *common)
        assert status == 1 and out == ""
        assert "INVALID_ARGUMENT: text must not be empty" in err
    finally:
        server.stop(None)


def test_music_sends_the_primer_events_and_writes_primer_and_continuation(
    fake_rest, capsys, tmp_path
):
    import note_seq

    from keras_selfattn.data import music

    sequence = note_seq.NoteSequence(ticks_per_quarter=220)
    for index, pitch in enumerate([60, 64, 67, 72]):
        sequence.notes.add(
            pitch=pitch, velocity=80, start_time=0.5 * index, end_time=0.5 * index + 0.4
        )
    sequence.total_time = 2.0
    note_seq.sequence_proto_to_midi_file(sequence, str(tmp_path / "in.mid"))
    primer = np.asarray(music.midi_to_events(str(tmp_path / "in.mid")), np.int32)
    continuation = primer[:3]  # any valid events
    tokens = np.concatenate([primer, continuation, np.zeros(2, np.int32)])  # zeros past the count

    server = fake_rest(lambda path, body: (200, {"predictions": [{"tokens": tokens.tolist(), "status": ""}]}))
    status, out, err = run_cli(
        capsys, "music", "--primer", str(tmp_path / "in.mid"), "--out", str(tmp_path / "out.mid"),
        "--max_new_tokens", "5", "--temperature", "0.9", "--top_k", "8", "--top_p", "0.95",
        "--seed", "4", "--rest_port", str(server.port),
    )
    assert status == 0, err
    ((path, body),) = server.requests
    assert path == "/v1/models/music:predict"
    assert body == {
        "signature_name": "generate",
        "instances": [
            {
                "primer": primer.tolist(),
                "primer_length": primer.size,
                "max_new_tokens": 5,
                "temperature": float(np.float32(0.9)),
                "top_k": 8,
                "top_p": float(np.float32(0.95)),
                "seed": 4,
            }
        ],
    }
    music.events_to_midi(np.concatenate([primer, continuation]), str(tmp_path / "expected.mid"))
    np.testing.assert_array_equal(
        music.midi_to_events(str(tmp_path / "out.mid")),
        music.midi_to_events(str(tmp_path / "expected.mid")),
    )
    assert f"{primer.size} primer events + 3 generated events" in out
    assert (tmp_path / "out.wav").stat().st_size > 44  # more than the WAV header
    assert str(tmp_path / "out.wav") in out

    short = fake_rest(lambda path, body: (200, {"predictions": [{"tokens": tokens.tolist(), "status": ""}]}))
    status, out, err = run_cli(
        capsys, "music", "--primer", str(tmp_path / "in.mid"), "--out", str(tmp_path / "2.mid"),
        "--primer_tokens", "2", "--rest_port", str(short.port),
    )
    assert status == 0, err
    assert short.requests[0][1]["instances"][0]["primer"] == primer[:2].tolist()
