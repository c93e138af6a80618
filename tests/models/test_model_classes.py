"""Each builder returns its family's model class; the class saves and loads
as itself, a plain Functional model of an earlier version is viewed as it,
and its attention weights are what its blocks compute."""

import keras
import numpy as np
import pytest

from keras_selfattn.generation import continue_sequence, sample_images, translate_tokens
from keras_selfattn.models import (
    ImageTransformer,
    MusicTransformer,
    SuperResolutionTransformer,
    TranslationTransformer,
    image_super_resolution,
    image_transformer,
    music_transformer,
    transformer_translation,
)

RNG = np.random.default_rng(13)
LOW_RESOLUTION = RNG.integers(0, 256, (2, 2, 2, 3)).astype("uint8")
IMAGE = dict(preset="tiny", num_layers=1, block_shape=(2, 6), memory_flange=(1, 3), block_length=8)


def _builders():
    return {
        "music": (lambda: music_transformer(23, preset="tiny", num_layers=2), MusicTransformer),
        "translation": (
            lambda: transformer_translation(19, 17, preset="tiny", num_layers=2), TranslationTransformer
        ),
        "images": (lambda: image_transformer((4, 4, 3), num_classes=3, **IMAGE), ImageTransformer),
        "super_resolution": (
            lambda: image_super_resolution((2, 2, 3), (4, 4, 3), **IMAGE), SuperResolutionTransformer
        ),
    }


def _generate(family, model):
    if family == "music":
        return continue_sequence(model, np.array([[3, 4, 5]], "int32"), 4, seed=1)
    if family == "translation":
        return translate_tokens(model, np.array([[5, 6, 7, 1]], "int32"), 5)
    if family == "images":
        return sample_images(model, 2, class_labels=np.array([0, 2]), seed=1)
    return sample_images(model, low_resolution=LOW_RESOLUTION, seed=1)


@pytest.mark.parametrize("family", sorted(_builders()))
def test_builder_returns_its_class_which_saves_and_loads_as_itself(family, tmp_path):
    build, model_class = _builders()[family]
    model = build()
    assert type(model) is model_class
    path = str(tmp_path / f"{family}.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert type(restored) is model_class
    np.testing.assert_array_equal(_generate(family, restored), _generate(family, model))


@pytest.mark.backends("tensorflow", "jax", reason="generation from a saved file")
@pytest.mark.parametrize("family", sorted(_builders()))
def test_a_plain_functional_model_of_an_earlier_version_still_loads_and_generates(family, tmp_path):
    build, model_class = _builders()[family]
    model = build()
    # What the builders returned before the classes: a plain Functional model.
    plain = keras.Model(model.input, model.output, name=model.name)
    path = str(tmp_path / f"{family}_plain.keras")
    plain.save(path)
    restored = keras.models.load_model(path)
    assert type(restored) is not model_class and isinstance(restored, keras.Model)
    viewed = model_class.from_model(restored)
    assert type(viewed) is model_class
    if model_class is SuperResolutionTransformer:
        assert type(ImageTransformer.from_model(restored)) is SuperResolutionTransformer
    np.testing.assert_array_equal(_generate(family, viewed), _generate(family, model))
    with pytest.raises(ValueError, match=r"becomes one with `\w+\.from_model\(model\)`"):
        _generate(family, restored)


@pytest.mark.parametrize("family", sorted(_builders()))
def test_construction_runs_every_init_of_the_class_hierarchy(family, monkeypatch):
    """Each `__init__` the package defines in the class's hierarchy runs
    once (none skipped by calling a grandparent's directly)."""
    build, model_class = _builders()[family]
    ours = [k for k in model_class.__mro__ if k.__module__.startswith("keras_selfattn") and "__init__" in vars(k)]
    calls = []
    for klass in ours:
        monkeypatch.setattr(klass, "__init__", _recorded(klass.__init__, klass.__name__, calls))
    build()
    assert sorted(calls) == sorted(klass.__name__ for klass in ours)


def _recorded(init, name, calls):
    def recording(self, *args, **kwargs):
        calls.append(name)
        return init(self, *args, **kwargs)

    return recording


def test_from_model_names_the_expected_family():
    with pytest.raises(ValueError, match="built by transformer_translation"):
        TranslationTransformer.from_model(music_transformer(11, preset="tiny", num_layers=1))
    with pytest.raises(ValueError, match="built by image_transformer or image_super_resolution"):
        ImageTransformer.from_model(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]))


def test_music_attention_scores_are_each_blocks_causal_probabilities():
    model = music_transformer(23, preset="tiny", num_layers=2)
    tokens = RNG.integers(0, 23, (2, 9)).astype("int32")
    scores = keras.ops.convert_to_numpy(model.attention_scores(tokens, block=0))
    assert scores.shape == (2, 4, 9, 9)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    assert np.all(np.triu(scores, 1) == 0)
    last = keras.ops.convert_to_numpy(model.attention_scores(tokens))
    assert not np.allclose(last, scores)


def test_translation_attention_scores_cover_the_real_source_only():
    model = transformer_translation(19, 17, preset="tiny", num_layers=2)
    source = np.array([[5, 6, 7, 8, 1], [9, 10, 1, 0, 0]], "int32")
    decoder_tokens = np.array([[0, 3, 4], [0, 5, 6]], "int32")
    scores = model.attention_scores(source, decoder_tokens)
    cross = keras.ops.convert_to_numpy(scores["cross"])
    assert cross.shape == (2, 4, 3, 5)
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)
    assert np.all(cross[1, :, :, 3:] == 0)
    own = keras.ops.convert_to_numpy(scores["self"])
    assert own.shape == (2, 4, 3, 3) and np.all(np.triu(own, 1) == 0)


def test_image_self_attention_inputs_feed_the_first_block():
    model = image_transformer((4, 4, 3), num_classes=3, **IMAGE)
    pixels = RNG.integers(0, 256, (2, 4, 4, 3)).astype("int32")
    h = keras.ops.convert_to_numpy(model.self_attention_inputs(pixels, np.array([0, 1]), block=0))
    assert h.shape == (2, 4 * 12, model.decoder_config["hidden_dim"])
    other_class = keras.ops.convert_to_numpy(model.self_attention_inputs(pixels, np.array([2, 1]), block=0))
    assert not np.allclose(h[0], other_class[0]) and np.allclose(h[1], other_class[1])


@pytest.mark.parametrize("attention", ["global", "local_2d"])
def test_image_attention_scores_are_the_first_blocks_probabilities(attention):
    settings = dict(IMAGE, attention=attention)
    model = image_transformer((4, 4, 3), num_classes=3, **settings)
    pixels = RNG.integers(0, 256, (2, 4, 4, 3)).astype("int32")
    scores = keras.ops.convert_to_numpy(model.attention_scores(pixels, np.array([0, 1]), block=0))
    heads = model.decoder_blocks[0].self_attention.num_heads
    assert scores.shape == (2, heads, 48, 48)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)
    if attention == "global":
        assert np.all(np.triu(scores, 1) == 0), "a sub-pixel attends to a later one"
    other_class = keras.ops.convert_to_numpy(model.attention_scores(pixels, np.array([2, 1]), block=0))
    assert not np.allclose(scores[0], other_class[0]) and np.allclose(scores[1], other_class[1])
