import keras
import numpy as np
import pytest
from keras import ops

from keras_selfattn.layers.local_attention_2d import LocalAttention2D
from keras_selfattn.layers.local_relative_attention_2d import LocalRelativeAttention2D
from keras_selfattn.layers.multi_head_attention import MultiHeadAttention
from keras_selfattn.ops.blocking_2d import padded_grid_shape
from tests.layer_testing import jit, run_layer_test
from tests.references import backend_gradients, naive_attention_scores

# Distinct primes (batch 2): no axis can pass for another.
HEADS, KEY_DIM, CHANNELS = 3, 5, 11
# The tests of block-raster order, caching and Keras's layer contract that
# hold for every local 2D layer run on each of these.
LOCAL_2D_LAYERS = pytest.mark.parametrize(
    "layer_class", [LocalAttention2D, LocalRelativeAttention2D], ids=["local_2d", "relative_local_2d"]
)


def images(height, width, batch=2, seed=0, channels=CHANNELS):
    return (
        np.random.default_rng(seed).normal(size=(batch, height, width, channels)).astype("float32")
    )


def numpy(x):
    return ops.convert_to_numpy(x)


def may_attend(query, key, query_shape, memory_flange, masked):
    """Whether pixel `query` may attend to pixel `key`, from the definition."""
    (row, column), (key_row, key_column) = query, key
    (qh, qw), (fh, fw) = query_shape, memory_flange
    top, left = (row // qh) * qh, (column // qw) * qw
    if not masked:
        return top - fh <= key_row < top + qh + fh and left - fw <= key_column < left + qw + fw
    above = top - fh <= key_row < top and left - fw <= key_column < left + qw + fw
    beside = top <= key_row < top + qh and left - fw <= key_column < left
    in_block = top <= key_row < top + qh and left <= key_column < left + qw
    earlier_in_block = in_block and (key_row, key_column) <= (row, column)
    return above or beside or earlier_in_block


def local_mask(height, width, query_shape, memory_flange, masked):
    """`[pixels, pixels]` in raster order, pixel by pixel."""
    pixels = [(r, c) for r in range(height) for c in range(width)]
    return np.array(
        [[may_attend(q, k, query_shape, memory_flange, masked) for k in pixels] for q in pixels]
    )


def dense_twin(layer, image):
    """A `MultiHeadAttention` with the weights of `layer` (built on `image`)."""
    if not layer.built:
        layer(image)
    dense = MultiHeadAttention(HEADS, KEY_DIM)
    sequence = image.reshape(image.shape[0], -1, image.shape[-1])
    dense(sequence, sequence)
    dense.set_weights(layer.get_weights())
    return dense


def dense_image_attention(dense, image, mask):
    """`dense` over the raster-order pixels of `image`, with an explicit mask."""
    batch, height, width, channels = image.shape
    sequence = ops.reshape(image, (batch, height * width, channels))
    output = dense(sequence, sequence, attention_mask=mask)
    return ops.reshape(output, (batch, height, width, -1))


def dense_reference(layer, image, mask):
    """Dense attention over the raster-order pixels, same weights, explicit mask."""
    return numpy(dense_image_attention(dense_twin(layer, image), image, mask))


def block_raster_order(height, width, query_shape):
    """`[(row, column, cache position)]` of the real pixels in generation order.

    The cache position counts the padded image's positions in block-raster
    order; padding pixels are skipped, never generated.
    """
    qh, qw = query_shape
    padded_height, padded_width = padded_grid_shape(height, width, query_shape)
    order, position = [], 0
    for block_row in range(padded_height // qh):
        for block_column in range(padded_width // qw):
            for r in range(qh):
                for c in range(qw):
                    row, column = block_row * qh + r, block_column * qw + c
                    if row < height and column < width:
                        order.append((row, column, position))
                    position += 1
    return order


CASES = [
    # height, width, query_shape, memory_flange
    (4, 6, (2, 3), (1, 2)),
    (5, 7, (2, 3), (1, 2)),
    (6, 6, (3, 2), (2, 1)),
    (5, 8, (1, 4), (0, 3)),
    (6, 5, (2, 2), (3, 0)),
    (4, 9, (2, 3), (2, 4)),
]


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
@pytest.mark.parametrize("height, width, query_shape, memory_flange", CASES)
def test_equals_dense_attention_with_local_mask(height, width, query_shape, memory_flange, masked):
    layer = LocalAttention2D(HEADS, KEY_DIM, query_shape, memory_flange)
    image = images(height, width)
    output = numpy(layer(image, use_causal_mask=masked))
    mask = local_mask(height, width, query_shape, memory_flange, masked)[None]
    np.testing.assert_allclose(output, dense_reference(layer, image, mask), atol=1e-5)


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
def test_input_gradient_equals_dense_attention_gradient(masked):
    height, width, query_shape, memory_flange = 5, 7, (2, 3), (1, 2)
    layer = LocalAttention2D(HEADS, KEY_DIM, query_shape, memory_flange)
    image = images(height, width)
    dense = dense_twin(layer, image)
    mask = local_mask(height, width, query_shape, memory_flange, masked)[None]
    weights = np.random.default_rng(4).normal(size=(2, height, width, CHANNELS))

    (local_gradient,) = backend_gradients(
        lambda x: ops.sum(ops.multiply(layer(x, use_causal_mask=masked), weights)), [image]
    )
    (dense_gradient,) = backend_gradients(
        lambda x: ops.sum(ops.multiply(dense_image_attention(dense, x, mask), weights)),
        [image],
    )
    np.testing.assert_allclose(local_gradient, dense_gradient, atol=1e-5)


def test_sub_pixel_positions_channels_folded_into_width():
    """A 4 x 4 x 3 image whose channels are positions: width 12, one feature each."""
    pixels = np.random.default_rng(1).integers(0, 256, size=(2, 4, 4, 3))
    embedded = (np.random.default_rng(2).normal(size=(256, CHANNELS)).astype("float32"))[pixels]
    sub_pixels = embedded.reshape(2, 4, 12, CHANNELS)
    layer = LocalAttention2D(HEADS, KEY_DIM, (2, 6), (1, 3))
    output = numpy(layer(sub_pixels, use_causal_mask=True))
    mask = local_mask(4, 12, (2, 6), (1, 3), True)[None]
    np.testing.assert_allclose(output, dense_reference(layer, sub_pixels, mask), atol=1e-5)


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
def test_padding_masks_are_respected(masked):
    height, width, query_shape, flange = 5, 6, (2, 3), (1, 2)
    layer = LocalAttention2D(HEADS, KEY_DIM, query_shape, flange)
    image = images(height, width)
    padding = np.random.default_rng(3).random((2, height, width)) > 0.25
    output = numpy(
        layer(image, image, query_mask=padding, value_mask=padding, use_causal_mask=masked)
    )
    flat = padding.reshape(2, -1)
    mask = (
        local_mask(height, width, query_shape, flange, masked)[None]
        & flat[:, None, :]
        & flat[:, :, None]
    )
    np.testing.assert_allclose(output, dense_reference(layer, image, mask), atol=1e-5)


@pytest.mark.parametrize("query_shape", [(4, 5), (6, 8)])
def test_a_block_covering_the_image_is_global_attention(query_shape):
    image = images(4, 5)
    layer = LocalAttention2D(HEADS, KEY_DIM, query_shape)
    output = numpy(layer(image))
    np.testing.assert_allclose(output, dense_reference(layer, image, None), atol=1e-5)
    # With one block, block-raster order is raster order: global causal attention.
    output = numpy(layer(image, use_causal_mask=True))
    causal = np.tril(np.ones((20, 20), bool))[None]
    np.testing.assert_allclose(output, dense_reference(layer, image, causal), atol=1e-5)


@LOCAL_2D_LAYERS
@pytest.mark.parametrize(
    "height, width, query_shape, memory_flange", [(4, 6, (2, 3), (1, 2)), (5, 5, (2, 2), (2, 1))]
)
def test_changing_a_later_pixel_changes_no_earlier_output(
    layer_class, height, width, query_shape, memory_flange
):
    layer = layer_class(HEADS, KEY_DIM, query_shape, memory_flange)
    image = images(height, width)
    before = numpy(layer(image, use_causal_mask=True))
    order = block_raster_order(height, width, query_shape)
    for step in (0, len(order) // 3, len(order) - 1):
        row, column, _ = order[step]
        changed = image.copy()
        changed[:, row, column] += 3.0
        after = numpy(layer(changed, use_causal_mask=True))
        for earlier_row, earlier_column, _ in order[:step]:
            np.testing.assert_array_equal(
                after[:, earlier_row, earlier_column], before[:, earlier_row, earlier_column]
            )
        assert not np.allclose(after[:, row, column], before[:, row, column])


def cached_loop(layer, image, step_function=None):
    """Generates every pixel in block-raster order; returns the outputs as an image."""
    height, width = image.shape[1:3]
    assert layer.grid_shape == (height, width)
    step_function = step_function or (
        lambda pixel, cache, index: layer(
            pixel, cache=cache, cache_update_index=index, use_causal_mask=True
        )
    )
    padded = padded_grid_shape(height, width, layer.query_shape)
    cache = np.zeros(
        (image.shape[0], 2, padded[0] * padded[1], layer.num_heads, layer.key_dim), "float32"
    )
    outputs = np.zeros(image.shape[:3] + (image.shape[-1],), "float32")
    for row, column, position in block_raster_order(height, width, layer.query_shape):
        output, cache = step_function(image[:, row : row + 1, column : column + 1], cache, position)
        outputs[:, row, column] = numpy(output)[:, 0, 0]
    return outputs


@pytest.mark.parametrize(
    "height, width, query_shape, memory_flange",
    [(4, 6, (2, 3), (1, 2)), (5, 7, (2, 3), (2, 4)), (3, 4, (3, 4), (0, 0))],
)
def test_cached_loop_equals_full_masked_pass(height, width, query_shape, memory_flange):
    layer = LocalAttention2D(HEADS, KEY_DIM, query_shape, memory_flange, grid_shape=(height, width))
    image = images(height, width)
    full = numpy(layer(image, use_causal_mask=True))
    np.testing.assert_allclose(cached_loop(layer, image), full, atol=1e-5)


@LOCAL_2D_LAYERS
def test_compiled_cached_step_with_tensor_index(layer_class):
    layer = layer_class(HEADS, KEY_DIM, (2, 3), (1, 2), grid_shape=(4, 7))
    image = images(4, 7)
    full = numpy(layer(image, use_causal_mask=True))
    step = jit(
        lambda pixel, cache, index: layer(
            pixel, cache=cache, cache_update_index=index, use_causal_mask=True
        )
    )
    looped = cached_loop(
        layer,
        image,
        lambda pixel, cache, index: step(pixel, cache, ops.convert_to_tensor(index, "int32")),
    )
    np.testing.assert_allclose(looped, full, atol=1e-5)


@LOCAL_2D_LAYERS
def test_layer_helper_masked_with_value(layer_class, tmp_path):
    run_layer_test(
        layer_class,
        dict(num_heads=HEADS, key_dim=KEY_DIM, block_shape=(2, 3), memory_flange=(1, 2)),
        {"query": images(7, 13), "value": images(7, 13, seed=1, channels=17)},
        tmp_path,
        call_kwargs={"use_causal_mask": True},
    )


def test_layer_helper_unmasked_self_attention_with_dropout_and_output_shape(tmp_path):
    run_layer_test(
        LocalAttention2D,
        dict(
            num_heads=HEADS,
            key_dim=KEY_DIM,
            block_shape=(2, 2),
            memory_flange=(2, 1),
            dropout=0.1,
            output_shape=17,
        ),
        {"query": images(7, 13)},
        tmp_path,
        expected_output_shape=(2, 7, 13, 17),
    )


def test_config_round_trip_keeps_local_arguments():
    layer = LocalAttention2D(HEADS, KEY_DIM, [8, 32], [8, 16])
    config = layer.get_config()
    assert config["block_shape"] == (8, 32) and config["memory_flange"] == (8, 16)
    assert "use_causal_mask" not in config and "flash_attention" not in config
    assert LocalAttention2D.from_config(config).get_config() == config


@LOCAL_2D_LAYERS
def test_query_shape_is_the_deprecated_name_of_block_shape(layer_class):
    with pytest.warns(DeprecationWarning, match="`query_shape` is deprecated; pass `block_shape`"):
        layer = layer_class(HEADS, KEY_DIM, query_shape=(2, 3), memory_flange=(1, 2))
    assert layer.block_shape == layer.query_shape == (2, 3)
    with pytest.raises(ValueError, match="Pass `block_shape` only"):
        layer_class(HEADS, KEY_DIM, block_shape=(2, 3), query_shape=(2, 3))
    with pytest.raises(ValueError, match="needs `block_shape`"):
        layer_class(HEADS, KEY_DIM)


@LOCAL_2D_LAYERS
def test_a_config_saved_with_query_shape_loads(layer_class):
    layer = layer_class(HEADS, KEY_DIM, (2, 3), (1, 2))
    old_config = layer.get_config()
    old_config["query_shape"] = old_config.pop("block_shape")
    restored = layer_class.from_config(old_config)
    assert restored.get_config() == layer.get_config()
    image = images(4, 6)
    expected = numpy(layer(image, use_causal_mask=True))
    restored(image)
    restored.set_weights(layer.get_weights())
    np.testing.assert_allclose(numpy(restored(image, use_causal_mask=True)), expected)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        (dict(block_shape=(0, 2)), "block_shape"),
        (dict(block_shape=(2, -1)), "block_shape"),
        (dict(block_shape=(2.0, 2)), "block_shape"),
        (dict(block_shape=4), "block_shape"),
        (dict(block_shape=(2, 2, 2)), "block_shape"),
        (dict(block_shape=(2, 2), memory_flange=(-1, 0)), "memory_flange"),
        (dict(block_shape=(2, 2), memory_flange=(1, 0.5)), "memory_flange"),
        (dict(block_shape=(True, 2)), "block_shape"),
        (dict(block_shape=(2, 2), memory_flange=(False, 1)), "memory_flange"),
        (dict(block_shape=(2, 2), use_causal_mask=True), "use_causal_mask"),
        (dict(block_shape=(2, 2), flash_attention=True), "flash_attention"),
        (dict(block_shape=(2, 2), sliding_window=3), "sliding_window"),
        (dict(block_shape=(2, 2), attention_axes=(1, 2)), "attention_axes"),
    ],
)
def test_bad_constructor_arguments(kwargs, argument):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        LocalAttention2D(HEADS, KEY_DIM, **kwargs)


def test_bad_call_arguments():
    layer = LocalAttention2D(HEADS, KEY_DIM, (2, 2), (1, 1))
    with pytest.raises(ValueError, match="`query` must have rank 4"):
        layer(np.zeros((2, 9, CHANNELS), "float32"))
    with pytest.raises(ValueError, match="`query` must have rank 4"):
        layer.build((2, 9, CHANNELS))
    with pytest.raises(ValueError, match="`memory_flange` must not exceed the image's width"):
        LocalAttention2D(HEADS, KEY_DIM, (2, 2), (1, 5))(images(6, 4))
    with pytest.raises(ValueError, match="one image size"):
        layer(images(4, 4), images(4, 5))
    with pytest.raises(ValueError, match="`use_causal_mask` must be True or False"):
        layer(images(4, 4), use_causal_mask=1)
    with pytest.raises(TypeError, match="grid_shape"):
        layer(images(4, 4), grid_shape=(4, 4))
    with pytest.raises(ValueError, match="decodes images of `grid_shape` \\(4, 4\\)"):
        LocalAttention2D(HEADS, KEY_DIM, (2, 2), (1, 1), grid_shape=(4, 4))(images(4, 6))
    with pytest.raises(TypeError, match="image_shape"):
        layer(images(4, 4), image_shape=(4, 4, CHANNELS))


def test_cache_arguments_are_checked():
    pixel, cache = images(1, 1), np.zeros((2, 2, 16, HEADS, KEY_DIM), "float32")
    causal = {"cache": cache, "cache_update_index": 0, "use_causal_mask": True}
    with pytest.raises(ValueError, match="construct the layer with `grid_shape="):
        LocalAttention2D(HEADS, KEY_DIM, (2, 2), (1, 1))(pixel, **causal)
    layer = LocalAttention2D(HEADS, KEY_DIM, (2, 2), (1, 1), grid_shape=(4, 4))
    with pytest.raises(ValueError, match="one pixel"):
        layer(images(2, 2), **causal)
    with pytest.raises(ValueError, match="block-raster positions"):
        LocalAttention2D(HEADS, KEY_DIM, (2, 2), (1, 1), grid_shape=(5, 4))(pixel, **causal)
    with pytest.raises(ValueError, match="`grid_shape` must be a pair of positive integers"):
        LocalAttention2D(HEADS, KEY_DIM, (2, 2), (1, 1), grid_shape=(4, True))
    with pytest.raises(ValueError, match="A `cache` needs `use_causal_mask=True`"):
        layer(pixel, cache=cache, cache_update_index=0)
    with pytest.raises(ValueError, match="`cache_update_index` needs a `cache`"):
        layer(images(4, 4), cache_update_index=0)


@pytest.mark.parametrize("symbolic", [False, True], ids=["eager", "symbolic"])
@pytest.mark.parametrize(
    "argument, value",
    [
        ("attention_mask", np.ones((2, 16, 16), bool)),
        ("attention_bias", np.zeros((2, HEADS, 16, 16), "float32")),
    ],
)
def test_arguments_block_attention_cannot_honour_raise(argument, value, symbolic):
    layer = LocalAttention2D(HEADS, KEY_DIM, (2, 2), (1, 1))
    image = keras.Input((4, 4, CHANNELS), batch_size=2) if symbolic else images(4, 4)
    with pytest.raises(ValueError, match=f"`{argument}` is not supported by LocalAttention2D"):
        layer(image, **{argument: value})


def test_one_layer_called_with_and_without_the_causal_mask():
    height, width, query_shape, flange = 5, 7, (2, 3), (1, 2)
    layer = LocalAttention2D(HEADS, KEY_DIM, query_shape, flange)
    image = images(height, width)
    for causal in (False, True):
        mask = local_mask(height, width, query_shape, flange, causal)[None]
        np.testing.assert_allclose(
            numpy(layer(image, use_causal_mask=causal)),
            dense_reference(layer, image, mask),
            atol=1e-5,
        )
    np.testing.assert_array_equal(
        numpy(layer(image)), numpy(layer(image, use_causal_mask=False))
    )


def test_symbolic_call_checks_the_flange():
    with pytest.raises(ValueError, match="`memory_flange`"):
        LocalAttention2D(HEADS, KEY_DIM, (2, 2), (3, 1))(keras.Input((2, 4, CHANNELS)))


def pixels_of(image):
    """`[batch, height, width, channels]` -> raster order `[batch, pixels, channels]`."""
    return image.reshape(image.shape[0], -1, image.shape[-1])


def output_from_scores(layer, scores, image):
    """The layer's output recomputed as `scores @ values`, projected, as an image."""
    values = numpy(layer.value_dense(pixels_of(image)))
    mixed = np.einsum("bhqk,bkhd->bqhd", scores, values).astype("float32")
    return numpy(layer.output_dense(mixed)).reshape(image.shape[:3] + (-1,))


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
@pytest.mark.parametrize("height, width, query_shape, memory_flange", [CASES[1], CASES[4]])
def test_scores_are_a_naive_dense_softmax_over_the_memory(
    height, width, query_shape, memory_flange, masked
):
    layer = LocalAttention2D(HEADS, KEY_DIM, query_shape, memory_flange)
    image = images(height, width)
    padding = np.ones((2, height, width), bool)
    padding[0, :, :2] = False  # left columns
    padding[1, -1] = False  # the last row
    output, scores = layer(
        image, image, query_mask=padding, value_mask=padding, use_causal_mask=masked,
        return_attention_scores=True,
    )
    scores, pixels = numpy(scores), height * width
    assert scores.shape == (2, HEADS, pixels, pixels)
    flat = padding.reshape(2, pixels)
    allowed = (
        local_mask(height, width, query_shape, memory_flange, masked)[None, None]
        & flat[:, None, None, :]
        & flat[:, None, :, None]
    )
    sequence = pixels_of(image)
    expected = naive_attention_scores(layer, sequence, sequence, allowed)
    np.testing.assert_allclose(scores, expected, atol=1e-6)
    assert np.all(scores[~np.broadcast_to(allowed, scores.shape)] == 0)
    has_keys = np.broadcast_to(allowed.any(-1), scores.shape[:-1])
    np.testing.assert_allclose(scores.sum(-1), has_keys.astype("float32"), atol=1e-5)
    np.testing.assert_allclose(output_from_scores(layer, scores, image), numpy(output), atol=1e-5)


@LOCAL_2D_LAYERS
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_cached_steps_return_the_rows_of_the_full_pass(layer_class, compiled):
    height, width = 5, 7
    layer = layer_class(HEADS, KEY_DIM, (2, 3), (1, 2), grid_shape=(height, width))
    image = images(height, width)
    _, full = layer(image, use_causal_mask=True, return_attention_scores=True)
    full = numpy(full).reshape(2, HEADS, height, width, height * width)

    def step(pixel, cache, index):
        return layer(
            pixel, cache=cache, cache_update_index=index, use_causal_mask=True,
            return_attention_scores=True,
        )

    step = jit(step) if compiled else step
    padded = padded_grid_shape(height, width, (2, 3))
    cache = np.zeros((2, 2, padded[0] * padded[1], HEADS, KEY_DIM), "float32")
    for row, column, position in block_raster_order(height, width, (2, 3)):
        pixel = image[:, row : row + 1, column : column + 1]
        _, scores, cache = step(pixel, cache, ops.convert_to_tensor(position, "int32"))
        scores = numpy(scores)
        assert scores.shape == (2, HEADS, 1, height * width)
        np.testing.assert_allclose(scores[:, :, 0], full[:, :, row, column], atol=1e-6)


def test_symbolic_scores_and_a_model_that_returns_them():
    layer = LocalAttention2D(HEADS, KEY_DIM, (2, 3), (1, 2), grid_shape=(5, 7))
    image = keras.Input((5, 7, CHANNELS), batch_size=2)
    model = keras.Model(image, layer(image, use_causal_mask=True, return_attention_scores=True))
    assert tuple(model.outputs[1].shape) == (2, HEADS, 35, 35)
    pixel = keras.Input((1, 1, CHANNELS), batch_size=2)
    cache = keras.Input((2, 54, HEADS, KEY_DIM), batch_size=2)
    _, step_scores, _ = layer(
        pixel, cache=cache, cache_update_index=0, use_causal_mask=True, return_attention_scores=True
    )
    assert tuple(step_scores.shape) == (2, HEADS, 1, 35)
    x = images(5, 7)
    _, expected = layer(x, use_causal_mask=True, return_attention_scores=True)
    _, predicted = model.predict(x, verbose=0)
    np.testing.assert_allclose(predicted, numpy(expected), atol=1e-6)
