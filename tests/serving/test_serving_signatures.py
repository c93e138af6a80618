"""The exported models through TensorFlow's C API loader (the server's
loader, XLA off, tf-text op libraries loaded): every signature answers as
TensorFlow's Python loader does (whose answers tests/export checks against
the Keras model and in-process generation, row by row), as a PredictRequest,
as REST rows and columns, under concurrent load, and a bad request fails by
name without harming the next."""

import numpy as np
import pytest

pytestmark = [
    pytest.mark.backends("tensorflow", reason="SavedModels and TensorFlow's C API"),
    pytest.mark.slow,
]

import tensorflow as tf  # noqa: E402

from tests.generation.generation_models import IMAGE_SHAPE, LOW_SHAPE  # noqa: E402
from tests.serving.emulator.c_api_loader import CApiSavedModel, ServingError  # noqa: E402
import client  # noqa: E402

GENERATE = dict(
    primer=np.array([[3, 4, 5], [6, 7, 8]], "int32"),
    max_new_tokens=np.array([5, 3], "int32"),
    temperature=np.array([0.0, 0.9], "float32"),
    top_k=np.array([0, 5], "int32"),
    top_p=np.array([1.0, 0.9], "float32"),
    seed=np.array([1, 2], "int32"),
)
TEXTS = ["ich habe hunger", "das ist gut"]


@pytest.fixture(scope="module")
def music(serving_exports):
    model, path = serving_exports["music"]
    with CApiSavedModel(path) as loaded:
        yield model, loaded


@pytest.fixture(scope="module")
def translation(serving_exports):
    model, path, tokenizer = serving_exports["translation"]
    with CApiSavedModel(path) as loaded:
        yield model, loaded, tokenizer


@pytest.fixture(scope="module")
def images(serving_exports):
    model, path = serving_exports["images"]
    with CApiSavedModel(path) as loaded:
        yield model, loaded


def _rows(*values, dtype):
    return np.array(values, dtype)


SIGNATURE_INPUTS = {
    ("music", "serving_default"): dict(tokens=np.array([[3, 4, 5], [6, 7, 8]], "int32")),
    ("music", "generate"): GENERATE,
    ("translation", "serving_default"): dict(
        source_tokens=np.array([[5, 6, 1], [7, 1, 0]], "int32"), target_tokens=np.array([[0, 4], [0, 9]], "int32")
    ),
    ("translation", "translate"): dict(text=np.array(TEXTS, object)),
    ("images", "serving_default"): dict(
        pixels=np.arange(2 * 48, dtype="int32").reshape((2,) + IMAGE_SHAPE), class_label=_rows(0, 2, dtype="int32")
    ),
    ("images", "sample"): dict(seed=_rows(1, 2, dtype="int32"), temperature=_rows(1.0, 0.0, dtype="float32"),
                               class_label=_rows(0, 2, dtype="int32")),
    ("images", "complete"): dict(pixels=np.full((2,) + IMAGE_SHAPE, 7, "uint8"), known_rows=_rows(1, 4, dtype="int32"),
                                 seed=_rows(1, 2, dtype="int32"), temperature=_rows(1.0, 1.0, dtype="float32"),
                                 class_label=_rows(0, 1, dtype="int32")),
    ("super_resolution", "serving_default"): dict(
        low_resolution=np.full((2,) + LOW_SHAPE, 9, "int32"), pixels=np.full((2,) + IMAGE_SHAPE, 3, "int32")
    ),
    ("super_resolution", "super_resolve"): dict(
        low_resolution=np.arange(24, dtype="uint8").reshape((2,) + LOW_SHAPE), seed=_rows(1, 2, dtype="int32"),
        temperature=_rows(0.0, 1.0, dtype="float32"),
    ),
}


@pytest.mark.parametrize("family", ["music", "translation", "images", "super_resolution"])
def test_every_signature_answers_alike_through_every_path(serving_exports, family):
    """C API run == TensorFlow's Python loader (which tests/export checks
    against the Keras model) == PredictRequest == REST rows == REST columns."""
    path = serving_exports[family][1]
    python_loaded = tf.saved_model.load(path)
    with CApiSavedModel(path) as loaded:
        assert sorted(loaded.signatures) == sorted(python_loaded.signatures)
        for signature in loaded.signatures:
            inputs = SIGNATURE_INPUTS[(family, signature)]
            outputs = loaded.run(signature, inputs)
            expected = python_loaded.signatures[signature](**{k: tf.constant(v) for k, v in inputs.items()})
            assert sorted(outputs) == sorted(expected)
            for key, value in expected.items():
                _assert_same(outputs[key], value.numpy(), f"{family}/{signature}/{key}")
            predicted = client.parse_predict_response(
                loaded.predict(client.predict_request(family, signature, inputs))
            )
            names = sorted(outputs)
            for form in ("instances", "inputs"):
                answer = loaded.rest(client.rest_body(signature, inputs, form=form))
                assert "error" not in answer, (signature, form, answer)
                parsed = client.parse_rest_response(answer, names)
                for key in names:
                    _assert_same(predicted[key], outputs[key], f"{family}/{signature}/{key} predict")
                    _assert_same(np.asarray(parsed[key]).astype(outputs[key].dtype), outputs[key],
                                 f"{family}/{signature}/{key} REST {form}")


def _assert_same(actual, expected, what):
    if expected.dtype.kind in "fc":
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5, err_msg=what)
    else:
        assert actual.shape == expected.shape and (actual == expected).all(), what


def _bad_requests():
    good = dict(GENERATE)
    yield "music", "generate", dict(good, top_k=good["top_k"].astype("int64")), "INVALID_ARGUMENT", "top_k"
    yield "music", "generate", {k: v for k, v in good.items() if k != "seed"}, "INVALID_ARGUMENT", "seed"
    yield "music", "generate", dict(good, extra=np.array([1, 2], "int32")), "INVALID_ARGUMENT", "extra"
    yield "music", "generate", dict(good, top_p=np.array([1.0, 2.0], "float32")), "INVALID_ARGUMENT", "`top_p` must be in"
    yield "music", "generate", dict(good, max_new_tokens=np.array([5, 20], "int32")), "INVALID_ARGUMENT", "`max_new_tokens` must be"
    yield "translation", "translate", {"text": np.array([""], object)}, "INVALID_ARGUMENT", "`text` must not be empty"
    yield "translation", "translate", {"text": np.array([b"\xc3\x28"], object)}, "INVALID_ARGUMENT", "`text` must be valid UTF-8"
    known = np.zeros((1,) + IMAGE_SHAPE, "uint8")
    yield "images", "complete", dict(pixels=known, known_rows=np.array([5], "int32"), seed=np.array([1], "int32"),
                                     temperature=np.array([1.0], "float32"), class_label=np.array([0], "int32")), \
        "INVALID_ARGUMENT", "`known_rows` must be in"


@pytest.mark.parametrize("family, signature, inputs, code, message", list(_bad_requests()))
def test_a_bad_request_fails_by_name_and_the_next_good_one_succeeds(
    request, family, signature, inputs, code, message
):
    loaded = request.getfixturevalue(family)[1]
    with pytest.raises(ServingError) as error:
        loaded.run(signature, inputs)
    assert error.value.code == code and message in error.value.message, error.value
    good = {"music": ("generate", GENERATE), "translation": ("translate", {"text": np.array(TEXTS, object)}),
            "images": ("sample", dict(seed=np.array([1], "int32"), temperature=np.array([1.0], "float32"),
                                      class_label=np.array([0], "int32")))}[family]
    assert loaded.run(*good)


def test_eight_concurrent_clients_get_every_generation(music):
    _, loaded = music
    report = loaded.load_test("generate", GENERATE, clients=8, requests_per_client=50)
    assert report["failures"] == 0, report["first_error"]
    assert len(report["latencies_ms"]) == 400
    print(f"generate under load: p50 {report['p50_ms']:.1f} ms, p99 {report['p99_ms']:.1f} ms")
