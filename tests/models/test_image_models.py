import keras
import numpy as np
import pytest

from keras_selfattn.models.config import resolve_preset
from keras_selfattn.models.image_decoding import generation_order
from keras_selfattn.models.image_common import NUM_DIFFERENCES, values_from_differences
from keras_selfattn.models.image_transformer import IMAGE_PRESETS, image_transformer
from keras_selfattn.models.super_resolution import (
    SUPER_RESOLUTION_PRESETS,
    image_super_resolution,
)
from keras_selfattn.ops.blocking_2d import block_raster_index
from tests.generation.generation_models import with_fitted_upsampler

RNG = np.random.default_rng(9)
SHAPE = (4, 4, 3)
TINY = dict(preset="tiny", block_length=8, block_shape=(2, 6), memory_flange=(1, 3))


def _generation_order(attention, head):
    """(row, column, channel) of every modelled position in generation order."""
    height, width, channels = SHAPE
    if head == "dmol":
        grid = [(r, c, None) for r in range(height) for c in range(width)]
        return grid
    positions = [(r, c // channels, c % channels) for r in range(height) for c in range(width * channels)]
    if attention in ("local_2d", "relative_local_2d"):
        positions.sort(
            key=lambda p: int(block_raster_index(p[0], p[1] * channels + p[2], width * channels, TINY["block_shape"]))
        )
    return positions


def _outputs_at(outputs, position):
    row, column, channel = position
    return outputs[:, row, column] if channel is None else outputs[:, row, column, channel]


def _pixels():
    return RNG.integers(0, 256, (2,) + SHAPE).astype("int32")


@pytest.mark.parametrize("head", ["categorical", "dmol"])
@pytest.mark.parametrize("attention", ["local_1d", "local_2d", "global", "relative_local_2d"])
def test_each_output_sees_only_earlier_positions(attention, head):
    overrides = dict(TINY, block_shape=(2, 2)) if head == "dmol" else TINY
    model = image_transformer(SHAPE, attention=attention, head=head, **overrides)
    order = _generation_order(attention, head)
    if head == "dmol" and attention in ("local_2d", "relative_local_2d"):
        order.sort(key=lambda p: int(block_raster_index(p[0], p[1], SHAPE[1], (2, 2))))
    pixels = _pixels()
    before = np.asarray(model(pixels))
    expected_shape = (2,) + SHAPE + (256,) if head == "categorical" else (2,) + SHAPE[:2] + (40,)
    assert before.shape == expected_shape
    step = len(order) // 2
    row, column, channel = order[step]
    changed = pixels.copy()
    channels = slice(None) if channel is None else channel
    changed[:, row, column, channels] = (changed[:, row, column, channels] + 1) % 256
    after = np.asarray(model(changed))
    for position in order[: step + 1]:
        np.testing.assert_allclose(_outputs_at(after, position), _outputs_at(before, position), atol=1e-5)
    assert not np.allclose(_outputs_at(after, order[step + 1]), _outputs_at(before, order[step + 1]))


@pytest.mark.parametrize("head", ["categorical", "dmol"])
@pytest.mark.parametrize("attention", ["local_1d", "local_2d", "global", "relative_local_2d"])
def test_cached_steps_in_generation_order_equal_the_forward_pass(attention, head):
    overrides = dict(TINY, attention=attention, head=head)
    del overrides["preset"]
    if head == "dmol":
        overrides["block_shape"] = (2, 2)
    config = resolve_preset("image_transformer", IMAGE_PRESETS, "tiny", overrides)
    model = image_transformer(SHAPE, preset="tiny", num_classes=4, **overrides)
    pixels, labels = _pixels(), np.array([1, 3])
    full = np.asarray(model({"pixels": pixels, "class_label": labels}))
    condition = model.class_condition(labels)
    caches = model.initial_cache(2)
    order = [tuple(p) for p in generation_order(SHAPE, config)]
    assert np.array_equal(model.generation_order(), order)
    channels = SHAPE[-1]

    def value_at(row, column):  # grid coordinates -> generated value(s)
        if head == "dmol":
            return pixels[:, row, column], full[:, row, column]
        return pixels[:, row, column // channels, column % channels], full[:, row, column // channels, column % channels]

    previous = np.zeros((2,) if head == "categorical" else (2, channels), "int32")
    for step, (row, column) in enumerate(order):
        outputs, hidden, caches = model.call_with_cache(previous[:, None], caches, step, class_condition=condition)
        assert hidden.shape == (2, 1, model.decoder_config["hidden_dim"])
        value, expected = value_at(row, column)
        np.testing.assert_allclose(outputs[:, 0], expected, atol=1e-5)
        previous = value


def test_local_attention_covering_the_image_equals_global():
    whole = dict(preset="tiny", block_length=48)
    local = image_transformer(SHAPE, attention="local_1d", **whole)
    dense = image_transformer(SHAPE, attention="global", **whole)
    dense.set_weights(local.get_weights())
    pixels = _pixels()
    np.testing.assert_allclose(local(pixels), dense(pixels), atol=1e-5)


def test_relative_local_2d_is_local_2d_with_relative_tables():
    relative = image_transformer(SHAPE, attention="relative_local_2d", **TINY)
    plain = image_transformer(SHAPE, attention="local_2d", **TINY)
    assert relative.decoder_config["attention"] == "relative_local_2d"
    assert relative.decoder_config["block_shape"] == TINY["block_shape"]
    blocks = [layer for layer in relative.layers if layer.name.startswith("decoder_block_")]
    tables = []
    for block in blocks:
        attention = block.self_attention
        assert type(attention).__name__ == "LocalRelativeAttention2D"
        # Every offset of the memory: query (2, 6) with flange (1, 3).
        assert attention.max_relative_position == (2, 8)
        tables += [attention.relative_height_embeddings, attention.relative_width_embeddings]
    assert relative.count_params() - plain.count_params() == sum(int(np.prod(t.shape)) for t in tables)
    # With its relative tables at zero it is the local_2d model.
    for table in tables:
        table.assign(np.zeros(table.shape, "float32"))
    table_ids = {id(table) for table in tables}
    plain.set_weights([keras.ops.convert_to_numpy(w) for w in relative.weights if id(w) not in table_ids])
    pixels = _pixels()
    np.testing.assert_allclose(relative(pixels), plain(pixels), atol=1e-5)


def test_class_condition_changes_the_outputs():
    model = image_transformer(SHAPE, num_classes=10, **TINY)
    pixels = _pixels()
    first = model({"pixels": pixels, "class_label": np.array([0, 0])})
    second = model({"pixels": pixels, "class_label": np.array([3, 3])})
    assert not np.allclose(first, second)


def _bicubic(low, size):
    return np.asarray(
        keras.ops.image.resize(np.asarray(low, "float32"), size, interpolation="bicubic")
    )


def test_super_resolution_upsampler_starts_as_bicubic_and_stays_frozen():
    model = image_super_resolution((2, 2, 3), SHAPE, **TINY)
    upsampler = model.upsampler
    low = RNG.integers(0, 256, (2, 2, 2, 3))
    np.testing.assert_allclose(upsampler(low), _bicubic(low, SHAPE[:2]), atol=1e-4)
    assert not upsampler.trainable and upsampler.weights
    trainable = {id(weight) for weight in model.trainable_weights}
    assert not any(id(weight) in trainable for weight in upsampler.weights)
    with pytest.raises(ValueError, match="`upsampler_layers` must be an integer >= 0"):
        image_super_resolution((2, 2, 3), SHAPE, **TINY, upsampler_layers=-1)
    with pytest.raises(ValueError, match="`upsampler_width` must be an integer >= 1"):
        image_super_resolution((2, 2, 3), SHAPE, **TINY, upsampler_width=2.5)
    plain = image_super_resolution((2, 2, 3), SHAPE, **TINY, upsampler_layers=0)
    assert not plain.upsampler.weights


def test_super_resolution_prior_is_centred_on_the_upsampler_estimate():
    model = with_fitted_upsampler(image_super_resolution((2, 2, 3), SHAPE, **TINY))
    low = RNG.integers(0, 256, (2, 2, 2, 3))
    estimate = np.asarray(model.upsampler(low))
    rounded = np.clip(np.round(estimate), 0, 255)
    assert np.mean(rounded != np.clip(np.round(_bicubic(low, SHAPE[:2])), 0, 255)) > 0.5
    encoded = model.encode_low_resolution(low)
    np.testing.assert_array_equal(encoded["estimates"], rounded.reshape(2, -1))
    # The prior is centred on the corrected estimate, not on bicubic.
    prior = np.asarray(encoded["position_logits"]).reshape(rounded.shape + (256,))
    np.testing.assert_array_equal(prior.argmax(-1), rounded)


@pytest.mark.slow
def test_super_resolution_decoder_refines_the_upsampler_estimate():
    """Trained on images that sit 3 levels above the frozen upsampler's
    estimate, the decoder moves its most likely value off the estimate onto
    the truth, which the prior alone never does."""
    model = with_fitted_upsampler(image_super_resolution((2, 2, 3), SHAPE, **TINY))
    low = RNG.integers(20, 236, (16, 2, 2, 3))
    estimate = np.clip(np.round(np.asarray(model.upsampler(low))), 0, 255)
    high = np.clip(estimate + 3, 0, 255).astype("int32")
    inputs = {"low_resolution": low, "pixels": high}

    def share_at_truth():
        return np.mean(np.asarray(model(inputs)).argmax(-1) == high)

    assert share_at_truth() < 0.2
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    # 60 steps over the 16 images as one epoch: each epoch of `fit` costs a
    # setup of its own.
    repeated = {name: np.concatenate([value] * 60) for name, value in inputs.items()}
    model.fit(repeated, np.concatenate([high] * 60), batch_size=16, epochs=1, shuffle=False, verbose=0)
    assert share_at_truth() > 0.9
    # The upsampler stayed frozen: the decoder did the refining.
    refitted = np.clip(np.round(np.asarray(model.upsampler(low))), 0, 255)
    np.testing.assert_array_equal(refitted, estimate)


def test_super_resolution_depends_on_the_low_resolution_image(tmp_path):
    model = with_fitted_upsampler(image_super_resolution((2, 2, 3), SHAPE, **TINY))
    low, high = RNG.integers(0, 256, (2, 2, 2, 3)), _pixels()
    outputs = np.asarray(model({"low_resolution": low, "pixels": high}))
    assert outputs.shape == (2,) + SHAPE + (256,)
    other = np.asarray(model({"low_resolution": (low + 50) % 256, "pixels": high}))
    assert not np.allclose(outputs, other)
    path = str(tmp_path / "super_resolution.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(restored({"low_resolution": low, "pixels": high}), outputs, atol=1e-6)


@pytest.mark.parametrize("attention", ["local_2d", "relative_local_2d"])
def test_super_resolution_cached_steps_equal_the_forward_pass(attention):
    overrides = {key: value for key, value in TINY.items() if key != "preset"}
    overrides["attention"] = attention
    config = resolve_preset("image_super_resolution", SUPER_RESOLUTION_PRESETS, "tiny", overrides)
    model = with_fitted_upsampler(image_super_resolution((2, 2, 3), SHAPE, preset="tiny", **overrides))
    low, high = RNG.integers(0, 256, (2, 2, 2, 3)), _pixels()
    full = np.asarray(model({"low_resolution": low, "pixels": high}))
    encoded = model.encode_low_resolution(low)
    assert set(encoded) == {"encoder_outputs", "position_condition", "position_logits", "estimates"}
    caches = model.initial_cache(2)
    previous = np.zeros((2,), "int32")
    for step, (row, column) in enumerate(generation_order(SHAPE, config)):
        outputs, _, caches = model.call_with_cache(previous[:, None], caches, step, **encoded)
        outputs = outputs[:, 0]
        pixel, channel = column // SHAPE[-1], column % SHAPE[-1]
        np.testing.assert_allclose(outputs, full[:, row, pixel, channel], atol=1e-5)
        previous = high[:, row, pixel, channel]


def _without_upsampled_features(model):
    layer = model.upsampled_conv_1
    layer.kernel.assign(np.zeros(layer.kernel.shape))
    layer.bias.assign(np.zeros(layer.bias.shape))
    return model


def test_super_resolution_decoder_input_carries_the_upsampled_image():
    model = _without_upsampled_features(image_super_resolution((2, 2, 3), SHAPE, **TINY))
    flat = np.full((1, 2, 2, 3), 100)
    upsampled = model.encode_low_resolution(flat)["position_condition"]
    table = model.upsampled_embedding.embeddings.numpy()
    # A flat image stays flat under any interpolation: every pixel's channel c
    # is embedded as value 100 of channel c.
    expected = np.tile(table[[100, 356, 612]], (SHAPE[0] * SHAPE[1], 1))
    np.testing.assert_allclose(upsampled[0], expected, atol=1e-6)
    # A step from 0 to 255 overshoots past both ends, clipped back to them.
    edge = np.zeros((1, 2, 2, 3), "int32")
    edge[:, :, 1] = 255
    upsampled = model.encode_low_resolution(edge)["position_condition"]
    grid = np.asarray(upsampled).reshape(SHAPE[:2] + (3, -1))
    np.testing.assert_allclose(grid[0, 0, 0], table[0], atol=1e-6)
    np.testing.assert_allclose(grid[0, -1, 0], table[255], atol=1e-6)


def test_super_resolution_decoder_input_sees_the_upsampled_image_ahead():
    model = image_super_resolution((2, 2, 3), SHAPE, **TINY)
    low = np.full((1, 2, 2, 3), 100)
    changed = low.copy()
    # The bottom-right pixel only, by so little that the top left's bicubic
    # estimate (weight 0.005 on it) still rounds to 100.
    changed[0, 1, 1] = 110
    encoded = [model.encode_low_resolution(x) for x in (low, changed)]
    assert encoded[0]["estimates"][0, 0] == encoded[1]["estimates"][0, 0]
    first, other = (np.asarray(e["position_condition"])[0, 0] for e in encoded)
    # The first position generated (top left) reads the image's far corner
    # through the convolutions, though its own estimate is unchanged.
    assert not np.allclose(first, other)
    _without_upsampled_features(model)
    first, other = (
        np.asarray(model.encode_low_resolution(x)["position_condition"])[0, 0]
        for x in (low, changed)
    )
    np.testing.assert_allclose(first, other, atol=1e-6)


def test_super_resolution_logits_carry_the_interpolation_prior():
    model = image_super_resolution((2, 2, 3), SHAPE, **TINY)
    precision = 0.05
    model.interpolation_prior.kernel.assign([[precision]])
    low, high = np.full((1, 2, 2, 3), 100), _pixels()[:1]
    with_prior = np.asarray(model({"low_resolution": low, "pixels": high}))
    model.interpolation_prior.kernel.assign([[0.0]])
    without = np.asarray(model({"low_resolution": low, "pixels": high}))
    # A flat image's estimate is 100 everywhere: the prior is a parabola there.
    expected = -0.5 * precision * (np.arange(256) - 100.0) ** 2
    np.testing.assert_allclose(with_prior - without, np.broadcast_to(expected, with_prior.shape), atol=1e-3)


def test_values_from_differences_reads_each_value_at_its_difference():
    logits = RNG.normal(size=(2, 3, NUM_DIFFERENCES)).astype("float32")
    estimates = np.array([[0, 17, 255], [128, 3, 200]])
    values = np.asarray(values_from_differences(logits, estimates))
    for index in np.ndindex(estimates.shape):
        for value in (0, 1, 77, 254, 255):
            difference = value - estimates[index]
            assert values[index + (value,)] == logits[index + (difference + 255,)]


def test_super_resolution_decoder_scores_differences_from_the_estimate():
    model = _without_upsampled_features(image_super_resolution((2, 2, 3), SHAPE, **TINY))
    # Without the absolute values (embeddings of the input and the estimate,
    # features of the upsampled image, the prior), the decoder sees only
    # differences: brightening both images by 30 moves every distribution 30
    # values up.
    for layer in (model.source_embedding, model.upsampled_embedding):
        layer.embeddings.assign(np.zeros(layer.embeddings.shape))
    model.interpolation_prior.kernel.assign([[0.0]])
    high = RNG.integers(40, 200, (2,) + SHAPE)
    darker = np.asarray(model({"low_resolution": np.full((2, 2, 2, 3), 100), "pixels": high}))
    brighter = np.asarray(model({"low_resolution": np.full((2, 2, 2, 3), 130), "pixels": high + 30}))
    np.testing.assert_allclose(brighter[..., 30:], darker[..., :-30], atol=1e-5)
    assert not np.allclose(brighter, darker)


def test_pixel_dropout_hides_previous_pixels_in_training_only():
    model = image_super_resolution((2, 2, 3), SHAPE, **TINY, pixel_dropout=0.5)
    inputs = {"low_resolution": RNG.integers(0, 256, (2, 2, 2, 3)), "pixels": _pixels()}
    inference = np.asarray(model(inputs, training=False))
    np.testing.assert_array_equal(np.asarray(model(inputs)), inference)
    trained = np.asarray(model(inputs, training=True))
    assert not np.allclose(trained, inference)
    # The first position has no previous pixel to hide and sees nothing else.
    np.testing.assert_allclose(trained[:, 0, 0, 0], inference[:, 0, 0, 0], atol=1e-5)
    for rate in (1.0, -0.1, True):
        with pytest.raises(ValueError, match="`pixel_dropout` must be a number in \\[0, 1\\)"):
            image_super_resolution((2, 2, 3), SHAPE, **TINY, pixel_dropout=rate)


@pytest.mark.parametrize("attention", ["local_1d", "local_2d", "relative_local_2d"])
def test_save_and_load_without_custom_objects(attention, tmp_path):
    model = image_transformer(SHAPE, attention=attention, num_classes=3, **TINY)
    inputs = {"pixels": _pixels(), "class_label": np.array([1, 2])}
    path = str(tmp_path / "image.keras")
    model.save(path)
    np.testing.assert_allclose(keras.models.load_model(path)(inputs), model(inputs), atol=1e-6)


def test_cifar10_preset_follows_the_paper():
    model = image_transformer((32, 32, 3), preset="cifar10")
    blocks = [layer for layer in model.layers if layer.name.startswith("decoder_block_")]
    assert len(blocks) == 12
    assert blocks[0].self_attention.block_length == 256
    assert model.output.shape == (None, 32, 32, 3, 256)


class TestBadInput:
    def test_unknown_attention_and_head(self):
        with pytest.raises(ValueError, match="valid values: \\['local_1d', 'local_2d', 'global', 'relative_local_2d'\\]"):
            image_transformer(SHAPE, preset="tiny", attention="dilated")
        with pytest.raises(ValueError, match="valid values: \\['categorical', 'dmol'\\]"):
            image_transformer(SHAPE, preset="tiny", head="gaussian")

    def test_image_incompatible_with_blocks(self):
        with pytest.raises(ValueError, match="multiple of `block_shape`"):
            image_transformer(SHAPE, preset="tiny", attention="local_2d", block_shape=(3, 5))

    def test_flange_larger_than_the_image(self):
        with pytest.raises(ValueError, match="`memory_flange`"):
            image_transformer(SHAPE, preset="tiny", attention="local_2d", block_shape=(2, 6), memory_flange=(8, 3))

    def test_num_classes(self):
        with pytest.raises(ValueError, match="`num_classes` must be an integer >= 2"):
            image_transformer(SHAPE, preset="tiny", num_classes=1)

    def test_dmol_needs_rgb(self):
        with pytest.raises(ValueError, match="needs 3 channels"):
            image_transformer((4, 4, 1), preset="tiny", head="dmol")


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="SavedModel export needs TF")
@pytest.mark.parametrize("attention", ["local_1d", "local_2d", "relative_local_2d"])
def test_exported_saved_model_serves_the_model_outputs(attention, tmp_path):
    import tensorflow as tf

    model = image_transformer(SHAPE, attention=attention, num_classes=3, **TINY)
    inputs = {"pixels": _pixels(), "class_label": np.array([1, 2])}
    export_dir = str(tmp_path / "saved_model")
    model.export(export_dir, format="tf_saved_model", verbose=False)
    serving = tf.saved_model.load(export_dir)  # kept alive: it owns the variables
    np.testing.assert_allclose(serving.serve(inputs), model(inputs), atol=1e-5)


def _bad_image_inputs(name):
    """A class-conditional image model's or a super-resolution model's
    inputs with one bad value in input `name`, and the message's bound."""
    from tests.generation.generation_models import IMAGE_SHAPE, LOW_SHAPE, image_model, super_resolution_model

    pixels = np.arange(2 * np.prod(IMAGE_SHAPE)).reshape((2,) + IMAGE_SHAPE).astype("int32") % 256
    if name == "low_resolution":
        model = super_resolution_model()
        inputs = {"low_resolution": np.full((2,) + LOW_SHAPE, 7, "int32"), "pixels": pixels}
        inputs["low_resolution"][1, 0, 1, 2] = 256
        return model, inputs, r"pixel value in `low_resolution` must lie in \[0, 255\]"
    model = image_model("local_2d", num_classes=3)
    inputs = {"pixels": pixels, "class_label": np.array([0, 2], "int32")}
    if name == "pixels":
        inputs["pixels"][0, 1, 2, 0] = -1
        return model, inputs, r"pixel value in `pixels` must lie in \[0, 255\]. Received: values from -1"
    inputs["class_label"][1] = 3
    return model, inputs, r"class label in `class_label` must lie in \[0, 2\]. Received: values from 0 to 3"


@pytest.mark.backends("tensorflow", reason="graph-mode assertions")
@pytest.mark.parametrize("name", ["pixels", "class_label", "low_resolution"])
def test_integer_inputs_are_checked_in_every_mode(name):
    import tensorflow as tf

    model, inputs, message = _bad_image_inputs(name)
    with pytest.raises(ValueError, match=message):
        model(inputs)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        tf.function(model)(inputs)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        model.predict(inputs, verbose=0)


@pytest.mark.parametrize("name", ["pixels", "class_label"])
def test_integer_inputs_are_checked_eagerly_on_every_backend(name):
    model, inputs, message = _bad_image_inputs(name)
    with pytest.raises(ValueError, match=message):
        model(inputs)
