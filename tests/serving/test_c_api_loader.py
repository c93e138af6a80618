"""The C API loader against TensorFlow's own Python loader, on small SavedModels.

Every expected output comes from `tf.saved_model.load(path).signatures[name]`, an
independent path from the C program under test.
"""

import base64
import io
import json
import os
import signal

import numpy as np
import pytest

import sentencepiece as spm  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text as tf_text  # noqa: E402
from tensorflow_serving.apis import predict_pb2  # noqa: E402

from serving.emulator.c_api_loader import (  # noqa: E402
    CApiSavedModel,
    ServingError,
    build_loader,
    op_libraries,
    session_config,
)
from serving.emulator.loader_build import child_env  # noqa: E402

pytestmark = pytest.mark.backends("tensorflow", reason="SavedModel and the C API")

TEXT_OPS = ["SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp"]


class Numeric(tf.Module):
    @tf.function(
        input_signature=[tf.TensorSpec([None, 3], tf.int32), tf.TensorSpec([None], tf.float32)]
    )
    def forward(self, x, y):
        return {"sum": tf.cast(tf.reduce_sum(x, 1), tf.float32) * y, "doubled": x * 2}

    @tf.function(input_signature=[tf.TensorSpec([None, 2, 2, 1], tf.uint8)])
    def images(self, pixels):
        bright = tf.reduce_mean(tf.cast(pixels, tf.float32), [1, 2, 3]) > 127.0
        return {"inverted": 255 - pixels, "bright": bright}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.bool)])
    def counts(self, n, flag):
        return {"total": tf.where(flag, n * 3, -n)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
    def checked(self, x):
        tf.debugging.assert_less(x, 10, message="x must be below 10")
        return {"y": x + 1}


class Strings(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def forward(self, text):
        return {
            "upper": tf.strings.upper(text), "length": tf.strings.length(text), "echo_bytes": text,
        }


class Tokenize(tf.Module):
    def __init__(self, model):
        super().__init__()
        self.tokenizer = tf_text.SentencepieceTokenizer(model=model)  # tracked by the module

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def forward(self, text):
        ids = self.tokenizer.tokenize(text)
        return {"tokens": ids.to_tensor(), "detokenized": self.tokenizer.detokenize(ids)}


def _sentencepiece_model():
    sentences = ["the cat sat on the mat", "a dog ran in the park", "the bird sang a song"]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences * 4), model_writer=model, vocab_size=32,
        hard_vocab_limit=False, minloglevel=2,
    )
    return model.getvalue()


def _save(module, path, signatures):
    tf.saved_model.save(module, str(path), signatures=signatures)
    return str(path)


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    base = tmp_path_factory.mktemp("models")
    numeric, strings, text = Numeric(), Strings(), Tokenize(_sentencepiece_model())
    return {
        "numeric": _save(numeric, base / "numeric" / "1", {
            "serving_default": numeric.forward, "images": numeric.images,
            "counts": numeric.counts, "checked": numeric.checked,
        }),
        "strings": _save(strings, base / "strings" / "1", {"serving_default": strings.forward}),
        "text": _save(text, base / "text" / "1", {"serving_default": text.forward}),
    }


@pytest.fixture(scope="module")
def numeric(paths):
    with CApiSavedModel(paths["numeric"]) as model:
        yield model


@pytest.fixture(scope="module")
def strings(paths):
    with CApiSavedModel(paths["strings"]) as model:
        yield model


def reference(path, signature, inputs):
    """The outputs of TensorFlow's Python SavedModel loader."""
    function = tf.saved_model.load(path).signatures[signature]
    return {key: value.numpy() for key, value in function(**inputs).items()}


def as_tensors(inputs):
    return {key: tf.constant(value) for key, value in inputs.items()}


def assert_outputs_equal(actual, expected):
    assert sorted(actual) == sorted(expected)
    for key in expected:
        assert actual[key].dtype == expected[key].dtype, key
        np.testing.assert_array_equal(actual[key], expected[key], err_msg=key)


NUMERIC_INPUTS = {
    "serving_default": {
        "x": np.array([[1, 2, 3], [-4, 5, 60]], np.int32), "y": np.array([0.5, -1.25], np.float32),
    },
    "images": {"pixels": np.array([[[[0], [255]], [[7], [9]]], [[[200]] * 2] * 2], np.uint8)},
    "counts": {"n": np.array([5, 2**40, -3], np.int64), "flag": np.array([True, False, True])},
    "checked": {"x": np.array([1, 9], np.int32)},
}


def test_signatures_come_from_the_signature_defs(numeric):
    assert sorted(numeric.signatures) == ["checked", "counts", "images", "serving_default"]
    assert numeric.signatures["serving_default"] == {
        "inputs": {"x": ("int32", (None, 3)), "y": ("float32", (None,))},
        "outputs": {"sum": ("float32", (None,)), "doubled": ("int32", (None, 3))},
    }
    assert numeric.signatures["images"]["outputs"]["bright"] == ("bool", (None,))


@pytest.mark.parametrize("signature", sorted(NUMERIC_INPUTS))
def test_run_equals_the_python_loader(numeric, paths, signature):
    inputs = NUMERIC_INPUTS[signature]
    expected = reference(paths["numeric"], signature, as_tensors(inputs))
    assert_outputs_equal(numeric.run(signature, inputs), expected)


def test_strings_keep_their_bytes(strings, paths):
    text = np.array(["héllo wörld", "", b"\xff\xfe raw", "x" * 100], dtype=object)
    expected = reference(paths["strings"], "serving_default", {"text": tf.constant(text.tolist())})
    actual = strings.run("serving_default", {"text": text})
    assert_outputs_equal(actual, expected)
    assert actual["echo_bytes"][2] == b"\xff\xfe raw"


def test_tensorflow_text_ops_load_and_run(paths):
    with CApiSavedModel(paths["text"]) as model:
        assert op_libraries() and all(error is None for error in model.op_library_status.values())
        registered = model.has_ops(TEXT_OPS + ["NoSuchOp"])
        assert registered == {**dict.fromkeys(TEXT_OPS, True), "NoSuchOp": False}
        text = ["the cat sat", "a bird in the park", ""]
        expected = reference(paths["text"], "serving_default", {"text": tf.constant(text)})
        actual = model.run("serving_default", {"text": text})
    assert_outputs_equal(actual, expected)
    assert actual["tokens"].shape[0] == 3 and actual["tokens"][0].any()


def test_without_the_text_op_libraries_the_model_does_not_load(paths):
    with pytest.raises(ServingError, match="SentencepieceOp") as error:
        CApiSavedModel(paths["text"], op_library_paths=[])
    assert error.value.code == "NOT_FOUND"


def test_failed_run_reports_the_tf_error_and_the_process_serves_on(numeric):
    pid = numeric.pid
    with pytest.raises(ServingError, match="x must be below 10") as error:
        numeric.run("checked", {"x": np.array([1, 20], np.int32)})
    assert error.value.code == "INVALID_ARGUMENT"
    assert numeric.alive and numeric.pid == pid
    np.testing.assert_array_equal(numeric.run("checked", {"x": [3]})["y"], [4])


ONE, ONE_ROW = np.ones([1], np.int32), np.ones([1, 3], np.int32)


@pytest.mark.parametrize(
    "signature, inputs, code, words",
    [
        ("serving_default", {"x": ONE_ROW}, "INVALID_ARGUMENT", "Missing but required: {y}"),
        ("checked", {"x": ONE, "z": ONE}, "INVALID_ARGUMENT", "Sent extra: {z}"),
        ("checked", {"z": ONE}, "INVALID_ARGUMENT", "alias not found in signature: z"),
        ("checked", {"x": ONE.astype(np.int64)}, "INVALID_ARGUMENT", "expects int32, but int64"),
        ("checked", {"x": np.array(["1"])}, "INVALID_ARGUMENT", "expects int32"),
        ("nope", {"x": ONE}, "FAILED_PRECONDITION", 'signature key "nope" not found'),
    ],
)
def test_bad_requests_are_refused_before_running(numeric, signature, inputs, code, words):
    with pytest.raises(ServingError) as error:
        numeric.run(signature, inputs)
    assert error.value.code == code and words in error.value.message
    assert numeric.run("checked", {"x": [0]})["y"].tolist() == [1]


def test_a_dead_process_answers_unavailable(paths):
    model = CApiSavedModel(paths["numeric"])
    os.kill(model.pid, signal.SIGKILL)
    model._process.wait()
    with pytest.raises(ServingError) as error:
        model.run("checked", {"x": [1]})
    assert error.value.code == "UNAVAILABLE" and "-9" in error.value.message
    model.close()


def test_close_ends_the_process(paths):
    with CApiSavedModel(paths["strings"]) as model:
        assert model.alive
    assert not model.alive and model._process.returncode == 0


def _predict_request(signature, inputs, **spec):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "numeric"
    if signature is not None:
        request.model_spec.signature_name = signature
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    return request


@pytest.mark.parametrize("signature", ["images", "counts", None])
def test_predict_request_round_trip(numeric, paths, signature):
    name = signature or "serving_default"
    inputs = NUMERIC_INPUTS[name]
    response = numeric.predict(_predict_request(signature, inputs))
    expected = reference(paths["numeric"], name, as_tensors(inputs))
    assert_outputs_equal({k: tf.make_ndarray(v) for k, v in response.outputs.items()}, expected)
    assert response.model_spec.name == "numeric"
    assert response.model_spec.signature_name == name
    assert response.model_spec.version.value == 1


def test_predict_reads_typed_values_and_filters_outputs(numeric):
    request = _predict_request("serving_default", {})
    # Typed values, the last one repeated to fill the shape, as TensorFlow parses them.
    request.inputs["x"].CopyFrom(tf.make_tensor_proto([7, 8], dtype=tf.int32, shape=[2, 3]))
    request.inputs["y"].CopyFrom(tf.make_tensor_proto(2.0, dtype=tf.float32, shape=[2]))
    request.output_filter.append("sum")
    response = numeric.predict(request)
    assert list(response.outputs) == ["sum"]
    x = tf.make_ndarray(request.inputs["x"])
    np.testing.assert_array_equal(tf.make_ndarray(response.outputs["sum"]), x.sum(1) * 2.0)


def test_predict_refuses_a_wrong_dtype_and_an_unknown_output(numeric):
    inputs = dict(NUMERIC_INPUTS["serving_default"], x=np.ones([1, 3], np.int64))
    with pytest.raises(ServingError, match="int64") as error:
        numeric.predict(_predict_request("serving_default", inputs))
    assert error.value.code == "INVALID_ARGUMENT"
    request = _predict_request("checked", {"x": np.ones([1], np.int32)})
    request.output_filter.append("nope")
    with pytest.raises(ServingError, match="output tensor alias not found"):
        numeric.predict(request)


def test_rest_row_form(numeric, paths):
    inputs = NUMERIC_INPUTS["serving_default"]
    rows = zip(inputs["x"].tolist(), inputs["y"].tolist())
    body = {"instances": [{"x": x, "y": y} for x, y in rows]}
    expected = reference(paths["numeric"], "serving_default", as_tensors(inputs))
    columns = zip(expected["sum"].tolist(), expected["doubled"].tolist())
    rows = [{"sum": total, "doubled": doubled} for total, doubled in columns]
    assert numeric.rest(json.dumps(body)) == {"predictions": rows}
    # One input: rows are plain values; one output: predictions are plain values.
    single = {"signature_name": "checked", "instances": [1, 2, 3]}
    assert numeric.rest(single) == {"predictions": [2, 3, 4]}


def test_rest_columnar_form(numeric, paths):
    inputs = NUMERIC_INPUTS["counts"]
    body = {"signature_name": "counts", "inputs": {k: v.tolist() for k, v in inputs.items()}}
    expected = reference(paths["numeric"], "counts", as_tensors(inputs))
    assert numeric.rest(body) == {"outputs": expected["total"].tolist()}
    images = NUMERIC_INPUTS["images"]["pixels"]
    answer = numeric.rest({"signature_name": "images", "inputs": images.tolist()})
    assert answer["outputs"]["inverted"] == (255 - images).tolist()
    assert answer["outputs"]["bright"] == [False, True]


def test_rest_b64_bytes_in_and_out(strings, paths):
    raw = b"\xff\x00 binary"
    body = {"instances": ["abc", {"b64": base64.b64encode(raw).decode()}]}
    answer = strings.rest(body)
    expected = reference(paths["strings"], "serving_default", as_tensors({"text": [b"abc", raw]}))
    assert [row["length"] for row in answer["predictions"]] == expected["length"].tolist()
    assert answer["predictions"][0] == {"upper": "ABC", "length": 3, "echo_bytes": {"b64": "YWJj"}}
    assert base64.b64decode(answer["predictions"][1]["echo_bytes"]["b64"]) == raw
    columnar = strings.rest({"inputs": {"text": [{"b64": base64.b64encode(raw).decode()}]}})
    assert columnar["outputs"]["length"] == [len(raw)]


@pytest.mark.parametrize(
    "body, words",
    [
        ({"instances": [{"x": [1, 2, 3]}]}, "must only have keys: x,y"),
        ({"instances": [{"x": [1, 2, 3], "y": 1.0, "z": 1}]}, "does not have named input: z"),
        ({"instances": [[1, 2, 3]]}, "instances is a plain list"),
        ({"instances": [{"x": [1, 2, 3], "y": 1.0}, {"x": [1], "y": 1.0}]}, "tensor size: 3"),
        ({"inputs": {"x": [[1, 2], [3]], "y": [1.0, 2.0]}}, "list at unexpected size: 1"),
        ({"inputs": {"x": [[1, 2, 3]]}}, "Missing named input: y"),
        ({"inputs": {"x": [[1, 2, 3]], "y": [2**30]}}, "to float without loss of precision"),
        ({"signature_name": "checked", "instances": [1.5]}, "is not of expected type: int32"),
        ({"signature_name": "checked", "inputs": [20]}, "x must be below 10"),
        ({"signature_name": "checked", "inputs": [1], "instances": [1]}, "only one of"),
        ({"signature_name": "checked", "instances": []}, "No values in 'instances'"),
        ({"signature_name": "nope", "inputs": [1]}, 'signature key "nope" not found'),
        ({"signature_name": "checked"}, "Missing 'inputs' or 'instances' key"),
        ("{not json", "JSON Parse error"),
    ],
)
def test_rest_errors_like_the_server(numeric, body, words):
    answer = numeric.rest(body)
    assert list(answer) == ["error"] and words in answer["error"]
    assert numeric.rest({"signature_name": "checked", "inputs": [1]}) == {"outputs": [2]}


def test_rest_writes_floats_as_the_server_does(numeric):
    # Shortest text that reads back to the same float32; keys the signature lacks are not read.
    body = {"inputs": {"x": [[1, 0, 0]], "y": [0.1], "unused": "ignored"}}
    assert numeric.rest(body) == {"outputs": {"sum": [0.1], "doubled": [[2, 0, 0]]}}


def test_load_test_runs_concurrent_sessions(numeric):
    inputs = NUMERIC_INPUTS["serving_default"]
    report = numeric.load_test("serving_default", inputs, clients=8, requests_per_client=20)
    assert report["failures"] == 0 and report["first_error"] is None
    assert len(report["latencies_ms"]) == 160 and all(ms > 0 for ms in report["latencies_ms"])
    assert 0 < report["p50_ms"] <= report["p99_ms"] <= max(report["latencies_ms"])


def test_load_test_counts_failures(numeric):
    inputs = {"x": np.array([20], np.int32)}
    report = numeric.load_test("checked", inputs, clients=2, requests_per_client=3)
    assert report["failures"] == 6
    assert report["first_error"].startswith("INVALID_ARGUMENT: assertion failed")
    assert "below 10" in report["first_error"]
    assert numeric.alive


def test_xla_jit_is_off_in_the_session_config_and_the_environment(monkeypatch):
    from tensorflow.core.protobuf import config_pb2

    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=2")
    assert child_env()["TF_XLA_FLAGS"] == (
        "--tf_xla_auto_jit=0 --tf_xla_cpu_global_jit=false"
    )

    config = config_pb2.ConfigProto.FromString(session_config())
    jit_level = config.graph_options.optimizer_options.global_jit_level
    assert jit_level == config_pb2.OptimizerOptions.OFF


def test_loader_build_is_cached():
    first = build_loader()
    assert first.is_file() and os.access(first, os.X_OK)
    assert build_loader() == first and first.stat().st_mtime == build_loader().stat().st_mtime
