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

from keras_selfattn.generation import continue_sequence, sample_images  # noqa: E402
from serving import client  # noqa: E402
from serving.emulator.c_api_loader import CApiSavedModel, ServingError  # noqa: E402
from tests.generation.generation_models import IMAGE_SHAPE, LOW_SHAPE  # noqa: E402

GENERATE = dict(
    primer=np.array([[3, 4, 5], [6, 7, 8]], "int32"),
    primer_length=np.array([3, 3], "int32"),
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
        temperature=_rows(0.0, 1.0, dtype="float32"), decoding=np.array([b"posterior_mean", b"sample"], object),
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
    actual, expected = np.asarray(actual), np.asarray(expected)
    if expected.dtype.kind in "fc":
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5, err_msg=what)
    else:
        assert actual.shape == expected.shape and (actual == expected).all(), what


def _bad_requests():
    """Requests the server refuses before running: wrong dtype, missing or extra input."""
    good = dict(GENERATE)
    yield "music", "generate", dict(good, top_k=good["top_k"].astype("int64")), "INVALID_ARGUMENT", "top_k"
    yield "music", "generate", {k: v for k, v in good.items() if k != "seed"}, "INVALID_ARGUMENT", "seed"
    yield "music", "generate", dict(good, extra=np.array([1, 2], "int32")), "INVALID_ARGUMENT", "extra"
    yield "music", "generate", dict(good, seed=np.array([1], "int32")), "INVALID_ARGUMENT", "`seed` must have one row"
    yield "translation", "translate", {"text": np.array([1], "int32")}, "INVALID_ARGUMENT", "text"


@pytest.mark.parametrize("family, signature, inputs, code, message", list(_bad_requests()))
def test_a_bad_request_fails_by_name_and_the_next_good_one_succeeds(
    request, family, signature, inputs, code, message
):
    loaded = request.getfixturevalue(family)[1]
    with pytest.raises(ServingError) as error:
        loaded.run(signature, inputs)
    assert error.value.code == code and message in error.value.message, error.value
    good = {"music": ("generate", GENERATE), "translation": ("translate", {"text": np.array(TEXTS, object)})}[family]
    assert loaded.run(*good)


def _one_row(value, dtype):
    return np.array([value], dtype)


COMPLETE = dict(pixels=np.arange(2 * 48, dtype="uint8").reshape((2,) + IMAGE_SHAPE),
                known_rows=_rows(1, 3, dtype="int32"),
                seed=_rows(1, 2, dtype="int32"), temperature=_rows(1.0, 0.7, dtype="float32"),
                class_label=_rows(0, 2, dtype="int32"))

# (family, signature, two good rows, one bad row, the bad row's status)
MERGED_WITH_A_BAD_ROW = [
    ("music", "generate", GENERATE, dict(GENERATE, top_p=_one_row(2.0, "float32")), "`top_p` must be in (0, 1]"),
    ("music", "generate", GENERATE, dict(GENERATE, max_new_tokens=_one_row(20, "int32")), "`max_new_tokens` must be"),
    ("music", "generate", GENERATE, dict(GENERATE, primer=np.array([[3, 99, 5]], "int32")), "`primer` must be token"),
    ("music", "generate", GENERATE, dict(GENERATE, primer_length=_one_row(0, "int32")), "`primer_length` must be"),
    ("translation", "translate", {"text": np.array(TEXTS, object)}, {"text": np.array([""], object)},
     "`text` must not be empty"),
    ("translation", "translate", {"text": np.array(TEXTS, object)}, {"text": np.array([b"\xc3\x28"], object)},
     "`text` must be valid UTF-8"),
    ("images", "complete", COMPLETE, dict(COMPLETE, known_rows=_one_row(5, "int32")), "`known_rows` must be in"),
    ("images", "complete", COMPLETE, dict(COMPLETE, class_label=_one_row(7, "int32")), "`class_label` must be"),
    ("images", "complete", COMPLETE, dict(COMPLETE, temperature=_one_row(np.nan, "float32")), "`temperature` must"),
]


def _merged(good, bad):
    """Good row 0, the bad row, good row 1: one batch, as the server merges three requests."""
    return {key: np.concatenate([good[key][:1], bad[key][:1], good[key][1:2]]) for key in good}


def _padded(row, width):
    """A row of a solo answer, widened with zeros to a merged answer's width."""
    return np.pad(row, [(0, width - row.shape[0])] + [(0, 0)] * (row.ndim - 1)) if row.ndim else row


@pytest.mark.parametrize("family, signature, good, bad, message", MERGED_WITH_A_BAD_ROW)
def test_a_bad_row_merged_with_good_ones_leaves_them_their_solo_answers(
    request, family, signature, good, bad, message
):
    loaded = request.getfixturevalue(family)[1]
    outputs = loaded.run(signature, _merged(good, bad))
    assert outputs["status"][[0, 2]].tolist() == [b"", b""]
    assert outputs["status"][1].decode().startswith(message), outputs["status"][1]
    for key, value in outputs.items():
        if key != "status":
            assert not np.asarray(value[1], bool).any(), f"the bad row's {key} is not empty"
    for row, merged_row in ((0, 0), (1, 2)):
        solo = loaded.run(signature, {key: value[row : row + 1] for key, value in good.items()})
        assert solo["status"].tolist() == [b""]
        for key in solo:
            width = outputs[key].shape[1] if outputs[key].ndim > 1 else None
            expected = solo[key][0] if width is None else _padded(solo[key][0], width)
            # Tokens, pixels and text exactly; a score to float32 rounding (a
            # source padded to another row's length sums in another order).
            _assert_same(outputs[key][merged_row], expected, f"{signature} {key} row {row}")


GENERATE_MIXED = dict(
    primer=np.array([[3, 4, 5], [6, 7, 8], [9, 1, 2], [4, 4, 4]], "int32"),
    primer_length=np.array([3, 3, 3, 3], "int32"),
    max_new_tokens=np.array([5, 3, 9, 1], "int32"),
    temperature=np.array([0.0, 0.9, 1.3, 0.6], "float32"),
    top_k=np.array([0, 5, 0, 3], "int32"),
    top_p=np.array([1.0, 0.9, 0.7, 1.0], "float32"),
    seed=np.array([1, 2, 3, 4], "int32"),
)


def test_rows_of_different_settings_merged_equal_in_process_generation(music):
    model, loaded = music
    inputs = GENERATE_MIXED
    tokens = loaded.run("generate", inputs)["tokens"]
    for row in range(len(tokens)):
        primer, count = inputs["primer"][row : row + 1], int(inputs["max_new_tokens"][row])
        expected = np.asarray(continue_sequence(
            model, primer, count, temperature=float(inputs["temperature"][row]), top_k=int(inputs["top_k"][row]),
            top_p=float(inputs["top_p"][row]), seed=int(inputs["seed"][row]),
        ))[0]
        np.testing.assert_array_equal(tokens[row], _padded(expected, tokens.shape[1]), err_msg=f"row {row}")


def _server_merged(requests):
    """Requests merged as the server does with `pad_variable_length_inputs`:
    each input padded to the longest past the batch dimension with its
    request's first value (a real event, for a primer), then concatenated."""
    merged = {}
    for key in requests[0]:
        width = max(request[key].shape[1:] for request in requests)
        padded = [
            np.pad(request[key], [(0, 0)] + [(0, w - s) for w, s in zip(width, request[key].shape[1:])],
                   constant_values=request[key].flat[0])
            for request in requests
        ]
        merged[key] = np.concatenate(padded)
    return merged


def _generate_request(primer, **settings):
    primer = np.array([primer], "int32")
    return dict(primer=primer, primer_length=np.array([primer.shape[1]], "int32"), **settings)


def test_primers_of_different_lengths_merged_get_their_solo_answers(music):
    model, loaded = music
    requests = [
        _generate_request([3, 4, 5, 6, 7, 8, 9], max_new_tokens=_one_row(4, "int32"),
                          temperature=_one_row(0.0, "float32"), top_k=_one_row(0, "int32"),
                          top_p=_one_row(1.0, "float32"), seed=_one_row(1, "int32")),
        _generate_request([9], max_new_tokens=_one_row(9, "int32"), temperature=_one_row(1.1, "float32"),
                          top_k=_one_row(0, "int32"), top_p=_one_row(0.9, "float32"), seed=_one_row(2, "int32")),
        _generate_request([6, 7, 8], max_new_tokens=_one_row(2, "int32"), temperature=_one_row(0.8, "float32"),
                          top_k=_one_row(4, "int32"), top_p=_one_row(1.0, "float32"), seed=_one_row(3, "int32")),
    ]
    outputs = loaded.run("generate", _server_merged(requests))
    assert outputs["status"].tolist() == [b"", b"", b""]
    for row, request in enumerate(requests):
        solo = loaded.run("generate", request)["tokens"][0]
        np.testing.assert_array_equal(outputs["tokens"][row], _padded(solo, outputs["tokens"].shape[1]),
                                      err_msg=f"row {row}")
        expected = continue_sequence(
            model, request["primer"], int(request["max_new_tokens"][0]),
            temperature=float(request["temperature"][0]), top_k=int(request["top_k"][0]),
            top_p=float(request["top_p"][0]), seed=int(request["seed"][0]),
        )
        np.testing.assert_array_equal(solo, np.asarray(expected)[0], err_msg=f"row {row} in process")


def test_image_rows_of_different_settings_merged_equal_in_process_sampling(images):
    model, loaded = images
    inputs = COMPLETE
    pixels = loaded.run("complete", inputs)["pixels"]
    for row in range(len(pixels)):
        expected = sample_images(
            model, class_labels=inputs["class_label"][row : row + 1], known_pixels=inputs["pixels"][row : row + 1],
            known_rows=int(inputs["known_rows"][row]), temperature=float(inputs["temperature"][row]),
            seed=int(inputs["seed"][row]),
        )
        np.testing.assert_array_equal(pixels[row], np.asarray(expected)[0], err_msg=f"row {row}")


def test_eight_concurrent_clients_get_every_generation(music):
    _, loaded = music
    report = loaded.load_test("generate", GENERATE, clients=8, requests_per_client=50)
    assert report["failures"] == 0, report["first_error"]
    assert len(report["latencies_ms"]) == 400
    print(f"generate under load: p50 {report['p50_ms']:.1f} ms, p99 {report['p99_ms']:.1f} ms")
