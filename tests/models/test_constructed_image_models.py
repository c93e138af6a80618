"""The image families as keras-hub-style Backbones: constructed from their
hyperparameters, which `get_config` returns; their layers as attributes;
`generate` on the model; files saved by the version whose image classes were
Functional models assembled by builders still load and generate the same
pixels."""

import json
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_selfattn.generation import sample_images
from keras_selfattn.models import (
    IMAGE_PRESETS,
    ImageTransformer,
    SuperResolutionTransformer,
    image_super_resolution,
    image_transformer,
)

SAVED = Path(__file__).with_name("saved")


def _expected():
    return json.loads((SAVED / "image_functional_generated.json").read_text())


def _pixels(images):
    return np.asarray(images).astype(int).tolist()


@pytest.mark.backends("tensorflow", reason="loads files saved on TensorFlow and their TensorFlow samples")
def test_image_transformer_files_of_an_earlier_version_load_and_generate_the_same():
    """Saved by the builders of the earlier version, with the pixels they
    generated then (a class-conditional local_2d categorical model and a
    local_1d DMOL one)."""
    expected = _expected()
    labels = np.array(expected["class_labels"], "int32")
    known = np.array(expected["known_pixels"], "uint8")
    model = keras.models.load_model(SAVED / "image_transformer_functional.keras")
    assert type(model) is ImageTransformer
    assert _pixels(sample_images(model, class_labels=labels, seed=3)) == expected["categorical_sampled"]
    assert _pixels(model.generate(class_labels=labels, seed=3)) == expected["categorical_sampled"]
    assert _pixels(sample_images(model, class_labels=labels, temperature=0)) == expected["categorical_greedy"]
    completed = sample_images(model, class_labels=labels, known_pixels=known, known_rows=2, seed=4, top_k=20)
    assert _pixels(completed) == expected["categorical_completed"]
    dmol = keras.models.load_model(SAVED / "image_transformer_dmol_functional.keras")
    assert type(dmol) is ImageTransformer
    assert _pixels(dmol.generate(2, seed=3, temperature=0.8)) == expected["dmol_sampled"]
    assert _pixels(sample_images(dmol, 2, decoding="posterior_mean")) == expected["dmol_posterior_mean"]


@pytest.mark.backends("tensorflow", reason="loads a file saved on TensorFlow and its TensorFlow samples")
def test_super_resolution_file_of_an_earlier_version_loads_and_generates_the_same():
    expected = _expected()
    low = np.array(expected["low_resolution"], "uint8")
    model = keras.models.load_model(SAVED / "image_super_resolution_functional.keras")
    assert type(model) is SuperResolutionTransformer
    assert _pixels(sample_images(model, low_resolution=low, seed=3)) == expected["super_resolution_sampled"]
    assert _pixels(model.generate(low, seed=3)) == expected["super_resolution_sampled"]
    assert _pixels(sample_images(model, low_resolution=low, temperature=0)) == expected["super_resolution_greedy"]
    mean = sample_images(model, low_resolution=low, decoding="posterior_mean")
    assert _pixels(mean) == expected["super_resolution_posterior_mean"]


IMAGE = dict(
    image_shape=(4, 4, 3), num_layers=2, hidden_dim=16, num_heads=2, feedforward_dim=32, attention="local_2d",
    head="categorical", dropout=0.0, block_length=8, block_shape=(2, 6), memory_flange=(1, 3), num_mixtures=3,
    num_classes=3,
)
SUPER_RESOLUTION = dict(
    low_shape=(2, 2, 3), high_shape=(4, 4, 3), num_layers=2, hidden_dim=16, num_heads=2, feedforward_dim=32,
    attention="relative_local_2d", head="categorical", num_encoder_layers=1, dropout=0.0, block_length=8,
    block_shape=(2, 6), memory_flange=(1, 2), num_mixtures=3, pixel_dropout=0.1, upsampled_inputs=True,
    upsampler_layers=2, upsampler_width=4,
)
RNG = np.random.default_rng(3)
PIXELS = RNG.integers(0, 256, (2, 4, 4, 3)).astype("int32")
LOW = RNG.integers(0, 256, (2, 2, 2, 3)).astype("uint8")


@pytest.mark.parametrize(
    "model_class, hyperparameters, inputs",
    [
        (ImageTransformer, IMAGE, {"pixels": PIXELS, "class_label": np.array([0, 2], "int32")}),
        (SuperResolutionTransformer, SUPER_RESOLUTION, {"low_resolution": LOW.astype("int32"), "pixels": PIXELS}),
    ],
    ids=["image", "super_resolution"],
)
def test_get_config_is_the_constructor_arguments_and_rebuilds_the_model(model_class, hyperparameters, inputs):
    model = model_class(**hyperparameters, name="mine")
    config = model.get_config()
    assert config == {"name": "mine", "trainable": True, **hyperparameters}
    rebuilt = model_class.from_config(config)
    assert type(rebuilt) is model_class and rebuilt.get_config() == config
    rebuilt.set_weights(model.get_weights())
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model(inputs)), keras.ops.convert_to_numpy(rebuilt(inputs)), atol=1e-6
    )


def test_the_models_own_their_layers_under_the_old_names():
    model = ImageTransformer(**IMAGE)
    assert [block.name for block in model.decoder_blocks] == ["decoder_block_0", "decoder_block_1"]
    named = {layer.name: layer for layer in model.layers}
    for attribute, name in [
        ("pixel_embedding", "pixel_embedding"), ("class_embedding", "class_embedding"),
        ("target_position", "target_position"), ("decoder_norm", "decoder_norm"), ("output_projection", "logits"),
    ]:
        assert getattr(model, attribute) is named[name], attribute
    assert model.pixel_dropout is None
    super_resolution = SuperResolutionTransformer(**SUPER_RESOLUTION)
    named = {layer.name: layer for layer in super_resolution.layers}
    for name in [
        "source_embedding", "source_position", "encoder_norm", "upsampler", "upsampled_estimate",
        "upsampled_embedding", "upsampled_conv_0", "upsampled_conv_1", "upsampled_condition",
        "interpolation_prior", "pixel_dropout", "pixel_embedding", "decoder_norm",
    ]:
        assert getattr(super_resolution, name) is named[name], name
    assert [block.name for block in super_resolution.encoder_blocks] == ["encoder_block_0"]
    assert super_resolution.output_projection is named["logits"]


def test_query_shape_is_the_deprecated_name_of_block_shape():
    arguments = {name: value for name, value in IMAGE.items() if name != "block_shape"}
    with pytest.warns(DeprecationWarning, match="`query_shape` is deprecated; pass `block_shape`"):
        model = ImageTransformer(**arguments, query_shape=(2, 6))
    assert model.get_config()["block_shape"] == (2, 6) and "query_shape" not in model.get_config()
    with pytest.warns(DeprecationWarning, match="`query_shape` is deprecated"):
        built = image_super_resolution((2, 2, 3), (4, 4, 3), preset="tiny", num_layers=1, query_shape=(2, 6))
    assert built.get_config()["block_shape"] == (2, 6)
    with pytest.raises(ValueError, match="Pass `block_shape` only"):
        image_transformer((4, 4, 3), preset="tiny", block_shape=(2, 6), query_shape=(2, 6))
    with pytest.raises(ValueError, match="needs `block_shape`"):
        ImageTransformer(**{**IMAGE, "block_shape": None})


def test_builders_are_presets_with_overrides():
    model = image_transformer((4, 4, 3), preset="tiny", num_classes=3, num_layers=1)
    same = ImageTransformer.from_preset("tiny", image_shape=(4, 4, 3), num_classes=3, num_layers=1)
    assert model.get_config() == same.get_config()
    assert model.get_config()["block_shape"] == IMAGE_PRESETS["tiny"]["block_shape"]
    built = image_super_resolution((2, 2, 3), (4, 4, 3), preset="tiny", num_layers=1)
    same = SuperResolutionTransformer.from_preset("tiny", low_shape=(2, 2, 3), high_shape=(4, 4, 3), num_layers=1)
    assert type(built) is SuperResolutionTransformer and built.get_config() == same.get_config()


def test_generate_is_the_free_function():
    model = ImageTransformer(**IMAGE)
    labels = np.array([0, 2], "int32")
    np.testing.assert_array_equal(
        model.generate(class_labels=labels, seed=5, top_k=30),
        sample_images(model, class_labels=labels, seed=5, top_k=30),
    )
    known = PIXELS.astype("uint8")
    np.testing.assert_array_equal(
        model.generate(class_labels=labels, known_pixels=known, known_rows=2, temperature=0),
        sample_images(model, class_labels=labels, known_pixels=known, known_rows=2, temperature=0),
    )
    super_resolution = SuperResolutionTransformer(**SUPER_RESOLUTION)
    np.testing.assert_array_equal(
        super_resolution.generate(LOW, seed=2, temperature=0.7),
        sample_images(super_resolution, low_resolution=LOW, seed=2, temperature=0.7),
    )
    np.testing.assert_array_equal(
        super_resolution.generate(LOW, decoding="posterior_mean"),
        sample_images(super_resolution, low_resolution=LOW, decoding="posterior_mean"),
    )


def test_super_resolution_attention_scores_read_the_low_resolution_image():
    model = SuperResolutionTransformer(**SUPER_RESOLUTION)
    h = keras.ops.convert_to_numpy(model.self_attention_inputs(PIXELS, LOW, block=0))
    assert h.shape == (2, 4 * 12, 16)
    scores = keras.ops.convert_to_numpy(model.attention_scores(PIXELS, LOW, block=-1))
    assert scores.shape == (2, 2, 48, 48)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    # The second block's inputs depend on the encoded image through the first block's cross-attention.
    other = LOW.copy()
    other[1] = 255 - other[1]
    changed = keras.ops.convert_to_numpy(model.attention_scores(PIXELS, other, block=-1))
    assert np.allclose(changed[0], scores[0], atol=1e-6) and not np.allclose(changed[1], scores[1])
