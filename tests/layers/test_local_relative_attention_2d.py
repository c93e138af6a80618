import keras
import numpy as np
import pytest
from keras import ops
from test_local_attention_2d import CHANNELS, HEADS, KEY_DIM, cached_loop, images, local_mask, numpy

from keras_selfattn.layers.local_relative_attention_2d import LocalRelativeAttention2D
from tests.layer_testing import run_layer_test
from tests.references import backend_gradients, naive_masked_softmax


def pixel_offsets(height, width):
    """`(dy, dx)` `[pixels, pixels]`: key minus query, pixels in raster order."""
    rows, columns = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    rows, columns = rows.reshape(-1), columns.reshape(-1)
    return rows[None, :] - rows[:, None], columns[None, :] - columns[:, None]


def pair_relations(layer, height, width):
    """`[(heads,) pixels, pixels, key_dim]`: r^H[dy] + r^W[dx] of every pair."""
    (kh, kw), tables = layer.max_relative_position, (
        numpy(layer.relative_height_embeddings),
        numpy(layer.relative_width_embeddings),
    )
    relations = 0.0
    for table, offsets, k in zip(tables, pixel_offsets(height, width), (kh, kw)):
        rows = np.clip(offsets, -k, k) + k
        relations = relations + (table[rows] if table.ndim == 2 else table[:, rows])
    return relations


def naive_weights(layer, image, mask):
    """`[batch, heads, pixels, pixels]`: every pair's relation materialised,
    masked softmax written out.

    `mask` `[batch or 1, pixels, pixels]` in raster order (`True` = may
    attend); a query with no key gets zeros.
    """
    batch, height, width, channels = image.shape
    sequence = image.reshape(batch, height * width, channels)
    q, k = (
        numpy(dense(sequence)).astype("float64") for dense in (layer.query_dense, layer.key_dense)
    )  # [batch, pixels, heads, dim]
    relations = pair_relations(layer, height, width).astype("float64")
    content = np.einsum("bqhd,bkhd->bhqk", q, k)
    if relations.ndim == 3:
        relative = np.einsum("bqhd,qkd->bhqk", q, relations)
    else:
        relative = np.einsum("bqhd,hqkd->bhqk", q, relations)
    logits = (content + relative) * float(layer.logit_scale)
    return naive_masked_softmax(logits, mask[:, None])


def naive_reference(layer, image, mask):
    """The layer's output from `naive_weights`."""
    batch, height, width, channels = image.shape
    v = numpy(layer.value_dense(image.reshape(batch, height * width, channels)))
    attended = np.einsum("bhqk,bkhd->bqhd", naive_weights(layer, image, mask), v)
    return numpy(layer.output_dense(attended.astype("float32"))).reshape(batch, height, width, -1)


def full_mask(height, width, masked):
    pixels = height * width
    return np.tril(np.ones((pixels, pixels), bool)) if masked else np.ones((pixels, pixels), bool)


CASES = [
    # height, width, query_shape, memory_flange, max_relative_position
    (4, 7, (2, 3), (1, 2), None),  # width padded to 9
    (6, 9, (3, 2), (2, 1), (2, 1)),  # offsets clipped on both axes
    (7, 4, (2, 2), (3, 0), (4, 1)),
    (4, 9, (1, 4), (0, 3), (0, 2)),  # no height term
]


@pytest.mark.parametrize("shared", [True, False], ids=["shared_tables", "per_head_tables"])
@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
@pytest.mark.parametrize("height, width, query_shape, memory_flange, max_relative", CASES)
def test_equals_naive_relative_attention_with_local_mask(
    height, width, query_shape, memory_flange, max_relative, masked, shared
):
    layer = LocalRelativeAttention2D(
        HEADS, KEY_DIM, query_shape, memory_flange, max_relative_position=max_relative,
        heads_share_relative_embedding=shared,
    )
    image = images(height, width)
    output = numpy(layer(image, use_causal_mask=masked))
    mask = local_mask(height, width, query_shape, memory_flange, masked)[None]
    np.testing.assert_allclose(output, naive_reference(layer, image, mask), atol=1e-5)


def test_default_tables_hold_every_offset_of_the_memory():
    layer = LocalRelativeAttention2D(HEADS, KEY_DIM, (2, 3), (1, 2))
    layer(images(4, 7))
    assert layer.max_relative_position == (2, 4)
    assert tuple(layer.relative_height_embeddings.shape) == (5, KEY_DIM)
    assert tuple(layer.relative_width_embeddings.shape) == (9, KEY_DIM)
    per_head = LocalRelativeAttention2D(
        HEADS, KEY_DIM, (2, 3), (1, 2), heads_share_relative_embedding=False
    )
    per_head(images(4, 7))
    assert tuple(per_head.relative_width_embeddings.shape) == (HEADS, 9, KEY_DIM)


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
@pytest.mark.parametrize("query_shape", [(4, 7), (6, 8)], ids=["exact", "padded"])
def test_a_block_covering_the_image_is_global_2d_relative_attention(query_shape, masked):
    image = images(4, 7)
    layer = LocalRelativeAttention2D(HEADS, KEY_DIM, query_shape, max_relative_position=(2, 3))
    output = numpy(layer(image, use_causal_mask=masked))
    # One block: block-raster order is raster order.
    mask = full_mask(4, 7, masked)[None]
    np.testing.assert_allclose(output, naive_reference(layer, image, mask), atol=1e-5)


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
def test_padding_masks_are_respected(masked):
    height, width, query_shape, flange = 4, 7, (2, 3), (1, 2)
    layer = LocalRelativeAttention2D(HEADS, KEY_DIM, query_shape, flange)
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
    np.testing.assert_allclose(output, naive_reference(layer, image, mask), atol=1e-5)


def dense_relative_attention(layer, image, mask, height_table, width_table):
    """The naive form in `keras.ops` (differentiable): relations `[.., query,
    key, key_dim]` gathered from the tables for every pair."""
    batch, height, width, channels = image.shape
    sequence = ops.reshape(image, (batch, height * width, channels))
    q, k, v = (dense(sequence) for dense in (layer.query_dense, layer.key_dense, layer.value_dense))
    relations = 0.0
    offsets = pixel_offsets(height, width)
    for table, offset, limit in zip((height_table, width_table), offsets, layer.max_relative_position):
        relations = relations + ops.take(table, np.clip(offset, -limit, limit) + limit, axis=-2)
    logits = ops.einsum("bqhd,bkhd->bhqk", q, k) + ops.einsum("bqhd,qkd->bhqk", q, relations)
    logits = ops.where(mask[None, None], logits * float(layer.logit_scale), -1e9)
    weights = ops.softmax(logits, axis=-1)
    attended = ops.einsum("bhqk,bkhd->bqhd", weights, v)
    return ops.reshape(layer.output_dense(attended), (batch, height, width, -1))


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
def test_gradients_equal_the_naive_forms(masked):
    """Input and table gradients against the materialised relations."""
    height, width, query_shape, flange = 4, 7, (2, 3), (1, 2)
    layer = LocalRelativeAttention2D(
        HEADS, KEY_DIM, query_shape, flange, max_relative_position=(1, 3)
    )
    image = images(height, width)
    layer(image)
    mask = local_mask(height, width, query_shape, flange, masked)
    weights = np.random.default_rng(4).normal(size=(2, height, width, CHANNELS)).astype("float32")
    tables = [numpy(layer.relative_height_embeddings), numpy(layer.relative_width_embeddings)]
    table_variables = [layer.relative_height_embeddings, layer.relative_width_embeddings]

    def local(x, height_table, width_table):
        values = [
            height_table if v is table_variables[0] else width_table if v is table_variables[1] else v.value
            for v in layer.trainable_variables
        ]
        output, _ = layer.stateless_call(values, [], x, use_causal_mask=masked)
        return ops.sum(ops.multiply(output, weights))

    def dense(x, height_table, width_table):
        output = dense_relative_attention(layer, x, mask, height_table, width_table)
        return ops.sum(ops.multiply(output, weights))

    for got, expected in zip(
        backend_gradients(local, [image] + tables), backend_gradients(dense, [image] + tables)
    ):
        assert np.abs(expected).max() > 0
        np.testing.assert_allclose(got, expected, atol=1e-4)


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
@pytest.mark.parametrize(
    "query_shape, memory_flange, shift",
    [((2, 3), (1, 2), (2, 3)), ((2, 2), (2, 1), (4, -2)), ((3, 2), (1, 1), (-3, 0))],
)
def test_translation_equivariance_without_an_absolute_signal(
    query_shape, memory_flange, shift, masked
):
    """A picture inside a zero border, moved by whole query blocks: each
    pixel whose windows (before and after) lie inside the canvas gets the
    output of the pixel it moved from."""
    height, width = 16, 17
    picture = (slice(6, 9), slice(6, 10))
    canvas = np.zeros((2, height, width, CHANNELS), "float32")
    canvas[:, picture[0], picture[1]] = images(3, 4)
    moved = np.roll(canvas, shift, axis=(1, 2))  # the border is wide enough not to wrap
    assert np.abs(moved).sum() == pytest.approx(np.abs(canvas).sum())
    layer = LocalRelativeAttention2D(HEADS, KEY_DIM, query_shape, memory_flange)
    before = numpy(layer(canvas, use_causal_mask=masked))
    after = numpy(layer(moved, use_causal_mask=masked))

    (qh, qw), (fh, fw) = query_shape, memory_flange

    def window_inside(row, column):
        if not (0 <= row < height and 0 <= column < width):
            return False
        top, left = (row // qh) * qh - fh, (column // qw) * qw - fw
        return top >= 0 and left >= 0 and top + qh + 2 * fh <= height and left + qw + 2 * fw <= width

    compared = set()
    for row in range(height):
        for column in range(width):
            if window_inside(row, column) and window_inside(row + shift[0], column + shift[1]):
                np.testing.assert_allclose(
                    after[:, row + shift[0], column + shift[1]], before[:, row, column], atol=1e-5
                )
                compared.add((row, column))
    assert {(r, c) for r in range(6, 9) for c in range(6, 10)} <= compared


@pytest.mark.parametrize(
    "height, width, query_shape, memory_flange, max_relative",
    [(4, 7, (2, 3), (1, 2), None), (7, 4, (2, 2), (3, 1), (2, 1)), (4, 7, (4, 7), (0, 0), None)],
    ids=["padded", "clipped", "global"],
)
def test_cached_loop_equals_full_masked_pass(height, width, query_shape, memory_flange, max_relative):
    layer = LocalRelativeAttention2D(
        HEADS, KEY_DIM, query_shape, memory_flange, grid_shape=(height, width),
        max_relative_position=max_relative, heads_share_relative_embedding=False,
    )
    image = images(height, width)
    full = numpy(layer(image, use_causal_mask=True))
    np.testing.assert_allclose(cached_loop(layer, image), full, atol=1e-5)


def test_layer_helper_unmasked_per_head_tables_dropout_and_output_shape(tmp_path):
    run_layer_test(
        LocalRelativeAttention2D,
        dict(
            num_heads=HEADS,
            key_dim=KEY_DIM,
            block_shape=(2, 2),
            memory_flange=(2, 1),
            max_relative_position=(1, 2),
            heads_share_relative_embedding=False,
            dropout=0.1,
            output_shape=17,
        ),
        {"query": images(7, 13)},
        tmp_path,
        expected_output_shape=(2, 7, 13, 17),
    )


def test_config_round_trip_keeps_relative_arguments():
    layer = LocalRelativeAttention2D(
        HEADS, KEY_DIM, [2, 4], [1, 2], max_relative_position=[3, 1],
        relative_embeddings_initializer="zeros",
    )
    config = layer.get_config()
    assert config["max_relative_position"] == (3, 1)
    assert config["heads_share_relative_embedding"] is True
    restored = LocalRelativeAttention2D.from_config(config)
    assert restored.get_config() == config
    restored(images(4, 8))
    assert not numpy(restored.relative_height_embeddings).any()


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        (dict(max_relative_position=(1, -1)), "max_relative_position"),
        (dict(max_relative_position=3), "max_relative_position"),
        (dict(max_relative_position=(1, 2.0)), "max_relative_position"),
        (dict(max_relative_position=(True, 1)), "max_relative_position"),
        (dict(heads_share_relative_embedding=None), "heads_share_relative_embedding"),
        (dict(block_shape=(0, 2)), "block_shape"),
        (dict(flash_attention=True), "flash_attention"),
    ],
)
def test_bad_constructor_arguments(kwargs, argument):
    kwargs = dict(dict(block_shape=(2, 2), memory_flange=(1, 1)), **kwargs)
    with pytest.raises(ValueError, match=f"`{argument}`"):
        LocalRelativeAttention2D(HEADS, KEY_DIM, **kwargs)


def test_unsupported_call_arguments_raise_by_name():
    layer = LocalRelativeAttention2D(HEADS, KEY_DIM, (2, 2), (1, 1))
    with pytest.raises(ValueError, match="`attention_mask` is not supported"):
        layer(images(4, 4), attention_mask=np.ones((2, 16, 16), bool))
    with pytest.raises(ValueError, match="construct the layer with `grid_shape="):
        layer(
            images(1, 1),
            cache=np.zeros((2, 2, 16, HEADS, KEY_DIM), "float32"),
            cache_update_index=0,
            use_causal_mask=True,
        )
    with pytest.raises(ValueError, match="`query` must have rank 4"):
        layer(keras.Input((9, CHANNELS)))


@pytest.mark.parametrize("shared", [True, False], ids=["shared_tables", "per_head_tables"])
@pytest.mark.parametrize("masked", [True, False], ids=["masked", "unmasked"])
def test_scores_are_the_naive_relative_probabilities(masked, shared):
    height, width, query_shape, memory_flange, max_relative = CASES[1]
    layer = LocalRelativeAttention2D(
        HEADS, KEY_DIM, query_shape, memory_flange, max_relative_position=max_relative,
        heads_share_relative_embedding=shared,
    )
    image = images(height, width)
    padding = np.ones((2, height, width), bool)
    padding[1, :, :2] = False  # left columns
    output, scores = layer(
        image, image, query_mask=padding, value_mask=padding, use_causal_mask=masked,
        return_attention_scores=True,
    )
    scores, pixels = numpy(scores), height * width
    assert scores.shape == (2, HEADS, pixels, pixels)
    flat = padding.reshape(2, pixels)
    mask = local_mask(height, width, query_shape, memory_flange, masked)[None]
    mask = mask & flat[:, None, :] & flat[:, :, None]
    np.testing.assert_allclose(scores, naive_weights(layer, image, mask), atol=1e-6)
    assert np.all(scores[~np.broadcast_to(mask[:, None], scores.shape)] == 0)
    np.testing.assert_allclose(numpy(output), naive_reference(layer, image, mask), atol=1e-5)
