import keras
import numpy as np
import pytest

from keras_selfattn.generation import continue_sequence, sample_images, translate_tokens
from keras_selfattn.layers import PositionEmbedding
from keras_selfattn.models import MusicTransformer
from tests.generation.generation_models import (
    IMAGE_SHAPE,
    LOW_SHAPE,
    image_model,
    music_model,
    super_resolution_model,
    translation_model,
)

PRIMER = np.array([[1, 2, 3]], "int32")
SOURCE = np.array([[4, 5, 6]], "int32")


def _positional_decoder(sequence_length=8):
    """A music model whose position signal is a learned table of
    `sequence_length` rows."""
    model = MusicTransformer(10, num_layers=1, hidden_dim=8, num_heads=2, key_dim=4, feedforward_dim=16)
    model.target_position = PositionEmbedding(sequence_length, name="target_position")
    model.target_position.build((None, None, 8))
    return model


def test_a_decoder_with_a_position_table_generates_within_its_length():
    model = _positional_decoder()
    assert continue_sequence(model, PRIMER, 5, seed=0).shape == (1, 8)
    with pytest.raises(ValueError, match=r"`max_new_tokens` must be <= 5.*Received: max_new_tokens=6"):
        continue_sequence(model, PRIMER, 6)
    with pytest.raises(ValueError, match=r"`primer` is longer than the model's maximum length 8"):
        continue_sequence(model, np.ones((1, 9), "int32"), 1)


def test_a_cached_step_past_the_position_table_is_named_eagerly_and_in_a_graph():
    model = _positional_decoder()
    cache = model.initial_cache(1, 12)
    message = r"Every position \(`cache_update_index` \+ row index\) in `inputs` must lie in \[0, 7\]"
    with pytest.raises(ValueError, match=message):
        model.call_with_cache(np.ones((1, 2), "int32"), cache, 7)
    if keras.backend.backend() != "tensorflow":
        return
    import tensorflow as tf

    step = tf.function(lambda tokens, index: model.call_with_cache(tokens, cache, index)[0], autograph=False)
    assert step(np.ones((1, 1), "int32"), tf.constant(7)).shape == (1, 1, 10)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        step(np.ones((1, 2), "int32"), tf.constant(7))


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(temperature=-0.5), r"`temperature` must be a finite number >= 0.*temperature=-0.5"),
        (dict(top_k=-1), r"`top_k` must be an integer >= 0.*top_k=-1"),
        (dict(top_k=True), r"`top_k` must be an integer >= 0.*top_k=True"),
        (dict(top_p=0.0), r"`top_p` must be a number in \(0, 1\].*top_p=0.0"),
        (dict(top_p=1.5), r"`top_p` must be a number in \(0, 1\].*top_p=1.5"),
        (dict(seed=-3), r"`seed` must be an integer in \[0, 2\*\*31\).*seed=-3"),
        (dict(seed="x"), r"`seed` must be an integer or an integer scalar tensor"),
    ],
)
def test_sampling_settings(settings, message):
    with pytest.raises(ValueError, match=message):
        continue_sequence(music_model("absolute"), PRIMER, 2, **settings)


@pytest.mark.parametrize(
    "primer_length",
    [[0], [4], [1, 2], [[2]], [1.5], np.array([2.0])],
    ids=["zero", "past the width", "two rows", "nested", "float", "float array"],
)
def test_primer_length_is_one_length_a_row_within_the_width(primer_length):
    with pytest.raises(ValueError, match=r"`primer_length` must be one integer a row of `primer`, each in \[1, 3\]"):
        continue_sequence(music_model("absolute"), PRIMER, 2, primer_length=primer_length)


def test_sequence_lengths():
    model = music_model("absolute")
    with pytest.raises(ValueError, match=r"`max_new_tokens` must be an integer >= 1.*max_new_tokens=0"):
        continue_sequence(model, PRIMER, 0)
    with pytest.raises(ValueError, match=r"`primer` must be integer tokens `\[batch, length\]`"):
        continue_sequence(model, np.zeros((1, 0), "int32"), 2)
    with pytest.raises(ValueError, match=r"`primer` must be integer tokens"):
        continue_sequence(model, np.array([1, 2]), 2)
    translation = translation_model("sinusoidal")
    with pytest.raises(ValueError, match=r"`max_new_tokens` must be an integer >= 1.*max_new_tokens=0"):
        translate_tokens(translation, SOURCE, 0)
    with pytest.raises(TypeError, match=r"Missing the argument `max_new_tokens`"):
        translation.generate(SOURCE)


def test_max_length_is_the_deprecated_name_of_max_new_tokens():
    model = translation_model("sinusoidal")
    expected = translate_tokens(model, SOURCE, 3)
    with pytest.warns(DeprecationWarning, match=r"`max_length` is deprecated; pass `max_new_tokens`"):
        np.testing.assert_array_equal(translate_tokens(model, SOURCE, max_length=3), expected)
    with pytest.warns(DeprecationWarning, match=r"`max_length` is deprecated"):
        np.testing.assert_array_equal(model.generate(SOURCE, max_length=3), expected)
    with pytest.raises(ValueError, match=r"Pass `max_new_tokens` only"):
        translate_tokens(model, SOURCE, 3, max_length=3)


def test_translation_settings():
    model = translation_model("sinusoidal")
    with pytest.raises(ValueError, match=r"`eos_id` must be an integer in \[1, 12\).*eos_id=12"):
        translate_tokens(model, SOURCE, 4, eos_id=12)
    with pytest.raises(ValueError, match=r"`beam_size` must be an integer >= 1.*beam_size=0"):
        translate_tokens(model, SOURCE, 4, beam_size=0)
    if keras.backend.backend() == "tensorflow":
        with pytest.raises(ValueError, match=r"with `beam_size` > 1 leave `temperature=0`"):
            translate_tokens(model, SOURCE, 4, beam_size=2, temperature=1.0)
        with pytest.raises(ValueError, match=r"`alpha` must be a finite number >= 0.*alpha=-1"):
            translate_tokens(model, SOURCE, 4, beam_size=2, alpha=-1)


@pytest.mark.parametrize(
    "call, supported",
    [
        (lambda m: continue_sequence(m, PRIMER, 2), "MusicTransformer"),
        (lambda m: translate_tokens(m, SOURCE, 2), "TranslationTransformer"),
        (lambda m: sample_images(m, 1), "ImageTransformer"),
    ],
    ids=["continue_sequence", "translate_tokens", "sample_images"],
)
def test_models_without_the_decoder_contract_are_named(call, supported):
    others = {
        "MusicTransformer": (translation_model("sinusoidal"), r"it has \['encode'\]"),
        "TranslationTransformer": (music_model("absolute"), r"it lacks \['encode'\]"),
        "ImageTransformer": (music_model("absolute"), r"it lacks \['image_shape'"),
    }
    other, problem = others[supported]
    with pytest.raises(ValueError, match=rf"`model` must keep the cached-step contract of {supported}.*{problem}"):
        call(other)
    with pytest.raises(ValueError, match=rf"contract of {supported}.*Received: model 'dense'"):
        call(keras.layers.Dense(3, name="dense"))


def test_image_inputs():
    conditional = image_model("local_1d", num_classes=3)
    with pytest.raises(ValueError, match=r"`class_labels` must be given exactly for a class-conditional model"):
        sample_images(conditional, 2)
    with pytest.raises(ValueError, match=r"`class_labels` must be given exactly"):
        sample_images(image_model("local_1d"), class_labels=np.array([1]))
    with pytest.raises(ValueError, match=r"`low_resolution` must be given exactly"):
        sample_images(super_resolution_model(), 1)
    with pytest.raises(ValueError, match=r"`batch_size` is needed"):
        sample_images(image_model("global"))
    with pytest.raises(ValueError, match=r"`batch_size` and the inputs' batch dimensions must agree"):
        sample_images(conditional, 3, class_labels=np.array([1, 2]))
    known = np.zeros((1,) + IMAGE_SHAPE, "uint8")
    with pytest.raises(ValueError, match=r"`known_rows` must be an integer in \[1, 4\] with `known_pixels`.*known_rows=5"):
        sample_images(image_model("global"), known_pixels=known, known_rows=5)
    with pytest.raises(ValueError, match=r"`known_rows` must be an integer 0 without `known_pixels`.*known_rows=2"):
        sample_images(image_model("global"), 1, known_rows=2)
    with pytest.raises(ValueError, match=r"`known_pixels` must have shape \('batch', 4, 4, 3\)"):
        sample_images(image_model("global"), known_pixels=np.zeros((1, 4, 4, 1), "uint8"), known_rows=1)
    with pytest.raises(ValueError, match=r"`top_k` and `top_p` filter a categorical head"):
        sample_images(image_model("global", "dmol"), 1, top_k=3)


def _out_of_range_inputs():
    """`(model, inputs, message)` of each family with one integer input past
    its bound."""
    tokens = np.array([[3, 4, 20]], "int32")
    source = np.array([[5, 14, 1]], "int32")
    pixels = np.full((1,) + IMAGE_SHAPE, 256, "int32")
    low = np.full((1,) + LOW_SHAPE, 7, "int32")
    return [
        (music_model("absolute"), tokens, r"token id in `tokens` must lie in \[0, 19\]. Received: values from 3 to 20"),
        (
            translation_model("sinusoidal"), {"source_tokens": source, "target_tokens": np.zeros((1, 2), "int32")},
            r"token id in `source_tokens` must lie in \[0, 13\]",
        ),
        (
            image_model("local_1d", num_classes=3), {"pixels": pixels, "class_label": np.array([0], "int32")},
            r"pixel value in `pixels` must lie in \[0, 255\]",
        ),
        (
            image_model("local_1d", num_classes=3),
            {"pixels": np.zeros((1,) + IMAGE_SHAPE, "int32"), "class_label": np.array([3], "int32")},
            r"class label in `class_label` must lie in \[0, 2\]",
        ),
        (
            super_resolution_model(), {"low_resolution": low - 8, "pixels": np.zeros((1,) + IMAGE_SHAPE, "int32")},
            r"pixel value in `low_resolution` must lie in \[0, 255\]. Received: values from -1",
        ),
    ]


def test_model_inputs_are_checked_eagerly_on_every_backend():
    """docs/layers.md: each family's integer inputs raise a `ValueError`
    naming the input, eagerly, on TensorFlow, JAX and PyTorch."""
    for model, inputs, message in _out_of_range_inputs():
        with pytest.raises(ValueError, match=message):
            model(inputs)
